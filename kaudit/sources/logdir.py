"""Walk what the user names — a folder of brokers' log dirs, one log dir, one topic-partition dir,
or single files — into a plan of files to decode, each tagged with its replica.

A replica is (log dir, topic, partition); its `replica` tag is the node id from the log dir's
`meta.properties` when there is one, else the log dir's path - and the path too when another log
dir of the same node holds the same partition (two snapshots of one broker, or the duplicate
directories Kafka's LogManager refuses to start with): replicas are never merged. Entries Kafka itself would ignore
(`-delete`/`-future`/`-stray` dirs, `*.deleted`, `*.cleaned`, and `*.swap` files of an incomplete
swap) are reported as skipped; a partition dir left by an interrupted cleaning is read as Kafka's
start-up recovers it (sources.swap_recovery: a completed swap's `.swap` files read in place of the
files they replace).
"""

from __future__ import annotations

import os

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.file_kinds import LOG_FILES, LogFile
from kaudit.protocol.logfiles import decode_partition_metadata
from kaudit.sources.swap_recovery import recovered
from kaudit.sources.targets import (  # noqa: F401  (Plan, Target, LogDir and the meta readers: this module's API too)
    LOG_DIR_FILES, MAX_DEPTH, PARTITION_DIR, REMOTE_EXTS, REMOTE_PARTITION_DIR, REMOTE_SEGMENT_FILE, SEGMENT_EXTS,
    SEGMENT_FILE, SKIP_DIR_SUFFIXES, SKIP_FILE_SUFFIXES, LogDir, Plan, Target, log_dir_clusters, read_cluster_id,
    read_node_id, replicated_partitions)


def _log_dir_of(partition_dir: str, cache: dict) -> LogDir:
    """The log dir owning a partition dir: its parent (Kafka's layout), named by meta.properties."""
    parent = os.path.dirname(os.path.abspath(partition_dir))
    if parent not in cache:
        meta = os.path.join(parent, "meta.properties")
        node = read_node_id(meta) if os.path.isfile(meta) else None
        cache[parent] = LogDir(parent, node)
    return cache[parent]


def _skip_reason(name: str, is_dir: bool) -> str | None:
    if is_dir:
        for suffix in SKIP_DIR_SUFFIXES:
            if name.endswith(suffix):
                return f"{suffix} directory (Kafka ignores it)"
    else:
        for suffix in SKIP_FILE_SUFFIXES:
            if name.endswith(suffix):
                return f"{suffix} file (Kafka ignores it)"
    return None


def classify_file(path: str, log_dir: LogDir | None, topic=None, partition=None, name: str | None = None) -> Target:
    """`name`: classify as that file (a swap file read as the file Kafka renames it to)."""
    name = name or os.path.basename(path)
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    reason = _skip_reason(name, False)
    if reason:
        return Target(path, "skipped", log_dir, topic, partition, reason=reason, size=size)
    m = SEGMENT_FILE.match(name)
    if m and (m["ext"] in SEGMENT_EXTS or "." + m["ext"] in LOG_FILES):
        return Target(path, m["ext"], log_dir, topic, partition, int(m["base"]), size=size,
                      reader=LOG_FILES.get("." + m["ext"]))
    if name in LOG_FILES:
        return Target(path, name, log_dir, topic, partition, size=size, reader=LOG_FILES[name])
    reason = LOG_DIR_FILES.get(name, "not a Kafka log file")
    return Target(path, "skipped", log_dir, topic, partition, reason=reason, size=size)


def read_topic_id(partition_dir: str) -> str | None:
    """The topic id a partition dir's `partition.metadata` records, None without a readable one
    (its decode issues are reported when the file itself is decoded)."""
    try:
        with open(os.path.join(partition_dir, "partition.metadata"), "rb") as f:   # read-only
            return decode_partition_metadata(f.read(4096))["topic_id"]
    except (OSError, DecodeError):
        return None


def _partition_targets(pdir: str, log_dir: LogDir, out: list[Target]) -> None:
    m = PARTITION_DIR.match(os.path.basename(pdir))
    topic, partition = m["topic"], int(m["partition"])
    names = sorted(os.listdir(pdir))
    topic_id = read_topic_id(pdir) if "partition.metadata" in names else None
    mine = []
    for name in names:
        path = os.path.join(pdir, name)
        if os.path.isdir(path):
            mine.append(Target(path, "skipped", log_dir, topic, partition, reason="unexpected directory"))
        else:
            t = classify_file(path, log_dir, topic, partition)
            t.topic_id = topic_id
            mine.append(t)
    if any(n.endswith(SKIP_FILE_SUFFIXES) for n in names):
        mine = recovered(mine, _as_renamed)   # an interrupted cleaning: the dir as Kafka recovers it
    out.extend(mine)


def _as_renamed(t: Target) -> Target:
    r = classify_file(t.path, t.log_dir, t.topic, t.partition, name=os.path.basename(t.path)[:-len(".swap")])
    r.topic_id = t.topic_id
    return r


def _remote_partition_targets(pdir: str, m, cache: dict, out: list[Target]) -> None:
    parent = os.path.dirname(os.path.abspath(pdir))
    d = cache.get(("remote", parent)) or cache.setdefault(("remote", parent), LogDir(parent, None, remote=True))
    topic, partition = m["topic"], int(m["partition"])
    for name in sorted(os.listdir(pdir)):
        path = os.path.join(pdir, name)
        f = REMOTE_SEGMENT_FILE.match(name)
        kind = REMOTE_EXTS.get(f["ext"]) if f else None
        if os.path.isdir(path) or kind is None:
            reason = ("a remote segment's leader epoch checkpoint (not decoded)"
                      if f and f["ext"] == "leader_epoch_checkpoint" else "not a remote segment file")
            out.append(Target(path, "skipped", d, topic, partition, reason=reason))
            continue
        out.append(Target(path, kind.lstrip("."), d, topic, partition, int(f["base"]), size=os.path.getsize(path),
                          topic_id=m["topic_id"], reader=LOG_FILES.get(kind) if kind.startswith(".") else None))


