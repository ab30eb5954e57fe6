"""Tiered storage from __remote_log_metadata (audit/tiered.py): a partition whose old segments
were copied to remote storage and deleted locally, with and without its remote segments; a copy
abandoned for a retry under another segment id."""

from __future__ import annotations

from diskcraft import audit, brief

from fixtures.builder.logdir import LogDirBuilder
from fixtures.builder.metadata import MetadataLog
from fixtures.encoder import metadata as me

TID = "dGllcmVkLXRvcGljLWlkAA"
RULES = ("missing-segments", "remote-segment-stuck")
SEG = {"a": "c2VnbWVudC1hLWlkLTAwMA", "b": "c2VnbWVudC1iLWlkLTAwMA", "c": "c2VnbWVudC1jLWlkLTAwMA"}


def _tiered(tmp_path, events):
    """`events`: (segment, start, end, [states]) in order; the local log starts at 200."""
    ld = LogDirBuilder(tmp_path / "node1", node_id=1)
    md = MetadataLog(ld)
    md.topic("tiered", TID, {0: [1]}, configs={"remote.storage.enable": "true"})
    rlmm = ld.partition("__remote_log_metadata", 0)
    ts = 1_000
    for seg, start, end, states in events:
        ts += 10
        values = [me.remote_segment_record("tiered", TID, 0, SEG[seg], start, end, event_ts=ts)]
        values += [me.remote_segment_update("tiered", TID, 0, SEG[seg], st, event_ts=ts + i + 1)
                   for i, st in enumerate(states)]
        rlmm.append_batch(values=values)
    pb = ld.partition("tiered", 0, topic_id=TID, start_offset=200)
    for i in range(3):
        pb.append_batch(values=[b"t%d" % i])
    root = ld.write()
    (root / "log-start-offset-checkpoint").write_bytes(b"0\n1\ntiered 0 0\n")
    return root


def test_tiered_partition_with_its_remote_segments_is_whole(tmp_path):
    assert audit(_tiered(tmp_path, [("a", 0, 99, [1]), ("b", 100, 199, [1])]), rules=RULES) == []


def test_tiered_partition_missing_a_remote_range(tmp_path):
    fs = audit(_tiered(tmp_path, [("a", 0, 99, [1])]), rules=RULES)
    assert brief(fs) == [("missing-segments", "error", "tiered-0", 100, 199)]


def test_abandoned_copy_is_stuck_and_the_retry_covers_the_range(tmp_path):
    fs = audit(_tiered(tmp_path, [("a", 0, 99, [1]), ("c", 100, 199, []), ("b", 100, 199, [1])]), rules=RULES)
    assert brief(fs) == [("remote-segment-stuck", "warning", "tiered-0", 100, 199)]
    assert SEG["c"] in fs[0]["message"] and "COPY_SEGMENT_STARTED" in fs[0]["message"]


def test_copy_in_flight_at_the_end_is_not_stuck(tmp_path):
    fs = audit(_tiered(tmp_path, [("a", 0, 99, [1]), ("b", 100, 199, [1]), ("c", 200, 299, [])]), rules=RULES)
    assert fs == []
