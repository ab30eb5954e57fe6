"""The oracle's vocabulary and the judge: each injected anomaly is an invariant an SRE would expect
reported (INVARIANTS: the rule ids that state it, the least severity that tells it right), and the
auditor's findings at warning or above must be exactly those: each expectation found on each feed
whose evidence shows it, on its partition and offsets; no other finding.

The rule ids are the registry's. Issue 27's invariants landed as `write-after-epoch-end` (a
zombie's data stored after its epoch was fenced or ended, on any partition; critical where a later
COMMIT exposed it; on the wire also a Produce acknowledged after the coordinator began fencing,
told at info when the fencing's ABORT discarded it) and `mixed-epoch-transaction` (a part of two
epochs, or a marker epoch its data's does not allow). PROVISIONAL stays for ids an oracle needs
before the registry has them (none now).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kaudit.audit.registry import SEVERITY_RANK

PROVISIONAL: dict[str, str] = {}


@dataclass(frozen=True)
class Invariant:
    rules: tuple          # a finding of any of these rules reports it
    severity: str         # the least severity that tells it right
    also: tuple = ()      # other rules that may truly report the same damage (allowed, not required)
    ceiling: str = "critical"   # the most severity the evidence allows (a louder report is a false alarm)


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
    "zombie-write-stored": Invariant(("write-after-epoch-end",), "error",
                                     also=("fenced-epoch", "unregistered-partition", "mixed-epoch-transaction",
                                           "late-transactional-write")),
    # ... and exposed to read_committed consumers by a later COMMIT
    "zombie-write-committed": Invariant(("write-after-epoch-end",), "critical",
                                        also=("fenced-epoch", "unregistered-partition", "mixed-epoch-transaction",
                                              "late-transactional-write", "torn-transaction")),
    # one transaction part on a partition holding batches of two epochs (a zombie's and its successor's)
    "mixed-epoch-part": Invariant(("mixed-epoch-transaction",), "error",
                                  also=("write-after-epoch-end", "fenced-epoch", "unregistered-partition", "torn-transaction")),
    # a Produce acknowledged after the coordinator began fencing its epoch (PrepareAbort written,
    # the markers on their way): the race every fencing has; the fencing's ABORT discards the data,
    # so it is told at info with what became of it, never louder
    "acked-after-fencing": Invariant(("write-after-epoch-end",), "info", ceiling="info"),
    # partitions whose outcome differs from the coordinator's decision (admin abort)
    "torn-transaction": Invariant(("torn-transaction",), "critical",
                                  also=("stray-marker", "mixed-epoch-transaction", "outcome-mismatch")),
    # an admin's ABORT (kafka-transactions.sh abort) on a partition whose transaction had already
    # ended: the leader appends it, it ends nothing - informational, never louder
    "stray-admin-marker": Invariant(("stray-marker",), "info", ceiling="info"),
    # data of a transaction stored after that transaction's marker, ended by a later transaction
    "late-write": Invariant(("late-transactional-write",), "error", also=("outcome-mismatch", "torn-transaction")),
    # data no marker will ever end
    # a zombie's request (EndTxn, AddPartitionsToTxn, a leader's verification of its Produce)
    # refused as fenced: the coordinator did its job, a warning (no partition)
    "fenced-request-refused": Invariant(("fenced-epoch",), "warning", also=("producer-error",)),
    # KIP-939: a prepared two-phase-commit transaction waits for its external coordinator, past its
    # timeout: open (dangling), not hanging. The log dirs tell it by the Int.MaxValue timeout of the
    # coordinator's records; without `__transaction_state` they cannot (-disk: hanging allowed).
    # The LSO it holds is by design too: lso-stuck may tell it at info only (not in `also`).
    "prepared-2pc": Invariant((), "info", also=("dangling-transaction",)),
    "prepared-2pc-disk": Invariant((), "info", also=("hanging-transaction", "dangling-transaction")),
    # a request delayed in the broker (KAFKA-17754): truly unanswered on its connection
    "delayed-request": Invariant((), "info", also=("unanswered-request",)),
    # ---- consumers (issue 31): wire-only rules, expected on pcap and audit ----
    # a partition's next owner served records its previous owner was delivered past the group's commit
    "redelivered": Invariant(("consumer-redelivery",), "warning"),
    # a commit past anything the group was served or looked up
    "commit-beyond-served": Invariant(("consumer-commit-beyond-served",), "error"),
    # OFFSET_OUT_OF_RANGE (committed offset below the log start), reset to the log end over records
    "reset-skip": Invariant(("consumer-reset-skip",), "error"),
    # a new group with auto.offset.reset=latest starting at the log end: the configuration's choice
    "reset-new-group": Invariant(("consumer-reset-skip",), "info", ceiling="info"),
    # a member's first Fetch beyond the committed offset the coordinator gave it (a seek)
    "start-beyond-commit": Invariant(("consumer-start-beyond-commit",), "error"),
    # the same inputs committed by two committed transactions (pre-KIP-447 TxnOffsetCommit names no
    # member: the takeover is also a true redelivery)
    "eos-double-commit": Invariant(("eos-double-commit",), "critical", also=("consumer-redelivery",)),
    # ... whose outputs were produced twice: the same values under two producers (allowed, not required)
    "eos-duplicate-output": Invariant((), "info", also=("duplicate-records",)),
    # a read_uncommitted consumer served a transaction's records that later aborted: the isolation
    # level's contract, told at info
    "uncommitted-aborted-read": Invariant(("uncommitted-aborted-read",), "info", ceiling="info"),
    # the coordinator's markers refused again and again (KAFKA-19999): the transaction stays
    # prepared and the partition's open data holds read_committed consumers back
    "markers-refused": Invariant(("txn-markers-refused",), "critical",
                                 also=("hanging-transaction", "torn-transaction", "fenced-epoch", "producer-error",
                                       "dangling-transaction", "lso-stuck")),
    # ---- partition-leader elections (tests/sim/replication.py, elect_episodes.py) ----
    # acks=1 writes the leader alone had acknowledged, truncated by a clean election: the producer's
    # documented risk (Kafka answers acks=1 before any follower has it), told as a warning, never
    # louder (the acks=all contract was never given)
    "acked-leader-only-lost": Invariant(("acknowledged-write-lost", "offset-acknowledged-twice",
                                         "acknowledged-records-replaced"), "warning", ceiling="warning"),
    # acks=all writes the ISR had (committed, acknowledged) lost to an unclean election
    "committed-lost": Invariant(("acknowledged-write-lost", "offset-acknowledged-twice",
                                 "acknowledged-records-replaced"), "critical",
                                also=("unclean-leader-election", "replica-divergence")),
    # the metadata log records a leader from outside the ISR and a replica in the inputs still holds
    # committed offsets past the new leader's epoch start
    "unclean-election": Invariant(("unclean-leader-election",), "critical",
                                  also=("replica-divergence", "acknowledged-write-lost")),
    # ... and every replica has rejoined and truncated: the election is recorded, what it lost cannot
    # be counted from the log dirs
    "unclean-election-uncounted": Invariant(("unclean-leader-election",), "error",
                                            also=("acknowledged-write-lost",)),
    # without the metadata log: replicas hold committed offsets (below their high watermark) in an
    # older leader epoch past another replica's start of a later epoch - the disk's trace of an
    # unclean election before the deposed replicas truncate
    "replica-diverged": Invariant(("replica-divergence",), "critical", also=("acknowledged-write-lost",)),
    # a replica read as its broker died lacks offsets the others committed after: out of the ISR, it
    # fetches them when it runs - a warning, nothing lost
    "replica-behind": Invariant(("replica-divergence",), "warning", ceiling="warning"),
    # an unclean election lost a committed transaction's marker on the partition (the new leader
    # fetched its data, not its marker): the new leader's copy of the transaction stays open - its
    # last stable offset stuck, read_committed consumers stop - while the coordinator completed it.
    # Told by the hanging transaction on the leader, by the deposed replicas still holding the
    # marker in an older epoch past the new leader's start (replica-divergence), or the recorded
    # unclean election
    "marker-lost": Invariant(("hanging-transaction", "replica-divergence", "unclean-leader-election"), "critical",
                             also=("torn-transaction", "acknowledged-write-lost", "dangling-transaction",
                                   "lso-stuck", "outcome-mismatch")),
    # ... seen on the wire: read_committed consumers of that partition fetch a last stable offset
    # that stays at the open transaction (allowed on the capture, not required: only when they read it)
    "marker-lost-read": Invariant((), "info", also=("lso-stuck",)),
    "hanging-transaction": Invariant(("hanging-transaction",), "critical",
                                     also=("unregistered-partition", "late-transactional-write", "dangling-transaction",
                                           "write-after-epoch-end", "fenced-epoch")),
}


def _span_overlaps(e, first, last) -> bool:
    if e.first is None or first is None:
        return True
    last = first if last is None else last
    return not (last < e.first or first > e.last)


def _damaged(f) -> list:
    """[(tp, first, last)] a finding about several partitions names (torn-transaction's
    details.damaged: one finding per transaction, each damaged partition with its offsets)."""
    d = f.get("details")
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except ValueError:
            return []
    rows = d.get("damaged") if isinstance(d, dict) else None
    return [(r[0], r[1], r[2]) for r in rows or () if isinstance(r, list) and len(r) >= 3]


def _overlaps(e, f) -> bool:
    if any(tp == f"{e.topic}-{e.partition}" for tp, _, _ in _damaged(f)):
        return any(_span_overlaps(e, a, b) for tp, a, b in _damaged(f) if tp == f"{e.topic}-{e.partition}")
    return _span_overlaps(e, f.get("first_offset"), f.get("last_offset"))


def _on(e, f, *, strict: bool = True) -> bool:
    """The finding is about the expectation's partition (its own, or one of the damaged partitions
    it names). A finding without a partition (about a request, or a whole transaction) is about the
    expectation's producer: it reports a request-level expectation, and (not strict) it may restate
    a partition-level one."""
    same_pid = e.producer_id is None or f.get("producer_id") == e.producer_id
    if f.get("topic") is None:
        return same_pid and (e.topic is None or not strict)
    if any(tp == f"{e.topic}-{e.partition}" for tp, _, _ in _damaged(f)):
        return True
    return f.get("topic") == e.topic and f.get("partition") == e.partition


def _rank(f: dict) -> int:
    return SEVERITY_RANK[f["severity"]]


def judge(findings: list[dict], oracle, feed: str) -> dict:
    """{'missed': [expectation], 'false_alarms': [finding], 'weak': [(expectation, finding)]} of one
    feed: weak = found, at a lower severity than the invariant's. Only findings at warning or above
    can be false alarms; an invariant told at info (its severity) is looked for among all, and a
    report louder than its ceiling explains nothing (a false alarm if it is at warning or above)."""
    warn = SEVERITY_RANK["warning"]
    expected = [e for e in oracle if feed in e.feeds]
    missed, weak, explained = [], [], set()
    for e in expected:
        inv = INVARIANTS[e.invariant]
        if not inv.rules:
            continue
        floor, top = min(SEVERITY_RANK[inv.severity], warn), SEVERITY_RANK[inv.ceiling]
        hits = [i for i, f in enumerate(findings) if f["rule"] in inv.rules and floor <= _rank(f) <= top
                and _on(e, f) and _overlaps(e, f)]
        if not hits:
            missed.append(e)
            continue
        explained.update(hits)
        best = max(hits, key=lambda i: _rank(findings[i]))
        if _rank(findings[best]) < SEVERITY_RANK[inv.severity]:
            weak.append((e, findings[best]))
    for i, f in enumerate(findings):
        if i in explained or _rank(f) < warn:
            continue
        for e in expected:   # another true statement of an injected damage is no false alarm
            inv = INVARIANTS[e.invariant]
            if f["rule"] in inv.rules + inv.also and _rank(f) <= SEVERITY_RANK[inv.ceiling] \
                    and _on(e, f, strict=False):
                explained.add(i)
                break
    false = [f for i, f in enumerate(findings) if i not in explained and _rank(f) >= warn]
    return {"missed": missed, "false_alarms": false, "weak": weak}


def brief(f: dict) -> str:
    off = "" if f.get("first_offset") is None else f" @{f['first_offset']}-{f.get('last_offset')}"
    return f"{f['rule']}({f['severity']}) {f.get('topic')}-{f.get('partition')}{off} pid {f.get('producer_id')}: " \
           f"{(f.get('message') or '')[:160]}"
