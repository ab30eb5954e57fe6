"""The consumer rules: what the group's members were served and committed, judged from the
timelines (timeline.py). `judge` runs them all over one capture."""

from __future__ import annotations

from bisect import bisect_left

from kaudit.audit.consumers.found import FOLD_NAME, MAX_FINDINGS, consumer_finding
from kaudit.audit.consumers.found import tp_name as _tp
from kaudit.audit.consumers.timeline import OFFSET_OUT_OF_RANGE, Timelines
from kaudit.audit.registry import evidence, fold_rules, rule

# the redelivery rule first: the order the rules have always been registered (and run) in
from kaudit.audit.consumers import rules_redelivery  # noqa: F401,E402


@rule("consumer-commit-beyond-served", "error", "wire",
      "a group committed a position beyond anything it was served or looked up for the partition",
      "The records between what the group was served and the committed position will never be read by "
      "the group: find the code path that commits positions it did not consume (a manual commit of a "
      "computed offset, a seek), and re-consume the range.", fold=FOLD_NAME)
def check_commit_beyond(tl: Timelines) -> list[dict]:
    """Invariant: a consumer commits the position after the records it was served (the next offset
    to read: KafkaConsumer.commitSync with its position(), librdkafka's stored offsets); positions
    it may also start from are the group's previous commits and the offsets it looked up
    (OffsetFetch, ListOffsets). A commit past all of them skips the records in between.
    Benign causes: a capture that missed some of the group's Fetch connections (only judged when
    the capture holds the group's Fetch responses for the partition before the commit, and lost
    no bytes of the connections that served them before it: audit.capture_holes); an
    application seek to a position computed elsewhere; an administrator's offset reset (a commit
    with no member id, named so in the finding: the records are skipped all the same)."""
    known_of = _known_positions(tl)
    out = []
    for c in tl.commits:
        if not c.effective:
            continue
        served, known = known_of(c)
        if not served:
            continue
        if c.offset <= known or _served_lost(tl, c):
            continue
        who = f"member {c.member_id}" if c.member_id else (
            "a client outside the group (no member id; admin tools such as kafka-consumer-groups "
            "--reset-offsets commit that way)")
        out.append(consumer_finding(
            "consumer-commit-beyond-served",
            f"group {c.group}, {_tp(c.tp)}: {who} committed offset {c.offset}, but the group had "
            f"been served and had looked up positions only up to {known}: offsets {known}-{c.offset - 1} are "
            "skipped by the group", c.tp, known, c.offset - 1, [evidence(c.source, c.position, "commit")],
            start=c.ts, client_id=c.client[1] if c.client else None,
            transactional_id=c.txn[0] if c.txn else None,
            details={"group": c.group, "member": c.member_id, "committed": c.offset, "known": known}))
    return out[:MAX_FINDINGS]


def _served_lost(tl: Timelines, c) -> bool:
    """Whether the capture lost bytes, before commit `c`, on a Fetch connection of the group's
    members (an incremental fetch session's answer may serve a partition its request left out)
    or on their connections to the coordinator (an offset look-up, an earlier commit): what
    brought the group's position up to the commit may be in them."""
    if not tl.holes:
        return False
    members = [m for m in tl.members.values() if m.group == c.group]
    clients = {m.client for m in members} | {c.client}
    conns = {s.connection for (client, _), serves in tl.by_client_tp.items() if client in clients for s in serves}
    conns |= tl.conns_of(clients)   # their coordinator's (a look-up or commit lost there) and their hosts' lossy ones
    return tl.holes.lost_on(conns, None, (c.source, c.position)) is not None


def _known_positions(tl: Timelines):
    """commit -> (whether the group was served the partition before it, the highest position the
    group knew then: served ends, fetch offsets, looked-up offsets, earlier effective commits)."""
    events: dict[tuple, list] = {}
    for s in tl.attributed:   # the serves tied to a member
        if s.member is not None:
            v = max(s.end if s.end is not None else -1, s.fetch_offset if s.fetch_offset is not None else -1)
            events.setdefault((s.member.group, s.tp), []).append((s.ts, 0, v, s.end is not None))
    groups_of_client: dict = {}
    for m in tl.members.values():
        groups_of_client.setdefault(m.client, set()).add(m.group)
    for p in tl.positions:   # a look-up counts for its group, or for the groups of its client's members
        grps = [p.get("group_id")] if p["event"] == "OFFSET_FETCH" else groups_of_client.get(p["client"], ())
        for grp in grps:
            events.setdefault((grp, p["tp"]), []).append((p.get("response_ts") or p["ts"], 0, p["offset"], False))
    for o in tl.commits:
        if o.effective:
            events.setdefault((o.group, o.tp), []).append((o.ts, 1, o.offset, False))   # strictly before a commit
    index = {}
    for k, ev in events.items():
        ev.sort(key=lambda e: (e[0], e[1]))
        times, known, served, hi, any_served = [], [], [], -1, False
        for ts, _, v, has in ev:
            hi, any_served = max(hi, v), any_served or has
            times.append(ts)
            known.append(hi)
            served.append(any_served)
        index[k] = (times, known, served)

    def of(c):
        times, known, served = index.get((c.group, c.tp), ([], [], []))
        i = bisect_left(times, c.ts) - 1   # what happened before the commit was sent
        return (served[i], known[i]) if i >= 0 else (False, -1)
    return of


