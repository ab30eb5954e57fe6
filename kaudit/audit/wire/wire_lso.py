"""`lso-stuck` on the wire: read_committed Fetch responses of one partition, in response order, and
the partition's transactional batches (a Produce's acknowledged offset, a Fetch's stored one): whose
open transaction starts at a stuck last stable offset."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Context, Fold, KeyedState, np_indices
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.txn.txn_model import two_pc_at
from kaudit.model import view
from kaudit.timefmt import duration, iso_s
from kaudit.audit.thresholds import MIN_RESPONSES, MIN_SPAN_S, STUCK_MS

KEY = ("topic", "partition")
ORDER = ("response_ts", "position")
COLUMNS = KEY + ORDER + ("source", "connection", "client_id", "high_watermark", "last_stable_offset",
                         "aborted_transactions", "fetch_offset", "topic_id")
Row = view("fetch_partition", COLUMNS)   # a Fetch response's partition as this fold reads it
BATCH_COLUMNS = KEY + ("source", "position", "response_ts", "topic_id", "source_kind", "base_offset",
                       "response_base_offset", "producer_id", "producer_epoch", "transactional_id")
Batch = view("batch", BATCH_COLUMNS)   # a transactional data batch: its producer at its log offset


@rule("lso-stuck", "warning", "wire", "last stable offset stuck behind an open transaction",
      "Find the open transaction at the last stable offset (`kafka-transactions.sh find-hanging`, "
      "`describe-producers`); if nothing will end it, abort it with kafka-transactions.sh abort "
      "--topic T --partition P --start-offset <LSO>. read_committed consumers cannot read past it.")
def lso_stuck(run: list) -> bool:
    """Invariant: the last stable offset of a partition (KIP-98) is the first offset of its oldest
    open transaction (kafka.log.UnifiedLog.lastStableOffset from
    ProducerStateManager.firstUnstableOffset), else the high watermark; it moves on as soon as the
    coordinator's marker ends that transaction. Stuck: at least MIN_RESPONSES read_committed Fetch
    responses over at least MIN_SPAN_S seconds carry the same last stable offset, below their high
    watermark (which may move on meanwhile).
    Benign causes: a long transaction still within its transaction.timeout.ms (the coordinator
    aborts it then and the LSO moves); a consumer that polls a partition nobody writes to no longer
    changes anything (the responses then show a constant high watermark); a KIP-939
    two-phase-commit transaction (its producer's InitProducerId in effect asked Enable2Pc, or a
    KeepPreparedTxn recovery with Enable2Pc kept it: the recovery's answer names the kept
    transaction's producer id and epoch in OngoingTxnProducerId/Epoch, whatever producer id the
    recovering session got - txn_kept) whose data the capture shows at that offset: its
    coordinator never times it out (TransactionStateManager skips
    isDistributedTwoPhaseCommitTxn), so it holds the LSO, by design, until its external
    transaction manager commits or aborts it - told at info, naming it (its open data is
    dangling-transaction's to judge). A recovery that kept nothing (OngoingTxnProducerId -1) or
    another transaction excuses none.
    Severity: warning; error when stuck longer than transaction.max.timeout.ms (15 min by
    default), which no open transaction but a two-phase-commit one outlives: read_committed
    consumers are stalled."""
    if len(run) < MIN_RESPONSES:
        return False
    return (run[-1].response_ts or 0) - (run[0].response_ts or 0) >= MIN_SPAN_S


def lso_runs(lso: np.ndarray, hw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of responses in the fold's order (`lso`, `hw`: their LSOs and high watermarks,
    -1 where unknown): (the positions of the responses with both, each run's first and end
    index among them). A run is the longest stretch of consecutive such responses whose LSO is
    the same and below their high watermark; the response at a run's end, where there is one,
    ended it (another LSO, or one at or above its high watermark). The wire-lso fold and its live
    settler (lso_settle) both cut runs here."""
    valid = np.flatnonzero((lso >= 0) & (hw >= 0))
    lso, hw = lso[valid], hw[valid]
    below = lso < hw
    goes_on = np.zeros(len(lso), dtype=bool)   # continues the run of the response before it
    goes_on[1:] = below[1:] & below[:-1] & (lso[1:] == lso[:-1])
    breaks = np.flatnonzero(~goes_on)
    starts = np.flatnonzero(below & ~goes_on)
    ends = np.concatenate([breaks, [len(lso)]])[np.searchsorted(breaks, starts, side="right")]
    return valid, starts, ends


class LsoPartition:
    """One partition: its runs of the same LSO below the high watermark, judged once the
    partition's transactional batches are known too (in `finish`: the kinds come in any order)."""

    def __init__(self, key: tuple, ctx: Context | None = None):
        self.topic, self.partition = key
        self.ctx = ctx
        self.fetches: list[pa.Table] = []
        self.batches: list[pa.Table] = []
        self.at: dict[int, tuple | None] = {}   # log offset -> (producer id, epoch, transactional id)

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        # judged in `finish`: a run may go on in the next chunk, and the batches matter only at
        # the LSO of a stuck run (most partitions have none: their batches are never read)
        (self.batches if kind == "batch" else self.fetches).append(table)
        return []

    def stuck_runs(self) -> list[list]:
        """The responses of each run (lso_runs) that `lso_stuck` holds, in order."""
        if not self.fetches:
            return []
        t = self.fetches[0] if len(self.fetches) == 1 else pa.concat_tables(self.fetches)
        valid, starts, ends = lso_runs(pc.fill_null(t.column("last_stable_offset"), -1).to_numpy(),
                                       pc.fill_null(t.column("high_watermark"), -1).to_numpy())
        ts = pc.fill_null(t.column("response_ts"), 0.0).to_numpy()[valid]
        # lso_stuck's own tests, before any row is made (it still decides, over the rows)
        maybe = (ends - starts >= MIN_RESPONSES) & (ts[np.maximum(ends - 1, 0)] - ts[starts] >= MIN_SPAN_S)
        out = []
        for s, e in zip(starts[maybe].tolist(), ends[maybe].tolist()):
            run = Row.of(t.take(np_indices(valid[s:e])))
            if lso_stuck(run):
                out.append(run)
        return out

    def _holders(self, offsets: set) -> None:
        """`at` for the offsets of `offsets`: the batches' producers there, in the rows' order."""
        for t in self.batches:
            produced = pc.fill_null(pc.equal(t.column("source_kind"), "produce"), False)
            off = pc.if_else(produced, t.column("response_base_offset"),
                             t.column("base_offset"))
            keep = pc.and_(pc.is_in(off, pa.array(sorted(offsets), pa.int64())),
                           pc.greater_equal(t.column("producer_id"), 0))
            part = t.filter(pc.fill_null(keep, False))
            for b in Batch.of(part):
                self._note(b.response_base_offset if b.source_kind == "produce" else b.base_offset, b)

    def _note(self, off: int, b) -> None:
        if off not in self.at:
            self.at[off] = (b.producer_id, b.producer_epoch, b.transactional_id)
        elif self.at[off] is not None and self.at[off][:2] == (b.producer_id, b.producer_epoch):
            self.at[off] = (b.producer_id, b.producer_epoch, b.transactional_id or self.at[off][2])
        else:
            self.at[off] = None   # two producers at one offset (a truncated log): whose is unknown

    def _two_pc(self, lso: int) -> tuple | None:
        """(producer id, epoch, transactional id) of the KIP-939 two-phase-commit transaction
        whose data the capture shows at `lso` (its InitProducerId in effect asked Enable2Pc)."""
        held = self.at.get(lso)
        inits = (self.ctx.two_pc_inits or {}) if self.ctx is not None else {}
        if held is None or not two_pc_at(inits.get(held[0]), held[1]):
            return None
        tid = held[2] or next((x[2] for x in inits[held[0]] if len(x) > 2 and x[2]), None)
        return held[0], held[1], tid

    def _finding(self, run: list) -> dict:
        first, last = run[0], run[-1]
        lso = first.last_stable_offset
        hws = [r.high_watermark for r in run]
        open_at = sorted({a for r in run for a in str(r.aborted_transactions or "").split(",") if a})
        span = (last.response_ts or 0) - (first.response_ts or 0)
        details = {"last_stable_offset": lso, "high_watermarks": [min(hws), max(hws)], "responses": len(run),
                   "span_s": round(span, 3), "aborted_transactions": open_at}
        text = (f"{self.topic}-{self.partition}: last stable offset stays at {lso} in {len(run)} read_committed "
                f"Fetch responses over {duration(span * 1000)} (since {iso_s(first.response_ts)}) while the "
                f"high watermark is {min(hws)}" + (f"-{max(hws)}" if max(hws) != min(hws) else ""))
        remediation = ("kafka-transactions.sh --bootstrap-server <broker> find-hanging --broker-id <leader>; "
                       f"then abort --topic {self.topic} --partition {self.partition} --start-offset {lso} "
                       "if nothing will end it")
        severity = "error" if span * 1000 > STUCK_MS else None
        held, pid, epoch = self._two_pc(lso), None, None
        if held is None:
            text += ": an open transaction starts there (read_committed consumers stop at it)"
        else:
            pid, epoch, tid = held
            details.update(two_phase_commit=True, producer_id=pid, producer_epoch=epoch, transactional_id=tid)
            text += (f": producer {pid} epoch {epoch}'s transaction (transactional id {tid or 'unknown'}) starts "
                     "there, a two-phase-commit transaction (KIP-939: its InitProducerId, or the recovery that kept it, "
                     "asked Enable2Pc), which "
                     "its coordinator never times out; read_committed consumers wait there until its external "
                     "transaction manager commits or aborts it")
            remediation = ("Have the external transaction manager complete it (its recovery commits or aborts the "
                           "transaction); only if that manager has lost its decision for good: "
                           "kafka-transactions.sh --bootstrap-server <broker> forceTerminateTransaction "
                           f"--transactionalId {tid or '<transactional id>'}")
            severity = "info"
        return finding(
            "lso-stuck", text,
            evidence=[evidence(r.source, r.position, "fetch", f"{r.connection} client {r.client_id}: "
                               f"LSO {r.last_stable_offset} HW {r.high_watermark}") for r in (first, last)],
            details=details, remediation=remediation, severity=severity, client_id=first.client_id,
            topic=self.topic, partition=self.partition, first_offset=lso, producer_id=pid, producer_epoch=epoch,
            first_ts_ms=int(first.response_ts * 1000), last_ts_ms=int(last.response_ts * 1000))

    def finish(self) -> list[dict]:
        runs = self.stuck_runs()
        if runs:
            self._holders({run[0].last_stable_offset for run in runs})
        return [self._finding(run) for run in runs]


def _where(t: pa.Table):
    m = pc.equal(t.column("isolation_level"), "read_committed")
    return pc.and_(pc.fill_null(m, False), pc.fill_null(pc.equal(t.column("error_code"), 0), False))


def _data(t: pa.Table):
    """Transactional data batches, produced (acknowledged) or fetched: who holds which offset."""
    m = pc.and_(pc.fill_null(t.column("is_transactional"), False),
                pc.invert(pc.fill_null(t.column("is_control"), False)))
    ok = pc.or_(pc.equal(t.column("source_kind"), "fetch"),
                pc.and_(pc.equal(t.column("source_kind"), "produce"), pc.equal(t.column("response_error"), 0)))
    return pc.and_(m, pc.fill_null(ok, False))


def _live(fold: Fold):
    """A live capture's settling (lso_settle: its runs over, its batches that no longer matter)."""
    from kaudit.audit.wire.lso_settle import LsoSettle

    return LsoSettle(fold, lso_stuck, lso_runs)


FOLD = Fold("wire-lso", {"fetch_partition": COLUMNS, "batch": BATCH_COLUMNS}, KEY, ORDER,
            lambda ctx: KeyedState(KEY, lambda k: LsoPartition(k, ctx)),
            where={"fetch_partition": _where, "batch": _data}, live=_live, per_key=True, cost=0.25)
