"""consumer-redelivery: records served to a member past its group's commit, then served again to
whoever held the partition next - another member after a rebalance or a death, or the same
member after a rebalance that took the partition from it and gave it back (the classic eager
protocol revokes every partition at each rebalance)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kaudit.audit.consumers.found import FOLD_NAME, consumer_finding
from kaudit.audit.consumers.found import tp_name as _tp
from kaudit.audit.consumers.timeline import Member, Stint, Timelines
from kaudit.audit.registry import evidence, rule


@dataclass
class Hold:
    """One member's hold of a partition within one generation (classic) or member epoch
    (KIP-848): a stint split where the member was assigned the partition again."""
    member: Member
    start: float
    end: float | None
    generation: int | None
    cause: str | None                      # why the hold ended
    serves: list = field(default_factory=list)   # the responses with records delivered
    # the highest offset its Fetches asked from in the hold: the client sends a partition's next
    # Fetch only once it has nothing of it buffered (AbstractFetch.fetchablePartitions), from its
    # position, which moves as poll() returns records - so every record below it was returned
    # to the application; what the last responses served past it may never have been (read-ahead)
    asked_to: int | None = None


def holds(stints: list[Stint]) -> list[Hold]:
    """A partition's holds in time order: each stint, split at each new assignment of the
    partition to its member at another generation or member epoch."""
    out = []
    for st in stints:
        starts = [(st.start, _generation_at(st.member, st.start))]
        for ts, gen, tps in st.member.assignments:
            if st.start < ts and (st.end is None or ts < st.end) and st.tp in tps and gen != starts[-1][1]:
                starts.append((ts, gen))
        for i, (ts, gen) in enumerate(starts):
            last = i == len(starts) - 1
            end = st.end if last else starts[i + 1][0]
            cause = st.cause if last else _reassigned(st.member, gen, starts[i + 1][1])
            within = [s for s in st.serves if ts <= s.ts and (last or s.ts < end)]
            asked = [s.fetch_offset for s in within if s.fetch_offset is not None and s.error in (None, 0)]
            out.append(Hold(st.member, ts, end, gen, cause, [s for s in within if s.data_end is not None],
                            max(asked) if asked else None))
    return out


def _generation_at(m: Member, ts: float):
    gens = [gen for t, gen, _ in m.assignments if t <= ts]
    return gens[-1] if gens else m.generation


def _reassigned(m: Member, gen, new_gen) -> str:
    what = "member epoch" if m.protocol == "consumer" else "generation"
    return (f"a rebalance ({what} {gen} -> {new_gen}) assigned the partition to it again and it restarted "
            "from the group's committed offset" + (" (the eager protocol revokes every partition at each "
                                                   "rebalance)" if m.protocol == "classic" else ""))


@rule("consumer-redelivery", "warning", "wire",
      "a partition's next owner was served records its previous owner had been served past its last commit",
      "Records in the range were served to a member twice or to two members: those the first member's "
      "application had processed were processed twice (at-least-once processing); the finding tells which "
      "were returned to it (a Fetch of it asked past them) and which it was only served (possibly read "
      "ahead and dropped unprocessed when it gave the partition up). Commit before giving a partition up "
      "(onPartitionsRevoked / a rebalance callback; with the eager protocol every rebalance revokes every "
      "partition), commit more often, keep members alive (max.poll.interval.ms, session.timeout.ms), or make "
      "processing idempotent; check the range's downstream effects.", fold=FOLD_NAME)
def check_redelivery(tl: Timelines) -> list[dict]:
    """Invariant: a group's committed offset is where the next holder of a partition starts
    (ConsumerCoordinator.onJoinComplete -> OffsetFetch; KIP-848 the same). Records served to a
    member past the group's commit when it stopped holding the partition (LeaveGroup, fenced,
    session timeout, revoked) are served again to the next holder: another member, or the same
    one assigned the partition again by the rebalance (the classic eager protocol revokes every
    partition at each rebalance, AbstractCoordinator.onJoinPrepare; cooperative and KIP-848
    members keep their position for a partition they keep, and read on).
    What the wire proves: the first member's client was served the range. A Fetch of the partition
    from offset p proves every record below p was returned to its application by poll() (the client
    fetches a partition only with nothing of it buffered, from its position); the records served
    past its last Fetch offset may have been read ahead and dropped unprocessed at the revocation -
    told apart in the finding, never left out: the wire cannot tell them unprocessed either.
    Benign causes: at-least-once delivery is the consumer's contract, so the rule is a warning; a
    member that was served records it never processed (prefetch) redelivers nothing in effect.
    Members committing with TxnOffsetCommit (exactly-once) are left to eos-double-commit."""
    out = []
    for (group, tp), stints in tl.stints.items():
        hs = holds(stints)
        for i, b in enumerate(hs):
            # the previous hold that was served records (one served nothing hides no range)
            a = next((h for h in reversed(hs[:i]) if h.serves), None)
            if a is None or not b.serves or any(c.txn for c in a.member.commits):
                continue
            f = _redelivered(tl, group, tp, a, b)
            if f is not None:
                out.append(f)
    return out


def _redelivered(tl: Timelines, group: str, tp: tuple, a: Hold, b: Hold) -> dict | None:
    a_lo, a_hi = min(s.data_first for s in a.serves), max(s.data_end for s in a.serves)
    b_first = b.serves[0]
    b_lo, b_hi = min(s.data_first for s in b.serves), max(s.data_end for s in b.serves)
    lo, hi = max(a_lo, b_lo), min(a_hi, b_hi)
    committed = _committed(tl, group, tp, b_first.ts)
    if committed is not None:
        lo = max(lo, committed)
    if lo >= hi:
        return None
    same = a.member is b.member
    # below `handed` the first member's application was returned the records (its Fetch asked past them)
    handed = lo if a.asked_to is None else min(max(a.asked_to, lo), hi)
    # the time begins at the first member's first response holding the range
    began = next((s.ts for s in a.serves if s.data_first < hi and s.data_end > lo), a.end or b.start)
    ev = [evidence(a.serves[-1].source, a.serves[-1].position, "fetch", "first member served"),
          evidence(b_first.source, b_first.position, "fetch",
                   "served again after the rebalance" if same else "next owner served again")]
    whom = (f"to member {a.member.label} and again to the same member" if same else
            f"to member {a.member.label} and again to {b.member.label}")
    who = "it" if same else "the first member"
    return consumer_finding(
        "consumer-redelivery",
        f"group {group}, {_tp(tp)}: offsets {lo}-{hi - 1} ({hi - lo} record offsets) were served {whom}: "
        f"whatever {who} processed of them was processed twice; it stopped holding the partition because: "
        f"{a.cause or 'unknown'}; the group's committed offset then was "
        f"{'none seen' if committed is None else committed}"
        + _handed_text(lo, handed, hi, a.asked_to, "the member" if same else "the first member"),
        tp, lo, hi - 1, ev, start=began, end=b_first.ts, connection=b_first.connection,
        client_id=b.member.client_id,
        details={"group": group, "first_member": a.member.member_id, "next_member": b.member.member_id,
                 "cause": a.cause, "committed": committed, "first_member_served_to": a_hi - 1,
                 "same_member": same, "generations": [a.generation, b.generation],
                 "returned_to_application": [lo, handed - 1] if handed > lo else None,
                 "served_past_last_fetch": [handed, hi - 1] if handed < hi else None})


def _handed_text(lo: int, handed: int, hi: int, asked: int | None, whom: str) -> str:
    """Which of the range the first member's application was surely returned, and which it was
    only served (its client may have read them ahead and dropped them at the revocation)."""
    if handed >= hi:
        return f"; {whom}'s application had been returned all of them (a Fetch of it asked from {asked})"
    past = (f"; offsets {handed}-{hi - 1} were served to {whom} past its last Fetch offset: its application "
            "may have processed them, or its client only read them ahead and dropped them unprocessed")
    return (f"; offsets {lo}-{handed - 1} had been returned to {whom}'s application (a Fetch of it asked "
            f"from {asked})" + past) if handed > lo else past


def _committed(tl: Timelines, group: str, tp: tuple, before: float) -> int | None:
    best = None
    for c in tl.commits:
        ts = c.outcome_ts if c.txn else c.ts
        if c.group == group and c.tp == tp and c.effective and ts is not None and ts <= before:
            best = c.offset
    return best
