"""The metadata replay never fails on records in any order or state (a change before its
partition, a removed topic's partitions, records of newer versions, snapshots and bootstrap
files mixed in), and what it says stays consistent: a known election's epoch is positive."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.protocol.metadata.history import COLUMNS, replay

IDS = ["AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ"]
SOURCES = ["n1/__cluster_metadata-0/00000000000000000000.log", "n2/__cluster_metadata-0/00000000000000000000.log",
           "n1/__cluster_metadata-0/00000000000000000004-0000000001.checkpoint", "n1/bootstrap.checkpoint"]
brokers = st.lists(st.integers(0, 3), max_size=3).map(lambda xs: ",".join(map(str, xs)))
row = st.fixed_dictionaries({
    "source": st.sampled_from(SOURCES), "position": st.integers(0, 100), "replica": st.sampled_from(["1", "2"]),
    "offset": st.integers(0, 12), "timestamp_ms": st.none() | st.integers(0, 10),
    "record_type": st.sampled_from(["TOPIC_RECORD", "PARTITION_RECORD", "PARTITION_CHANGE_RECORD",
                                    "REMOVE_TOPIC_RECORD", "FEATURE_LEVEL_RECORD", "CONFIG_RECORD",
                                    "BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD",
                                    "ABORT_TRANSACTION_RECORD", "REMOTE_LOG_SEGMENT_METADATA_RECORD"]),
    "issue": st.sampled_from([None, None, "unknown-version"]),
    "record_topic_id": st.sampled_from(IDS), "record_topic": st.sampled_from(["a", "b"]),
    "record_partition": st.integers(0, 1), "leader": st.none() | st.integers(-1, 3),
    "leader_epoch": st.integers(0, 5), "partition_epoch": st.integers(0, 5),
    "leader_recovery_state": st.none() | st.integers(0, 1), "replicas": st.none() | brokers,
    "isr": st.none() | brokers, "elr": st.none() | brokers, "last_known_elr": st.none() | brokers,
    "feature": st.sampled_from(["transaction.version", "metadata.version"]), "feature_level": st.integers(0, 3),
    "config_resource_type": st.sampled_from([2, 4]), "config_resource": st.sampled_from(["a", ""]),
    "config_name": st.sampled_from(["retention.ms", "log.retention.ms"]),
    "config_value": st.sampled_from([None, "-1", "1000"]),
    "remote_segment_id": st.none() | st.sampled_from(IDS), "start_offset": st.none() | st.integers(0, 9),
    "end_offset": st.none() | st.integers(0, 9), "remote_state": st.sampled_from(["COPY_SEGMENT_STARTED",
                                                                                  "COPY_SEGMENT_FINISHED"]),
    "event_timestamp_ms": st.none() | st.integers(0, 9),
    "broker_id": st.integers(0, 3), "broker_epoch": st.integers(0, 3), "next_producer_id": st.integers(0, 9),
})


@settings(max_examples=150, deadline=None)
@given(st.lists(row, max_size=25))
def test_replay_never_fails(rows):
    assert set(COLUMNS) <= set(rows[0]) if rows else True
    h = replay(rows)
    h.names()
    h.transaction_version()
    for (tid, _), p in h.partitions.items():
        h.unlimited("a", tid, "retention.ms", "log.retention.ms")
        for e in p.elections:
            assert e.leader >= 0 and e.unclean in (True, False, None)


def test_offline_then_unclean_names_the_last_real_leader():
    def r(offset, t, **kw):
        base = {c: None for c in COLUMNS}
        base.update(source="n1/__cluster_metadata-0/00000000000000000000.log", position=offset, replica="1",
                    offset=offset, record_type=t, record_topic_id=IDS[0], record_partition=0)
        base.update(kw)
        return base
    rows = [r(0, "TOPIC_RECORD", record_topic="a"),
            r(1, "PARTITION_RECORD", leader=1, leader_epoch=0, isr="1,2,3", replicas="1,2,3"),
            r(2, "PARTITION_CHANGE_RECORD", isr="1"),
            r(3, "PARTITION_CHANGE_RECORD", leader=-1),
            r(4, "PARTITION_CHANGE_RECORD", leader=3, isr="3"),
            r(5, "PARTITION_CHANGE_RECORD", leader=1, isr="1")]
    (e, back), = [p.elections for p in replay(rows).partitions.values()]
    assert (e.leader, e.previous_leader, e.leader_epoch, e.unclean, e.previous_isr) == (3, 1, 2, True, [1])
    assert (back.leader, back.unclean) == (1, True)   # 1 was no longer in the ISR [3]
