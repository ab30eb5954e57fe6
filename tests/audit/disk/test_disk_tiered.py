"""Tiered storage from __remote_log_metadata (audit/cluster/tiered.py): a partition whose old segments
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


def _remote_folder(tmp_path, seg_ids=("a", "b")):
    """The partition's first 200 offsets as two remote segments, in LocalTieredStorage's layout."""
    import shutil

    src = LogDirBuilder(tmp_path / "src", node_id=9)
    pb = src.partition("tiered", 0, topic_id=TID)
    for i in range(200):
        if i == 100:
            pb.roll_segment()
        pb.append_batch(values=[b"r%d" % i])
    src.write()
    out = tmp_path / "remote" / f"tiered-0-{TID}"
    out.mkdir(parents=True)
    for base, seg in zip((0, 100), seg_ids):
        for ext in ("log", "index", "timeindex"):
            shutil.copy(tmp_path / "src" / "tiered-0" / f"{base:020d}.{ext}", out / f"{base}-{SEG[seg]}.{ext}")
        (out / f"{base}-{SEG[seg]}.leader_epoch_checkpoint").write_bytes(f"0\n1\n0 {base}\n".encode())
    return tmp_path / "remote"


def test_remote_segment_folder_is_decoded_as_its_own_replica(tmp_path):
    from kaudit.sources.logdir import plan
    from kaudit.sources.segments import Options, decode_target

    remote = _remote_folder(tmp_path)
    p = plan([str(remote)])
    kinds = sorted({t.kind for t in p.targets})
    assert kinds == ["index", "log", "skipped", "timeindex"]
    rows = [r for t in p.targets for k, tb in decode_target(t, Options()) if k == "batch" for r in tb.to_pylist()]
    assert len(rows) == 200 and {r["topic"] for r in rows} == {"tiered"} and {r["topic_id"] for r in rows} == {TID}
    assert {r["replica"] for r in rows} == {"remote:" + str(remote)}


def test_local_and_remote_together_raise_no_false_alarm(tmp_path):
    local = _tiered(tmp_path / "l", [("a", 0, 99, [1]), ("b", 100, 199, [1])])
    remote = _remote_folder(tmp_path)
    fs = audit([local, remote], rules=())
    assert fs == [], [(f["rule"], f["message"]) for f in fs]


def test_a_hole_beside_a_remote_segment_no_copy_explains_is_lost(tmp_path):
    local = _tiered(tmp_path / "l", [("a", 0, 99, [1]), ("c", 100, 199, [])])
    fs = audit([local, _remote_folder(tmp_path, seg_ids=("a",))], rules=("missing-offsets",) + RULES)
    assert brief(fs) == [("missing-offsets", "error", "tiered-0", 100, 199)]
