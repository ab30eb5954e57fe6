"""Transactions on the wire (DESIGN.md §4, issue 5): per producer id, in send order, the
InitProducerId / AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit / Produce / EndTxn requests
of the client and the WriteTxnMarkers the coordinator sends to the partition leaders. The rule ids
are the disk rules' (txn_rules.py): `unregistered-partition`, `late-transactional-write`,
`dangling-transaction`, `hanging-transaction`, `coordinator-abort`; plus `lso-stuck`, judged from
read_committed Fetch responses (a second fold keyed by partition).

Model (transaction version 0/1, KIP-98): a transaction starts with the first AddPartitionsToTxn /
AddOffsetsToTxn after the previous one ended; EndTxn ends it at the client; the coordinator then
writes a marker to every registered partition. A partition holds an open transaction from its first
accepted transactional batch until a marker for it is answered; data sent after that answer opens
a new one (a late write) that only a later marker ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.coordinator_state import partition_names
from kaudit.audit.folds import Context, Fold, KeyedState
from kaudit.audit.registry import evidence, finding
from kaudit.audit.txn_rules import ABORT_HINT, DEFAULT_MAX_TIMEOUT_MS

KEY = ("producer_id",)
TXN_COLUMNS = ("source", "connection", "position", "ts", "event", "transactional_id", "producer_id",
               "producer_epoch", "partitions", "result", "coordinator_epoch", "timeout_ms", "group_id",
               "new_producer_id", "new_producer_epoch", "error_codes")
BATCH_COLUMNS = ("source", "connection", "position", "request_ts", "response_ts", "topic", "topic_id", "partition",
                 "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count",
                 "transactional_id", "response_error", "response_base_offset", "correlation_id")
FRAME_COLUMNS = ("source", "connection", "request_frame", "response_ts", "api_key")
TXN_APIS = (22, 24, 25, 26, 27, 28)
FENCED = {47: "INVALID_PRODUCER_EPOCH", 90: "PRODUCER_FENCED"}


def _nonzero(s) -> list[int]:
    """The non-zero error codes of an `error_codes` cell ("0,47" or "0;47")."""
    codes = (x.strip() for x in str(s or "").replace(";", ",").split(","))
    return [e for e in (int(x) for x in codes if x.lstrip("-").isdigit()) if e != 0]


@dataclass
class Open:
    """Data of one producer in one partition not yet ended by a marker."""
    topic: str
    partition: int
    epoch: int
    first_ts: float
    first_offset: int | None
    batches: list = field(default_factory=list)   # rows
    cause: str | None = None                      # None | unregistered | late
    txn: "Txn | None" = None


@dataclass
class Txn:
    epoch: int
    start_ts: float
    transactional_id: str | None
    timeout_ms: int | None
    added: set = field(default_factory=set)
    groups: set = field(default_factory=set)
    end: dict | None = None          # EndTxn row
    markers: dict = field(default_factory=dict)   # tp -> (result, epoch, ts, response_ts)
    timeline: list = field(default_factory=list)
    fenced_by: str | None = None     # the InitProducerId line that fenced it
    fenced_epoch: int | None = None  # the epoch a new instance's successful InitProducerId got
    coordinator_aborted: bool = False
    last_offset: dict = field(default_factory=dict)   # tp -> last offset of its accepted data


def _tp(topic, partition) -> str:
    return f"{topic}-{partition}"


class ProducerWire:
    """All wire transactions of one producer id, judged in `finish` in time order."""

    def __init__(self, key: tuple, ctx: Context):
        self.pid = key[0]
        self.ctx = ctx
        self.rows: list[tuple[float, int, str, dict]] = []

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        for r in table.to_pylist():
            ts = r["ts"] if kind == "txn_event" else r["request_ts"]
            self.rows.append((ts or 0.0, r["position"] or 0, kind, r))
        return []

    # ---- replay ------------------------------------------------------------------------------
    def finish(self) -> list[dict]:
        if self.pid is None or self.pid < 0:
            return []
        self.out: list[dict] = []
        self.cur: Txn | None = None
        self.txns: list[Txn] = []
        self.open: dict[str, Open] = {}
        self.tid: str | None = None
        self.timeout_ms: int | None = None
        self.max_epoch = -1
        self.saw_markers = False   # marker traffic (inter-broker) is in the capture
        # the client's coordinator traffic is in the capture: registration can be judged
        self.saw_adds = any(k == "txn_event" and r["event"] in ("ADD_PARTITIONS", "ADD_OFFSETS")
                            for _, _, k, r in self.rows)
        self.log: list[str] = []   # every step of the producer, for timelines
        for ts, _, kind, r in sorted(self.rows, key=lambda x: (x[0], x[1])):
            (self._txn_event if kind == "txn_event" else self._batch)(ts, r)
        self._at_end()
        return self.out

    def _step(self, txn: Txn | None, line: str) -> str:
        self.log.append(line)
        if txn is not None:
            txn.timeline.append(line)
        return line

    def _new_txn(self, ts: float, epoch: int) -> Txn:
        self.cur = Txn(epoch, ts, self.tid, self.timeout_ms)
        self.txns.append(self.cur)
        return self.cur

    def _ongoing(self) -> Txn | None:
        c = self.cur
        return c if c is not None and c.end is None and not c.coordinator_aborted else None

    def _txn_event(self, ts: float, r: dict) -> None:
        ev, epoch, errs = r["event"], r["producer_epoch"], _nonzero(r["error_codes"])
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        at = f"t={ts:.6f} frame {r['position']}"
        if r["transactional_id"]:
            self.tid = r["transactional_id"]
        if ev == "INIT_PRODUCER_ID":
            if r["timeout_ms"]:
                self.timeout_ms = r["timeout_ms"]
            ok = not errs and epoch is not None and epoch >= 0
            line = (f"{at}: InitProducerId transactional id {r['transactional_id']!r}"
                    + (f" -> producer id {self.pid} epoch {epoch}" if ok else err))
            o = self._ongoing()
            if o is not None and (not ok or epoch > o.epoch) and o.fenced_by is None:
                o.fenced_by = line
                line += f" (a new instance: fences the open transaction of epoch {o.epoch})"
            if o is not None and ok and epoch > o.epoch and o.fenced_epoch is None:
                o.fenced_epoch = epoch
            self._step(o, line)
            if ok:
                self.max_epoch = max(self.max_epoch, epoch)
            return
        if ev in ("ADD_PARTITIONS", "ADD_OFFSETS", "TXN_OFFSET_COMMIT"):
            what = {"ADD_PARTITIONS": f"AddPartitionsToTxn {r['partitions']}",
                    "ADD_OFFSETS": f"AddOffsetsToTxn group {r['group_id']}",
                    "TXN_OFFSET_COMMIT": f"TxnOffsetCommit group {r['group_id']} {r['partitions'] or ''}"}[ev]
            line = f"{at}: epoch {epoch} {what}{err}"
            if errs or (epoch is not None and epoch < self.max_epoch):
                self._step(self._ongoing() or self.cur, line)
                return
            t = self._ongoing()
            if t is None or (epoch is not None and epoch > t.epoch):
                t = self._new_txn(ts, epoch)
            if ev == "ADD_PARTITIONS":
                t.added.update(partition_names(r["partitions"]))
            elif r["group_id"]:
                t.groups.add(r["group_id"])
            self._step(t, line)
            return
        if ev == "END_TXN":
            line = f"{at}: epoch {epoch} EndTxn {r['result']}{err}"
            t = self._ongoing()
            if t is not None and not errs and epoch == t.epoch:
                t.end = dict(r, ts=ts)
            elif t is None and self.cur is not None and epoch == self.cur.epoch and not errs:
                pass  # an empty transaction's EndTxn, or a retry
            self._step(t or self.cur, line)
            return
        if ev == "WRITE_MARKERS":
            resp = r.get("response_ts")
            line = (f"{at}: WriteTxnMarkers {r['result']} epoch {epoch} coordinator epoch "
                    f"{r['coordinator_epoch']} to {r['partitions']}{err}")
            t = self._marker_txn(r)
            self.saw_markers = True
            self._step(t, line)
            for tp in partition_names(r["partitions"]):
                if t is not None:
                    t.markers[tp] = (r["result"], epoch, ts, resp)
                o = self.open.get(tp)
                # data sent before the marker was answered may have landed before it: ended by it
                if o is not None and o.first_ts <= (resp if resp is not None else ts) and not errs:
                    self._closed(o, r, ts, line)
                    del self.open[tp]
            if t is not None and epoch is not None and self._is_coordinator_abort(t, r):
                t.coordinator_aborted = True
                self.max_epoch = max(self.max_epoch, epoch)
            return

    def _marker_txn(self, r: dict) -> Txn | None:
        tps = set(partition_names(r["partitions"]))
        for t in reversed(self.txns):
            if t.added & tps or any(_tp(o.topic, o.partition) in tps for o in self.open.values() if o.txn is t):
                return t
        return self.cur

    def _is_coordinator_abort(self, t: Txn, r: dict) -> bool:
        return r["result"] == "ABORT" and r["producer_epoch"] == t.epoch + 1 and \
            (t.end is None or t.end.get("result") != "ABORT")

    def _batch(self, ts: float, r: dict) -> None:
        tp = _tp(r["topic"], r["partition"])
        err = r["response_error"]
        answer = "no response" if err is None else ("accepted at offset %s" % r["response_base_offset"]
                                                   if err == 0 else f"rejected {FENCED.get(err, err)}")
        line = (f"t={ts:.6f} frame {r['position']}: Produce {tp} epoch {r['producer_epoch']} seq "
                f"{r['base_sequence']}-{r['last_sequence']} ({r['record_count']} records) -> {answer}")
        if err not in (0, None):
            t = next((t for t in reversed(self.txns) if t.epoch == r["producer_epoch"]), self.cur)
            if err in FENCED:
                line += " (a zombie: its epoch was fenced)"
            self._step(t, line)
            return
        t = self._ongoing()
        if not self.saw_adds:
            # no AddPartitionsToTxn in the capture (the coordinator's connection is not in it):
            # the data belongs to the producer's current transaction, which EndTxn ends
            if t is None or r["producer_epoch"] > t.epoch:
                t = self._new_txn(ts, r["producer_epoch"])
            t.added.add(tp)
        registered = t is not None and tp in t.added
        cause = None
        if not registered:
            last = self.cur
            pending = last is not None and tp in last.added and self._before_marker(last, tp, ts, r)
            if pending:
                # raced the marker: still part of the transaction the marker ends
                self._step(last, line + " (sent before its transaction's marker here: ended by it)")
                self._accepted(last, tp, r)
                return
            elif last is not None and tp in last.added and self.saw_adds:
                cause = "late"     # after its transaction's marker was answered
            elif self.saw_adds:
                cause = "unregistered"
        self._step(t, line)
        if t is not None:
            self._accepted(t, tp, r)
        o = self.open.get(tp)
        if o is None:
            o = self.open[tp] = Open(r["topic"], r["partition"], r["producer_epoch"], ts,
                                     r["response_base_offset"] if err == 0 else None, txn=t, cause=cause)
        elif cause and not o.cause:
            o.cause = cause
        o.batches.append(r)
        if cause:
            self._flag(cause, o, r, t, line)

    @staticmethod
    def _accepted(t: Txn, tp: str, r: dict) -> None:
        off = r["response_base_offset"]
        if r["response_error"] == 0 and off is not None and off >= 0:
            t.last_offset[tp] = max(t.last_offset.get(tp, -1), off + (r["record_count"] or 1) - 1)

    @staticmethod
    def _before_marker(t: Txn, tp: str, ts: float, r: dict) -> bool:
        """Whether data sent at `ts` to `tp` after its transaction ended landed before the marker:
        the marker was not sent yet, or was not answered yet and the data's offset follows the
        transaction's data directly (a marker in between takes one offset)."""
        m = t.markers.get(tp)
        if m is None or ts < m[2]:
            return True
        resp = m[3] if m[3] is not None else m[2]
        if ts >= resp:
            return False
        off, last = r["response_base_offset"], t.last_offset.get(tp)
        if r["response_error"] == 0 and off is not None and off >= 0 and last is not None:
            return off <= last + 1
        return True

    def _flag(self, cause: str, o: Open, r: dict, t: Txn | None, line: str) -> None:
        tp = _tp(o.topic, o.partition)
        accepted = "accepted by the broker" if r["response_error"] == 0 else "unanswered"
        if cause == "unregistered":
            ctx = (f"transaction of epoch {t.epoch} registered {sorted(t.added) or 'no partitions'}"
                   if t is not None else "the producer had no ongoing transaction")
            msg = (f"{tp}: transactional Produce of producer {self.pid} epoch {r['producer_epoch']} "
                   f"to a partition its transaction never added ({ctx}); {accepted} (Kafka before 3.6 "
                   "does not verify): no marker will end it")
            rid = "unregistered-partition"
        else:
            msg = (f"{tp}: transactional Produce of producer {self.pid} epoch {r['producer_epoch']} "
                   f"after its transaction's marker for {tp} was written; {accepted}: it opens a "
                   "transaction no coordinator knows, or the next transaction ends it")
            rid = "late-transactional-write"
        self.out.append(finding(
            rid, msg, evidence=[self._ev(r)], timeline=(t.timeline if t else [line])[-12:],
            details={"accepted": r["response_error"] == 0, "registered": sorted(t.added) if t else []},
            **self._fields(o, r)))

    def _closed(self, o: Open, marker: dict, ts: float, line: str) -> None:
        if o.cause == "late":
            by = o.txn.epoch if o.txn else None
            self.log.append(f"  the late data on {_tp(o.topic, o.partition)} from t={o.first_ts:.6f} "
                            f"is ended by {marker['result']} (of another transaction, epoch {by})")

    # ---- end of the capture ------------------------------------------------------------------
    def _at_end(self) -> None:
        for t in self.txns:
            self._coordinator_abort(t)
        ref = self.ctx.reference_time_ms
        fenced: dict[int, tuple] = {}
        for tp, o in sorted(self.open.items()):
            t = o.txn
            if o.cause is None and t is not None and t.end is not None and not self.saw_markers \
                    and t.end.get("response_ts") is not None:
                continue   # ended by an answered EndTxn; the markers are not in the capture
            if o.cause is None and t is not None and t.fenced_epoch is not None and tp not in t.markers:
                # a new instance got a bumped epoch: the coordinator aborted this transaction
                # first (TransactionCoordinator.handleInitProducerId); its markers are elsewhere
                fenced.setdefault(id(t), (t, []))[1].append(tp)
                continue
            reasons = []
            timeout = (t.timeout_ms if t else None) or self.timeout_ms or DEFAULT_MAX_TIMEOUT_MS
            if ref is not None and ref - o.first_ts * 1000 > timeout:
                reasons.append(f"open for {int(ref - o.first_ts * 1000)} ms, past its timeout of {timeout} ms")
            if o.cause == "unregistered":
                reasons.append("its transaction never registered the partition: no marker will come")
            elif o.cause == "late":
                reasons.append("written after its transaction's marker: no coordinator knows it")
            elif t is not None and t.end is not None and tp not in t.markers and t.markers:
                reasons.append("its transaction ended and the coordinator wrote markers elsewhere only")
            first = o.first_offset
            text = (f"{tp}: producer {self.pid} epoch {o.epoch} has transactional data from "
                    f"t={o.first_ts:.6f}" + (f" (offset {first})" if first is not None else "")
                    + " with no marker by the end of the capture")
            det = {"start_offset": first, "reasons": reasons, "batches": len(o.batches),
                   "end_txn": t.end["result"] if t and t.end else None}
            tl = (t.timeline if t else [])[-16:]
            ev = [self._ev(b) for b in o.batches[:8]]
            if reasons:
                cmd = ABORT_HINT.format(topic=o.topic, partition=o.partition,
                                        offset=first if first is not None else "<first offset>")
                self.out.append(finding(
                    "hanging-transaction", f"{text}: hanging ({'; '.join(reasons)})", evidence=ev,
                    details=det, timeline=tl, remediation=f"{cmd} (producer id {self.pid}, producer epoch {o.epoch})",
                    **self._fields(o, o.batches[0])))
            else:
                self.out.append(finding("dangling-transaction", f"{text} (its transaction may still end)",
                                        evidence=ev, details=det, timeline=tl, **self._fields(o, o.batches[0])))

        for t, tps in fenced.values():
            self._fenced_abort(t, tps)

    def _fenced_abort(self, t: Txn, tps: list[str]) -> None:
        """`coordinator-abort` from the InitProducerId that fenced an open transaction, when the
        capture holds none of its ABORT markers (a client-side capture)."""
        tps = sorted(tps)
        self._abort_finding(
            t, tps, f"fencing): a new instance got epoch {t.fenced_epoch} from InitProducerId; the "
            "ABORT markers are not in the capture", [evidence(None, None, "txn", t.fenced_by)],
            {"cause": "fencing", "partitions": tps, "data_epoch": t.epoch, "marker_epoch": None,
             "new_epoch": t.fenced_epoch, "markers_seen": False, "start_ts": t.start_ts,
             "timeout_ms": t.timeout_ms},
            t.timeline[-16:], _ts(t.fenced_by) or t.start_ts)

    def _abort_finding(self, t: Txn, tps: list[str], why: str, ev: list, details: dict, timeline: list,
                       last_ts: float) -> None:
        """A `coordinator-abort` finding of transaction `t` on `tps`; `why` goes on from
        "aborted by the coordinator (" to the end of the message."""
        self.out.append(finding(
            "coordinator-abort",
            f"transaction of producer {self.pid} epoch {t.epoch} ({t.transactional_id!r}) on "
            f"{','.join(tps)} aborted by the coordinator ({why}",
            evidence=ev, details=details, timeline=timeline, producer_id=self.pid, producer_epoch=t.epoch,
            transactional_id=t.transactional_id, first_ts_ms=int(t.start_ts * 1000),
            last_ts_ms=int(last_ts * 1000)))

    def _coordinator_abort(self, t: Txn) -> None:
        aborts = [(tp, m) for tp, m in t.markers.items() if m[0] == "ABORT" and m[1] == t.epoch + 1]
        if not aborts or (t.end is not None and t.end.get("result") == "ABORT"):
            return
        mts = min(m[2] for _, m in aborts)
        if t.fenced_by is not None:
            kind = "fencing"
        elif t.timeout_ms is not None and (mts - t.start_ts) * 1000 >= t.timeout_ms:
            kind = "timeout"
        else:
            kind = "timeout or fencing"
        # the rest of the story: what the producer id did after the abort (new epoch, zombie)
        tail = [line for line in self.log if line not in t.timeline and _ts(line) is not None
                and _ts(line) >= mts]
        timeline = sorted(t.timeline + tail[:12], key=lambda line: _ts(line) or 0.0)
        tps = sorted(tp for tp, _ in aborts)
        self._abort_finding(
            t, tps, f"{kind}): ABORT markers at epoch {t.epoch + 1}"
            + (f" after {(mts - t.start_ts) * 1000:.0f} ms (timeout {t.timeout_ms} ms)" if kind != "fencing" else ""),
            [evidence(None, None, "txn", line) for line in timeline[:1]],
            {"cause": kind, "partitions": tps, "data_epoch": t.epoch, "marker_epoch": t.epoch + 1,
             "start_ts": t.start_ts, "marker_ts": mts, "timeout_ms": t.timeout_ms},
            timeline, mts)

    def _fields(self, o: Open, r: dict) -> dict:
        return dict(topic=o.topic, partition=o.partition, connection=r["connection"], producer_id=self.pid,
                    producer_epoch=r["producer_epoch"], transactional_id=r["transactional_id"] or self.tid,
                    first_offset=r["response_base_offset"] if r["response_error"] == 0 else None,
                    base_sequence=r["base_sequence"], last_sequence=r["last_sequence"],
                    first_ts_ms=int(r["request_ts"] * 1000) if r["request_ts"] else None)

    @staticmethod
    def _ev(r: dict) -> dict:
        return evidence(r["source"], r["position"], "produce", f"corr {r['correlation_id']} on {r['connection']}")


