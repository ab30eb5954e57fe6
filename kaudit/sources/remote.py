"""Remote (tiered, KIP-405) segments and the local log as ONE log per partition.

A folder of remote segments copied from object storage (logdir.REMOTE_PARTITION_DIR) holds a
partition's older segments; a broker's log dir holds its recent ones. Kafka serves them as one
log (RemoteLogManager reads below the local log start offset), so kaudit audits them as one:
the remote segments below a replica's first local segment are tagged with that replica and
decoded before its local files, so every per-log fold (offset gaps, sequences, transactions,
indexes) runs across the boundary.

- One replica per partition gets them (the one whose local log starts lowest; ties: its name):
  merged into every replica, one finding inside a remote segment would be told once per replica.
- Overlap is normal (a remote segment is a copy of a local one; a follower rolls its own
  segments): a remote segment at or above the first local segment's base offset is listed as
  skipped, and the one reaching into the local log is clipped at it (`Target.stop_offset`:
  segments.decode_target drops its rows from that offset on), so no offset is read twice.
- A remote segment's `.snapshot` is the producer state at the *next* segment's base offset and
  its `.leader_epoch_checkpoint` the epoch cache up to it: listed as skipped, never judged as
  the local files of that name are.
- A remote folder with no local replica of its partition in the inputs stays a replica of its
  own (`remote:<folder>`), of a cluster of its own.
"""

from __future__ import annotations

import dataclasses
import os

from kaudit.ranges import merged
from kaudit.sources.targets import REMOTE_SEGMENT_FILE, LogDir, Target

SEGMENT_KINDS = ("log", "index", "timeindex", "txnindex")
SKIP_REASONS = {
    "snapshot": "a remote segment's producer snapshot (taken at the next segment's base offset; not judged)",
    "leader_epoch_checkpoint": "a remote segment's leader epoch checkpoint (not decoded)",
}


def segment_id(path: str) -> str | None:
    m = REMOTE_SEGMENT_FILE.match(os.path.basename(path))
    return m["segment"] if m else None


def is_remote(t: Target) -> bool:
    return t.log_dir is not None and t.log_dir.remote


def merge(targets: list[Target]) -> list[Target]:
    """The plan's targets with each partition's remote segments merged into one local replica's
    group (grouped targets in, grouped targets out)."""
    remote: dict[tuple, list[Target]] = {}   # (topic, partition, topic id) -> its remote files
    for t in targets:
        if is_remote(t) and t.topic is not None:
            remote.setdefault((t.topic, t.partition, t.topic_id), []).append(t)
    if not remote:
        return targets
    local: dict[tuple, dict[str, list[Target]]] = {}   # (topic, partition) -> log dir -> files
    for t in targets:
        if t.log_dir is not None and not t.log_dir.remote and t.topic is not None:
            local.setdefault((t.topic, t.partition), {}).setdefault(t.log_dir.path, []).append(t)
    into: dict[tuple, list[Target]] = {}    # (local log dir, topic, partition) -> the remote files before it
    moved: set[int] = set()
    for (topic, partition, _), rts in remote.items():
        replicas = local.get((topic, partition), {})
        ld = _receiver(rts, replicas)
        if ld is None or (ld, topic, partition) in into:
            continue   # no local replica (or one already given another incarnation's): a replica of its own
        placed = _placed(rts, _first_base(replicas[ld]), replicas[ld][0].log_dir, replicas[ld][0].topic_id)
        into[(ld, topic, partition)] = placed
        moved.update(id(t) for t in rts)
    out: list[Target] = []
    done: set = set()
    for t in targets:
        if id(t) in moved:
            continue
        k = (t.log_dir.path if t.log_dir else None, t.topic, t.partition)
        if k in into and k not in done:
            done.add(k)
            out.extend(into[k])
        out.append(t)
    return out


def _receiver(rts: list[Target], replicas: dict[str, list[Target]]) -> str | None:
    """The local log dir (path) whose replica gets the partition's remote segments: its topic id
    agrees (when both are known), its local log starts lowest."""
    tid = next((t.topic_id for t in rts if t.topic_id), None)
    best = None
    for path, ts in sorted(replicas.items()):
        ids = {t.topic_id for t in ts if t.topic_id}
        if tid is not None and ids and tid not in ids:
            continue   # another incarnation of the topic (deleted, created again)
        first = _first_base(ts)
        rank = (first is None, first if first is not None else 0, ts[0].log_dir.replica)
        if best is None or rank < best[0]:
            best = (rank, path)
    return None if best is None else best[1]


def _first_base(ts: list[Target]) -> int | None:
    bases = [t.base_offset for t in ts if t.kind == "log" and t.base_offset is not None]
    return min(bases) if bases else None


