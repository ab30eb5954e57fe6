"""The transaction coordinator's view on disk: `__transaction_state` records (txn_log rows) of one
producer id, folded into the coordinator's transactions, and the state machine they must follow
(kafka.coordinator.transaction.TransactionMetadata / TransactionState, KIP-98)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from kaudit.audit.registry import evidence, finding, rule

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
          "Dead", "PrepareEpochFence")
# TransactionState.validPreviousStates (Kafka 3.x), DESIGN.md §2.
VALID_PREVIOUS: dict[str, frozenset[str]] = {
    "Empty": frozenset({"Empty", "CompleteCommit", "CompleteAbort"}),
    "Ongoing": frozenset({"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"}),
    "PrepareCommit": frozenset({"Ongoing"}),
    "PrepareAbort": frozenset({"Ongoing", "PrepareEpochFence"}),
    "CompleteCommit": frozenset({"PrepareCommit"}),
    "CompleteAbort": frozenset({"PrepareAbort"}),
    "Dead": frozenset({"Empty", "CompleteAbort", "CompleteCommit"}),
    "PrepareEpochFence": frozenset({"Ongoing"}),
}
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


@rule("illegal-state-transition", "error", "disk",
      "coordinator state machine broken",
      "The coordinator's log is inconsistent (lost or reordered __transaction_state records, a "
      "bad coordinator failover or a broker bug). Compare the replicas of the __transaction_state "
      "partition; if the transactional id is stuck, abort its open transactions with "
      "kafka-transactions.sh and restart the producer.")
def illegal_state_transition(previous: str | None, new: str) -> bool:
    """Invariant: two consecutive `__transaction_state` records of one transactional id go from a
    state to one of its valid successors: TransactionMetadata.prepareTransitionTo checks
    `TransactionState.validPreviousStates` (Empty <- Empty|CompleteCommit|CompleteAbort; Ongoing <-
    Ongoing|Empty|CompleteCommit|CompleteAbort; PrepareCommit <- Ongoing; PrepareAbort <-
    Ongoing|PrepareEpochFence; CompleteCommit <- PrepareCommit; CompleteAbort <- PrepareAbort;
    Dead <- Empty|CompleteCommit|CompleteAbort; PrepareEpochFence <- Ongoing). KIP-98.
    Benign causes: the first record kaudit sees (compaction or retention removed the earlier
    ones: no previous state to check against), a tombstone (the id expired: history restarts).
    An unknown state id is reported too."""
    if previous is None:
        return False
    allowed = VALID_PREVIOUS.get(new)
    return allowed is None or previous not in allowed


@dataclass
class CoordTxn:
    """One transaction as the coordinator logged it (from Ongoing to its Complete record)."""

    transactional_id: str
    producer_id: int
    epoch: int                      # epoch of its first record
    start_ms: int | None
    timeout_ms: int | None
    partitions: set[str] = field(default_factory=set)
    registered_at: dict[str, int] = field(default_factory=dict)   # tp -> time first listed
    states: list[dict] = field(default_factory=list)
    result: str | None = None       # COMMIT | ABORT (from Prepare*/Complete*)
    prepare_ts: int | None = None
    prepare_epoch: int | None = None
    complete_ts: int | None = None
    next_epoch: int | None = None    # epoch of the id's next record after this transaction
    index: int = -1                  # its position in CoordView.txns

    @property
    def complete(self) -> bool:
        return self.complete_ts is not None

    @property
    def last_state(self) -> str:
        return self.states[-1]["state"] if self.states else "Empty"


@dataclass
class CoordView:
    """The coordinator's records of one producer id: its transactions and its latest state.
    `registered` and `follows` are indexes for the rules, computed once `build` is done."""

    transactional_ids: set[str] = field(default_factory=set)
    txns: list[CoordTxn] = field(default_factory=list)
    last_state: str | None = None
    last_ts: int | None = None
    timeout_ms: int | None = None
    findings: list[dict] = field(default_factory=list)
    client_transaction_version: int | None = None   # the latest record's (flexible values only, KIP-890)

    @property
    def open_txn(self) -> CoordTxn | None:
        if self.txns and not self.txns[-1].complete and self.last_state in OPEN_STATES:
            return self.txns[-1]
        return None

    @cached_property
    def registered(self) -> frozenset[str]:
        """Every partition some transaction of the producer listed."""
        return frozenset(tp for t in self.txns for tp in t.partitions)

    def follows(self, a: CoordTxn, b: CoordTxn) -> bool:
        """True when `b` comes right after `a` in the coordinator's order (both of this view)."""
        return a.index >= 0 and b.index == a.index + 1


