"""`missing-offsets` on crafted log dirs: a lost `.log` beside its indexes, a closed segment cut
short, a gap between segments - each an error with the offsets lost - and no such finding where
nothing is missing (the active tail, compaction, the whole corpus)."""

from __future__ import annotations

import os

from diskcraft import audit, details, logdir
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.builder import truncate_file

RULES = ("missing-offsets", "index-mismatch", "truncated-tail", "corrupt-batch")
SEG = "{:020d}"


def _three_segments(tmp_path, name="broker", sizes=(6, 6, 3)):
    """orders-0 with segments of `sizes` batches (one offset each), an index entry every batch."""
    ld = logdir(tmp_path, name)
    pb = ld.partition("orders", 0, index_interval_bytes=100)
    p = pb.producer(7, 0)
    for n, k in enumerate(sizes):
        if n:
            pb.roll_segment()
        for i in range(k):
            p.send([b"v%d" % i * 20])   # 108-byte batches
    return ld.write() / "orders-0"


def _seg(d, base, ext="log"):
    return d / f"{SEG.format(base)}.{ext}"


def _lost(fs):
    return [(f["severity"], f["first_offset"], f["last_offset"]) for f in fs if f["rule"] == "missing-offsets"]


def _rules(fs):
    return sorted(f["rule"] for f in fs)


def test_clean_log_gives_nothing(tmp_path):
    assert audit(_three_segments(tmp_path).parent, rules=RULES) == []


def test_missing_log_beside_its_indexes(tmp_path):
    d = _three_segments(tmp_path)
    os.remove(_seg(d, 6))
    fs = audit(d.parent, rules=RULES)
    assert _rules(fs) == ["missing-offsets"]        # not a warning per index entry
    [f] = fs
    assert _lost(fs) == [("error", 6, 11)]
    assert "its .log is missing while its indexes remain" in f["message"]
    assert "the next segment starts at offset 12" in f["message"]
    assert f["evidence"][0]["source"].endswith(".index") or f["evidence"][0]["source"].endswith(".timeindex")
    assert details(f)["next_segment_base_offset"] == 12


def test_empty_log_beside_its_indexes(tmp_path):
    d = _three_segments(tmp_path)
    truncate_file(_seg(d, 6), os.path.getsize(_seg(d, 6)))
    fs = audit(d.parent, rules=RULES)
    assert _lost(fs) == [("error", 6, 11)] and "its .log is empty" in fs[0]["message"]


def test_missing_log_of_the_last_segment_names_what_its_indexes_show(tmp_path):
    d = _three_segments(tmp_path)
    os.remove(_seg(d, 12))
    fs = audit(d.parent, rules=RULES)
    assert _lost(fs) == [("error", 12, 14)]
    assert "no later segment: at least offsets 12-14" in fs[0]["message"]


def test_closed_segment_cut_mid_batch(tmp_path):
    d = _three_segments(tmp_path)
    size = truncate_file(_seg(d, 6), 150)
    fs = audit(d.parent, rules=RULES)
    assert _rules(fs) == ["missing-offsets", "truncated-tail"]   # the index entries past the cut: no noise
    [f] = [f for f in fs if f["rule"] == "missing-offsets"]
    assert (f["severity"], f["first_offset"], f["last_offset"]) == ("error", 10, 11)
    assert f["evidence"][0]["position"] < size and f"ends mid-batch at byte {f['evidence'][0]['position']}" in f["message"]
    assert "its indexes name offset 11" in f["message"]


def test_active_tail_cut_is_no_loss(tmp_path):
    d = _three_segments(tmp_path)
    truncate_file(_seg(d, 12), 30)
    fs = audit(d.parent, rules=RULES)
    assert _lost(fs) == [] and [(f["rule"], f["severity"]) for f in fs] == [("truncated-tail", "info")]


def test_closed_segment_cut_at_a_batch_boundary(tmp_path):
    """No partial batch is left: only the next segment's base offset and the indexes show it."""
    d = _three_segments(tmp_path)
    truncate_file(_seg(d, 6), 108 * 2)       # two whole 108-byte batches
    fs = audit(d.parent, rules=RULES)
    assert _rules(fs) == ["missing-offsets"]
    assert _lost(fs) == [("error", 10, 11)]
    assert "ends at offset 9" in fs[0]["message"] and "starts at offset 12" in fs[0]["message"]


