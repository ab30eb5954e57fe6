"""The consistency rules (replicas, checkpoints, leader epochs, .txnindex, .snapshot) on the real
corpus: every scenario, all nodes at once, agrees - including 4.1.0's v7, whose three replicas
were compacted each by its own cleaner - and the rules do compare what is there."""

from __future__ import annotations

import shutil

import pytest

from kaudit.engine.local import audit_segments
from kaudit.sources.logdir import plan, replicated_partitions

RULES = ("replica-divergence", "checkpoint-mismatch", "leader-epoch-mismatch", "txnindex-mismatch",
         "snapshot-mismatch")
V7 = "real-kafka-4.1.0/v7-compacted-eos-changelog/logdirs"
SCENARIOS = ["real-kafka-3.0.2/logdirs-final", "real-kafka-3.0.2-extra/01-idempotent-state-expiry/logdirs",
             "real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes/logdirs"] + [
    f"real-kafka-4.1.0/{s}/logdirs" for s in ("v1-idempotent-clean", "v2-txn-java-tv2", "v3-txn-confluent",
                                              "v4-idem-retry-java", "v5-fencing-tv2", "v6-codecs",
                                              "v7-compacted-eos-changelog")]


def _findings(paths):
    run = audit_segments([str(p) for p in paths], select=RULES)
    assert run.errors == []
    return run.findings


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_scenario_all_nodes_agree(corpus, scenario):
    root = corpus / scenario
    nodes = sorted(root.glob("node*"))
    assert nodes
    assert _findings([root]) == []
    if len(nodes) > 1:   # three brokers: their partitions are compared replica by replica
        assert len(replicated_partitions(plan([str(root)]))) >= 2


def test_wild_log_dirs(corpus):
    """Four clusters' log dirs audited together: partitions that share a name (their
    __consumer_offsets) are not replicas of each other (meta.properties' cluster.id)."""
    wild = sorted(p for p in (corpus / "public" / "wild-logdirs").glob("*__*") if not p.name.endswith(".truth"))
    assert len(wild) == 4
    assert _findings(wild) == []
    for d in wild:
        assert _findings([d]) == []
    assert replicated_partitions(plan([str(p) for p in wild])) == set()


def test_v7_without_cleaner_checkpoints_still_compacted(corpus, tmp_path):
    """The compacted changelog with every cleaner-offset-checkpoint removed: the delete-horizon
    flags the cleaners set still tell their compaction apart from divergence."""
    root = tmp_path / "v7"
    shutil.copytree(corpus / V7, root)
    for f in root.glob("node*/data/cleaner-offset-checkpoint"):
        f.chmod(0o644)
        f.unlink()
    assert _findings([root]) == []


def test_v7_with_a_damaged_replica(corpus, tmp_path):
    """The same replicas with node 3's last segment cut after offset 2104: compaction still
    excused, the lost committed tail reported (below node 3's recovery point: flushed records)."""
    root = tmp_path / "v7"
    shutil.copytree(corpus / V7, root)
    log = root / "node3" / "data" / "eos-changelog-0" / "00000000000000002079.log"
    log.chmod(0o644)
    from kaudit.engine.local import decode_segments

    _, chunks = decode_segments([str(log)])
    pos = {b: p for k, t in chunks if k == "batch"
           for b, p in zip(t.column("base_offset").to_pylist(), t.column("position").to_pylist())}
    with open(log, "r+b") as f:
        f.truncate(pos[2105])
    got = sorted((f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"])
                 for f in _findings([root]))
    assert ("replica-divergence", "error", "3", 2105, 2117) in got
    assert ("checkpoint-mismatch", "error", "3", 2105, 2117) in got
    assert {g[2] for g in got} == {"3"}
