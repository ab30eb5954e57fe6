"""unclean-leader-election and unexplained-divergence (audit/cluster/leadership.py): a crafted 3-node
cluster whose node 1 keeps the KRaft metadata log, built with the fixture builders from Kafka's
specs; each case against its negative twin."""

from __future__ import annotations

import json

from diskcraft import audit, brief

from fixtures.builder.metadata import MetadataLog, election_history
from fixtures.builder.replicas import write_replicas

RULES = ("unclean-leader-election", "unexplained-divergence")
TID = "b3JkZXJzLXRvcGljLWlkAA"


def _cluster(tmp_path, *, election: str, old_hw: int, new_hw: int = 8, metadata: bool = True):
    """orders-0 led by broker 1 (epoch 0, offsets 0-9), then by broker 2 (epoch 1) from offset 5:
    `election` "unclean" (ISR [1] and LeaderRecoveryState RECOVERING), "unclean-3.0" (ISR [1],
    no recovery state: Kafka before 3.2), or "clean" (2 back in the ISR first)."""
    def build(ld, node):
        if node == 1 and metadata:
            election_history(ld, "orders", TID, election)
        pb = ld.partition("orders", 0, topic_id=TID, role="leader" if node == 1 else "follower")
        for i in range(10 if node == 1 else 5):
            pb.append_batch(values=[b"v%d" % i])
        if node != 1:
            pb.set_leader_epoch(1)
            for i in range(3):
                pb.append_batch(values=[b"w%d" % i])
        pb.high_watermark = old_hw if node == 1 else new_hw
    return write_replicas(tmp_path / "cluster", build)


def test_unclean_election_with_lost_acknowledged_tail(tmp_path):
    roots = _cluster(tmp_path, election="unclean", old_hw=10)
    fs = audit(roots, rules=RULES)
    assert brief(fs) == [("unclean-leader-election", "critical", "orders-0", 5, 9)]
    d = json.loads(fs[0]["details"])
    assert (d["leader"], d["leader_epoch"], d["previous_leader"], d["new_leader_start_offset"]) == (2, 1, 1, 5)
    assert d["lost"] == {"1": [5, 9]} and d["acknowledged_lost"] == {"1": [5, 9]}
    assert "RECOVERING" in fs[0]["message"] and fs[0]["topic_id"] == TID
    kinds = [e["kind"] for e in fs[0]["evidence"]]
    assert kinds[:2] == ["metadata_record", "leader_epoch_entry"] and "batch" in kinds


def test_unclean_election_told_from_the_isr_before_kafka_3_2(tmp_path):
    fs = audit(_cluster(tmp_path, election="unclean-3.0", old_hw=5), rules=RULES)
    assert brief(fs) == [("unclean-leader-election", "critical", "orders-0", 5, 9)]
    assert "neither the ISR [1] nor the ELR []" in fs[0]["message"]
    assert json.loads(fs[0]["details"])["acknowledged_lost"] == {}


def test_clean_election_and_truncation_above_the_high_watermark_is_normal(tmp_path):
    assert audit(_cluster(tmp_path, election="clean", old_hw=5), rules=RULES) == []


def test_divergence_below_the_high_watermark_after_clean_elections(tmp_path):
    fs = audit(_cluster(tmp_path, election="clean", old_hw=10), rules=RULES)
    assert brief(fs) == [("unexplained-divergence", "critical", "orders-0", 5, None)]
    assert json.loads(fs[0]["details"])["epochs"] == [0, 1]


def test_no_metadata_no_judgement(tmp_path):
    assert audit(_cluster(tmp_path, election="unclean", old_hw=10, metadata=False), rules=RULES) == []


def test_unclean_finding_and_replica_divergence_are_one_incident(tmp_path):
    fs = audit(_cluster(tmp_path, election="unclean", old_hw=10), rules=RULES + ("replica-divergence",))
    rules = {f["rule"] for f in fs}
    assert "unclean-leader-election" in rules
    incidents = {f["incident"] for f in fs}
    assert len(incidents) == 1, [(f["rule"], f["message"]) for f in fs]


