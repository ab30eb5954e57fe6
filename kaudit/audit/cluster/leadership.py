"""`unclean-leader-election` and `unexplained-divergence`: the cluster's own record of who led each
partition (KRaft `__cluster_metadata`, protocol.metadata.history) joined with what the replicas
hold (their batches' leader epochs, leader-epoch-checkpoints and high watermarks).

The fold sees the whole selection at once (its key is empty: the metadata names partitions by
topic id, the logs by directory): the metadata records, and each replica's batches reduced as
they are selected to runs of one leader epoch (first and last batch of each run per chunk), with
the leader-epoch-checkpoint entries and the high-watermark checkpoint entries. Nothing is judged
without metadata: a log dir set without `__cluster_metadata` gives no finding here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.cluster import tiered
from kaudit.audit.cluster.retention import Broker, keeps_everything
from kaudit.audit.folds import Context, Fold, FoldState, np_indices
from kaudit.audit.registry import evidence, finding, rule
from kaudit.protocol.metadata.history import COLUMNS as METADATA_COLUMNS
from kaudit.protocol.metadata.history import Election, replay

METADATA_TOPIC = "__cluster_metadata"
BATCH_COLUMNS = ("replica", "log_dir", "topic", "partition", "source", "position", "base_offset", "last_offset",
                 "partition_leader_epoch", "topic_id")
EPOCH_COLUMNS = ("replica", "log_dir", "topic", "partition", "source", "position", "leader_epoch", "start_offset")
CHECKPOINT_COLUMNS = ("replica", "log_dir", "topic", "partition", "source", "position", "checkpoint", "offset")


@rule("unclean-leader-election", "critical", "disk",
      "a partition leader was elected from outside the in-sync replicas: acknowledged records may be lost",
      "Find the records the old leader had past the new leader's start offset (the finding's "
      "offsets, on the replica it names) before that broker rejoins: it truncates them when it "
      "does. Copy its partition dir aside now, replay what must survive, and set "
      "unclean.leader.election.enable=false (topic and broker) unless availability was chosen "
      "over durability on purpose.")
def unclean_leader_election(e: Election) -> bool:
    """Invariant: a partition leader is elected from its ISR, or since KIP-966 from its eligible
    leader replicas (ELR) - replicas that hold every committed (acknowledged with acks=all)
    record (QuorumController / PartitionChangeBuilder.electLeader). Electing any other replica
    is an unclean election (unclean.leader.election.enable, or kafka-leader-election --election-
    type UNCLEAN): since 3.2 the controller marks it LeaderRecoveryState RECOVERING (KIP-704).
    The new leader starts its epoch at its own log end (its leader-epoch-checkpoint entry); what
    the previous leader held past that offset is truncated from every replica that follows it
    (KIP-101, KIP-279): lost, acknowledged or not.
    Flagged: a PartitionChangeRecord naming a leader that was in neither the ISR nor the ELR of
    the partition's state before it, or carrying LeaderRecoveryState 1. Joined with the
    replicas' logs: the offsets a replica still holds in an earlier leader epoch past the new
    leader's start offset (the records lost), and whether they were below that replica's high
    watermark (acknowledged to acks=all producers).
    Benign causes: none for durability - an operator may accept the loss on purpose (a cluster
    that lost every in-sync replica); the records lost are still lost."""
    return bool(e.unclean)


@rule("unexplained-divergence", "critical", "disk",
      "replicas hold different leader epochs at committed offsets though every election was clean",
      "The replication protocol guarantees committed offsets identical on every replica after a "
      "clean election; this is a broker bug or a disk fault. Find which replica the consumers "
      "read (the current leader), keep a copy of each partition dir, and re-replicate the "
      "divergent replica from the leader (stop it, move its partition dir aside).")
def unexplained_divergence(_) -> bool:
    """Invariant: with only clean elections (each leader from the ISR or ELR), every record below
    the high watermark is on every in-sync replica in the same leader epoch: a new leader holds
    every committed record, and followers truncate only what lies above the high watermark to
    the new leader's epoch boundary (KIP-101, KIP-279). So two replicas holding the same offset
    in different leader epochs below both their high watermarks contradict the leadership
    history the metadata log records - when that history is complete for the partition (its
    PartitionRecord in the log or a snapshot).
    Benign causes: above a replica's high watermark (an old leader's uncommitted tail, truncated
    when it rejoins: normal after a clean election); an unclean election (reported as
    `unclean-leader-election` instead)."""
    return True


@rule("missing-segments", "error", "disk",
      "a replica's log starts above offset 0 though its topic keeps every record and nothing moved its start",
      "Segments were removed from this replica outside Kafka (by hand, a failed disk or copy, a "
      "restore from an older backup). Check the other replicas (kaudit segments on every node's "
      "log dir): if one holds the missing offsets, re-replicate this one from it; else the "
      "records are lost - tell the consumers that read from the beginning.")
def missing_segments(first: int, log_start_ckpt: int | None, epoch_start: int | None) -> bool:
    """Invariant: a partition's log starts at offset 0 and its log start offset moves only by
    retention (retention.ms, retention.bytes: whole segments deleted), DeleteRecords (recorded in
    `log-start-offset-checkpoint`, UnifiedLog.maybeIncrementLogStartOffset), the log cleaner of a
    compacted topic, tiered storage (KIP-405: local segments deleted once copied remotely), or a
    new replica starting at its leader's log start. With retention.ms -1 for the topic from its
    creation on (its ConfigRecord, or the cluster's dynamic default, in the metadata log),
    retention.bytes never set otherwise, no compaction and no remote storage, the start can only
    have moved by DeleteRecords (Kafka Streams purges its repartition topics so) - and whenever
    the broker moves a log start it also truncates the leader epoch cache from the start
    (LeaderEpochFileCache.truncateFromStart): its first `leader-epoch-checkpoint` entry begins
    at the new start. A replica whose first batch lies above 0, above its log-start-offset-
    checkpoint entry and above the first entry of its leader-epoch-checkpoint lost segments the
    broker never deleted.
    The topic's retention is its own ConfigRecords, else the broker's then the cluster's dynamic
    defaults (ConfigRecord of resource BROKER), else the broker's server.properties when the
    inputs hold it (in or beside the log dir root: log.retention.ms/minutes/hours,
    log.retention.bytes, log.cleanup.policy), else Kafka's defaults (168 hours: not judged).
    Benign causes: a static config changed since (server.properties is read as it is now: a
    retention set there earlier and removed since moved the start); a broker stopped hard right after it
    moved the start, before its epoch cache reached the disk (recent UnifiedLogs flush it
    asynchronously: truncateFromStartAsyncFlush). Not judged without the replica's
    leader-epoch-checkpoint (a restart after the loss rewrites it: then nothing shows)."""
    if epoch_start is None or first <= 0:
        return False
    return (log_start_ckpt is None or log_start_ckpt < first) and epoch_start < first


@dataclass
class Run:
    replica: str
    epoch: int
    first: int
    last: int
    source: str
    position: int
    log_dir: str | None = None


@dataclass(frozen=True)
class LeadershipFold(Fold):
    # log dir -> cluster id (meta.properties), bound by the engines: one cluster's metadata
    # judges only the log dirs of that cluster (an unknown id matches the only cluster)
    clusters: tuple = ()
    # log dir -> retention.Broker (its node id and server.properties, when the inputs hold it)
    brokers: tuple = ()

    def bind(self, replicated, clusters: dict | None = None, layout=None) -> "LeadershipFold":
        bound = tuple(sorted((clusters or {}).items(), key=lambda kv: kv[0]))
        brokers = _brokers(clusters or {})
        fold = replace(self, clusters=bound, brokers=brokers, make=partial(_make, clusters=bound, brokers=brokers))
        if layout is not None and not may_hold_metadata(layout):
            # no metadata file among the inputs: no metadata_record row, so the fold finds
            # nothing (LeadershipState.finish) - it need not buffer every log's batch rows
            fold = replace(fold, inputs={"metadata_record": self.inputs["metadata_record"]})
        return fold


def _brokers(clusters: dict) -> tuple:
    """Each log dir's broker: node id (meta.properties) and static config (sources.broker_config)."""
    import os

    from kaudit.sources.broker_config import for_log_dir
    from kaudit.sources.logdir import read_node_id

    out = []
    for path, cluster in sorted(clusters.items()):
        if str(cluster or "").startswith("remote:"):
            continue
        meta = os.path.join(path, "meta.properties")
        node = read_node_id(meta) if os.path.isfile(meta) else None
        found = for_log_dir(path, node)
        out.append((path, Broker(node, found[0], tuple(sorted(found[1].items()))) if found else Broker(node)))
    return tuple(out)

    def select(self, kind: str, table: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table | None:
        sel = super().select(kind, table, extra)
        if sel is None or kind != "batch" or sel.num_rows < 3:
            return sel
        return _run_ends(sel)


def _run_ends(t: pa.Table) -> pa.Table:
    """The first and last batch of each run of one (replica, topic, partition, leader epoch)."""
    n = t.num_rows
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in ("replica", "topic", "partition", "partition_leader_epoch"):
        col = t.column(c)
        ne = pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True)
        change[1:] |= ne.to_numpy(zero_copy_only=False)
    keep = change.copy()
    keep[:-1] |= change[1:]
    keep[-1] = True
    return t.take(np_indices(np.flatnonzero(keep)))


def may_hold_metadata(layout) -> bool:
    """Whether the files of a log-dir plan may give metadata_record rows: `__cluster_metadata`
    logs and snapshots and bootstrap.checkpoint files (cluster_metadata.metadata_targets), or
    `__remote_log_metadata` logs."""
    from kaudit.sources.cluster_metadata import metadata_targets
    from kaudit.sources.records import REMOTE_TOPIC

    return bool(metadata_targets(layout.targets)) or any(t.topic == REMOTE_TOPIC for t in layout.targets)


def _batch_where(t: pa.Table):
    ok = pc.and_(pc.equal(t.column("source_kind"), "log"), pc.not_equal(t.column("topic"), METADATA_TOPIC))
    ok = pc.and_(ok, pc.invert(pc.ends_with(t.column("source"), ".checkpoint")))
    return pc.fill_null(pc.and_(ok, pc.greater_equal(t.column("partition_leader_epoch"), 0)), False)


def _checkpoint_where(t: pa.Table):
    names = pa.array(["replication-offset-checkpoint", "log-start-offset-checkpoint"])
    return pc.fill_null(pc.is_in(t.column("checkpoint"), value_set=names), False)


class LeadershipState(FoldState):
    def __init__(self, ctx: Context, clusters: dict, brokers: dict | None = None):
        self.ctx = ctx
        self.clusters = clusters
        self.brokers = brokers or {}
        self.tables: dict[str, list[pa.Table]] = defaultdict(list)

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        self.tables[kind].append(table)
        return []

    def finish(self) -> list[dict]:
        meta = defaultdict(list)
        for r in _rows(self.tables.pop("metadata_record", [])):
            meta[self.clusters.get(r["log_dir"])].append(r)
        if not meta:
            return []
        data = {k: _rows(self.tables.pop(k, [])) for k in ("batch", "leader_epoch_entry", "checkpoint_entry")}
        out = []
        for cluster, rows in sorted(meta.items(), key=lambda kv: str(kv[0])):
            mine = {k: [r for r in v if self._same(cluster, r["log_dir"], len(meta))] for k, v in data.items()}
            out.extend(_judge(replay(rows), mine, self.brokers))
        return out

    def _same(self, cluster, log_dir, n: int) -> bool:
        c = self.clusters.get(log_dir)
        return c == cluster or (n == 1 and (c is None or cluster is None))


def _judge(history, data: dict, brokers: dict | None = None) -> list[dict]:
    names = history.names()
    runs: dict[tuple, list[Run]] = defaultdict(list)
    live = {name: tid for tid, name in names.items() if history.live_id(name) == tid}
    for r in data["batch"]:
        # a partition dir of another incarnation of the topic (deleted, created again) is not its log
        if r["topic_id"] is None or r["topic_id"] == live.get(r["topic"], r["topic_id"]):
            _add_run(runs[(r["topic"], r["partition"])], r)
    epochs: dict[tuple, dict] = defaultdict(dict)
    for r in data["leader_epoch_entry"]:
        epochs[(r["topic"], r["partition"])].setdefault(r["replica"], []).append(r)
    hws = {(r["replica"], r["topic"], r["partition"]): r for r in data["checkpoint_entry"]
           if r["checkpoint"] == "replication-offset-checkpoint"}
    starts = {(r["replica"], r["topic"], r["partition"]): r for r in data["checkpoint_entry"]
              if r["checkpoint"] == "log-start-offset-checkpoint"}
    out = []
    for (tid, p), ph in sorted(history.partitions.items(), key=lambda kv: (names.get(kv[0][0], kv[0][0]), kv[0][1])):
        topic = names.get(tid)
        if topic is None:
            continue
        part = Partition(topic, p, tid, runs.get((topic, p), []), epochs.get((topic, p), {}), hws)
        for e in ph.elections:
            if unclean_leader_election(e):
                f = part.unclean(e)
                f["timeline"] = leadership_timeline(ph, e.offset)
                out.append(f)
        if ph.known and not any(e.unclean is not False for e in ph.elections):
            out.extend(part.divergence())
        kept = _kept(history, topic, tid, part, brokers or {})
        if kept:
            out.extend(part.missing_start(starts, kept))
        elif (tid, p) in history.remote and _remote_enabled(history, topic):
            out.extend(tiered.missing_local_and_remote(part, starts, history.remote[(tid, p)]))
    for (tid, p), segments in sorted(history.remote.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        topic = names.get(tid) or tid
        out.extend(tiered.stuck(topic, p, tid, segments))
    return out


TIMELINE_STATES = 12


def leadership_timeline(ph, at: int) -> list[str]:
    """The partition's states up to a few after metadata offset `at`, oldest first: who led it,
    in which epoch, with which ISR and ELR - "who led this partition when the data went missing"."""
    import datetime as dt

    def when(ts):
        return "?" if ts is None else dt.datetime.fromtimestamp(ts / 1000, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"

    states = ph.states
    i = next((k for k, s in enumerate(states) if s[0] >= at), len(states))
    window = states[max(0, i - TIMELINE_STATES + 3): i + 3]
    return [f"metadata offset {o} {when(ts)}: leader {leader} epoch {epoch} ISR {list(isr or [])} ELR {list(elr or [])}"
            + ("  <- unclean election" if o == at else "")
            for o, ts, leader, epoch, isr, elr in window]


def _remote_enabled(history, topic: str) -> bool:
    from kaudit.protocol.metadata.history import TOPIC_RESOURCE

    return (history.config_at_end(TOPIC_RESOURCE, topic, "remote.storage.enable") or "").lower() == "true"


def _kept(history, topic: str, tid: str, part: "Partition", brokers: dict) -> dict:
    """replica -> (why its broker keeps every record of the topic, its server.properties when
    that says so) for the replicas whose broker does (retention.keeps_everything)."""
    out = {}
    for rep, log_dir in sorted({(r.replica, r.log_dir) for r in part.runs}, key=str):
        broker = brokers.get(log_dir) or Broker()
        ok, why = keeps_everything(history, topic, tid, broker)
        if ok:
            out[rep] = (why, broker.path if broker.path and broker.path in why else None)
    return out


def _rows(tables: list[pa.Table]) -> list[dict]:
    return [r for t in tables for r in t.to_pylist()]


def _add_run(runs: list[Run], r: dict) -> None:
    last = runs[-1] if runs else None
    if last is not None and last.replica == r["replica"] and last.epoch == r["partition_leader_epoch"] \
            and r["base_offset"] >= last.first:
        last.last = max(last.last, r["last_offset"])
        return
    runs.append(Run(r["replica"], r["partition_leader_epoch"], r["base_offset"], r["last_offset"],
                    r["source"], r["position"], r.get("log_dir")))


@dataclass
class Partition:
    topic: str
    partition: int
    topic_id: str
    runs: list[Run]
    epochs: dict          # replica -> leader_epoch_entry rows
    hws: dict             # (replica, topic, partition) -> replication-offset-checkpoint row

    def hw(self, replica) -> int | None:
        r = self.hws.get((replica, self.topic, self.partition))
        return None if r is None else r["offset"]

    def start_of(self, replica: str, epoch: int):
        """(start offset, entry row) of `epoch` in the replica's leader-epoch-checkpoint."""
        for r in self.epochs.get(replica, ()):
            if r["leader_epoch"] == epoch:
                return r["start_offset"], r
        return None, None

    def unclean(self, e: Election) -> dict:
        new = str(e.leader)
        start, entry = self.start_of(new, e.leader_epoch)
        if start is None:   # no checkpoint of the new leader: where its epoch's batches begin
            later = [r.first for r in self.runs if r.epoch >= e.leader_epoch]
            start = min(later) if later else None
        lost = []
        if start is not None:
            for r in self.runs:
                if r.replica != new and r.epoch < e.leader_epoch and r.last >= start:
                    lost.append(r)
        ev = [evidence(e.source, e.position, "metadata_record",
                       f"PartitionChangeRecord: leader {e.leader}, leader epoch {e.leader_epoch}")]
        if entry is not None:
            ev.append(evidence(entry["source"], entry["position"], "leader_epoch_entry",
                               f"replica {new} starts epoch {e.leader_epoch} at offset {start}"))
        by_replica: dict[str, list[int]] = {}
        for r in lost:
            lo, hi = by_replica.setdefault(r.replica, [max(r.first, start), r.last])
            by_replica[r.replica] = [min(lo, max(r.first, start)), max(hi, r.last)]
            ev.append(evidence(r.source, r.position, "batch", f"replica {r.replica}: epoch {r.epoch} "
                               f"batches at {r.first}-{r.last}"))
        msg = (f"{self.topic}-{self.partition}: unclean leader election at metadata offset {e.offset}: "
               f"broker {e.leader} became leader at leader epoch {e.leader_epoch} (previous leader "
               f"{e.previous_leader}); {e.why}")
        acked = {}
        if by_replica:
            parts = []
            for rep, (lo, hi) in sorted(by_replica.items()):
                hw = self.hw(rep)
                note = ""
                if hw is not None and hw > lo:
                    acked[rep] = [lo, min(hi, hw - 1)]
                    note = f", {lo}-{min(hi, hw - 1)} below its high watermark {hw} (acknowledged)"
                parts.append(f"replica {rep} holds offsets {lo}-{hi} of earlier leader epochs{note}")
            msg += (f". Broker {e.leader} starts epoch {e.leader_epoch} at offset {start}: "
                    + "; ".join(parts) + f" - records broker {e.leader} does not have (lost)")
        elif start is not None:
            msg += (f". Broker {e.leader} starts epoch {e.leader_epoch} at offset {start}; no replica in "
                    "the inputs still holds what the previous leader had past it, so what was lost "
                    "cannot be counted from these log dirs")
        else:
            msg += ". The new leader's log is not in the inputs: what was lost cannot be counted"
        first = min((v[0] for v in by_replica.values()), default=None)
        last = max((v[1] for v in by_replica.values()), default=None)
        return finding("unclean-leader-election", msg, topic=self.topic, partition=self.partition,
                       replica=",".join(sorted(by_replica)) or None,   # where the lost records still are
                       topic_id=self.topic_id, first_offset=first, last_offset=last,
                       first_ts_ms=e.timestamp_ms, evidence=ev,
                       severity="critical" if by_replica or start is None else "error",
                       details={"leader": e.leader, "leader_epoch": e.leader_epoch,
                                "previous_leader": e.previous_leader, "previous_isr": e.previous_isr,
                                "previous_elr": e.previous_elr, "leader_recovery_state": e.recovery_state,
                                "metadata_offset": e.offset, "new_leader_start_offset": start,
                                "lost": by_replica, "acknowledged_lost": acked})

    def missing_start(self, starts: dict, kept: dict) -> list[dict]:
        out = []
        firsts: dict[str, Run] = {}
        for r in self.runs:
            if r.replica not in firsts or r.first < firsts[r.replica].first:
                firsts[r.replica] = r
        for rep, r in sorted(firsts.items()):
            if rep not in kept:
                continue
            ck = starts.get((rep, self.topic, self.partition))
            ck_offset = None if ck is None else ck["offset"]
            entries = self.epochs.get(rep) or []
            epoch_start = min((e["start_offset"] for e in entries), default=None)
            if not missing_segments(r.first, ck_offset, epoch_start):
                continue
            lo = ck_offset or 0
            ev = [evidence(r.source, r.position, "batch", f"replica {rep}: first batch at offset {r.first}")]
            if ck is not None:
                ev.append(evidence(ck["source"], ck["position"], "checkpoint", f"log start offset {ck_offset}"))
            first_entry = min(entries, key=lambda e: e["start_offset"])
            ev.append(evidence(first_entry["source"], first_entry["position"], "leader_epoch_entry",
                               f"epoch {first_entry['leader_epoch']} starts at {epoch_start}"))
            if kept[rep][1]:
                ev.append(evidence(kept[rep][1], None, "file", "the broker's static retention"))
            out.append(finding(
                "missing-segments", f"{self.topic}-{self.partition} (replica {rep}): the log starts at offset "
                f"{r.first}, yet the topic keeps every record on this broker ({kept[rep][0]}) and "
                + (f"the log-start-offset-checkpoint says {ck_offset}" if ck is not None else
                   "no log-start-offset-checkpoint entry (DeleteRecords) moved its start")
                + f", and its leader-epoch-checkpoint still starts at {epoch_start} (the broker never "
                f"moved its log start): offsets {max(lo, epoch_start)}-{r.first - 1} are missing from its segments",
                topic=self.topic, partition=self.partition, replica=rep, topic_id=self.topic_id,
                first_offset=max(lo, epoch_start), last_offset=r.first - 1, evidence=ev,
                details={"first_offset_on_disk": r.first, "log_start_offset_checkpoint": ck_offset, "retention": kept[rep][0],
                         "leader_epoch_checkpoint_start": epoch_start}))
        return out

    def divergence(self) -> list[dict]:
        """Replicas holding one offset in different leader epochs below both their high
        watermarks: one finding per partition, at the lowest such offset, naming every pair."""
        by_rep: dict[str, list[Run]] = defaultdict(list)
        for r in self.runs:
            by_rep[r.replica].append(r)
        clashes = []
        reps = sorted(by_rep)
        for i, a in enumerate(reps):
            for b in reps[i + 1:]:
                ha, hb = self.hw(a), self.hw(b)
                if ha is None or hb is None:
                    continue
                hit = _first_clash(by_rep[a], by_rep[b], min(ha, hb))
                if hit is not None:
                    clashes.append((hit[0], a, b, min(ha, hb), hit[1], hit[2]))
        if not clashes:
            return []
        clashes.sort(key=lambda c: (c[0], c[1], c[2]))
        offset, a, b, limit, ra, rb = clashes[0]
        others = "; ".join(f"{x}/{y} at {o}" for o, x, y, *_ in clashes[1:])
        msg = (f"{self.topic}-{self.partition}: replicas {a} and {b} hold offset {offset} in leader "
               f"epochs {ra.epoch} and {rb.epoch}, below both their high watermarks (lowest {limit}), "
               "though the metadata log records only clean elections for this partition"
               + (f" (also replicas {others})" if others else ""))
        ev = []
        for _, x, y, _, rx, ry in clashes:
            ev += [evidence(rx.source, rx.position, "batch", f"replica {x}: epoch {rx.epoch}"),
                   evidence(ry.source, ry.position, "batch", f"replica {y}: epoch {ry.epoch}")]
        return [finding("unexplained-divergence", msg, topic=self.topic, partition=self.partition,
                        topic_id=self.topic_id, first_offset=offset, evidence=list({(e["source"], e["position"]): e
                                                                                   for e in ev}.values()),
                        details={"replicas": [a, b], "epochs": [ra.epoch, rb.epoch], "high_watermark": limit,
                                 "pairs": [[x, y, o] for o, x, y, *_ in clashes]})]


def _first_clash(xs: list[Run], ys: list[Run], limit: int):
    best = None
    for x in xs:
        for y in ys:
            lo, hi = max(x.first, y.first), min(x.last, y.last)
            if lo <= hi and lo < limit and x.epoch != y.epoch and (best is None or lo < best[0]):
                best = (lo, x, y)
    return best


def _make(ctx: Context, clusters: tuple = (), brokers: tuple = ()) -> "LeadershipState":
    return LeadershipState(ctx, dict(clusters), dict(brokers))


FOLD = LeadershipFold("leadership",
                      {"metadata_record": METADATA_COLUMNS + ("log_dir",), "batch": BATCH_COLUMNS,
                       "leader_epoch_entry": EPOCH_COLUMNS, "checkpoint_entry": CHECKPOINT_COLUMNS},
                      (), ("source", "position"), partial(_make, clusters=()),
                      where={"batch": _batch_where, "checkpoint_entry": _checkpoint_where})