def _ts(line: str) -> float | None:
    s = line.strip()
    if not s.startswith("t="):
        return None
    try:
        return float(s[2:].split()[0])
    except ValueError:
        return None


class TxnFold(Fold):
    """Needs the txn_event rows' response times (from their frames) and the producer id of failed
    InitProducerId requests (from their transactional id): `prepare` adds both before sorting."""

    def prepare(self, items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
        resp = {}
        for kind, t in items:
            if kind == "frame":
                for s, c, f, ts in zip(*(t.column(n).to_pylist() for n in FRAME_COLUMNS[:4])):
                    resp[(s, c, f)] = ts
        out = []
        events = [t for k, t in items if k == "txn_event"]
        if events:
            t = pa.concat_tables(events)
            rows = t.to_pylist()
            pid_of = {}
            for r in rows:
                if r["transactional_id"] and r["producer_id"] is not None and r["producer_id"] >= 0:
                    pid_of.setdefault(r["transactional_id"], r["producer_id"])
            for r in rows:
                if (r["producer_id"] is None or r["producer_id"] < 0) and r["transactional_id"] in pid_of:
                    r["producer_id"] = pid_of[r["transactional_id"]]
                r["response_ts"] = resp.get((r["source"], r["connection"], r["position"]))
            out.append(("txn_event", pa.Table.from_pylist(rows)))
        out.extend((k, t) for k, t in items if k == "batch")
        return out


def _txn_batch_where(t: pa.Table):
    return pc.and_(pc.equal(t.column("source_kind"), "produce"),
                   pc.fill_null(pc.equal(t.column("is_transactional"), True), False))


FOLD = TxnFold("wire-txn", {"txn_event": TXN_COLUMNS, "batch": BATCH_COLUMNS, "frame": FRAME_COLUMNS},
               KEY, ("ts", "request_ts", "position"),
               lambda ctx: KeyedState(KEY, lambda k: ProducerWire(k, ctx)),
               where={"batch": _txn_batch_where,
                      "txn_event": lambda t: pc.invert(pc.equal(t.column("event"), "STATE")),
                      "frame": lambda t: pc.is_in(t.column("api_key"), pa.array(TXN_APIS, t.column("api_key").type))})
