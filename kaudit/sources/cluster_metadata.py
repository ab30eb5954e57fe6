"""The KRaft metadata a log-dir plan holds, read before the audit: each cluster's history
(protocol.metadata.history) from its `__cluster_metadata` logs, snapshots and bootstrap
checkpoints, so that partition dirs without a `partition.metadata` get their topic id from it
and the topic ids of captures get their names (KIP-516).

Metadata logs are small (Kafka keeps ~100 MB by default, metadata.max.retention.bytes): they are
read whole here, up to MAX_BYTES per plan; past that the plan is left as it is.
"""

from __future__ import annotations

from kaudit.protocol.metadata.history import COLUMNS, ClusterHistory, replay

METADATA_TOPIC = "__cluster_metadata"
MAX_BYTES = 256 << 20


def metadata_targets(targets) -> list:
    return [t for t in targets if (t.topic == METADATA_TOPIC and t.kind in ("log", "checkpoint"))
            or t.kind == "bootstrap.checkpoint"]


def histories(plan) -> dict:
    """cluster id (None: unknown) -> ClusterHistory of the plan's metadata files."""
    cached = getattr(plan, "_cluster_histories", None)
    if cached is not None:
        return cached
    from kaudit.sources.targets import log_dir_clusters
    from kaudit.sources.segments import Options, decode_target

    targets = metadata_targets(plan.targets)
    out: dict = {}
    if targets and sum(t.size for t in targets) <= MAX_BYTES:
        clusters = log_dir_clusters(plan)
        rows: dict = {}
        for t in targets:
            cluster = clusters.get(t.log_dir.path) if t.log_dir else None
            for kind, table in decode_target(t, Options()):
                if kind == "metadata_record":
                    rows.setdefault(cluster, []).extend(table.select(list(COLUMNS)).to_pylist())
        out = {c: replay(r) for c, r in rows.items()}
    plan._cluster_histories = out
    return out


def _history_for(hs: dict, cluster) -> ClusterHistory | None:
    if cluster in hs:
        return hs[cluster]
    return next(iter(hs.values())) if len(hs) == 1 else None


def name_partitions(plan) -> None:
    """Partition dirs with no partition.metadata get the id of the live topic of their name
    that their cluster's metadata records."""
    missing = [t for t in plan.targets if t.topic and t.topic != METADATA_TOPIC and t.topic_id is None
               and t.kind != "skipped"]
    if not missing:
        return
    hs = histories(plan)
    if not hs:
        return
    from kaudit.sources.targets import log_dir_clusters

    clusters = log_dir_clusters(plan)
    for t in missing:
        h = _history_for(hs, clusters.get(t.log_dir.path) if t.log_dir else None)
        if h is not None:
            t.topic_id = h.live_id(t.topic)


def names(plan) -> dict[str, str]:
    """topic id -> name from every cluster's metadata in the plan."""
    out: dict[str, str] = {}
    for h in histories(plan).values():
        for tid, name in h.names().items():
            out.setdefault(tid, name)
    return out


def transaction_version(plan) -> int | None:
    """The finalized transaction.version of the plan's cluster (None: not in the inputs, or
    log dirs of several clusters)."""
    hs = histories(plan)
    return next(iter(hs.values())).transaction_version() if len(hs) == 1 else None
