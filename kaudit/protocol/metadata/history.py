"""The cluster's own record, replayed: KRaft `metadata_record` rows -> the facts every audit may
use - topic names by id over time, each partition's leadership history (leader, leader epoch,
ISR, ELR, recovery state), the finalized features (`transaction.version`), producer id blocks.

Sources of records, in the order Kafka replays them (MetadataLoader): the newest KRaft snapshot
(`<end offset>-<epoch>.checkpoint`) when the log no longer starts at 0, then the log records past
it; a log dir's `bootstrap.checkpoint` gives the features only where nothing later does. Several
nodes' copies of one metadata log hold the same record at each committed offset: each offset is
replayed once (the first copy in (offset, replica) order).

A partition's leader epoch is replayed as PartitionRegistration.merge does: a PartitionRecord sets
it, a PartitionChangeRecord with a Leader field (-2 is "unchanged") bumps it by one.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

_SNAPSHOT = re.compile(r"^(?P<end>\d{20})-(?P<epoch>\d{10})\.checkpoint$")
NO_LEADER = -1
RECOVERING = 1
COLUMNS = ("source", "position", "replica", "offset", "timestamp_ms", "record_type", "issue",
           "record_topic_id", "record_topic", "record_partition", "leader", "leader_epoch",
           "partition_epoch", "leader_recovery_state", "replicas", "isr", "elr", "last_known_elr",
           "broker_id", "broker_epoch", "feature", "feature_level", "next_producer_id",
           "config_resource_type", "config_resource", "config_name", "config_value",
           "remote_segment_id", "start_offset", "end_offset", "remote_state", "event_timestamp_ms")
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4   # ConfigResource.Type ids; broker "" is the cluster default


def ids(s: str | None) -> list[int] | None:
    if s is None:
        return None
    return [int(x) for x in s.split(",") if x != ""]


@dataclass
class Election:
    """One leadership change of a partition, as the metadata records it."""

    offset: int
    timestamp_ms: int | None
    source: str
    position: int
    leader: int
    leader_epoch: int
    previous_leader: int | None
    previous_isr: list[int] | None
    previous_elr: list[int] | None
    isr: list[int] | None
    recovery_state: int | None
    unclean: bool | None        # None: the state before it is not in the evidence
    why: str = ""


@dataclass
class PartitionHistory:
    topic_id: str
    partition: int
    leader: int | None = None
    leader_epoch: int | None = None
    isr: list[int] | None = None
    elr: list[int] | None = None
    last_known_elr: list[int] | None = None
    replicas: list[int] | None = None
    recovery_state: int | None = None
    last_leader: int | None = None   # the last broker that led it (a leader of -1 aside)
    known: bool = False          # a PartitionRecord (log or snapshot) gave the whole state
    elections: list[Election] = field(default_factory=list)
    states: list[tuple] = field(default_factory=list)   # (offset, ts, leader, epoch, isr, elr)


@dataclass
class ClusterHistory:
    topics: dict[str, list[list]] = field(default_factory=dict)   # id -> [[name, from, removed at]]
    partitions: dict[tuple[str, int], PartitionHistory] = field(default_factory=dict)
    features: dict[str, int] = field(default_factory=dict)
    feature_source: dict[str, str] = field(default_factory=dict)   # "log" | "snapshot" | "bootstrap"
    producer_id_blocks: list[dict] = field(default_factory=list)
    # (resource type, resource name) -> {config: [(offset, value)]}: dynamic configs over time
    configs: dict = field(default_factory=dict)
    topic_created: dict = field(default_factory=dict)   # topic id -> offset of its TopicRecord
    # (topic id, partition) -> {segment id: RemoteSegment}, from __remote_log_metadata
    remote: dict = field(default_factory=dict)
    first_offset: int | None = None   # the first log offset replayed
    complete: bool = False            # the whole history: a log from offset 0, or a snapshot
    issues: int = 0                   # records not decoded (newer versions, corrupt)
    aborted: int = 0                  # records of aborted metadata transactions (not applied)

    def names(self) -> dict[str, str]:
        """topic id -> name (the latest name an id had: ids are never reused)."""
        return {tid: spans[-1][0] for tid, spans in self.topics.items() if spans}

    def live_id(self, name: str) -> str | None:
        """The id of the live topic named `name` (the last created and never removed), else None."""
        best = None
        for tid, spans in self.topics.items():
            for n, start, removed in spans:
                if n == name and removed is None and (best is None or start > best[1]):
                    best = (tid, start)
        return best[0] if best else None

    def partition(self, topic: str, partition: int) -> PartitionHistory | None:
        tid = self.live_id(topic) or next((t for t, s in self.topics.items() if any(x[0] == topic for x in s)), None)
        return None if tid is None else self.partitions.get((tid, partition))

    def transaction_version(self) -> int | None:
        """The finalized transaction.version; 0 when a whole history never finalized it; from a
        bootstrap.checkpoint alone only at 2 or more (kafka-features may have raised it since)."""
        tv = self.features.get("transaction.version")
        if self.feature_source.get("transaction.version") != "bootstrap":
            return tv if tv is not None else 0 if self.complete else None
        if self.complete:
            return 0      # a whole log holds the bootstrap records too: none finalized it
        return tv if tv >= 2 else None

    def config_values(self, rtype: int, name: str, key: str) -> list[tuple[int, str | None]]:
        """(offset, value) of every ConfigRecord that set `key` on the resource, oldest first
        (value None: deleted)."""
        return self.configs.get((rtype, name), {}).get(key, [])

    def unlimited(self, topic: str, topic_id: str, key: str, cluster_key: str) -> bool:
        """Whether the metadata shows `key` (retention.ms, retention.bytes) at -1 for the topic
        from its creation on: the topic's own config at its TopicRecord, else the cluster-wide
        dynamic default `cluster_key` - and never set otherwise after. False when no record
        set it (the brokers' static config decides: not in the evidence)."""
        created = self.topic_created.get(topic_id)
        if created is None:
            return False
        own = self.config_values(TOPIC_RESOURCE, topic, key)
        default = self.config_values(BROKER_RESOURCE, "", cluster_key)
        own_at = [value for offset, value in own if offset <= created]
        # the topic's own value at creation wins; else the cluster default, and any later own value
        chain = own if own_at and own_at[-1] is not None else default + [x for x in own if x[0] > created]
        start = [value for offset, value in chain if offset <= created]
        if not start or start[-1] != "-1":
            return False
        return all(value == "-1" for offset, value in chain if offset > created)

    def config_at_end(self, rtype: int, name: str, key: str) -> str | None:
        vals = self.config_values(rtype, name, key)
        return vals[-1][1] if vals else None


def _origin(source: str) -> tuple[str, int]:
    """("log", 0) | ("snapshot", end offset) | ("bootstrap", -1) of a row's file."""
    name = os.path.basename(source or "")
    m = _SNAPSHOT.match(name)
    if m:
        return "snapshot", int(m["end"])
    if name == "bootstrap.checkpoint":
        return "bootstrap", -1
    return "log", 0


def replay(rows: list[dict]) -> ClusterHistory:
    """The history of the metadata records `rows` (dicts with COLUMNS), any nodes, any order."""
    h = ClusterHistory()
    log, snaps, boot, remote = [], {}, [], []
    for r in rows:
        if (r.get("record_type") or "").startswith("REMOTE_"):
            remote.append(r)
            continue
        kind, end = _origin(r["source"])
        (log if kind == "log" else boot if kind == "bootstrap" else snaps.setdefault(end, [])).append(r)
    log.sort(key=lambda r: (r["offset"], str(r["replica"]), r["source"]))
    unique = _one_per_offset(log)
    start = unique[0]["offset"] if unique else None
    h.first_offset = start
    h.complete = start == 0
    base = [e for e in snaps if start is None or e >= start]
    if snaps and (start is None or start > 0) and base:
        end = min(base)   # the snapshot the log continues from
        h.complete = True
        one = _one_copy(snaps[end])
        for r in sorted(one, key=lambda r: r["offset"]):
            _apply(h, r, "snapshot", end - 1)
        unique = [r for r in unique if r["offset"] >= end]
    for r in boot:
        if r.get("feature") and r.get("issue") is None:
            h.features.setdefault(r["feature"], r["feature_level"])
            h.feature_source.setdefault(r["feature"], "bootstrap")
    _apply_log(h, unique)
    _remote(h, remote)
    return h


def _apply_log(h: ClusterHistory, rows: list[dict]) -> None:
    """The log's records in offset order; those of a metadata transaction (KIP-868: Begin/End/
    AbortTransactionRecord, 3.6+) once it ends, none of an aborted one - as MetadataLoader does.
    An open transaction at the end of the log is not applied (not committed yet)."""
    pending: list[dict] | None = None
    for r in rows:
        t = r["record_type"]
        if t == "BEGIN_TRANSACTION_RECORD":
            pending = []
        elif t == "END_TRANSACTION_RECORD":
            for x in pending or ():
                _apply(h, x, "log", x["offset"])
            pending = None
        elif t == "ABORT_TRANSACTION_RECORD":
            h.aborted += len(pending or ())
            pending = None
        elif pending is not None:
            pending.append(r)
        else:
            _apply(h, r, "log", r["offset"])


@dataclass
class RemoteSegment:
    """One remote log segment (KIP-405) as __remote_log_metadata records it."""

    segment_id: str
    start: int | None = None
    end: int | None = None
    states: list = field(default_factory=list)   # (event ms, state, source, position), in order

    @property
    def state(self) -> str | None:
        return self.states[-1][1] if self.states else None


def _remote(h: ClusterHistory, rows: list[dict]) -> None:
    """Each partition's remote segments; one event once however many replicas of the metadata
    partition hold it, in event time order."""
    seen = set()
    for r in sorted(rows, key=lambda r: (r["event_timestamp_ms"] or 0, r["offset"], str(r["source"]))):
        if r.get("issue") is not None or r.get("remote_segment_id") is None:
            continue
        key = (r["remote_segment_id"], r["remote_state"], r["event_timestamp_ms"])
        if key in seen:
            continue
        seen.add(key)
        segs = h.remote.setdefault((r["record_topic_id"], r["record_partition"]), {})
        seg = segs.setdefault(r["remote_segment_id"], RemoteSegment(r["remote_segment_id"]))
        if r["start_offset"] is not None:
            seg.start, seg.end = r["start_offset"], r["end_offset"]
        seg.states.append((r["event_timestamp_ms"], r["remote_state"], r["source"], r["position"]))


_SAME = tuple(c for c in COLUMNS if c not in ("source", "position", "replica"))


def _one_per_offset(log: list[dict]) -> list[dict]:
    """One record per offset (log sorted by offset, replica): the version most nodes hold - a
    node's uncommitted tail, truncated by KRaft when it rejoins, loses to the quorum's -, the
    first node's on a tie."""
    out, i = [], 0
    while i < len(log):
        j = i
        while j < len(log) and log[j]["offset"] == log[i]["offset"]:
            j += 1
        copies = log[i:j]
        if len(copies) == 1:
            out.append(copies[0])
        else:
            votes: dict = {}
            for r in copies:
                votes.setdefault(tuple(r.get(c) for c in _SAME), []).append(r)
            out.append(max(votes.values(), key=len)[0])   # max keeps the first on a tie
        i = j
    return out


def _one_copy(rows: list[dict]) -> list[dict]:
    first = min(rows, key=lambda r: str(r["source"]))["source"]
    return [r for r in rows if r["source"] == first]


def _apply(h: ClusterHistory, r: dict, origin: str, offset: int) -> None:
    if r.get("issue") not in (None, "trailing-bytes"):
        h.issues += 1
        return
    t = r["record_type"]
    if t == "CONFIG_RECORD":
        h.configs.setdefault((r["config_resource_type"], r["config_resource"]), {}).setdefault(
            r["config_name"], []).append((offset, r["config_value"]))
    elif t == "TOPIC_RECORD":
        h.topic_created[r["record_topic_id"]] = offset
        spans = h.topics.setdefault(r["record_topic_id"], [])
        if not spans or spans[-1][0] != r["record_topic"]:
            spans.append([r["record_topic"], offset, None])
    elif t == "REMOVE_TOPIC_RECORD":
        for span in h.topics.get(r["record_topic_id"], []):
            if span[2] is None:
                span[2] = offset
                h.configs.pop((TOPIC_RESOURCE, span[0]), None)   # Kafka drops a deleted topic's configs
    elif t == "PARTITION_RECORD":
        _partition_record(h, r, offset)
    elif t == "PARTITION_CHANGE_RECORD":
        _partition_change(h, r, offset)
    elif t == "FEATURE_LEVEL_RECORD":
        h.features[r["feature"]] = r["feature_level"]
        h.feature_source[r["feature"]] = origin
    elif t == "PRODUCER_IDS_RECORD":
        h.producer_id_blocks.append({"broker_id": r["broker_id"], "broker_epoch": r["broker_epoch"],
                                     "next_producer_id": r["next_producer_id"], "offset": offset,
                                     "timestamp_ms": r["timestamp_ms"]})


def _key(r: dict) -> tuple[str, int]:
    return r["record_topic_id"], r["record_partition"]


def _partition_record(h: ClusterHistory, r: dict, offset: int) -> None:
    p = h.partitions.get(_key(r)) or h.partitions.setdefault(_key(r), PartitionHistory(*_key(r)))
    p.leader, p.leader_epoch = r["leader"], r["leader_epoch"]
    if p.leader is not None and p.leader >= 0:
        p.last_leader = p.leader
    p.isr, p.replicas = ids(r["isr"]), ids(r["replicas"])
    p.elr, p.last_known_elr = ids(r["elr"]) or [], ids(r["last_known_elr"]) or []
    p.recovery_state = r["leader_recovery_state"] or 0
    p.known = True
    p.states.append((offset, r["timestamp_ms"], p.leader, p.leader_epoch, p.isr, p.elr))


def _partition_change(h: ClusterHistory, r: dict, offset: int) -> None:
    p = h.partitions.get(_key(r)) or h.partitions.setdefault(_key(r), PartitionHistory(*_key(r)))
    prev_leader, prev_isr, prev_elr, last_leader = p.leader, p.isr, p.elr, p.last_leader
    if r["isr"] is not None:
        p.isr = ids(r["isr"])
    if r["replicas"] is not None:
        p.replicas = ids(r["replicas"])
    if r["elr"] is not None:
        p.elr = ids(r["elr"])
    if r["last_known_elr"] is not None:
        p.last_known_elr = ids(r["last_known_elr"])
    if r["leader_recovery_state"] is not None:
        p.recovery_state = r["leader_recovery_state"]
    if r["leader"] is not None:   # a Leader field: a new leader epoch (PartitionRegistration.merge)
        p.leader = r["leader"]
        p.leader_epoch = None if p.leader_epoch is None else p.leader_epoch + 1
        if r["leader"] != NO_LEADER and r["leader"] != prev_leader:
            p.elections.append(_election(p, r, offset, last_leader, prev_isr, prev_elr))
        if r["leader"] != NO_LEADER:
            p.last_leader = r["leader"]
    p.states.append((offset, r["timestamp_ms"], p.leader, p.leader_epoch, p.isr, p.elr))


def _election(p: PartitionHistory, r: dict, offset: int, prev_leader, prev_isr, prev_elr) -> Election:
    leader = r["leader"]
    recovering = r["leader_recovery_state"] == RECOVERING
    if recovering:
        unclean, why = True, "the controller marked the leader RECOVERING (LeaderRecoveryState 1: an unclean election)"
    elif not p.known or prev_isr is None:
        unclean, why = None, "the partition's earlier state is not in the metadata read"
    elif leader in prev_isr or leader in (prev_elr or ()):
        unclean, why = False, ""
    else:
        unclean, why = True, (f"broker {leader} was in neither the ISR {_fmt(prev_isr)} nor the ELR "
                              f"{_fmt(prev_elr or [])} when it was elected")
    return Election(offset, r["timestamp_ms"], r["source"], r["position"], leader,
                    -1 if p.leader_epoch is None else p.leader_epoch, prev_leader, prev_isr, prev_elr,
                    p.isr, r["leader_recovery_state"], unclean, why)


def _fmt(xs) -> str:
    return "[" + ",".join(map(str, xs)) + "]"


def latest_features(rows: list[dict]) -> dict[str, int]:
    """The finalized feature levels the newest FeatureLevelRecord of each feature gives, in
    replay order: log records by offset, a snapshot's at its end offset, bootstrap.checkpoint
    first (each record holds the whole level, so the newest wins)."""
    best: dict[str, tuple] = {}
    for r in rows:
        if r.get("record_type") != "FEATURE_LEVEL_RECORD" or r.get("issue") is not None or not r.get("feature"):
            continue
        kind, end = _origin(r["source"])
        at = (-1, r["offset"]) if kind == "bootstrap" else (end - 1, r["offset"]) if kind == "snapshot" \
            else (r["offset"], 0)
        if r["feature"] not in best or at > best[r["feature"]][0]:
            best[r["feature"]] = (at, r["feature_level"])
    return {f: v for f, (_, v) in best.items()}
