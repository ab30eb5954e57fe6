"""Sequence rules on the wire: the batches of Produce requests, per partition, in send order, with
what the broker answered. The state mirrors the broker's (the last accepted batch per producer)
so that the verdicts read like the broker's own: OUT_OF_ORDER_SEQUENCE_NUMBER (45),
DUPLICATE_SEQUENCE_NUMBER (46), INVALID_PRODUCER_EPOCH (47), PRODUCER_FENCED (90)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.producers.disk_sequences import REMEDIATIONS, duplicate_batch, fenced_epoch, out_of_order_sequence
from kaudit.audit.producers.duplicate_records import duplicate_records  # noqa: F401  (registers the rule)
from kaudit.audit.folds import Fold, KeyedState, np_mask
from kaudit.audit.producers.producer_state import BatchView, ProducerState
from kaudit.audit.producers.wire_attempts import MAX_ANON_KEYS, MAX_REFUSED, Attempts, Pid
from kaudit.audit.producers.wire_clean import apply_clean, clean_rows
from kaudit.audit.producers.wire_resends import Resends
from kaudit.audit.registry import evidence, finding, rule
from kaudit.model import view
from kaudit.timefmt import iso_s

KEY = ("topic", "partition")
ORDER = ("request_ts", "source", "position")
COLUMNS = KEY + ORDER + (
    "connection", "correlation_id", "client_id", "transactional_id", "acks", "api_version",
    "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count", "crc",
    "batch_size", "base_timestamp_ms", "max_timestamp_ms", "is_control", "response_ts",
    "response_error", "response_base_offset", "topic_id", "attributes", "magic", "base_offset", "last_offset",
)
Row = view("batch", COLUMNS)   # a Produce batch as this fold reads it (fields checked at import)
ERRORS = {45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER",
          47: "INVALID_PRODUCER_EPOCH", 90: "PRODUCER_FENCED"}
FENCED = (47, 90)


def _sent_again(prior: list, r) -> bool:
    """A batch without a timestamp (-1: a magic 0 client's, or converted) whose every earlier copy
    was acknowledged before it was sent: a client retries only a send that failed or got no
    answer, so without a create time to prove a retry this is the application sending the same
    values again (repeated-records on disk), not a retried batch."""
    if r.base_timestamp_ms not in (-1, None) or r.max_timestamp_ms not in (-1, None) or r.request_ts is None:
        return False
    return all(a.response_error == 0 and a.response_ts is not None and a.response_ts <= r.request_ts
               for a in prior)


def _copy_words(kind: str, d: dict) -> str:
    if kind == "unknown":
        return "the records not compared: the first copy is not at hand or was batched otherwise"
    bounds = d.get("original_batch_sequences")
    if kind != "identical" and bounds:
        return (f"in a batch of other bounds: the first copy's batch held sequences {bounds[0]}-{bounds[1]}, "
                "and a client resends a batch whole")
    if kind != "identical":
        return "with a different payload"
    return "same batch" if d.get("copy") != "same-records" else "the same records under a new batch header"


@rule("retried-batch", "info", "wire", "the same batch sent more than once",
      "Nothing to do when it was deduplicated. When it was stored twice, see duplicate-batch / "
      "duplicate-records; when the outcome is unknown, audit the capture together with the log "
      "dirs (`kaudit audit --pcap ... --segments ...`).")
def retried_batch(attempts: list, now, idempotent: bool = True) -> str:
    """Invariant: a producer retries a batch whose response it did not get (timeout, dropped
    connection, retriable error) with the same producer id, epoch and sequences (idempotent) or
    the same bytes (producer id -1); the broker answers an idempotent retry of one of the last five
    batches with the original offset (ProducerStateManager.findDuplicateBatch, KIP-98) and appends
    it otherwise. Outcome of the latest attempt: deduplicated (the original offset, or
    DUPLICATE_SEQUENCE_NUMBER; for an idempotent producer also an acceptance after an unanswered
    attempt: the broker stores it once either way), stored twice (two successes at different
    offsets), stored once (accepted after attempts the broker rejected), rejected (an error),
    unknown (no response; for producer id -1 also an acceptance after an unanswered attempt,
    which may have been stored too).
    Benign causes: this is the normal retry path; only 'stored twice' (and 'unknown' without
    idempotence) is a problem."""
    err, off = now.response_error, now.response_base_offset
    prior = [a.response_base_offset for a in attempts if a.response_error == 0]
    if err == 46:
        return "deduplicated"
    if err is None:
        return "unknown"
    if err != 0:
        return "rejected"
    if any(p != off for p in prior):
        return "stored twice"
    if prior:
        return "deduplicated"
    if any(a.response_error is None for a in attempts):
        return "deduplicated" if idempotent else "unknown"
    return "stored once"


class _Timeline:
    """A finding's timeline (WirePartition._line of the producer's last batches, then of this
    one), written out when a finding takes it: most batches have none."""

    __slots__ = ("part", "rows", "row")

    def __init__(self, part, rows: list, row: Row):
        self.part, self.rows, self.row = part, rows, row

    def lines(self) -> list[str]:
        return [self.part._line(x) for x in self.rows] + [self.part._line(self.row)]


class WirePartition:
    clean_pass = True   # the clean-producer pass (audit/producers/wire_clean.py); False: every row checked

    def __init__(self, key: tuple, ctx=None):
        self.topic, self.partition = key
        self.ctx = ctx   # read at each chunk: a live audit's lineage grows while the capture arrives
        self._lineage, self.left = None, {}
        self.pids: dict[int, Pid] = {}
        self.anon = Attempts(MAX_ANON_KEYS)
        self.out: list[dict] = []
        self.resends = Resends(self.topic, self.partition)

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        lineage = getattr(self.ctx, "producer_lineage", None)
        if lineage is not self._lineage:
            # idempotent producer ids a KIP-360 InitProducerId moved to a new id (txn_lineage): id -> Move
            self._lineage, self.left = lineage, left_behind(lineage)
            self.resends.left = self.left
        # records a new producer session sent again after a failed send (vectorised, all rows)
        self.out.extend(self.resends.feed(t))
        # the producers' clean batches first (no finding, only state), then the rest in order:
        # producers are independent, so the findings and the state come out as row by row
        if self.clean_pass and not (self.left and _names_any(t, self.left)):
            clean, groups = clean_rows(t, self.pids)
            apply_clean(t, Row, self.pids, groups, clean)
            if clean.any():
                t = t.filter(np_mask(~clean))
        for r in Row.of(t):
            if r.producer_id is None or r.producer_id < 0:
                self._anonymous(r)
            else:
                self._idempotent(r)
        out, self.out = self.out, []
        return out

    def finish(self) -> list[dict]:
        return self.out

    # -- helpers ------------------------------------------------------------------------------
    def _where(self) -> str:
        return f"{self.topic}-{self.partition}"

    @staticmethod
    def _answer(r: Row) -> str:
        e = r.response_error
        if e is None:
            return "no response" if r.acks != 0 else "acks=0, no response expected"
        if e == 0:
            return f"accepted at offset {r.response_base_offset}"
        return f"rejected with {ERRORS.get(e, 'error')} ({e})"

    def _line(self, r: Row) -> str:
        seq = "" if r.producer_id is None or r.producer_id < 0 else \
            f"epoch {r.producer_epoch} seq {r.base_sequence}-{r.last_sequence} "
        return (f"frame {r.position} {iso_s(r.request_ts)} corr {r.correlation_id} "
                f"{r.connection}: {seq}({r.record_count} records) -> {self._answer(r)}")

    def _fields(self, r: Row, **kw) -> dict:
        ok = r.response_error == 0 and r.response_base_offset is not None \
            and r.response_base_offset >= 0
        pid = r.producer_id
        idem = pid is not None and pid >= 0
        return dict(topic=self.topic, partition=self.partition, connection=r.connection,
                    client_id=r.client_id, producer_id=pid, producer_epoch=r.producer_epoch if idem else None,
                    transactional_id=r.transactional_id,
                    first_offset=r.response_base_offset if ok else None,
                    last_offset=r.response_base_offset + r.record_count - 1 if ok else None,
                    base_sequence=r.base_sequence if idem else None,
                    last_sequence=r.last_sequence if idem else None,
                    first_ts_ms=int(r.request_ts * 1000), **kw)

    @staticmethod
    def _ev(r: Row, note: str | None = None) -> dict:
        n = f"corr {r.correlation_id} on {r.connection}"
        return evidence(r.source, r.position, "produce", f"{n}; {note}" if note else n)

    @staticmethod
    def _view(r: Row) -> BatchView:
        return BatchView(r.source, r.position, r.response_base_offset, None, r.producer_id,
                         r.producer_epoch, r.base_sequence, r.last_sequence,
                         r.record_count or 0, r.crc, r.batch_size, False, None,
                         r.base_timestamp_ms, r.max_timestamp_ms, r.attributes)

    # -- producer id -1 -----------------------------------------------------------------------
    def _anonymous(self, r: Row) -> None:
        if r.acks == 0:
            return
        fp = (r.crc, r.batch_size, r.record_count, r.base_timestamp_ms, r.max_timestamp_ms)
        prior = self.anon.get(fp)
        if prior and _sent_again(prior, r):
            prior = None   # the application's own repetition, not a retry
        if prior:
            outcome = retried_batch(prior, r, idempotent=False)
            lines = [self._line(a) for a in prior] + [self._line(r)]
            sev = "warning" if outcome == "unknown" else None
            risk = ""
            if outcome == "unknown":
                risk = (" — an earlier attempt got no answer and may have been stored too" if r.response_error == 0
                        else " — without idempotence a retry may be stored twice")
            self.out.append(finding(
                "retried-batch", f"{self._where()}: a batch of {r.record_count} records from a "
                f"non-idempotent producer (client {r.client_id}) was sent again "
                f"({len(prior) + 1} attempts): {outcome} ({self._answer(r)}){risk}",
                severity=sev, evidence=[self._ev(a) for a in prior] + [self._ev(r)],
                details={"outcome": outcome, "attempts": len(prior) + 1}, timeline=lines, **self._fields(r)))
            if outcome == "stored twice":
                offs = sorted({a.response_base_offset for a in prior if a.response_error == 0})
                self.out.append(finding(
                    "duplicate-records", f"{self._where()}: the same {r.record_count} records "
                    f"were acknowledged at offset{'s' if len(offs) > 1 else ''} {', '.join(map(str, offs))} "
                    f"and again at {r.response_base_offset} "
                    f"(producer id -1: the broker cannot deduplicate)",
                    evidence=[self._ev(a) for a in prior] + [self._ev(r)],
                    details={"original_first_offset": offs[0]}, timeline=lines, **self._fields(r)))
        self.anon.add(fp, r)

    # -- idempotent and transactional producers ------------------------------------------------
    def _idempotent(self, r: Row) -> None:
        p = self.pids.setdefault(r.producer_id, Pid())
        b = self._view(r)
        err = r.response_error
        key = (r.producer_epoch, r.base_sequence, r.last_sequence)
        prior = p.attempts.get(key)
        st = p.state
        # the producer's last batches and this one, written out only for a finding
        timeline = _Timeline(self, p.recent[-4:], r)
        where = self._where()

        moved = self.left.get(r.producer_id)
        if (moved is not None and err == 0 and moved.ts_ms is not None and r.request_ts is not None
                and r.request_ts * 1000 > moved.ts_ms):
            self.out.append(self._after_move(r, moved, timeline))
        if (st is not None and fenced_epoch(st, b)) or err in FENCED:
            stale = st is not None and fenced_epoch(st, b)
            # an error only when the broker took it; refused or unanswered: the broker's job
            sev = "error" if err == 0 else "warning"
            why = (f"after epoch {st.max_epoch} was used" if stale
                   else "which the broker knows to be fenced")
            self.out.append(finding(
                "fenced-epoch", f"{where}: producer {r.producer_id} sent data with epoch "
                f"{r.producer_epoch} {why}: {self._answer(r)}",
                severity=sev, evidence=[self._ev(r)], timeline=timeline.lines(),
                details={"stale_epoch": r.producer_epoch, "current_epoch": st.max_epoch if st else None,
                         "broker": self._answer(r)}, **self._fields(r)))
        elif prior:
            outcome = retried_batch(prior, r)
            self.out.append(finding(
                "retried-batch", f"{where}: producer {r.producer_id} epoch {r.producer_epoch} "
                f"sequences {r.base_sequence}-{r.last_sequence} sent {len(prior) + 1} times: "
                f"{outcome} ({self._answer(r)})", evidence=[self._ev(a) for a in prior] + [self._ev(r)],
                details={"outcome": outcome, "attempts": len(prior) + 1}, timeline=timeline.lines(),
                **self._fields(r)))
            if outcome in ("stored twice", "stored once") or err == 45:
                # stored anew (or refused as out of order): the sequence checks apply to it
                self._sequence_findings(p, r, b, timeline)
        elif st is not None or err == 45:
            self._sequence_findings(p, r, b, timeline)

        # the broker's state after this request (acks=0 or no response: assume it was appended);
        # a retry answered with an offset an earlier attempt already got changes nothing
        dedup = err == 46 or (err == 0 and any(
            a.response_error == 0 and a.response_base_offset == b.base_offset for a in prior))
        if (err == 0 or (err is None and r.acks != 0)) and not dedup:
            if st is None:
                p.state = st = ProducerState(b.producer_epoch, b.last_sequence, b.producer_epoch, None, 0)
            st.epoch, st.last_seq = b.producer_epoch, b.last_sequence
            st.max_epoch = max(st.max_epoch, b.producer_epoch)
            if err == 0 and b.base_offset is not None and b.base_offset >= 0:
                b.last_offset = b.base_offset + b.record_count - 1
                st.remember(b)
                st.note(b)   # at hand to compare a later copy with (duplicate_batch)
        elif err not in (None, 0, 46):
            p.refused.append((b.producer_epoch, b.base_sequence, b.last_sequence))
            del p.refused[:-MAX_REFUSED]
        p.attempts.add(key, r)
        p.recent.append(r)
        del p.recent[:-4]

    def _after_move(self, r: Row, m, timeline: _Timeline) -> dict:
        """write-after-epoch-end for an idempotent producer: its client ended the old id's session
        when its KIP-360 InitProducerId was answered with a new id, yet a Produce under the old id
        sent after that was stored. Told at info: a broker never fences an idempotent producer id
        (TransactionCoordinator.handleInitProducerId hands out a new id and leaves the old one's
        state alone), so the leader rightly stored it in sequence and consumers read it once; the
        damage, if any, is a copy re-sent under the new id (duplicate-records judges by content)."""
        return finding(
            "write-after-epoch-end", f"{self._where()}: producer {r.producer_id} epoch {r.producer_epoch} "
            f"sequences {r.base_sequence}-{r.last_sequence} was sent {r.request_ts - m.ts_ms / 1000:.3f} s after "
            f"its client's InitProducerId asked to replace producer id {m.old} (epoch {m.last_epoch}) and got "
            f"producer id {m.new} (KIP-360), and was {self._answer(r)}: the old id's session had ended for "
            f"its client, but a broker never fences an idempotent producer id, so it was stored in sequence",
            severity="info",
            remediation=("A client kept writing under the producer id it had asked to replace (or another "
                         "process shares it). Find the connection and client id given; if it also re-sent "
                         "these records under the new producer id, consumers read them twice: audit the "
                         "capture with the log dirs (kaudit audit) to compare the records."),
            evidence=[self._ev(r, "written under the old producer id"),
                      evidence(m.source, m.position, "request", f"InitProducerId: producer id {m.old} -> {m.new}")],
            timeline=timeline.lines(),
            details={"next_producer_id": m.new, "epoch_ended_ms": m.ts_ms, "epoch_end": m.how,
                     "last_epoch_asked": m.last_epoch, "how_known": "kip360", "accepted": True,
                     "producer_ids": [m.old, m.new]},
            **self._fields(r))

    def _sequence_findings(self, p: Pid, r: Row, b: BatchView, timeline: _Timeline) -> None:
        err, st, where = r.response_error, p.state, self._where()
        accepted = err == 0
        if st is not None and accepted:
            for kind, d in duplicate_batch(st, b):
                if d["original_first_offset"] == b.base_offset:
                    continue  # answered with the original offset: deduplicated
                lo, hi = d["original_sequences"]
                self.out.append(finding(
                    "duplicate-batch", f"{where}: producer {r.producer_id} epoch {r.producer_epoch} "
                    f"sequences {lo}-{hi} were acknowledged at offset {d['original_first_offset']} and "
                    f"again at offset {b.base_offset} "
                    f"({_copy_words(kind, d)})",
                    evidence=[self._ev(r)], details={"payload": kind, **{k: v for k, v in d.items() if k != 'original'}},
                    timeline=timeline.lines(), remediation=REMEDIATIONS.get(kind),
                    **self._fields(r)))
        verdict = out_of_order_sequence(st, b) if st is not None else None
        if verdict is None and err != 45:
            return
        if verdict is None:
            text = "was rejected as out of order"
            if st is not None:
                text += (f" although it follows sequence {st.last_seq} of epoch {st.epoch} "
                         "in this capture (the broker's state differs: lost or reset)")
            kind, expected = "broker", None
        else:
            kind, expected = verdict
            if err not in (None, 0) and kind in ("gap", "new-epoch") and \
                    p.covered_by_refused(b.producer_epoch, expected, b.base_sequence - 1):
                # the sequences in between (a new epoch's from 0) were in flight in batches the
                # broker refused (a retriable error: OUT_OF_ORDER_SEQUENCE_NUMBER in their wake,
                # NOT_LEADER_OR_FOLLOWER from a leader deposed while they waited for the ISR): this
                # batch, refused too, followed them in order and is retried after them
                return
            text = {"gap": f"jumps from {st.last_seq} to {b.base_sequence} (expected {expected})",
                    "regression": f"goes back from {st.last_seq} to {b.base_sequence} (expected {expected})",
                    "new-epoch": f"starts new epoch {b.producer_epoch} at sequence {b.base_sequence}, not 0"}[kind]
        # the broker stored it: an error; refused with 45 (or unanswered): a warning
        sev = "error" if accepted else "warning"
        lost = self._lost_between(p, r) if kind in ("gap", "new-epoch") else None
        tail = ""
        if lost is not None:
            # the sequences in between may be in a request the capture lost: not Kafka's anomaly
            sev = "info"
            tail = (f"; the capture lost bytes on {lost.words()}, between this producer's previous "
                    f"batch here and this one: sequences {expected}-{b.base_sequence - 1} may be in a "
                    "request it lost")
        self.out.append(finding(
            "out-of-order-sequence", f"{where}: producer {r.producer_id} epoch {r.producer_epoch} "
            f"sequences {b.base_sequence}-{b.last_sequence} {text}: {self._answer(r)}{tail}",
            severity=sev, evidence=[self._ev(r)], timeline=timeline.lines(),
            details={"kind": kind, "expected_sequence": expected, "broker": self._answer(r),
                     "previous_last_sequence": st.last_seq if st else None,
                     **({"capture_lost": lost.words()} if lost is not None else {})}, **self._fields(r)))


    def _lost_between(self, p: Pid, r: Row):
        """The capture hole (audit.capture_holes.Lost) between the producer's previous request to
        this partition and `r`, on either's connection; None: none."""
        holes = getattr(self.ctx, "capture_holes", None)
        if not holes:
            return None
        prev = p.recent[-1] if p.recent else None
        if prev is None:
            return holes.lost_on([r.connection], None, (r.source, r.position))
        return holes.lost_on([r.connection, prev.connection], (prev.source, prev.position), (r.source, r.position))


def left_behind(lineage: dict | None) -> dict:
    """Producer id -> the Move that left it, for idempotent producers' lineages (no transactional
    id: a transactional id's moves are the transaction rules')."""
    out = {}
    for pid, lin in (lineage or {}).items():
        if lin.transactional_id is None:
            m = lin.next_move(pid)
            if m is not None:
                out[pid] = m
    return out


def _names_any(t: pa.Table, pids: dict) -> bool:
    return pc.any(pc.is_in(t.column("producer_id"), value_set=pa.array(list(pids), pa.int64()))).as_py() or False


FOLD = Fold("wire-produce", {"batch": COLUMNS}, KEY, ORDER,
            lambda ctx: KeyedState(KEY, lambda k: WirePartition(k, ctx)),
            where={"batch": lambda t: pc.equal(t.column("source_kind"), "produce")}, per_key=True, cost=1.2)
