"""What a log-dir walk yields, below everything that reads it: the plan's files (Target) tagged
with their log dir (LogDir), the names Kafka gives them, and each log dir's identity from its
meta.properties (node id, cluster id). The walk itself is sources.logdir; the readers of a
plan's files (segments, remote, cluster_metadata) import only this."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from kaudit.protocol.file_kinds import LogFile

PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# Tiered storage (KIP-405) copied from an object store in the layout of Kafka's reference
# RemoteStorageManager (LocalTieredStorage): `<topic>-<partition>-<topic id>/` holding
# `<start offset>-<segment id>.log` beside its .index, .timeindex, .txnindex, .snapshot and
# .leader_epoch_checkpoint.
REMOTE_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)-(?P<topic_id>[A-Za-z0-9_-]{22})$")
REMOTE_SEGMENT_FILE = re.compile(r"^(?P<base>\d{1,19})-(?P<segment>[A-Za-z0-9_-]{22})\.(?P<ext>[a-z_]+)$")
# (a segment's .leader_epoch_checkpoint holds the epoch cache up to that segment: one per
# segment, not a replica's file - listed as skipped)
REMOTE_EXTS = {"log": "log", "index": "index", "timeindex": "timeindex", "txnindex": ".txnindex",
               "snapshot": ".snapshot"}
SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})(?:-\d+)?\.(?P<ext>[a-z]+)$")
# Named like segments and decoded here (sources.segment_log, index_table); the other files kaudit
# decodes are registered by name or suffix with their decoders (protocol.file_kinds).
SEGMENT_EXTS = ("log", "index", "timeindex", "checkpoint")
SKIP_FILE_SUFFIXES = (".deleted", ".cleaned", ".swap")
SKIP_DIR_SUFFIXES = ("-delete", "-future", "-stray")
# Files a log dir holds that kaudit does not decode (yet): listed as skipped, with the reason.
LOG_DIR_FILES = {
    ".lock": "lock file",
    "server.properties": "a broker's static config (read for retention: sources/broker_config.py)",
}
MAX_DEPTH = 8


@dataclass(frozen=True, slots=True)
class LogDir:
    path: str
    node_id: int | None
    # another log dir of the same node holds one of this one's partitions: tagged by path
    shares_partitions: bool = False
    remote: bool = False   # a folder of remote (tiered) segments: its own replica, never compared

    @property
    def replica(self) -> str:
        if self.remote:
            return "remote:" + self.path
        return str(self.node_id) if self.node_id is not None and not self.shares_partitions else self.path


@dataclass(slots=True)
class Target:
    """One file to decode, or one entry to report as skipped."""

    path: str
    kind: str  # log | index | timeindex | checkpoint | skipped | a registered file's name or suffix
    log_dir: LogDir | None
    topic: str | None = None
    partition: int | None = None
    base_offset: int | None = None
    reason: str | None = None
    size: int = 0
    topic_id: str | None = None   # the partition dir's partition.metadata (KIP-516), when it has one
    reader: LogFile | None = None   # how a registered file decodes (carried to the tasks with it)
    # a remote segment merged into a local replica's log (sources.remote): its rows from this
    # offset on are the local log's, not read from it
    stop_offset: int | None = None

    def place(self) -> dict:
        return {
            "source": self.path,
            "replica": self.log_dir.replica if self.log_dir else None,
            "log_dir": self.log_dir.path if self.log_dir else None,
            "topic": self.topic,
            "partition": self.partition,
        }


@dataclass
class Plan:
    targets: list[Target] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # unreadable inputs
    # ranges __remote_log_metadata lists as copied that no input holds (sources.remote.not_read)
    remote_not_read: list[dict] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(t.size for t in self.targets if t.kind != "skipped")


def _meta_lines(meta_properties: str) -> list[str]:
    try:
        with open(meta_properties, "rb") as f:
            return [line.strip() for line in f.read(65536).decode("utf-8", "replace").splitlines()]
    except OSError:
        return []


def read_node_id(meta_properties: str) -> int | None:
    for line in _meta_lines(meta_properties):
        for key in ("node.id", "broker.id"):
            if line.startswith(key + "="):
                try:
                    return int(line.split("=", 1)[1].strip())
                except ValueError:
                    return None
    return None


def read_cluster_id(meta_properties: str) -> str | None:
    for line in _meta_lines(meta_properties):
        if line.startswith("cluster.id="):
            return line.split("=", 1)[1].strip() or None
    return None


def log_dir_clusters(p: Plan) -> dict[str, str | None]:
    """Each log dir's cluster id (its meta.properties), None where it has none; a folder of
    remote segments is a cluster of its own (never compared with the brokers' replicas)."""
    out: dict[str, str | None] = {}
    for t in p.targets:
        d = t.log_dir
        if d is not None and d.remote:
            out[d.path] = "remote:" + d.path
        elif d is not None and d.path not in out:
            meta = os.path.join(d.path, "meta.properties")
            out[d.path] = read_cluster_id(meta) if os.path.isfile(meta) else None
    return out


def replicated_partitions(p: Plan, clusters: dict | None = None) -> set[tuple[str, int]]:
    """The (topic, partition) pairs whose segments the plan holds in more than one replica of
    one cluster (log dirs of different cluster ids hold different partitions of the same name;
    an unknown cluster id matches any): the ones the replica comparison needs batch by batch."""
    clusters = log_dir_clusters(p) if clusters is None else clusters
    seen: dict[tuple, dict] = {}
    for t in p.targets:
        if t.kind == "log" and t.topic is not None and t.partition is not None and t.log_dir is not None:
            seen.setdefault((t.topic, t.partition), {})[t.log_dir.replica] = clusters.get(t.log_dir.path)
    out = set()
    for key, reps in seen.items():
        known = [c for c in reps.values() if c is not None]
        if len(reps) > 1 and (len(known) - len(set(known)) > 0 or len(known) < len(reps)):
            out.add(key)
    return out
