"""Transactions on the wire: one producer id's requests and responses turned into the facts of
txn_model - its data and end markers per partition, and the coordinator's transactions as the
requests show them - which the same rules as the log's judge (txn_findings.judge).

What each request says (KIP-98, KIP-890; Kafka's TransactionCoordinator, AddPartitionsToTxnManager,
TransactionMarkerChannelManager):
- InitProducerId (answered): the id's Empty state at the new epoch; asked while a transaction is
  open, it fences it: the coordinator aborts it (ABORT markers at epoch + 1) before it answers.
- AddPartitionsToTxn: from the client (v0-3, transaction version 0/1) it registers partitions;
  from a partition leader (v4+, client id AddPartitionsManager-client-N) with verifyOnly=false it
  registers the partition of a version-2 producer's Produce (or TxnOffsetCommit v5), with
  verifyOnly=true it checks a version 0/1 producer registered it. Only answered partitions count.
- AddOffsetsToTxn / TxnOffsetCommit: the group's `__consumer_offsets` partition joins the
  transaction (its number shows in the markers).
- EndTxn (answered): PrepareCommit/PrepareAbort, by the client; v5 answers the bumped epoch
  (version 2) - the markers then carry it.
- WriteTxnMarkers: the coordinator's (client id broker-N-txn-marker-sender) end the transaction
  on each partition answered; any other sender is an admin (kafka-transactions.sh abort). A
  coordinator's ABORT without an EndTxn before it is its own: a fencing when a new instance's
  InitProducerId came, else a timeout.
- Produce: accepted (or unanswered) transactional batches are the data; the broker appended
  them at their request, a marker at its answer (`rank`).
"""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.coordinator_state import partition_names
from kaudit.audit.folds import Context, Fold, KeyedState
from kaudit.audit.registry import evidence
from kaudit.audit.txn_model import ADMIN, COORDINATOR, Coverage, ProducerTxns, assemble
from kaudit.timefmt import iso_s

NO_TIMEOUT_MS = 2**31 - 1

KEY = ("producer_id",)
TXN_COLUMNS = ("source", "connection", "position", "ts", "event", "transactional_id", "producer_id",
               "producer_epoch", "partitions", "result", "coordinator_epoch", "timeout_ms", "group_id",
               "new_producer_id", "new_producer_epoch", "error_codes", "transaction_version", "enable_2pc",
               "keep_prepared_txn")
BATCH_COLUMNS = ("source", "connection", "position", "request_ts", "response_ts", "topic", "topic_id", "partition",
                 "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count",
                 "transactional_id", "response_error", "response_base_offset", "correlation_id", "client_id")
FRAME_COLUMNS = ("source", "connection", "request_frame", "response_ts", "api_key", "client_id", "api_version",
                 "partition_errors", "markers")
TXN_APIS = (22, 24, 25, 26, 27, 28)
ADMIN_APIS = (61, 65, 66)   # DescribeProducers, DescribeTransactions, ListTransactions (KIP-664)
FENCED = {47: "INVALID_PRODUCER_EPOCH", 90: "PRODUCER_FENCED"}
MARKER_SENDER = re.compile(r"^broker-\d+-txn-marker-sender$")   # TransactionMarkerChannelManager
ADMIN_CLIENT = re.compile(r"^adminclient-\d+$")                  # KafkaAdminClient's default client id


def marker_writer(client_id: str | None, admin_clients: frozenset = frozenset()) -> str | None:
    """Who sent a WriteTxnMarkers: the coordinator (its marker sender's fixed client id), an
    admin (Kafka's admin client id, or a client that also sent the admin APIs of KIP-664 -
    kafka-transactions.sh abort asks DescribeProducers first), else unknown."""
    cid = client_id or ""
    if MARKER_SENDER.match(cid):
        return COORDINATOR
    if ADMIN_CLIENT.match(cid) or cid in admin_clients:
        return ADMIN
    return None


def nonzero(s) -> list[int]:
    """The non-zero error codes of an `error_codes` cell ("0,47" or "0;47")."""
    codes = (x.strip() for x in str(s or "").replace(";", ",").split(","))
    return [e for e in (int(x) for x in codes if x.lstrip("-").isdigit()) if e != 0]


def _newer(a: int | None, b: int | None) -> bool:
    """Whether epoch `a` is known and above `b` (an unknown `b` is below any known epoch)."""
    return a is not None and (b is None or a > b)


