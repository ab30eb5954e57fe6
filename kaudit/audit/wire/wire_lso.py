"""`lso-stuck` on the wire: read_committed Fetch responses of one partition, in response order."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Fold, KeyedState
from kaudit.audit.registry import evidence, finding, rule
from kaudit.model import view
from kaudit.timefmt import duration, iso_s
from kaudit.audit.thresholds import MIN_RESPONSES, MIN_SPAN_S, STUCK_MS

KEY = ("topic", "partition")
ORDER = ("response_ts", "position")
COLUMNS = KEY + ORDER + ("source", "connection", "client_id", "high_watermark", "last_stable_offset",
                         "aborted_transactions", "fetch_offset", "topic_id")
Row = view("fetch_partition", COLUMNS)   # a Fetch response's partition as this fold reads it


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
    changes anything (the responses then show a constant high watermark).
    Severity: warning; error when stuck longer than transaction.max.timeout.ms (15 min by
    default), which no open transaction outlives: read_committed consumers are stalled."""
    if len(run) < MIN_RESPONSES:
        return False
    return (run[-1].response_ts or 0) - (run[0].response_ts or 0) >= MIN_SPAN_S


class LsoPartition:
    def __init__(self, key: tuple):
        self.topic, self.partition = key
        self.run: list = []
        self.out: list[dict] = []

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        for r in Row.of(table):
            lso, hw = r.last_stable_offset, r.high_watermark
            if lso is None or hw is None or lso < 0 or hw < 0:
                continue
            if self.run and lso != self.run[0].last_stable_offset:
                self._close()
            if lso < hw:
                self.run.append(r)
            elif self.run:
                self._close()
        return []

    def _close(self) -> None:
        run, self.run = self.run, []
        if not lso_stuck(run):
            return
        first, last = run[0], run[-1]
        lso = first.last_stable_offset
        hws = [r.high_watermark for r in run]
        open_at = sorted({a for r in run for a in str(r.aborted_transactions or "").split(",") if a})
        span = (last.response_ts or 0) - (first.response_ts or 0)
        self.out.append(finding(
            "lso-stuck",
            f"{self.topic}-{self.partition}: last stable offset stays at {lso} in {len(run)} read_committed "
            f"Fetch responses over {duration(span * 1000)} (since {iso_s(first.response_ts)}) while the "
            f"high watermark is {min(hws)}"
            + (f"-{max(hws)}" if max(hws) != min(hws) else "")
            + ": an open transaction starts there (read_committed consumers stop at it)",
            evidence=[evidence(r.source, r.position, "fetch", f"{r.connection} client {r.client_id}: "
                               f"LSO {r.last_stable_offset} HW {r.high_watermark}") for r in (first, last)],
            details={"last_stable_offset": lso, "high_watermarks": [min(hws), max(hws)], "responses": len(run),
                     "span_s": round(span, 3), "aborted_transactions": open_at},
            remediation=("kafka-transactions.sh --bootstrap-server <broker> find-hanging --broker-id <leader>; "
                         f"then abort --topic {self.topic} --partition {self.partition} --start-offset {lso} "
                         "if nothing will end it"),
            severity="error" if span * 1000 > STUCK_MS else None, client_id=first.client_id,
            topic=self.topic, partition=self.partition, first_offset=lso,
            first_ts_ms=int(first.response_ts * 1000), last_ts_ms=int(last.response_ts * 1000)))

    def finish(self) -> list[dict]:
        self._close()
        return self.out


def _where(t: pa.Table):
    m = pc.equal(t.column("isolation_level"), "read_committed")
    return pc.and_(pc.fill_null(m, False), pc.fill_null(pc.equal(t.column("error_code"), 0), False))


FOLD = Fold("wire-lso", {"fetch_partition": COLUMNS}, KEY, ORDER,
            lambda ctx: KeyedState(KEY, LsoPartition), where={"fetch_partition": _where}, per_key=True, cost=0.9)