def test_a_whole_segment_gone(tmp_path):
    d = _three_segments(tmp_path)
    for ext in ("log", "index", "timeindex"):
        os.remove(_seg(d, 6, ext))
    fs = audit(d.parent, rules=RULES)
    assert _lost(fs) == [("error", 6, 11)]
    assert "00000000000000000000.log ends at offset 5" in fs[0]["message"]


def _compacted(tmp_path, name, gap_at_end: bool):
    """A cleaned partition: offsets missing between batches (the cleaner removed them) and, when
    `gap_at_end`, at the end of the first segment too (next base 8, last batch 5)."""
    ld = logdir(tmp_path, name)
    pb = ld.partition("orders", 0, index_interval_bytes=100)
    for off in (0, 2, 3, 5) + (() if gap_at_end else (6, 7)):
        pb.append_batch(keys=[b"k%d" % off], values=[b"x" * 40], base_offset=off)
    pb.next_offset = 8
    pb.roll_segment()
    for off in (8, 9, 11):
        pb.append_batch(keys=[b"k%d" % off], values=[b"x" * 40], base_offset=off)
    return ld.write() / "orders-0"


def test_compaction_gaps_are_no_loss(tmp_path):
    for gap_at_end in (False, True):
        d = _compacted(tmp_path, f"c{gap_at_end}", gap_at_end)
        assert audit(d.parent, rules=RULES) == [], gap_at_end


def test_compacted_partition_still_loses_a_cut_segment(tmp_path):
    d = _compacted(tmp_path, "c", gap_at_end=False)
    truncate_file(_seg(d, 0), 20)
    assert _lost(audit(d.parent, rules=RULES)) == [("error", 7, 7)]   # batch 6 is whole, batch 7 cut


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=3, max_size=5), data=st.data())
def test_any_removed_middle_segment_is_told_with_its_range(tmp_path_factory, sizes, data):
    d = _three_segments(tmp_path_factory.mktemp("gen"), sizes=tuple(sizes))
    bases = [sum(sizes[:i]) for i in range(len(sizes))]
    k = data.draw(st.integers(1, len(sizes) - 2))
    how = data.draw(st.sampled_from(["log", "all"]))
    for ext in (("log",) if how == "log" else ("log", "index", "timeindex")):
        os.remove(_seg(d, bases[k], ext))
    assert _lost(audit(d.parent, rules=RULES)) == [("error", bases[k], bases[k + 1] - 1)]


def test_corpus_has_no_loss(corpus):
    """Every log dir of the corpus (real brokers, public repositories): nothing is missing, so
    no missing-offsets finding (compacted topics, transactions, multi-segment partitions)."""
    roots = set()
    for d, _, files in os.walk(corpus):
        if ".truth" not in d and any(f.endswith(".log") and f[:20].isdigit() for f in files):
            roots.add(os.path.dirname(d))
    assert len(roots) > 30
    for r in sorted(roots):
        assert [f["message"] for f in audit(r, rules=("missing-offsets",))] == [], r


def test_log_renamed_by_kafka_is_no_loss(tmp_path):
    """A copy taken while Kafka swapped in a cleaned segment or deleted one: the .log is there
    under another name (LogLoader completes the swap), the indexes not yet renamed."""
    for suffix in (".swap", ".deleted", ".cleaned"):
        d = _three_segments(tmp_path, f"b{suffix}")
        os.rename(_seg(d, 6), str(_seg(d, 6)) + suffix)
        assert _lost(audit(d.parent, rules=RULES)) == [], suffix


def test_missing_first_log_names_the_retention_race(tmp_path):
    d = _three_segments(tmp_path)
    os.remove(_seg(d, 0))
    [f] = audit(d.parent, rules=("missing-offsets",))
    assert (f["first_offset"], f["last_offset"]) == (0, 5)
    assert "first segment: if retention was deleting it" in f["message"]


def test_coverage_names_the_loss_and_never_says_nothing_missing(tmp_path):
    from typer.testing import CliRunner

    from kaudit.cli import app

    clean = _three_segments(tmp_path, "clean").parent
    r = CliRunner().invoke(app, ["segments", str(clean)])
    assert r.exit_code == 0 and "nothing missing" in r.stdout
    d = _three_segments(tmp_path, "lost")
    os.remove(_seg(d, 6))
    r = CliRunner().invoke(app, ["segments", str(d.parent)])
    assert r.exit_code == 1, r.output
    assert "nothing missing" not in r.stdout
    assert "lost or unreadable: orders-0 (replica 1): offsets 6-11 (missing-offsets)" in r.stdout
    assert "index-mismatch" not in r.stdout