@lru_cache(maxsize=4096)
def partition_names(s: str | None) -> tuple[str, ...]:
    """The "topic-partition" names of a record's partition list (the same lists recur)."""
    return tuple(p for p in (s or "").split(",") if p)


def pick_replica(rows: list[dict]) -> list[dict]:
    """Replicas of a `__transaction_state` partition hold the same records: keep, per partition,
    the replica holding the most rows of this producer (in offset order)."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault((r["topic"], r["partition"], r["replica"]), []).append(r)
    best: dict[tuple, list[dict]] = {}
    for (t, p, _rep), rs in sorted(by.items(), key=lambda kv: str(kv[0])):
        if len(rs) > len(best.get((t, p), [])):
            best[(t, p)] = rs
    out = [r for rs in best.values() for r in rs]
    out.sort(key=lambda r: (r["timestamp_ms"] or 0, r["partition"], r["offset"]))
    return out


def build(rows: list[dict]) -> CoordView:
    """Fold the coordinator records of one producer id into its transactions, checking each
    transition (illegal-state-transition findings in `view.findings`). One pass over the records
    in pick_replica's order; a transaction runs from a record other than Empty/Dead of its
    transactional id to its Complete record (the id's next record closes it)."""
    view = CoordView()
    prev_by_id: dict[str, tuple[str, dict]] = {}   # tid -> (state, its latest record)
    cur: dict[str, CoordTxn | None] = {}
    for r in pick_replica(rows):
        tid = r["transactional_id"]
        if r.get("tombstone"):
            prev_by_id.pop(tid, None)
            cur[tid] = None
            continue
        state = r["state"] or f"unknown({r.get('state_id')})"
        view.transactional_ids.add(tid)
        last = prev_by_id.get(tid)
        if last is not None and illegal_state_transition(last[0], state):
            prev = {**last[1], "state": last[0]}
            view.findings.append(finding(
                "illegal-state-transition",
                f"transactional id {tid!r} (producer {r['producer_id']}): {prev['state']} -> {state} "
                f"at {r['topic']}-{r['partition']} offset {r['offset']} is not a valid transition "
                f"(valid previous states of {state}: "
                f"{', '.join(sorted(VALID_PREVIOUS.get(state, ()))) or 'none, unknown state'})",
                evidence=[evidence(prev["source"], prev["position"], "txn_log", "previous"),
                          evidence(r["source"], r["position"], "txn_log")],
                details={"previous_state": prev["state"], "state": state,
                         "previous_offset": prev["offset"], "offset": r["offset"]},
                topic=r["topic"], partition=r["partition"], replica=r["replica"],
                producer_id=r["producer_id"], producer_epoch=r["producer_epoch"],
                transactional_id=tid, first_offset=prev["offset"], last_offset=r["offset"],
                first_ts_ms=prev["timestamp_ms"], last_ts_ms=r["timestamp_ms"]))
        prev_by_id[tid] = (state, r)
        st = {"state": state, "epoch": r["producer_epoch"], "ts": r["timestamp_ms"],
              "offset": r["offset"], "partitions": r["partitions"], "source": r["source"],
              "position": r["position"]}
        view.last_state, view.last_ts = state, r["timestamp_ms"]
        view.timeout_ms = r["transaction_timeout_ms"]
        if r.get("client_transaction_version") is not None:
            view.client_transaction_version = r["client_transaction_version"]
        t = cur.get(tid)
        if t is not None and t.complete:
            if t.next_epoch is None:
                t.next_epoch = r["producer_epoch"]
            t = cur[tid] = None
        if state in ("Empty", "Dead"):
            continue
        if t is None:
            t = cur[tid] = CoordTxn(tid, r["producer_id"], r["producer_epoch"],
                                    r["start_ms"] if (r["start_ms"] or -1) >= 0 else r["timestamp_ms"],
                                    r["transaction_timeout_ms"], index=len(view.txns))
            view.txns.append(t)
        t.states.append(st)
        for tp in partition_names(r["partitions"]):
            t.partitions.add(tp)
            t.registered_at.setdefault(tp, r["timestamp_ms"])
        if state in ("PrepareCommit", "PrepareAbort"):
            t.result = "COMMIT" if state == "PrepareCommit" else "ABORT"
            t.prepare_ts, t.prepare_epoch = r["timestamp_ms"], r["producer_epoch"]
        elif state in ("CompleteCommit", "CompleteAbort"):
            t.result = "COMMIT" if state == "CompleteCommit" else "ABORT"
            t.complete_ts = r["timestamp_ms"]
            if t.prepare_ts is None:
                t.prepare_ts, t.prepare_epoch = r["timestamp_ms"], r["producer_epoch"]
    return view
