"""The oracle's vocabulary and the judge: each injected anomaly is an invariant an SRE would expect
reported (INVARIANTS: the rule ids that state it, the least severity that tells it right), and the
auditor's findings at warning or above must be exactly those: each expectation found on each feed
whose evidence shows it, on its partition and offsets; no other finding.

PROVISIONAL rule ids are the ones issue 27 asks for and that the current registry lacks (the
txn27 helper adds them): kept here, in one table, so the integrator aligns them with the names the
registry ends up with. A finding of a provisional id counts exactly like an existing one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaudit.audit.registry import SEVERITY_RANK

# provisional rule id -> the invariant of issue 27 it states
PROVISIONAL = {
    "zombie-write": "a batch of an epoch stored after that epoch was fenced or ended, on any partition, "
                    "registered or not (error; critical where a later COMMIT exposed it)",
    "mixed-epoch-part": "a transaction part holding batches of more than one epoch, or whose marker epoch is "
                        "not what the data's epoch allows (TV1: same or +1 for a fencing abort; TV2: +1)",
    "acked-after-fencing": "on the wire, a Produce answered without error for an epoch whose fencing had "
                           "already begun at the coordinator",
}


@dataclass(frozen=True)
class Invariant:
    rules: tuple          # a finding of any of these rules reports it
    severity: str         # the least severity that tells it right
    also: tuple = ()      # other rules that may truly report the same damage (allowed, not required)


INVARIANTS = {
    # idempotence: the broker stored one producer session's sequences twice (state expired)
    # (out-of-order-sequence: the same regression told as a sequence fault; produce-outcome: the
    # joined story of the same resend)
    "duplicate-sequence-stored": Invariant(("duplicate-batch",), "error",
                                           also=("duplicate-records", "out-of-order-sequence", "produce-outcome")),
    # records stored twice by a resend the broker could not recognise (no idempotence, new producer id)
    "duplicate-records-resent": Invariant(("duplicate-records",), "error", also=("duplicate-batch", "produce-outcome")),
    # the capture alone: a non-idempotent batch sent again after no answer may be stored twice
    "possible-duplicate": Invariant(("retried-batch", "duplicate-records"), "warning",
                                    also=("unanswered-request", "produce-outcome")),
    # a zombie's write the broker refused (it did its job): a warning on the wire
    "fenced-write-refused": Invariant(("fenced-epoch",), "warning", also=("producer-error",)),
    # a zombie's write stored after its epoch was fenced, aborted or never ended
    "zombie-write-stored": Invariant(("zombie-write", "fenced-epoch"), "error",
                                     also=("unregistered-partition", "mixed-epoch-part", "late-transactional-write")),
    # ... and exposed to read_committed consumers by a later COMMIT
    "zombie-write-committed": Invariant(("zombie-write", "fenced-epoch"), "critical",
                                        also=("unregistered-partition", "mixed-epoch-part",
                                              "late-transactional-write", "torn-transaction")),
    # one transaction part on a partition holding batches of two epochs (a zombie's and its successor's)
    "mixed-epoch-part": Invariant(("mixed-epoch-part",), "error",
                                  also=("zombie-write", "fenced-epoch", "unregistered-partition", "torn-transaction")),
    # a Produce acknowledged after the coordinator began fencing its epoch
    "acked-after-fencing": Invariant(("acked-after-fencing",), "warning", also=("fenced-epoch",)),
    # partitions whose outcome differs from the coordinator's decision (admin abort)
    "torn-transaction": Invariant(("torn-transaction",), "critical",
                                  also=("stray-marker", "mixed-epoch-part", "outcome-mismatch")),
    # data of a transaction stored after that transaction's marker, ended by a later transaction
    "late-write": Invariant(("late-transactional-write",), "error", also=("outcome-mismatch", "torn-transaction")),
    # data no marker will ever end
    # a zombie's request (EndTxn, AddPartitionsToTxn, a leader's verification of its Produce)
    # refused as fenced: the coordinator did its job, a warning (no partition)
    "fenced-request-refused": Invariant(("fenced-epoch",), "warning", also=("producer-error",)),
    # KIP-939: a prepared two-phase-commit transaction waits for its external coordinator, past its
    # timeout: open (dangling), not hanging. The log dirs alone cannot tell (no 2PC flag on disk).
    "prepared-2pc": Invariant((), "info", also=("dangling-transaction",)),
    "prepared-2pc-disk": Invariant((), "info", also=("hanging-transaction", "dangling-transaction")),
    # a request delayed in the broker (KAFKA-17754): truly unanswered on its connection
    "delayed-request": Invariant((), "info", also=("unanswered-request",)),
    "hanging-transaction": Invariant(("hanging-transaction",), "critical",
                                     also=("unregistered-partition", "late-transactional-write", "dangling-transaction",
                                           "zombie-write", "fenced-epoch")),
}


def _overlaps(e, f) -> bool:
    if e.first is None or f.get("first_offset") is None:
        return True
    last = f.get("last_offset") if f.get("last_offset") is not None else f["first_offset"]
    return not (last < e.first or f["first_offset"] > e.last)


def _on(e, f, *, strict: bool = True) -> bool:
    """The finding is about the expectation's partition. A finding without a partition (about a
    request, or a whole transaction) is about the expectation's producer: it reports a request-level
    expectation, and (not strict) it may restate a partition-level one."""
    same_pid = e.producer_id is None or f.get("producer_id") == e.producer_id
    if f.get("topic") is None:
        return same_pid and (e.topic is None or not strict)
    return f.get("topic") == e.topic and f.get("partition") == e.partition


def judge(findings: list[dict], oracle, feed: str) -> dict:
    """{'missed': [expectation], 'false_alarms': [finding], 'weak': [(expectation, finding)]} of one
    feed: weak = found, at a lower severity than the invariant's."""
    loud = [f for f in findings if SEVERITY_RANK[f["severity"]] >= SEVERITY_RANK["warning"]]
    expected = [e for e in oracle if feed in e.feeds]
    missed, weak, explained = [], [], set()
    for e in expected:
        inv = INVARIANTS[e.invariant]
        if not inv.rules:
            continue
        hits = [i for i, f in enumerate(loud) if f["rule"] in inv.rules and _on(e, f) and _overlaps(e, f)]
        if not hits:
            missed.append(e)
            continue
        explained.update(hits)
        best = max(hits, key=lambda i: SEVERITY_RANK[loud[i]["severity"]])
        if SEVERITY_RANK[loud[best]["severity"]] < SEVERITY_RANK[inv.severity]:
            weak.append((e, loud[best]))
    for i, f in enumerate(loud):
        if i in explained:
            continue
        for e in expected:   # another true statement of an injected damage is no false alarm
            inv = INVARIANTS[e.invariant]
            if f["rule"] in inv.rules + inv.also and _on(e, f, strict=False):
                explained.add(i)
                break
    false = [f for i, f in enumerate(loud) if i not in explained]
    return {"missed": missed, "false_alarms": false, "weak": weak}


def brief(f: dict) -> str:
    off = "" if f.get("first_offset") is None else f" @{f['first_offset']}-{f.get('last_offset')}"
    return f"{f['rule']}({f['severity']}) {f.get('topic')}-{f.get('partition')}{off} pid {f.get('producer_id')}: " \
           f"{(f.get('message') or '')[:160]}"