@rule("consumer-reset-skip", "error", "wire",
      "a consumer reset its position to the log end and jumped over records",
      "auto.offset.reset=latest skipped the records between the old position and the log end: re-consume "
      "them (seek) and prefer auto.offset.reset=earliest or none for data that must not be lost; find why "
      "the position was out of range (retention, an unclean leader election, committed offsets expiring).", fold=FOLD_NAME)
def check_reset(tl: Timelines) -> list[dict]:
    """Invariant: a consumer whose position is out of range (Fetch OFFSET_OUT_OF_RANGE) or whose
    group has no committed offset resets by auto.offset.reset (SubscriptionState.resetStrategy):
    to the log end (ListOffsets timestamp -1, then its next Fetch from there) it skips every record
    between its position (or the log start) and that end.
    Benign causes: a new group configured with latest on purpose (reported as info); records below
    the log start were already deleted by retention."""
    out = []
    for p in tl.positions:
        if p["event"] != "LIST_OFFSETS" or p.get("timestamp") != -1:
            continue
        tp, client, ts, end = p["tp"], p["client"], p["ts"], p["offset"]
        # a look-up is a reset only when the client's next Fetch starts there (librdkafka's and
        # kafka-python's watermark queries look the end up too, and read on from where they were)
        nxt = next((s for s in tl.client_serves(client, tp, ts, open_start=True) if s.fetch_offset is not None),
                   None)
        if nxt is None or nxt.fetch_offset < end:
            continue
        before = tl.client_serves(client, tp, until=ts)
        errs = [s for s in before if s.error == OFFSET_OUT_OF_RANGE and s.fetch_offset is not None]
        if errs and not any(errs[-1].ts < s.ts and s.error in (0, None) for s in before):
            e = errs[-1]
            # Kafka answers OFFSET_OUT_OF_RANGE with log start -1 (ReplicaManager.createLogReadResult):
            # the log start is then the one of the answer at the log end (records under it were
            # deleted by retention, not skipped by the reset)
            start = e.log_start if e.log_start is not None and e.log_start >= 0 else _later_log_start(tl, tp, ts)
            lo = max(e.fetch_offset, start if start is not None else 0)
            said = f"log start {start}" if start is not None else (
                "its log start is in no answer: any of these records under it were deleted by retention, "
                "not skipped")
            if end > lo:
                out.append(_reset(p, lo, end, "error", f"its Fetch at offset {e.fetch_offset} was answered "
                                  f"OFFSET_OUT_OF_RANGE ({said}), and it reset to the log end",
                                  [evidence(e.source, e.position, "fetch", "out of range")]))
        if errs:
            continue
        if before:
            continue   # it was reading the partition already: a watermark query, not a start
        fetched = [q for q in tl.positions if q["event"] == "OFFSET_FETCH" and q["tp"] == tp
                   and q["client"] == client and q["ts"] <= ts]
        if fetched and fetched[-1].get("group_id") and end > fetched[-1]["offset"]:
            c = fetched[-1]["offset"]
            out.append(_reset(p, c, end, "error", f"its group {fetched[-1]['group_id']} had committed offset {c}, "
                              "yet it reset to the log end", [evidence(fetched[-1]["source"], fetched[-1]["position"],
                                                                       "offset_fetch")]))
            continue
        start = _log_start(tl, tp)
        if start is not None and end > start:
            out.append(_reset(p, start, end, "info", "it had no committed position (a new group or expired "
                              "offsets) and auto.offset.reset=latest started it at the log end", []))
    return out[:MAX_FINDINGS]


def _later_log_start(tl: Timelines, tp, ts) -> int | None:
    """The log start of the first answer for tp after ts (the one at the log end, usually; a
    KIP-227 incremental response may leave the partition out). The log start only grows: records
    at or past it were there at ts, so the range from it is skipped for certain."""
    return next((s.log_start for s in tl.tp_serves(tp) if s.ts > ts and s.log_start is not None
                 and s.log_start >= 0), None)


def _log_start(tl: Timelines, tp) -> int | None:
    for p in tl.positions:
        if p["event"] == "LIST_OFFSETS" and p["tp"] == tp and p.get("timestamp") == -2:
            return p["offset"]
    starts = [s.log_start for s in tl.tp_serves(tp) if s.log_start is not None and s.log_start >= 0]
    return min(starts) if starts else None


