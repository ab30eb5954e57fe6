"""KRaft metadata records decode from Kafka's specs: field for field as Kafka 3.0.2's
kafka-dump-log --cluster-metadata-decoder printed the corpus's metadata log; crafted records of
newer versions (ELR, LeaderRecoveryState) from the hand-written encoder; unknown versions and
types said, never guessed; no input makes the decoder raise."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.encoder import metadata as me
from kaudit.protocol.metadata import decode_metadata_record, dump_json
from kaudit.protocol.metadata.rows import buffer_rows, row_fields

TID = "lNslWYzxSBmLJPqtdd1E9w"
_PAYLOAD = re.compile(r"^\| offset: (\d+) .* payload: (\{.*\})$")


def test_corpus_metadata_log_agrees_with_kafka_dump(corpus):
    node1 = corpus / "real-kafka-3.0.2/logdirs-final/node1/meta/__cluster_metadata-0"
    dump = corpus / "real-kafka-3.0.2/logdirs-final.truth/node1/meta/__cluster_metadata-0.dump.txt"
    rows, issues = buffer_rows((node1 / "00000000000000000000.log").read_bytes())
    assert issues == []
    ref = {int(m[1]): json.loads(m[2]) for m in map(_PAYLOAD.match, dump.read_text().splitlines()) if m}
    data_rows = [r for r in rows if not r["is_control"]]
    assert len(data_rows) == len(ref) == 963
    for r in data_rows:
        got = {"type": r["record_type"], "version": r["version"], "data": json.loads(r["data"])}
        if r["record_type"] == "PRODUCER_IDS_RECORD":   # 3.0's name for NextProducerId
            got["data"]["producerIdsEnd"] = got["data"].pop("nextProducerId")
        assert got == ref[r["offset"]], r["offset"]
    leaders = [r for r in rows if r["record_type"] == "LEADER_CHANGE"]
    assert len(leaders) == 9 and all(r["voters"] == "1,2,3" for r in leaders)


def test_partition_change_v2_with_elr_and_recovery_state():
    v = me.partition_change_record(TID, 4, isr=[2], leader=3, recovery_state=1, elr=[1], last_known_elr=[],
                                   version=2)
    d = decode_metadata_record(v)
    assert d.issue is None and d.record_type == "PARTITION_CHANGE_RECORD" and d.version == 2
    row = row_fields(d)
    assert (row["record_partition"], row["record_topic_id"], row["leader"], row["isr"]) == (4, TID, 3, "2")
    assert (row["elr"], row["last_known_elr"], row["leader_recovery_state"], row["replicas"]) == ("1", "", 1, None)
    assert dump_json(d) == {"partitionId": 4, "topicId": TID, "isr": [2], "leader": 3, "leaderRecoveryState": 1,
                            "eligibleLeaderReplicas": [1], "lastKnownElr": []}


def test_partition_change_unchanged_fields_are_null():
    row = row_fields(decode_metadata_record(me.partition_change_record(TID, 0, isr=[1, 2])))
    assert row["leader"] is None and row["leader_recovery_state"] is None and row["isr"] == "1,2"


def test_partition_record_v1_and_v2():
    for version in (0, 1, 2):
        v = me.partition_record(TID, 1, [1, 2, 3], [1, 2], 2, 7, 9, version=version, elr=[3] if version == 2 else None)
        row = row_fields(decode_metadata_record(v))
        assert (row["leader"], row["leader_epoch"], row["partition_epoch"], row["isr"]) == (2, 7, 9, "1,2")
        assert row["issue"] is None
        assert row["elr"] == ("3" if version == 2 else None)


def test_feature_level_and_producer_ids():
    row = row_fields(decode_metadata_record(me.feature_level_record("transaction.version", 2)))
    assert (row["feature"], row["feature_level"]) == ("transaction.version", 2)
    row = row_fields(decode_metadata_record(me.producer_ids_record(1, 5, 3000)))
    assert (row["broker_id"], row["broker_epoch"], row["next_producer_id"]) == (1, 5, 3000)


def test_newer_version_and_type_are_said_not_guessed():
    d = decode_metadata_record(me.frame(5, 3, b"\x00" * 30))
    assert d.issue == "unknown-version" and d.data is None and d.record_type == "PARTITION_CHANGE_RECORD"
    d = decode_metadata_record(me.frame(99, 0, b""))
    assert d.issue == "unknown-record-type" and d.record_type == "UNKNOWN(99)"
    d = decode_metadata_record(me.frame(2, 0, b"", frame_version=0))
    assert d.issue == "unknown-frame-version"


def test_truncated_and_trailing_bytes():
    v = me.topic_record("t", TID)
    for cut in range(len(v)):
        d = decode_metadata_record(v[:cut])
        assert d.issue is not None and d.data is None
    d = decode_metadata_record(v + b"\x00")
    assert d.issue == "trailing-bytes" and d.data["Name"] == "t"


def test_secret_config_values_are_redacted():
    from fixtures.encoder.primitives import _compact_string, _i8
    body = _i8(4) + _compact_string("1") + _compact_string("listener.name.x.ssl.keystore.password") \
        + _compact_string("hunter2", nullable=True) + b"\x00"
    row = row_fields(decode_metadata_record(me.frame(4, 0, body)))
    assert row["config_value"] == "[redacted]" and "hunter2" not in row["data"]


def test_bootstrap_checkpoint_features(corpus):
    data = (corpus / "real-kafka-4.1.0/v5-fencing-tv2/logdirs/node1/data/bootstrap.checkpoint").read_bytes()
    rows, issues = buffer_rows(data)
    assert issues == []
    assert {r["feature"]: r["feature_level"] for r in rows if r.get("feature")}["transaction.version"] == 2
    assert [r["record_type"] for r in rows][0::5] == ["SNAPSHOT_HEADER", "SNAPSHOT_FOOTER"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_never_raise(data):
    d = decode_metadata_record(data)
    row_fields(d)


def test_remote_log_metadata_records():
    from kaudit.protocol.metadata.schemas import REMOTE_BY_KEY

    seg = "c2VnbWVudC1pZC0wMDAwMQ"
    d = decode_metadata_record(me.remote_segment_record("orders", TID, 3, seg, 100, 199, broker=2, event_ts=5,
                                                        epochs=[(0, 100), (1, 150)], size=4096), REMOTE_BY_KEY)
    row = row_fields(d)
    assert d.issue is None and row["record_type"] == "REMOTE_LOG_SEGMENT_METADATA_RECORD"
    assert (row["record_topic"], row["record_topic_id"], row["record_partition"], row["remote_segment_id"]) == \
        ("orders", TID, 3, seg)
    assert (row["start_offset"], row["end_offset"], row["segment_leader_epochs"], row["remote_state"]) == \
        (100, 199, "0:100,1:150", "COPY_SEGMENT_STARTED")
    row = row_fields(decode_metadata_record(me.remote_segment_update("orders", TID, 3, seg, 1), REMOTE_BY_KEY))
    assert (row["remote_state"], row["remote_segment_id"]) == ("COPY_SEGMENT_FINISHED", seg)
