"""Remote (tiered) segments and the local log audited as ONE log (sources/remote.py): overlap is no
finding, a sequence or a transaction is judged across the boundary, a gap beside a remote
segment is lost unless __remote_log_metadata lists it as copied (then: not read, in coverage)."""

from __future__ import annotations

from diskcraft import brief

from fixtures.builder.tiered import SEGMENT_IDS, TIERED_TID as TID, build_tiered
from kaudit.engine.local import audit_segments

SEG = SEGMENT_IDS


def _cluster(tmp_path, **kw):
    return [str(p) for p in build_tiered(tmp_path, **kw)]


def _run(roots, **kw):
    return audit_segments(roots, **kw)


def test_overlapping_remote_copy_is_one_log_without_findings(tmp_path):
    run = _run(_cluster(tmp_path))
    assert run.findings == [], [(f["rule"], f["message"]) for f in run.findings]
    assert "remote_not_read" not in run.coverage


def test_remote_segments_join_the_local_replica_clipped_at_its_first_segment(tmp_path):
    from kaudit.sources.logdir import plan
    from kaudit.sources.segments import Options, decode_target

    p = plan(_cluster(tmp_path))
    logs = [t for t in p.targets if t.topic == "tiered" and t.kind == "log"]
    assert [t.log_dir.replica for t in logs] == ["1"] * len(logs)
    assert [t.base_offset for t in logs] == [0, 100, 150, 250] and logs[1].stop_offset == 150
    offsets = [o for t in logs for k, tb in decode_target(t, Options()) if k == "batch"
               for o in tb.column("base_offset").to_pylist()]
    assert offsets == sorted(offsets) and len(offsets) == len(set(offsets)) and offsets[0] == 0
    skipped = {t.reason.split(" (")[0] for t in p.targets if t.kind == "skipped" and "-c2Vn" in t.path}
    assert "a remote segment's producer snapshot" in skipped


def test_a_sequence_gap_at_the_boundary_is_judged_across_it(tmp_path):
    fs = _run(_cluster(tmp_path, seq_jump_at=150), select=("out-of-order-sequence",)).findings
    assert [(f["rule"], f["replica"], f["first_offset"]) for f in fs] == [("out-of-order-sequence", "1", 150)]


def test_a_remote_segment_not_in_the_inputs_is_not_read_not_lost(tmp_path):
    run = _run(_cluster(tmp_path, remote=(100,)))
    assert run.findings == [], [(f["rule"], f["message"]) for f in run.findings]
    assert run.coverage["remote_not_read"] == [
        {"topic": "tiered", "partition": 0, "topic_id": TID, "segment_id": SEG[0], "state": "COPY_SEGMENT_FINISHED",
         "first_offset": 0, "last_offset": 99}]


def test_without_the_remote_folder_the_copied_ranges_are_not_read(tmp_path):
    roots = _cluster(tmp_path)[:1]
    run = _run(roots)
    # the transaction's data (offset 140) is among the ranges not read: its marker alone is info
    assert [(f["rule"], f["severity"]) for f in run.findings] == [("stray-marker", "info")]
    assert [(r["segment_id"], r["first_offset"], r["last_offset"]) for r in run.coverage["remote_not_read"]] \
        == [(SEG[0], 0, 99), (SEG[100], 100, 149)]


def test_a_middle_remote_segment_missing_is_not_read_when_copied(tmp_path):
    run = _run(_cluster(tmp_path, copied=(0, 100, 200), remote=(0, 200), local_from=250))
    assert run.findings == [], [(f["rule"], f["message"]) for f in run.findings]
    assert [(r["first_offset"], r["last_offset"]) for r in run.coverage["remote_not_read"]] == [(100, 199)]


def test_a_middle_remote_segment_missing_without_a_copy_record_is_lost(tmp_path):
    fs = _run(_cluster(tmp_path, copied=(0, 200), remote=(0, 200), local_from=250)).findings
    assert brief(fs) == [("missing-offsets", "error", "tiered-0", 100, 199)]
    assert "remote (tiered) segment borders the gap" in fs[0]["message"]


def test_a_middle_remote_segment_missing_without_any_metadata_is_lost(tmp_path):
    fs = _run(_cluster(tmp_path, remote=(0, 200), local_from=250, metadata=False)).findings
    assert brief(fs) == [("missing-offsets", "error", "tiered-0", 100, 199)]


def test_the_committed_sample_is_current(tmp_path):
    from fixtures.builder.tiered import TIERED_ROOT

    if not TIERED_ROOT.is_dir():
        import pytest

        pytest.skip("fixtures/logdirs/tiered not generated")
    build_tiered(tmp_path)

    def tree(root):
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert tree(tmp_path) == tree(TIERED_ROOT), "fixtures/logdirs/tiered is stale: run `python -m fixtures.builder tiered`"