def _host(conn: str | None, side: int) -> str | None:
    """The address (no port) of a connection's client (0) or server (1)."""
    if not conn or " -> " not in conn:
        return None
    return conn.split(" -> ")[side].rsplit(":", 1)[0]


class _Txn:
    """The coordinator's transaction as the requests show it."""

    def __init__(self, tid, epoch, ts, timeout_ms):
        self.tid, self.epoch, self.start, self.timeout_ms = tid, epoch, ts, timeout_ms
        self.partitions: list[str] = []
        self.groups: set[str] = set()
        self.prepared: str | None = None     # COMMIT | ABORT once its end is known
        self.prepare_epoch: int | None = None
        self.marked: set[str] = set()        # partitions whose marker was answered
        self.complete = False
        self.fence_request: float | None = None   # a new instance's InitProducerId while open
        self.fence_row: dict | None = None


class WireFeed:
    """Builds the facts of one producer id from its rows in time order (`rows()`)."""

    def __init__(self, pid: int, ctx: Context):
        self.pid = pid
        self.ctx = ctx
        self.data: list[dict] = []
        self.markers: list[dict] = []
        self.records: list[dict] = []
        self.timeline: list[str] = []
        self.cur: _Txn | None = None
        self.txns: list[_Txn] = []
        self.tid: str | None = None
        self.timeout_ms: int | None = None
        self.seen_init = False
        self.client_coordinator = False      # the client's own coordinator requests show
        self.version: int | None = None      # 2: EndTxn v5 / the leaders' adds (KIP-890)
        self.tv1_adds = False
        self.tv2_adds = False
        self.add_hosts: set[str] = set()     # leaders whose AddPartitionsToTxn the capture holds
        self.marker_hosts: set[str] = set()  # leaders whose WriteTxnMarkers the capture holds
        self.produce_hosts: dict[str, str] = {}   # tp -> the leader its data went to
        self.known_from: float | None = None      # from here on the capture shows every registration
        self._seen: set[tuple] = set()

    # -- the producer's story ---------------------------------------------------------------
    def step(self, ts: float, position, text: str) -> None:
        self.timeline.append(f"{iso_s(ts)} frame {position}: {text}")

    def record(self, state: str, ts: float, r: dict, t: _Txn, *, epoch=None, cause=None, detail=None) -> None:
        self.records.append({
            "topic": None, "partition": 0, "replica": None, "offset": len(self.records),
            "source": r["source"], "position": r["position"], "transactional_id": t.tid or self.tid,
            "producer_id": self.pid, "producer_epoch": t.epoch if epoch is None else epoch,
            "state": state, "state_id": None, "partitions": ",".join(t.partitions) or None,
            "timestamp_ms": int(ts * 1000), "start_ms": int(t.start * 1000),
            "transaction_timeout_ms": t.timeout_ms, "tombstone": False,
            "client_transaction_version": self.version, "end_cause": cause, "end_detail": detail,
            "evidence": [evidence(r["source"], r["position"], "request", f"{state} on {r['connection']}")]})

    def open_txn(self) -> _Txn | None:
        t = self.cur
        return t if t is not None and t.prepared is None and not t.complete else None

    def _new(self, ts: float, epoch: int) -> _Txn:
        self.cur = _Txn(self.tid, epoch, ts, self.timeout_ms)
        self.txns.append(self.cur)
        return self.cur

    def _boundary(self, ts: float) -> None:
        """A transaction boundary the capture shows (InitProducerId, an answered EndTxn): every
        registration after it is in the capture too."""
        if self.known_from is None:
            self.known_from = ts

    # -- events -------------------------------------------------------------------------------
    def event(self, ts: float, r: dict) -> None:
        ev = r["event"]
        if r["transactional_id"]:
            self.tid = r["transactional_id"]
        handler = {"INIT_PRODUCER_ID": self._init, "ADD_PARTITIONS": self._add, "ADD_OFFSETS": self._offsets,
                   "TXN_OFFSET_COMMIT": self._offsets, "END_TXN": self._end,
                   "WRITE_MARKERS": self._markers}.get(ev)
        if handler is not None:
            handler(ts, r, nonzero(r["error_codes"]))

    def _init(self, ts: float, r: dict, errs: list[int]) -> None:
        epoch = r["producer_epoch"]
        ok = not errs and epoch is not None and epoch >= 0 and r["error_codes"] is not None
        if r["timeout_ms"]:
            self.timeout_ms = r["timeout_ms"]
        if r.get("enable_2pc"):
            self.timeout_ms = NO_TIMEOUT_MS   # KIP-939: the coordinator never times it out
        keep = bool(r.get("keep_prepared_txn"))
        text = (f"InitProducerId transactional id {r['transactional_id']!r}"
                + (" (two-phase commit, KIP-939)" if r.get("enable_2pc") else "")
                + (" keeping its prepared transaction" if keep else "")
                + (f" -> producer id {self.pid} epoch {epoch}" if ok else
                   f" -> error {','.join(map(str, errs))}" if errs else " -> no response"))
        t = None if keep else self.open_txn()   # KIP-939 keeps a prepared transaction: no fencing
        if t is not None and (not ok or _newer(epoch, t.epoch)):
            if t.fence_request is None:
                t.fence_request, t.fence_row = ts, r
            text += f" (a new instance: fences the open transaction of epoch {t.epoch})"
        self.step(ts, r["position"], text)
        if not ok:
            return
        self.client_coordinator = self.seen_init = True
        self._boundary(ts)
        if t is not None and _newer(epoch, t.epoch):
            # TransactionCoordinator.handleInitProducerId aborted it before answering
            bumped = None if t.epoch is None else t.epoch + 1
            self.record("PrepareAbort", t.fence_request or ts, t.fence_row or r, t, epoch=bumped,
                        cause=COORDINATOR, detail="fencing")
            t.prepared, t.prepare_epoch = "ABORT", bumped
            self._maybe_complete(t, ts, r, force=True)
        self.cur = None
        self.record("Empty", ts, r, _Txn(self.tid, epoch, ts, self.timeout_ms))

    def _add(self, ts: float, r: dict, errs: list[int]) -> None:
        broker = r.get("api_version") is not None and r["api_version"] >= 4
        verify = r["result"] == "VERIFY"
        tps = self._answered(r)
        who = (f"leader {r.get('client_id')} " if broker else "") + ("verifies" if verify else "AddPartitionsToTxn")
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        self.step(ts, r["position"], f"epoch {r['producer_epoch']} {who} {r['partitions']}{err}")
        if broker:
            self.add_hosts.add(_host(r["connection"], 0))
            if verify:
                self.version = self.version or 1
            else:
                self.version, self.tv2_adds = 2, True
        else:
            self.tv1_adds = self.client_coordinator = True
        if not tps:
            return
        t = self.open_txn()
        epoch = r["producer_epoch"]
        if t is None or _newer(epoch, t.epoch):
            t = self._new(ts, epoch)
        new = [tp for tp in tps if tp not in t.partitions]
        if new:
            t.partitions.extend(new)
            self.record("Ongoing", ts, r, t)

    def _answered(self, r: dict) -> list[str]:
        """The partitions of an AddPartitionsToTxn its answer accepted."""
        if r["error_codes"] is None:
            return []
        errs = r.get("partition_errors")
        if errs:
            try:
                rows = json.loads(errs)
                return [f"{row[1]}-{row[2]}" for row in rows if len(row) > 3 and row[3] == 0]
            except (ValueError, TypeError, IndexError):
                pass
        return [] if nonzero(r["error_codes"]) else list(partition_names(r["partitions"]))

    def _offsets(self, ts: float, r: dict, errs: list[int]) -> None:
        what = "AddOffsetsToTxn" if r["event"] == "ADD_OFFSETS" else f"TxnOffsetCommit {r['partitions'] or ''}"
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        self.step(ts, r["position"], f"epoch {r['producer_epoch']} {what} group {r['group_id']}{err}")
        if errs or r["error_codes"] is None:
            return
        self.client_coordinator = self.client_coordinator or r["event"] == "ADD_OFFSETS"
        t = self.open_txn() or self._new(ts, r["producer_epoch"])
        if r["group_id"]:
            t.groups.add(r["group_id"])

    def _end(self, ts: float, r: dict, errs: list[int]) -> None:
        result = r["result"]
        v5 = r.get("api_version") is not None and r["api_version"] >= 5
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        new = ""
        if r["new_producer_epoch"] is not None and r["new_producer_epoch"] >= 0:
            new = f" -> epoch {r['new_producer_epoch']}"
            if r["new_producer_id"] not in (None, -1, self.pid):
                new = (f" -> producer id {r['new_producer_id']} epoch {r['new_producer_epoch']} (the epoch ran "
                       "out: the transactional id moves to a new producer id)")
        text = f"epoch {r['producer_epoch']} EndTxn {result}{err}{new}"
        if errs and set(errs) & set(FENCED):
            text += " (a zombie: its epoch was fenced)"
        self.step(ts, r["position"], text)
        if errs or r["error_codes"] is None:
            return
        self.client_coordinator = True
        self._boundary(ts)
        if v5:
            self.version = 2
        t = self.open_txn()
        if t is None:
            return   # an empty transaction's EndTxn, or a retry: nothing to end
        new_epoch = r["new_producer_epoch"]
        epoch = new_epoch if v5 and new_epoch is not None and new_epoch >= 0 else r["producer_epoch"]
        if r["new_producer_id"] not in (None, -1, self.pid):
            epoch = None if t.epoch is None else t.epoch + 1   # the markers carry the old id's last epoch
        t.prepared, t.prepare_epoch = result, epoch
        self.record("Prepare" + result.capitalize(), ts, r, t, epoch=epoch, cause="client", detail=f"EndTxn {result.lower()}")
        self._maybe_complete(t, ts, r)

    def _markers(self, ts: float, r: dict, errs: list[int]) -> None:
        writer = marker_writer(r.get("client_id"), r.get("admin_clients") or frozenset())
        if writer != ADMIN and (r.get("transaction_version") or 0) >= 2:
            self.version = 2   # KIP-1228: the coordinator says the transaction's version
        answers = self._marker_answers(r)
        resp = r.get("response_ts")
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        by = f" from {r.get('client_id')!r} (not the coordinator: an admin)" if writer == ADMIN else ""
        self.step(ts, r["position"], f"WriteTxnMarkers {r['result']} epoch {r['producer_epoch']} coordinator epoch "
                                     f"{r['coordinator_epoch']} to {r['partitions']}{by}{err}")
        self.marker_hosts.add(_host(r["connection"], 1))
        t = self._marker_txn(r) if writer != ADMIN else None
        for tp in partition_names(r["partitions"]):
            code = answers.get(tp, 0 if r["error_codes"] is not None and not errs else None)
            if code not in (0, None):
                continue
            topic, _, part = tp.rpartition("-")
            self.markers.append({
                "topic": topic, "partition": int(part), "replica": None, "producer_id": self.pid,
                "producer_epoch": r["producer_epoch"], "base_offset": None, "last_offset": None,
                "is_transactional": True, "is_control": True, "control_type": r["result"],
                "coordinator_epoch": r["coordinator_epoch"], "base_timestamp_ms": int(ts * 1000),
                "max_timestamp_ms": int(ts * 1000), "source": r["source"], "position": r["position"],
                "writer": writer, "client_id": r.get("client_id"), "connection": r["connection"],
                "rank": (resp if resp is not None else ts, r["position"]), "sent": ts})
            if t is not None and code == 0:
                if tp.startswith("__consumer_offsets-") and t.groups and tp not in t.partitions:
                    t.partitions.append(tp)   # AddOffsetsToTxn named the group, the marker its partition
                t.marked.add(tp)
        if t is not None and t.prepared is None and not t.complete:
            self._coordinator_end(t, ts, r)
        if t is not None:
            self._maybe_complete(t, resp if resp is not None else ts, r)

    def _marker_txn(self, r: dict) -> _Txn | None:
        """The transaction a coordinator's markers end: the latest one ending with this result
        at this epoch whose markers are still out, else the open one."""
        tps = set(partition_names(r["partitions"]))
        for t in reversed(self.txns):
            if (t.prepared == r["result"] and t.prepare_epoch == r["producer_epoch"] and not t.complete
                    and (tps & set(t.partitions) or any(tp.startswith("__consumer_offsets-") for tp in tps))):
                return t
        return self.open_txn()

    def _coordinator_end(self, t: _Txn, ts: float, r: dict) -> None:
        """Markers with no EndTxn before them: the coordinator ended the transaction itself."""
        if t.fence_request is not None:
            cause, detail = COORDINATOR, "fencing"
        elif not self.client_coordinator:
            cause, detail = None, None      # the client's requests are not in the capture
        elif r["result"] == "ABORT" and t.timeout_ms and (ts - t.start) * 1000 >= t.timeout_ms:
            cause, detail = COORDINATOR, "timeout"
        elif r["result"] == "ABORT":
            cause, detail = COORDINATOR, "timeout or fencing"
        else:
            cause, detail = None, None
        t.prepared, t.prepare_epoch = r["result"], r["producer_epoch"]
        self.record("Prepare" + r["result"].capitalize(), ts, t.fence_row or r, t, epoch=r["producer_epoch"],
                    cause=cause, detail=detail)

    @staticmethod
    def _marker_answers(r: dict) -> dict:
        out = {}
        if r.get("markers"):
            try:
                for m in json.loads(r["markers"]):
                    if m[0] == r["producer_id"] and m[6] is not None:
                        out[f"{m[4]}-{m[5]}"] = m[6]
            except (ValueError, TypeError, IndexError):
                pass
        return out

    def _maybe_complete(self, t: _Txn, ts: float, r: dict, force: bool = False) -> None:
        """CompleteX once every registered partition's marker was answered (or, `force`, when a
        later answer shows the coordinator completed it: a new epoch after a fencing)."""
        if t.complete or t.prepared is None:
            return
        if force or (t.partitions and set(t.partitions) <= t.marked):
            t.complete = True
            self.record("Complete" + t.prepared.capitalize(), ts, r, t, epoch=t.prepare_epoch)

    # -- data -------------------------------------------------------------------------------------
    def batch(self, ts: float, r: dict) -> None:
        tp = f"{r['topic']}-{r['partition']}"
        err = r["response_error"]
        answer = ("no response" if err is None else f"accepted at offset {r['response_base_offset']}" if err == 0
                  else f"rejected {FENCED.get(err, err)}")
        text = (f"Produce {tp} epoch {r['producer_epoch']} seq {r['base_sequence']}-{r['last_sequence']} "
                f"({r['record_count']} records) -> {answer}")
        if err in FENCED:
            text += " (a zombie: its epoch was fenced)"
        self.step(ts, r["position"], text)
        if err not in (0, None):
            return
        key = (tp, r["producer_epoch"], r["base_sequence"])
        if key in self._seen:
            return      # a retry of a batch already counted: the broker stored it once
        self._seen.add(key)
        self.produce_hosts.setdefault(tp, _host(r["connection"], 1))
        if self.version == 2 or not self.tv1_adds:
            self._implicit_add(ts, r, tp)
        base = r["response_base_offset"]
        base = base if err == 0 and base is not None and base >= 0 else None
        n = r["record_count"] or 1
        self.data.append({
            "topic": r["topic"], "partition": r["partition"], "replica": None, "producer_id": self.pid,
            "producer_epoch": r["producer_epoch"], "base_offset": base,
            "last_offset": None if base is None else base + n - 1, "is_transactional": True,
            "is_control": False, "control_type": None, "coordinator_epoch": None,
            "base_timestamp_ms": int(ts * 1000), "max_timestamp_ms": int(ts * 1000),
            "source": r["source"], "position": r["position"], "connection": r["connection"],
            "client_id": r["client_id"], "correlation_id": r["correlation_id"], "base_sequence": r["base_sequence"],
            "last_sequence": r["last_sequence"], "response_error": err, "rank": (ts, r["position"])})

    def _implicit_add(self, ts: float, r: dict, tp: str) -> None:
        """Data on a partition whose registration the capture cannot show (a version-2 producer's
        leader registers it with the Produce - once per transaction and partition; a version 0/1
        producer's AddPartitionsToTxn before the capture or outside it) is in the producer's
        transaction all the same: its EndTxn ends it."""
        t = self.open_txn()
        epoch = r["producer_epoch"]
        if t is None or _newer(epoch, t.epoch):
            t = self._new(ts, epoch)
        if tp not in t.partitions:
            t.partitions.append(tp)
            self.record("Ongoing", ts, r, t)

    def _order_races(self) -> None:
        """Data sent while a marker was on its way (sent, not answered yet) landed before it when
        its offset follows the data before the marker directly (a marker takes an offset)."""
        by_tp: dict[str, list[dict]] = {}
        for m in self.markers:
            by_tp.setdefault(f"{m['topic']}-{m['partition']}", []).append(m)
        for d in self.data:
            for m in by_tp.get(f"{d['topic']}-{d['partition']}", ()):
                sent, answered = m["sent"], m["rank"][0]
                if not (sent <= d["rank"][0] < answered) or d["base_offset"] is None:
                    continue
                before = [x["last_offset"] for x in self.data if x is not d and x["last_offset"] is not None
                          and x["topic"] == d["topic"] and x["partition"] == d["partition"] and x["rank"] < d["rank"]]
                if before and d["base_offset"] > max(before) + 1:
                    d["rank"] = (answered, m["position"], d["position"])

    def facts(self) -> ProducerTxns:
        self._order_races()
        coverage = WireCoverage(source="wire", coordinator=self.client_coordinator or self.tv2_adds,
                                registrations=self.tv2_adds if self.version == 2 else self.tv1_adds,
                                markers=bool(self.marker_hosts), slack_ms=0, feed=self)
        pt = assemble(self.pid, self.data + self.markers, self.records, coverage=coverage)
        pt.timeline = self.timeline
        return pt


