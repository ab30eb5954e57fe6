"""metadata_record rows from a log dir: the metadata log, a KRaft snapshot (.checkpoint) and the
log dir's bootstrap.checkpoint; a newer record version is a row and a decode issue, not a crash."""

from __future__ import annotations

from fixtures.builder.logdir import LogDirBuilder
from fixtures.builder.metadata import MetadataLog, snapshot_checkpoint
from fixtures.encoder import metadata as me
from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target

TID = "AAAAAAAAAAAAAAAAAAAAAQ"


def _rows(root, kind):
    out = []
    for t in plan([str(root)]).targets:
        for k, table in decode_target(t, Options()):
            if k == kind:
                out.extend(table.to_pylist())
    return out


def test_log_snapshot_and_bootstrap(tmp_path):
    ld = LogDirBuilder(tmp_path / "node1", node_id=1)
    md = MetadataLog(ld)
    md.feature("transaction.version", 2)
    md.topic("orders", TID, {0: [1, 2, 3]})
    md.change("orders", 0, leader=2, isr=[2, 3])
    md.append(me.frame(5, 9, b"\x00" * 8))          # a PartitionChangeRecord v9: newer than kaudit
    name, data = snapshot_checkpoint([me.topic_record("orders", TID)], end_offset=5)
    md.pb.add_file(name, data)
    ld.add_file("bootstrap.checkpoint", snapshot_checkpoint([me.feature_level_record("metadata.version", 20)],
                                                            end_offset=0)[1])
    ld.write()
    rows = _rows(tmp_path, "metadata_record")
    types = [(r["source"].rsplit("/", 1)[1], r["record_type"]) for r in rows]
    assert ("00000000000000000000.log", "LEADER_CHANGE") in types
    assert ("00000000000000000000.log", "PARTITION_CHANGE_RECORD") in types
    assert (name, "SNAPSHOT_HEADER") in types and (name, "TOPIC_RECORD") in types
    assert ("bootstrap.checkpoint", "FEATURE_LEVEL_RECORD") in types
    change = [r for r in rows if r["record_type"] == "PARTITION_CHANGE_RECORD" and r["issue"] is None][0]
    assert (change["leader"], change["isr"], change["record_topic_id"], change["topic"]) == (2, "2,3", TID,
                                                                                            "__cluster_metadata")
    newer = [r for r in rows if r["issue"] == "unknown-version"]
    assert len(newer) == 1 and newer[0]["version"] == 9
    issues = _rows(tmp_path, "decode_issue")
    assert [i["issue"] for i in issues] == ["metadata-unknown-version"]


def test_partition_dir_without_partition_metadata_is_named_from_the_metadata_log(tmp_path):
    from kaudit.sources.topics import from_plan

    ld = LogDirBuilder(tmp_path / "node1", node_id=1)
    md = MetadataLog(ld)
    md.topic("orders", "AAAAAAAAAAAAAAAAAAAAAA", {0: [1]})
    md.remove_topic("orders")
    md.topic("orders", TID, {0: [1]})                    # deleted and created again: the live id
    md.topic("elsewhere", "AAAAAAAAAAAAAAAAAAAAAg", {0: [2]})
    pb = ld.partition("orders", 0)
    pb.write_partition_metadata = False
    pb.append_batch(values=[b"x"])
    ld.write()
    p = plan([str(tmp_path)])
    assert {t.topic_id for t in p.targets if t.topic == "orders"} == {TID}
    batches = [b for b in _rows(tmp_path, "batch") if b["topic"] == "orders"]
    assert batches and all(b["topic_id"] == TID for b in batches)
    names = from_plan(p)
    assert names[TID] == "orders" and names["AAAAAAAAAAAAAAAAAAAAAg"] == "elsewhere"


def test_aborted_metadata_transaction_is_not_replayed(tmp_path):
    from kaudit.protocol.metadata.history import COLUMNS, replay

    ld = LogDirBuilder(tmp_path / "node1", node_id=1)
    md = MetadataLog(ld)
    md.append(me.frame(23, 0, b"\x00"))                       # BeginTransactionRecord
    md.topic("ghost", "AAAAAAAAAAAAAAAAAAAAAw", {0: [1]})
    md.append(me.frame(25, 0, b"\x00"))                       # AbortTransactionRecord
    md.append(me.frame(23, 0, b"\x00"))
    md.topic("orders", TID, {0: [1]})
    md.append(me.frame(24, 0, b"\x00"))                       # EndTransactionRecord
    ld.write()
    rows = [{k: r.get(k) for k in COLUMNS} for r in _rows(tmp_path, "metadata_record")]
    h = replay(rows)
    assert h.names() == {TID: "orders"} and h.aborted == 2