def _reset(p, lo, end, severity, why, ev) -> dict:
    return consumer_finding(
        "consumer-reset-skip", f"{_tp(p['tp'])}: client {p['client'][1]} ({p['connection']}) looked up the log "
        f"end {end}: {why}; offsets {lo}-{end - 1} are never served to it", p["tp"], lo, end - 1,
        ev + [evidence(p["source"], p["position"], "list_offsets")], start=p["ts"], severity=severity,
        connection=p["connection"], client_id=p["client"][1], details={"log_end": end, "from": lo})


@rule("consumer-start-beyond-commit", "error", "wire",
      "a member started reading a partition beyond its group's committed position",
      "The records between the group's committed offset and where the member started were skipped by "
      "the group: look for an application seek or a custom offset store, and re-consume the range.", fold=FOLD_NAME)
def check_start_beyond(tl: Timelines) -> list[dict]:
    """Invariant: a member given a partition starts at its group's committed offset as the
    coordinator answered its OffsetFetch after the assignment (ConsumerCoordinator.
    refreshCommittedOffsets; only then is it judged), or resets by
    auto.offset.reset where there is none (then it sends ListOffsets). Its first Fetch at a higher
    offset skips the records in between.
    Benign causes: an application seek (invisible on the wire: the rule says so) and offsets kept
    outside Kafka; bytes the capture lost on the member's connection after the look-up (an
    earlier answer from the committed offset may be in them: not judged).
    A KIP-227 incremental Fetch leaves out a partition whose position the session already holds
    (FetchSessionHandler sends only what changed): a member given back a partition at the position
    its session kept is answered from there without naming it. Such an answer's records start at or
    below that position (the batch holding it), so only its lowest served offset is judged."""
    out = []
    for (group, tp), stints in tl.stints.items():
        for st in stints:
            first, at = _first_position(tl, st)
            if first is None:
                continue
            looked = [p for p in tl.positions if p["tp"] == tp and p["ts"] <= first.ts and
                      p["ts"] >= st.start - 1e-6 and p["client"] == st.member.client]
            if any(p["event"] == "LIST_OFFSETS" for p in looked):
                continue
            fetched = [p for p in looked if p["event"] == "OFFSET_FETCH" and p.get("group_id") == group]
            # the position the coordinator gave it (OffsetFetch): commits seen elsewhere may not be the
            # last ones (a capture that missed one would accuse the member of a skip)
            committed = fetched[-1]["offset"] if fetched else None
            if committed is None or at <= committed or (tl.holes and tl.holes.lost_on(
                    {first.connection} | tl.conns_of([st.member.client]),
                    (fetched[-1].get("source"), fetched[-1].get("position")),
                    (first.source, first.position)) is not None):
                continue   # (or an earlier answer from the committed offset is in bytes the capture lost)
            how = f"started fetching at offset {at}" if first.fetch_offset is not None else (
                f"was first answered offsets from {at} by its fetch session (the request did not name the "
                "partition: the broker read from the position the session held)")
            out.append(consumer_finding(
                "consumer-start-beyond-commit",
                f"group {group}, {_tp(tp)}: member {st.member.label} {how} "
                f"while the group's committed offset was {committed}: offsets {committed}-{at - 1} "
                "were skipped (unless the application sought there on purpose)",
                tp, committed, at - 1, [evidence(first.source, first.position, "fetch")],
                start=first.ts, connection=first.connection, client_id=st.member.client_id,
                details={"group": group, "member": st.member.member_id, "committed": committed,
                         "fetch_offset": at}))
    return out[:MAX_FINDINGS]


def _first_position(tl: Timelines, st) -> tuple:
    """(serve, offset) of the stint's first answer that shows where the member stood: a Fetch naming
    the partition (its fetch offset), or an incremental session answer serving records of a partition
    the request left out (its lowest served offset: the session's position is at or past it). A Fetch
    sent before the assignment or before a look-up answered carries the position from before them:
    the consumer drops such an answer (its offset is not the position any more)."""
    answered = [p.get("response_ts") or p["ts"] for p in tl.positions
                if p["tp"] == st.tp and p["client"] == st.member.client and p["ts"] >= st.start - 1e-6]
    for s in st.serves:
        if s.request_ts is not None and (s.request_ts < st.start or
                                         any(s.request_ts < t <= s.ts for t in answered)):
            continue
        if s.fetch_offset is not None:
            return s, s.fetch_offset
        if s.first is not None:
            return s, s.first
    return None, None


def judge(tl: Timelines, batches: list[dict]) -> list[dict]:
    """Every consumer rule over one capture's timelines, in registration order."""
    from kaudit.audit.consumers import rules_poll  # noqa: F401  (registers the rest)

    tl.batches = batches
    out: list[dict] = []
    for r in fold_rules(FOLD_NAME):
        out.extend(((r.check or r.fn)(tl))[:MAX_FINDINGS])
    return out