class WireCoverage(Coverage):
    """What a capture shows of one producer: a partition's registration only when the capture
    holds its leader's KIP-890 adds (version 2) or the client's own AddPartitionsToTxn (0/1),
    after a transaction boundary it shows (a capture may start mid-transaction); a marker only
    when it holds WriteTxnMarkers to that partition's leader."""

    def __init__(self, *, feed: WireFeed, **kw):
        super().__init__(**kw)
        self.feed = feed

    def sees_registration(self, tp: str, ts_ms: int | None) -> bool:
        f = self.feed
        if not self.registrations or f.known_from is None or ts_ms is None or ts_ms < f.known_from * 1000:
            return False
        if f.version == 2:
            return f.produce_hosts.get(tp) in f.add_hosts
        return f.tv1_adds

    def sees_marker(self, tp: str) -> bool:
        return self.feed.produce_hosts.get(tp) in self.feed.marker_hosts


class ProducerWire:
    """Fold group of one producer id: its rows, judged in `finish`."""

    def __init__(self, key: tuple, ctx: Context):
        self.pid = key[0]
        self.ctx = ctx
        self.rows: list[tuple[float, int, str, dict]] = []

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        for r in table.to_pylist():
            ts = r["ts"] if kind == "txn_event" else r["request_ts"]
            self.rows.append((ts or 0.0, r["position"] or 0, kind, r))
        return []

    def finish(self) -> list[dict]:
        from kaudit.audit import txn_findings

        if self.pid is None or self.pid < 0:
            return []
        return txn_findings.judge(producer_facts(self.pid, self.rows, self.ctx), self.ctx.reference_time_ms)


