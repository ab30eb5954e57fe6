"""Tiered storage (KIP-405) judged from `__remote_log_metadata` (the default
TopicBasedRemoteLogMetadataManager's records, replayed in protocol.metadata.history) against the
replicas' local logs: `remote-segment-stuck`, and the tiered case of `missing-segments` (a range
neither a local segment nor a copied remote segment holds). Called by the leadership fold, which
holds the metadata and the replicas' epoch runs."""

from __future__ import annotations

from kaudit.audit.registry import evidence, finding, rule
from kaudit.ranges import merged

STARTED = {"COPY_SEGMENT_STARTED": "COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED": "DELETE_SEGMENT_FINISHED"}


@rule("remote-segment-stuck", "warning", "disk",
      "a remote log segment's copy or deletion started and never finished, though later ones did",
      "Look the segment up in the object store (its id is in the finding): an abandoned copy can "
      "leave a partial object behind, an unfinished deletion the data. Check the brokers' "
      "RemoteLogManager errors at that time (remote storage credentials, quotas, timeouts) before "
      "removing anything by hand.")
def remote_segment_stuck(segment, later) -> bool:
    """Invariant: the RemoteLogManager moves every remote segment COPY_SEGMENT_STARTED ->
    COPY_SEGMENT_FINISHED (after RemoteStorageManager.copyLogSegmentData) and, when retention
    removes it, DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED (RemoteLogSegmentState,
    KIP-405); a copy that fails is retried under a new segment id, so the failed id stays in
    COPY_SEGMENT_STARTED unless a later cleanup removes it. Flagged: a segment whose last state is a *_STARTED while a later segment of the same
    partition reached the matching *_FINISHED - the manager moved on without it.
    Benign causes: none for storage hygiene; the partition's data is still whole (the retry copied
    the range under another id, or the deletion was of data retention had already given up)."""
    return later is not None


def stuck(topic: str, partition: int, topic_id: str, segments: dict) -> list[dict]:
    out = []
    segs = sorted(segments.values(), key=lambda s: (s.states[0][0] or 0) if s.states else 0)
    for s in segs:
        done = STARTED.get(s.state)
        if done is None:
            continue
        at = s.states[-1][0] or 0
        later = next((o for o in segs if o is not s and any(st == done and (ts or 0) > at for ts, st, *_ in o.states)),
                     None)
        if not remote_segment_stuck(s, later):
            continue
        when = next(ts for ts, st, *_ in later.states if st == done and (ts or 0) > at)
        ev = [evidence(s.states[-1][2], s.states[-1][3], "metadata_record", f"segment {s.segment_id}: {s.state}"),
              evidence(later.states[-1][2], later.states[-1][3], "metadata_record",
                       f"segment {later.segment_id}: {done}")]
        span = f" (offsets {s.start}-{s.end})" if s.start is not None else ""
        out.append(finding(
            "remote-segment-stuck", f"{topic}-{partition}: remote segment {s.segment_id}{span} has been "
            f"{s.state} since {at} ms and never reached {done}, while segment {later.segment_id} reached it "
            f"at {when} ms", topic=topic, partition=partition, topic_id=topic_id,
            first_offset=s.start, last_offset=s.end, first_ts_ms=at, evidence=ev,
            details={"segment_id": s.segment_id, "state": s.state, "later_segment": later.segment_id}))
    return out


def copied(segments: dict) -> list[tuple[int, int]]:
    """The offset ranges of the segments copied and not yet deleted (last state
    COPY_SEGMENT_FINISHED, or DELETE_SEGMENT_STARTED: retention is removing it), merged."""
    return [tuple(x) for x in merged((s.start, s.end) for s in segments.values()
                                     if s.state in ("COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED")
                                     and s.start is not None)]


def uncovered(lo: int, hi: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [lo, hi] no span covers."""
    out, at = [], lo
    for a, b in spans:
        if b < at:
            continue
        if a > hi:
            break
        if a > at:
            out.append((at, a - 1))
        at = max(at, b + 1)
    if at <= hi:
        out.append((at, hi))
    return out


def missing_local_and_remote(part, starts: dict, segments: dict) -> list[dict]:
    """A tiered partition's replicas: offsets from the log start (its log-start-offset-checkpoint
    entry, which Kafka writes for every remote-enabled log) up to the first batch the inputs hold
    for the replica (local, or a remote segment merged into its log: sources.remote) that no
    copied remote segment holds."""
    out = []
    spans = copied(segments)
    firsts = {}
    for r in part.runs:
        if r.replica not in firsts or r.first < firsts[r.replica].first:
            firsts[r.replica] = r
    for rep, r in sorted(firsts.items()):
        ck = starts.get((rep, part.topic, part.partition))
        if ck is None or r.first <= ck["offset"]:
            continue
        gaps = uncovered(ck["offset"], r.first - 1, spans)
        if not gaps:
            continue
        text = ", ".join(f"{a}-{b}" for a, b in gaps)
        out.append(finding(
            "missing-segments", f"{part.topic}-{part.partition} (replica {rep}): offsets {text} lie between the log "
            f"start {ck['offset']} (log-start-offset-checkpoint) and the first batch the inputs hold at {r.first}, and no "
            "remote segment __remote_log_metadata lists as copied holds them: neither local nor tiered storage has them",
            topic=part.topic, partition=part.partition, replica=rep, topic_id=part.topic_id,
            first_offset=gaps[0][0], last_offset=gaps[-1][1],
            evidence=[evidence(r.source, r.position, "batch", f"replica {rep}: first batch at {r.first}"),
                      evidence(ck["source"], ck["position"], "checkpoint", f"log start offset {ck['offset']}")],
            details={"gaps": gaps, "remote_copied": spans, "log_start_offset": ck["offset"]}))
    return out