def test_a_second_copy_of_a_remote_range_is_not_read_twice(tmp_path):
    import shutil

    node1, remote = build_tiered(tmp_path)
    folder = next(remote.iterdir())
    other = "c2Vjb25kLWNvcHktb2YtMA"
    for p in list(folder.iterdir()):
        if p.name.startswith("0-"):   # the same range re-copied under another id
            shutil.copy(p, folder / p.name.replace(SEG[0], other))
    run = _run([str(node1), str(remote)])
    assert run.findings == [], [(f["rule"], f["message"]) for f in run.findings]
    from kaudit.sources.logdir import plan

    twice = [t for t in plan([str(node1), str(remote)]).targets if "not read twice" in (t.reason or "")]
    assert {t.path.rsplit("/", 1)[1].split(".")[0] for t in twice} == {f"0-{max(other, SEG[0])}"} and len(twice) == 3   # .log, .index, .timeindex


def test_an_aborted_transaction_across_the_boundary(tmp_path):
    run = _run(_cluster(tmp_path, abort=True))
    assert run.findings == [], [(f["rule"], f["message"]) for f in run.findings]


def test_followers_with_their_own_local_start(tmp_path):
    node1, remote = build_tiered(tmp_path, followers=((2, 200), (3, 120)))
    roots = [str(node1), str(remote), str(tmp_path / "node2"), str(tmp_path / "node3")]
    run = _run(roots)
    # the remote segments go to the replica whose local log starts lowest (node 3, from 120)
    assert [(f["rule"], f["severity"]) for f in run.findings if f["severity"] != "info"] == []
    from kaudit.sources.logdir import plan

    merged = {t.log_dir.replica for t in plan(roots).targets if t.kind == "log" and "c2Vn" in t.path}
    assert merged == {"3"}


def test_the_reports_say_not_read(tmp_path):
    from typer.testing import CliRunner

    from kaudit.cli import app

    node1, _ = build_tiered(tmp_path)
    r = CliRunner().invoke(app, ["segments", str(node1)])
    assert r.exit_code in (0, 1) and f"not read (tiered): tiered-0: offsets 0-99 - remote segment {SEG[0]}" in r.output
    r = CliRunner().invoke(app, ["segments", str(node1), "--format", "html", "-o", str(tmp_path / "r.html")])
    assert "not read (tiered):</b> tiered-0: offsets 100-149" in (tmp_path / "r.html").read_text()


def test_generated_splits_of_one_log(tmp_path_factory):
    """Any local start and any subset of the remote segments in the inputs: the merged log reads
    each offset once, in order; nothing is a finding (every segment was copied); the segments
    not given are exactly the ranges said not read."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kaudit.sources.logdir import plan
    from kaudit.sources.segments import Options, decode_target

    @settings(max_examples=4, deadline=None)
    @given(st.integers(101, 249), st.sets(st.sampled_from((0, 100, 200))))
    def check(local_from, remote):
        tmp = tmp_path_factory.mktemp("gen")
        roots = _cluster(tmp, copied=(0, 100, 200), remote=tuple(sorted(remote)), local_from=local_from)
        p = plan(roots)
        offsets = [o for t in p.targets if t.topic == "tiered" and t.kind == "log" and t.log_dir.replica == "1"
                   for k, tb in decode_target(t, Options()) if k == "batch" for o in tb.column("base_offset").to_pylist()]
        assert offsets == sorted(set(offsets))
        run = _run(roots)
        assert [f["rule"] for f in run.findings if f["severity"] != "info"] == []
        ends = {0: 99, 100: 199, 200: 299}
        want = [(b, min(ends[b], local_from - 1)) for b in (0, 100, 200) if b < local_from and b not in remote]
        assert [(r["first_offset"], r["last_offset"]) for r in run.coverage.get("remote_not_read", [])] == want

    check()


def test_remote_segments_of_another_topic_incarnation_are_not_merged(tmp_path):
    from kaudit.sources.logdir import plan

    node1, remote = build_tiered(tmp_path)
    folder = next(remote.iterdir())
    folder.rename(remote / "tiered-0-b3RoZXItaW5jYXJuYXRpbw")   # the topic deleted and created again
    logs = [t for t in plan([str(node1), str(remote)]).targets if t.kind == "log" and "c2Vn" in t.path]
    assert logs and {t.log_dir.replica for t in logs} == {"remote:" + str(remote)}