def producer_facts(pid: int, rows: list[tuple], ctx: Context) -> ProducerTxns:
    """The facts of one producer id from its (ts, position, kind, row) tuples."""
    feed = WireFeed(pid, ctx)
    for ts, _, kind, r in sorted(rows, key=lambda x: (x[0], x[1])):
        (feed.event if kind == "txn_event" else feed.batch)(ts, r)
    return feed.facts()


class TxnFold(Fold):
    """Needs the txn_event rows' response times, senders and per-partition answers (from their
    frames) and the producer id of failed InitProducerId requests (from their transactional id):
    `prepare` adds them before sorting."""

    def prepare(self, items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
        frames = {}
        admins = set()
        for kind, t in items:
            if kind == "frame":
                cols = [t.column(n).to_pylist() for n in FRAME_COLUMNS]
                for vals in zip(*cols):
                    f = dict(zip(FRAME_COLUMNS, vals))
                    frames[(f["source"], f["connection"], f["request_frame"])] = f
                    if f["api_key"] in ADMIN_APIS and f["client_id"]:
                        admins.add(f["client_id"])
        out = []
        events = [t for k, t in items if k == "txn_event"]
        if events:
            rows = pa.concat_tables(events).to_pylist()
            pid_of = {}
            for r in rows:
                if r["transactional_id"] and r["producer_id"] is not None and r["producer_id"] >= 0:
                    pid_of.setdefault(r["transactional_id"], r["producer_id"])
            for r in rows:
                if (r["producer_id"] is None or r["producer_id"] < 0) and r["transactional_id"] in pid_of:
                    r["producer_id"] = pid_of[r["transactional_id"]]
                f = frames.get((r["source"], r["connection"], r["position"]), {})
                r.update(response_ts=f.get("response_ts"), client_id=f.get("client_id"),
                         api_version=f.get("api_version"), partition_errors=f.get("partition_errors"),
                         markers=f.get("markers"),
                         admin_clients=sorted(admins) if r["event"] == "WRITE_MARKERS" else None)
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
                      "frame": lambda t: pc.is_in(t.column("api_key"),
                                                  pa.array(TXN_APIS + ADMIN_APIS, t.column("api_key").type))})
