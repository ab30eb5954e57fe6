"""The transaction coordinator's view on disk: `__transaction_state` records (txn_log rows) of one
producer id, folded into the coordinator's transactions, and the state machine they must follow
(kafka.coordinator.transaction.TransactionMetadata / TransactionState, KIP-98)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from kaudit.audit.txn import txn_clean
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.txn.txn_states import (  # noqa: F401
    EMPTY_ABORT_PREVIOUS, MAX_EPOCH, OPEN_STATES, STATES, VALID_PREVIOUS,
)
from kaudit.audit.thresholds import FENCE_FOLLOW_MS

@rule("illegal-state-transition", "error", "disk",
      "two __transaction_state records whose states the coordinator never writes in that order",
      "The coordinator's log is inconsistent (lost or reordered __transaction_state records, a "
      "bad coordinator failover or a broker bug). Compare the replicas of the __transaction_state "
      "partition; if the transactional id is stuck, abort its open transactions with "
      "kafka-transactions.sh and restart the producer.", clean=txn_clean.valid_transitions,
      fold="transactions", check=lambda j: j.pt.view.findings)   # found while `build` folds the records
def illegal_state_transition(previous: str | None, new: str, client_version: int | None = None) -> bool:
    """Invariant: two consecutive `__transaction_state` records of one transactional id go from a
    state to one of its valid successors: TransactionMetadata.prepareTransitionTo checks
    `TransactionState.validPreviousStates` (Empty <- Empty|CompleteCommit|CompleteAbort; Ongoing <-
    Ongoing|Empty|CompleteCommit|CompleteAbort; PrepareCommit <- Ongoing; PrepareAbort <-
    Ongoing|PrepareEpochFence; CompleteCommit <- PrepareCommit; CompleteAbort <- PrepareAbort;
    Dead <- Empty|CompleteCommit|CompleteAbort; PrepareEpochFence <- Ongoing). KIP-98. Kafka 4.x
    adds PrepareAbort <- Empty|CompleteCommit|CompleteAbort: a transaction version 2 producer
    aborting with nothing sent (KIP-890; such a record carries ClientTransactionVersion 2).
    Benign causes: the first record kaudit sees (compaction or retention removed the earlier
    ones: no previous state to check against), a tombstone (the id expired: history restarts).
    An unknown state id is reported too."""
    if previous is None:
        return False
    allowed = VALID_PREVIOUS.get(new)
    if new == "PrepareAbort" and (client_version or 0) >= 2:
        allowed = allowed | EMPTY_ABORT_PREVIOUS
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
    next_state: str | None = None
    next_ts: int | None = None
    index: int = -1                  # its position in CoordView.txns
    # who ended it: "client" (EndTxn), "coordinator" (its own abort: timeout or fencing), None
    # when the evidence does not tell; `end_detail` says how ("timeout", "fencing", ...)
    ended_by: str | None = None
    end_detail: str | None = None
    client_version: int | None = None   # ClientTransactionVersion of its records (KIP-890)
    # NextProducerId of its Prepare record (flexible values: -1 none, the id it moves to when the
    # epoch runs out under version 2); None where the record does not carry it
    next_producer_id: int | None = None
    evidence: list = field(default_factory=list)   # wire: the requests that made its states

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
    # the client's transaction version: its latest Ongoing record's (flexible values only, KIP-890);
    # the coordinator's own aborts of a version 0/1 client on a version-2 cluster carry 2
    client_transaction_version: int | None = None
    # every record in order, Empty and Dead too (txn_history.epochs reads the epochs' ends)
    log: list[dict] = field(default_factory=list)

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


def build(rows: list[dict], check: bool = True) -> CoordView:
    """Fold the coordinator records of one producer id into its transactions, checking each
    transition when `check` (illegal-state-transition findings in `view.findings`; the wire's
    records are inferred from requests, not logged: not checked). One pass over the records
    in pick_replica's order; a transaction runs from a record other than Empty/Dead of its
    transactional id to its Complete record (the id's next record closes it). A record may say
    who ended its transaction (`end_cause`, `end_detail`: the wire knows the requests); else
    `end_cause` infers it from the states."""
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
        if check and last is not None and illegal_state_transition(last[0], state, r.get("client_transaction_version")):
            view.findings.append(_illegal(last, r, state))
        prev_by_id[tid] = (state, r)
        st = {"state": state, "epoch": r["producer_epoch"], "ts": r["timestamp_ms"],
              "offset": r["offset"], "partitions": r["partitions"], "source": r["source"],
              "position": r["position"]}
        view.log.append(st)
        view.last_state, view.last_ts = state, r["timestamp_ms"]
        view.timeout_ms = r["transaction_timeout_ms"]
        ctv = r.get("client_transaction_version")
        if ctv is not None and state == "Ongoing":
            view.client_transaction_version = ctv
        t = cur.get(tid)
        if t is not None and t.complete:
            if t.next_epoch is None:
                t.next_epoch = r["producer_epoch"]
                t.next_state = state
                t.next_ts = r["timestamp_ms"]
            t = cur[tid] = None
        if state in ("Empty", "Dead"):
            continue
        if t is None and state in ("CompleteCommit", "CompleteAbort") and r["producer_epoch"] == 0 \
                and not r.get("end_cause"):
            # the end of a transaction of the id's previous producer id: when its epoch ran out
            # (KIP-890 transaction version 2) the coordinator completes it under the next id
            continue
        if t is None:
            t = cur[tid] = CoordTxn(tid, r["producer_id"], r["producer_epoch"],
                                    r["start_ms"] if (r["start_ms"] or -1) >= 0 else r["timestamp_ms"],
                                    r["transaction_timeout_ms"], index=len(view.txns))
            view.txns.append(t)
        st["txn"] = t.index   # its CoordTxn in view.txns (not the object: t.states holds st)
        _add_record(t, r, st, state)
    for t in view.txns:
        _ended(t)
    return view


def _illegal(last: tuple[str, dict], r: dict, state: str) -> dict:
    """The illegal-state-transition finding of record `r` (state `state`) after `last` (the
    id's previous state and record)."""
    tid = r["transactional_id"]
    prev = {**last[1], "state": last[0]}
    return finding(
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
        first_ts_ms=prev["timestamp_ms"], last_ts_ms=r["timestamp_ms"])


def _ended(t: CoordTxn) -> None:
    """Who ended the transaction, where its records do not say (end_cause)."""
    if t.ended_by is None:
        t.ended_by, t.end_detail = end_cause(t)
    if t.prepare_epoch == MAX_EPOCH and not t.complete and t.next_producer_id != -1:
        # the coordinator moved the id to a new producer id (TV2 epoch exhaustion): this
        # producer id's last transaction completes under the next one (unless its Prepare
        # record says it moves to none: KAFKA-20090, epoch-exhausted-transaction)
        t.complete_ts = t.prepare_ts
        t.end_detail = (t.end_detail + "; " if t.end_detail else "") + "epoch exhausted: completed under the next producer id"


def _add_record(t: CoordTxn, r: dict, st: dict, state: str) -> None:
    t.states.append(st)
    if r.get("evidence"):
        t.evidence.extend(r["evidence"])
    ctv = r.get("client_transaction_version")
    if ctv is not None and state in ("Ongoing",):
        t.client_version = ctv if t.client_version is None else max(t.client_version, ctv)
    for tp in partition_names(r["partitions"]):
        t.partitions.add(tp)
        t.registered_at.setdefault(tp, r["timestamp_ms"])
    if r.get("transaction_timeout_ms") is not None:
        # the latest record's: a KIP-939 recovery (KeepPreparedTxn with Enable2Pc) rewrites the
        # kept transaction's timeout to Int.MaxValue; no other request changes an open one's
        t.timeout_ms = r["transaction_timeout_ms"]
    if r.get("end_cause"):
        t.ended_by, t.end_detail = r["end_cause"], r.get("end_detail")
    if state in ("PrepareCommit", "PrepareAbort"):
        t.result = "COMMIT" if state == "PrepareCommit" else "ABORT"
        t.prepare_ts, t.prepare_epoch = r["timestamp_ms"], r["producer_epoch"]
        t.next_producer_id = r.get("next_producer_id")
    elif state in ("CompleteCommit", "CompleteAbort"):
        t.result = "COMMIT" if state == "CompleteCommit" else "ABORT"
        t.complete_ts = r["timestamp_ms"]
        if t.prepare_ts is None:
            t.prepare_ts, t.prepare_epoch = r["timestamp_ms"], r["producer_epoch"]




def end_cause(t: CoordTxn) -> tuple[str | None, str | None]:
    """Who ended a transaction, read from the coordinator's records (TransactionCoordinator,
    KIP-890): the coordinator itself aborts on a timeout (abortTimedOutTransactions: the
    transaction's start plus its timeout passed) or when a new instance's InitProducerId fences
    it (PrepareAbort, CompleteAbort, then the new instance's Empty record at the epoch after);
    under transaction version 0/1 its PrepareAbort bumps the epoch while the client's EndTxn
    does not; under version 2 every end bumps it once. A commit is always the client's."""
    if t.result is None:
        return None, None
    if t.result == "COMMIT":
        return "client", "EndTxn commit"
    first = t.states[0]["epoch"] if t.states else t.epoch
    bumped = t.prepare_epoch is not None and first is not None and t.prepare_epoch > first
    tv2 = (t.client_version or 0) >= 2
    if not bumped:
        return "client", "EndTxn abort"
    timed_out = (t.prepare_ts is not None and t.start_ms is not None and t.timeout_ms is not None
                 and t.timeout_ms < 2**31 - 1 and t.prepare_ts - t.start_ms >= t.timeout_ms)
    if timed_out:
        return "coordinator", "timeout"
    fenced = (t.next_state == "Empty" and t.next_epoch is not None and t.prepare_epoch is not None
              and t.next_epoch > t.prepare_epoch and t.next_ts is not None and t.complete_ts is not None
              and t.next_ts - t.complete_ts <= FENCE_FOLLOW_MS)
    if tv2 and not fenced:
        return "client", "EndTxn abort"
    # transaction version 0/1: an abort that bumps the epoch before the timeout is a fencing
    return "coordinator", "fencing"