def _placed(rts: list[Target], first: int | None, log_dir: LogDir, topic_id: str | None) -> list[Target]:
    """The remote targets as the receiving replica's: below its first local segment, each
    clipped at the next segment's base offset (remote or local), in offset order; the rest
    skipped."""
    rts = sorted(rts, key=lambda t: (t.base_offset is None, t.base_offset or 0, os.path.basename(t.path)))
    # one segment per base offset (a second copy of a range - a re-copy after a leadership
    # change - is not read twice: the first by segment id is kept)
    keep: dict[int, str] = {}
    for t in rts:
        if t.kind == "log" and t.base_offset is not None:
            keep.setdefault(t.base_offset, segment_id(t.path))
    bases = sorted(keep)
    out = []
    for t in rts:
        ext = os.path.basename(t.path).rsplit(".", 1)[-1]
        if t.kind == "skipped" or ext in SKIP_REASONS or t.kind not in SEGMENT_KINDS:
            reason = SKIP_REASONS.get(ext, t.reason or "not a remote segment file")
            out.append(dataclasses.replace(t, kind="skipped", reason=reason))
        elif first is not None and t.base_offset is not None and t.base_offset >= first:
            out.append(dataclasses.replace(t, kind="skipped", reason=(
                f"a remote segment at or above the first local segment ({first}) of replica "
                f"{log_dir.replica}: the local log holds its offsets")))
        elif t.base_offset in keep and keep[t.base_offset] != segment_id(t.path):
            out.append(dataclasses.replace(t, kind="skipped", reason=(
                f"another remote segment ({keep.get(t.base_offset)}) starts at offset {t.base_offset}: "
                "not read twice")))
        else:
            nxt = next((b for b in bases if b > t.base_offset), None)
            stops = [x for x in (nxt, first) if x is not None]
            out.append(dataclasses.replace(t, log_dir=log_dir, stop_offset=min(stops) if stops else None,
                                           topic_id=t.topic_id or topic_id))
    return out


COPIED = ("COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED")


def not_read(plan) -> list[dict]:
    """The offset ranges `__remote_log_metadata` lists as copied to remote storage (last state
    COPY_SEGMENT_FINISHED, or DELETE_SEGMENT_STARTED: retention is removing it) that no input
    holds: neither a remote segment file of that id nor a local replica's log (from its first
    segment on). Each: topic, partition, topic_id, segment_id, state, first_offset, last_offset."""
    segments, names = remote_segments(plan)
    if not segments:
        return []
    have = {segment_id(t.path) for t in plan.targets if segment_id(t.path) and t.path.endswith(".log")}
    local: dict[tuple, int] = {}
    for t in plan.targets:
        if t.kind == "log" and t.base_offset is not None and t.topic is not None and not segment_id(t.path):
            k = (t.topic, t.partition)
            local[k] = min(local.get(k, t.base_offset), t.base_offset)
    out: dict[tuple, dict] = {}
    for (tid, p), segs in segments.items():
        topic = names.get(tid)
        for s in segs.values():
            if s.state not in COPIED or s.start is None or s.end is None or s.segment_id in have:
                continue
            first_local = local.get((topic, p)) if topic is not None else None
            hi = s.end if first_local is None else min(s.end, first_local - 1)
            if hi < s.start:
                continue
            out[(topic or tid, p, s.start, s.segment_id)] = {
                "topic": topic or tid, "partition": p, "topic_id": tid, "segment_id": s.segment_id,
                "state": s.state, "first_offset": s.start, "last_offset": hi}
    return [out[k] for k in sorted(out, key=lambda k: (str(k[0]), k[1], k[2], k[3]))]


# __remote_log_metadata is kept forever by default (remote.log.metadata.topic.retention.ms -1):
# read up to this many bytes of it per plan, else not at all (nothing is then said not read)
MAX_METADATA_BYTES = 512 << 20


def remote_segments(plan) -> tuple[dict, dict]:
    """((topic id, partition) -> {segment id: RemoteSegment}, topic id -> name) from the plan's
    __remote_log_metadata partitions (protocol.metadata.history)."""
    from kaudit.protocol.metadata.history import COLUMNS, replay
    from kaudit.protocol.metadata.rows import REMOTE_TOPIC
    from kaudit.sources.segments import Options, decode_target

    targets = [t for t in plan.targets if t.topic == REMOTE_TOPIC and t.kind == "log"]
    if not targets or sum(t.size for t in targets) > MAX_METADATA_BYTES:
        return {}, {}
    rows = []
    for t in targets:
        for kind, table in decode_target(t, Options()):
            if kind == "metadata_record":
                rows.extend(table.select(list(COLUMNS)).to_pylist())
    names = {r["record_topic_id"]: r["record_topic"] for r in rows if r.get("record_topic_id")}
    return replay(rows).remote, names


def unread_spans(rows: list[dict]) -> dict[tuple, list[tuple[int, int]]]:
    """(topic, partition) -> the not-read ranges, merged and sorted."""
    spans: dict[tuple, list] = {}
    for r in rows:
        spans.setdefault((r["topic"], r["partition"]), []).append((r["first_offset"], r["last_offset"]))
    return {k: [tuple(x) for x in merged(xs)] for k, xs in spans.items()}