def test_one_clusters_metadata_never_judges_another_clusters_logs(tmp_path):
    from fixtures.builder.logdir import LogDirBuilder

    a = LogDirBuilder(tmp_path / "a" / "node1", node_id=1, cluster_id="Y2x1c3Rlci1hLWNsdXN0ZXI")
    md = MetadataLog(a)
    md.topic("orders", TID, {0: [1, 2, 3]})
    md.change("orders", 0, isr=[1])
    md.change("orders", 0, leader=2, isr=[2], recovery_state=1)
    a.write()
    roots = [tmp_path / "a" / "node1"]
    for node in (1, 2):
        b = LogDirBuilder(tmp_path / "b" / f"node{node}", node_id=node, cluster_id="Y2x1c3Rlci1iLWNsdXN0ZXI")
        pb = b.partition("orders", 0)
        for i in range(10 if node == 1 else 5):
            pb.append_batch(values=[b"v%d" % i])
        if node == 2:
            pb.set_leader_epoch(1)
            pb.append_batch(values=[b"w"])
        roots.append(b.write())
    fs = audit(roots, rules=RULES)
    assert [(f["rule"], f["first_offset"]) for f in fs] == [("unclean-leader-election", None)]
    assert "cannot be counted" in fs[0]["message"]


# -- missing-segments ----------------------------------------------------------------------------

def _kept_forever(tmp_path, *, configs, later=None, start=5, start_entry=False, epochs_from=0):
    from fixtures.builder.logdir import LogDirBuilder

    ld = LogDirBuilder(tmp_path / "node1", node_id=1)
    md = MetadataLog(ld)
    md.topic("keep", TID, {0: [1]}, configs=configs)
    for key, value in (later or {}).items():
        md.config(2, "keep", key, value)
    pb = ld.partition("keep", 0, topic_id=TID, start_offset=start)
    for i in range(3):
        pb.append_batch(values=[b"k%d" % i])
    # the epoch cache of a log that started at `epochs_from` (None: an empty leader-epoch-checkpoint)
    pb.epochs = [] if epochs_from is None else [(0, epochs_from)]
    root = ld.write()
    if not start_entry:   # Kafka writes an entry only when the start is inside the first segment
        (root / "log-start-offset-checkpoint").write_bytes(b"0\n0\n")
    return root


def test_missing_segments_of_a_topic_that_keeps_everything(tmp_path):
    fs = audit(_kept_forever(tmp_path, configs={"retention.ms": "-1"}), rules=("missing-segments",))
    assert brief(fs) == [("missing-segments", "error", "keep-0", 0, 4)]
    assert fs[0]["replica"] == "1"


def test_missing_segments_not_claimed_without_proof(tmp_path):
    rules = ("missing-segments",)
    assert audit(_kept_forever(tmp_path / "a", configs={}), rules=rules) == []   # broker static retention
    assert audit(_kept_forever(tmp_path / "b", configs={"retention.ms": "-1"}, start_entry=True), rules=rules) == []
    assert audit(_kept_forever(tmp_path / "c", configs={"retention.ms": "604800000"},
                               later={"retention.ms": "-1"}), rules=rules) == []
    assert audit(_kept_forever(tmp_path / "d", configs={"retention.ms": "-1", "cleanup.policy": "compact"}),
                 rules=rules) == []
    assert audit(_kept_forever(tmp_path / "e", configs={"retention.ms": "-1", "retention.bytes": "1000"}),
                 rules=rules) == []
    assert audit(_kept_forever(tmp_path / "f", configs={"retention.ms": "-1"}, start=0), rules=rules) == []
    # DeleteRecords to a segment boundary: no log start entry, but the epoch cache moved with it
    assert audit(_kept_forever(tmp_path / "g", configs={"retention.ms": "-1"}, epochs_from=5), rules=rules) == []
    assert audit(_kept_forever(tmp_path / "h", configs={"retention.ms": "-1"}, epochs_from=None), rules=rules) == []


def test_a_stale_dir_of_a_deleted_topic_is_not_a_replica_of_the_new_one(tmp_path):
    old = "b2xkLWluY2FybmF0aW9uAA"

    def build(ld, node):
        if node == 1:
            md = MetadataLog(ld)
            md.topic("orders", old, {0: [1, 2]})
            md.remove_topic("orders")
            md.topic("orders", TID, {0: [2, 1]})
        pb = ld.partition("orders", 0, topic_id=old if node == 1 else TID)
        pb.set_leader_epoch(3 if node == 1 else 0)
        for i in range(5):
            pb.append_batch(values=[b"%d-%d" % (node, i)])
    roots = write_replicas(tmp_path / "cluster", build, nodes=(1, 2))
    assert audit(roots, rules=RULES) == []