def test_a_damaged_last_batch_is_not_told_twice(tmp_path):
    """A closed segment whose last batch fails its CRC: crc-mismatch tells it; no gap is made of
    the offsets that batch holds."""
    from fixtures.builder import corrupt_file

    d = _three_segments(tmp_path)
    corrupt_file(_seg(d, 6), 108 * 5 + 100)
    fs = audit(d.parent, rules=RULES + ("crc-mismatch",))
    assert _rules(fs) == ["crc-mismatch"] and fs[0]["first_offset"] == 11


def test_partition_dir_without_any_log(tmp_path):
    """Every .log gone (a copy that lost them): the producer snapshot and the leader epoch
    checkpoint show offsets the partition held; an empty .log (retention emptied it) is no loss."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    for i in range(4):
        p.send([b"v%d" % i])
    pb.set_leader_epoch(1)
    pb.epochs.append((1, 4))
    p.send([b"w"])
    pb.restart()
    d = ld.write() / "orders-0"
    for n in os.listdir(d):
        if n.endswith((".log", ".index", ".timeindex")):
            os.remove(d / n)
    fs = audit(d.parent, rules=RULES)
    assert _lost(fs) == [("error", 0, 4)]
    assert "holds no .log at all" in fs[0]["message"] and "leader epoch starts at offset 4" in fs[0]["message"]
    (d / f"{SEG.format(5)}.log").write_bytes(b"")          # the empty active segment Kafka keeps
    assert _lost(audit(d.parent, rules=RULES)) == []


def test_files_not_given_are_not_files_lost(tmp_path):
    """`kaudit segments` on some files of a partition: the others are on disk, not lost."""
    d = _three_segments(tmp_path)
    files = [_seg(d, 0), _seg(d, 12), _seg(d, 6, "index"), _seg(d, 6, "timeindex")]
    assert _lost(audit([str(f) for f in files], rules=RULES)) == []


def _end_gap(tmp_path, name, thinned: bool):
    """orders-0: segment 0 holds batches 0-1 and 2-3 and ends before segment 6 (offsets 4-5
    missing at its end, nothing missing between its batches); `thinned`: batch 0-1 holds one
    record - rebuilt by the cleaner, which keeps a batch's last offset delta."""
    ld = logdir(tmp_path, name)
    pb = ld.partition("orders", 0, index_interval_bytes=10_000)
    recs = [{"value": b"x" * 40, "offset_delta": 0}, {"value": b"y" * 40, "offset_delta": 1}]
    pb.append_batch(recs[1:] if thinned else recs, base_offset=0, last_offset_delta=1)
    pb.append_batch(recs, base_offset=2)
    pb.next_offset = 6
    pb.roll_segment()
    pb.append_batch(recs, base_offset=6)
    return ld.write() / "orders-0"


def test_a_rebuilt_batch_marks_the_partition_compacted(tmp_path):
    """A gap at a segment's end is compaction where a batch holds fewer records than its
    offsets (only the cleaner writes one: a producer's batch has a record per offset, which
    the broker checks); without that mark the same gap is a loss."""
    assert _lost(audit(_end_gap(tmp_path, "thinned", True).parent, rules=RULES)) == []
    assert _lost(audit(_end_gap(tmp_path, "whole", False).parent, rules=RULES)) == [("error", 4, 5)]


def test_the_cleaners_files_mark_the_partition_compacted(tmp_path):
    """A gap at a segment's end is compaction where the partition dir holds the cleaner's files: a
    `.cleaned` segment (a cleaning under way, or interrupted), or a segment's `.log.deleted`
    beside a `.log` of the same base offset (the cleaner swapped in its output and the broker
    stopped before deleting the old segment; retention deletes a segment whole, and a new one
    starts at the log end, past it). A `.log.deleted` of a base offset no `.log` has (retention)
    is no such mark: the gap stays a loss."""
    whole = tmp_path / "whole"
    cases = {"cleaned": ("{:020d}.log.cleaned".format(6), []),
             "replaced": ("{:020d}.log.deleted".format(0), []),
             "retention": ("{:020d}.log.deleted".format(100), [("error", 4, 5)])}
    for name, (extra, lost) in cases.items():
        d = _end_gap(whole / name, name, False)
        (d / extra).write_bytes(b"")
        assert _lost(audit(d.parent, rules=RULES)) == lost, name