def _looks_like_partition_dir(path: str, name: str) -> bool:
    if not PARTITION_DIR.match(name):
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return any(_segment_file(n) or LOG_FILES.get(n, _LOG_DIR_FILE).where == "partition" for n in names) or not names


_LOG_DIR_FILE = LogFile("", "log_dir", None)


def _segment_file(name: str) -> bool:
    m = SEGMENT_FILE.match(name)
    return m is not None and (m["ext"] in SEGMENT_EXTS or "." + m["ext"] in LOG_FILES)


def plan(paths: list[str]) -> Plan:
    """Every file to decode under `paths`, in a stable order (sorted names)."""
    result = Plan()
    cache: dict = {}
    for p in paths:
        if not os.path.exists(p):
            result.errors.append(f"{p}: no such file or directory")
            continue
        if not os.access(p, os.R_OK):
            result.errors.append(f"{p}: permission denied")
            continue
        p = os.path.abspath(p)
        if os.path.isfile(p):
            parent = os.path.dirname(p)
            m = PARTITION_DIR.match(os.path.basename(parent))
            if m:
                t = classify_file(p, _log_dir_of(parent, cache), m["topic"], int(m["partition"]))
                t.topic_id = read_topic_id(parent)
                result.targets.append(t)
            else:
                result.targets.append(classify_file(p, _log_dir_of(p, cache)))
            continue
        _walk(p, 0, cache, result)
    result.targets = _grouped(_distinct_replicas(result.targets))
    if any(t.topic_id is None and t.topic for t in result.targets):
        from kaudit.sources.cluster_metadata import name_partitions

        name_partitions(result)   # partition dirs without partition.metadata: the metadata log's id
    from kaudit.sources.remote import merge

    result.targets = merge(result.targets)   # remote (tiered) segments and the local log: one log
    if any(t.topic == "__remote_log_metadata" for t in result.targets):
        from kaudit.sources.remote import not_read

        result.remote_not_read = not_read(result)
    return result


def _has_remote_segments(d: str) -> bool:
    try:
        return any(REMOTE_SEGMENT_FILE.match(n) for n in os.listdir(d))
    except OSError:
        return False


def _distinct_replicas(targets: list[Target]) -> list[Target]:
    """Log dirs of one node that hold the same partition get their paths as replica tags (every
    file of theirs, so checkpoints still meet their partitions): one node id would merge two
    replicas' rows into one fold."""
    dirs: dict[tuple, set] = {}
    for t in targets:
        if t.log_dir is not None and t.log_dir.node_id is not None and t.topic is not None:
            dirs.setdefault((t.log_dir.node_id, t.topic, t.partition), set()).add(t.log_dir.path)
    shared = set().union(*(paths for paths in dirs.values() if len(paths) > 1))
    if shared:
        tagged: dict = {}
        for t in targets:
            if t.log_dir is not None and t.log_dir.path in shared:
                d = t.log_dir
                t.log_dir = tagged.get(d.path) or tagged.setdefault(d.path, LogDir(d.path, d.node_id, True))
    return targets


def _grouped(targets: list[Target]) -> list[Target]:
    """Each file once (inputs may overlap: `D` and `D/node1`), and the files of each
    (replica, topic, partition) together in name order, in the order they first appear - a log
    dir's own files (topic None) together per replica: the folds keyed by a log's partition
    read each key's rows as one run, in log order (engine.plan)."""
    seen: set[str] = set()
    groups: dict[tuple, list[Target]] = {}
    for t in targets:
        real = os.path.realpath(t.path)
        if real in seen:
            continue
        seen.add(real)
        if t.topic is not None and t.partition is not None:
            key = (t.log_dir.path if t.log_dir else None, t.topic, t.partition)
        elif t.log_dir is not None:
            key = ("", t.log_dir.replica)
        else:
            key = ("", real)
        groups.setdefault(key, []).append(t)
    out = []
    for key, group in groups.items():
        if key[0] != "":
            group.sort(key=lambda t: os.path.basename(t.path))
        out.extend(group)
    return out


def _walk(d: str, depth: int, cache: dict, result: Plan) -> None:
    name = os.path.basename(d)
    m = REMOTE_PARTITION_DIR.match(name)
    if m and _has_remote_segments(d):
        _remote_partition_targets(d, m, cache, result.targets)
        return
    if _looks_like_partition_dir(d, name):
        _partition_targets(d, _log_dir_of(d, cache), result.targets)
        return
    if depth > MAX_DEPTH:
        result.targets.append(Target(d, "skipped", None, reason="too deep"))
        return
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError as e:
        result.errors.append(f"{d}: {e.strerror}")
        return
    is_log_dir = any(e.name == "meta.properties" for e in entries)
    own = None
    if is_log_dir:
        own = LogDir(d, read_node_id(os.path.join(d, "meta.properties")))
        cache[d] = own
    for e in entries:
        if e.is_symlink():
            result.targets.append(Target(e.path, "skipped", own, reason="symbolic link (not followed)"))
        elif e.is_dir():
            reason = _skip_reason(e.name, True)
            if reason:
                result.targets.append(Target(e.path, "skipped", own, reason=reason))
            else:
                _walk(e.path, depth + 1, cache, result)
        elif own is not None or depth == 0:
            result.targets.append(classify_file(e.path, own))
