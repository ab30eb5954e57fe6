"""A partition dir left by an interrupted cleaning (sources/swap_recovery.py) is read as Kafka's
LogLoader recovers it: a completed swap's `.swap` files in place of the files in its range,
`.cleaned`/`.deleted` files and an incomplete swap not read - and the inputs untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from fixtures.builder import LogDirBuilder, corrupt_file, truncate_file
from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target
from kaudit.sources.swap_recovery import next_offset

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit" / "disk"))
from diskcraft import audit  # noqa: E402

SEG = "{:020d}"


def _partition(tmp_path: Path) -> Path:
    """orders-0: an idempotent producer's batches of one offset each in segments 0, 6 and 12."""
    ld = LogDirBuilder(tmp_path / "broker", node_id=1)
    pb = ld.partition("orders", 0, index_interval_bytes=100)
    p = pb.producer(7, 0)
    for n, k in enumerate((6, 6, 3)):
        if n:
            pb.roll_segment()
        for i in range(k):
            p.send([b"v%d" % i * 20])
    return ld.write() / "orders-0"


def _as(d: Path, base: int, suffix: str, *, keep: bool = True) -> None:
    """Segment `base`'s files copied (keep) or renamed to `<name><suffix>`."""
    for ext in ("log", "index", "timeindex"):
        p = d / f"{SEG.format(base)}.{ext}"
        (shutil.copy if keep else os.rename)(p, str(p) + suffix)


def _rows(d: Path, kind: str) -> list[dict]:
    out = []
    for t in plan([str(d.parent)]).targets:
        for k, table in decode_target(t, Options()):
            if k == kind:
                out.extend(table.to_pylist())
    return out


def _batches_by_file(d: Path) -> dict[str, list[int]]:
    out: dict = {}
    for r in _rows(d, "batch"):
        out.setdefault(os.path.basename(r["source"]), []).append(r["base_offset"])
    return out


def _skipped(d: Path) -> dict[str, str]:
    return {os.path.basename(r["source"]): r["reason"] for r in _rows(d, "skipped")}


def test_a_completed_swap_is_read_in_place_of_what_it_replaces(tmp_path):
    """The cleaned segment renamed `.swap`, the old segment not yet renamed: Kafka deletes the
    files of offsets 6-11 (the old segment and the snapshot at 6) and renames the swap."""
    d = _partition(tmp_path)
    _as(d, 6, ".swap")
    files = _batches_by_file(d)
    assert files[SEG.format(6) + ".log.swap"] == list(range(6, 12))
    assert SEG.format(6) + ".log" not in files
    skipped = _skipped(d)
    for name in (".log", ".index", ".timeindex", ".snapshot"):
        assert "replaced by an interrupted cleaning's .swap segment (offsets 6-11)" in skipped[SEG.format(6) + name]
    assert SEG.format(12) + ".snapshot" not in skipped
    assert audit(d.parent, rules=()) == []


def test_old_segment_renamed_deleted_beside_the_swap(tmp_path):
    d = _partition(tmp_path)
    _as(d, 6, ".swap")
    _as(d, 6, ".deleted", keep=False)
    assert _batches_by_file(d)[SEG.format(6) + ".log.swap"] == list(range(6, 12))
    assert _skipped(d)[SEG.format(6) + ".log.deleted"].startswith(".deleted file: Kafka deletes it")
    assert audit(d.parent, rules=()) == []


def test_a_cleaned_file_leaves_the_old_segments_and_voids_later_swaps(tmp_path):
    """`.cleaned` at 6: the swap never began - the old segment 6 is the log, and a `.swap` at
    12 (past the lowest `.cleaned`) is part of the incomplete operation: not read."""
    d = _partition(tmp_path)
    _as(d, 6, ".cleaned")
    _as(d, 12, ".swap")
    files = _batches_by_file(d)
    assert files[SEG.format(6) + ".log"] == list(range(6, 12))
    assert files[SEG.format(12) + ".log"] == [12, 13, 14]
    skipped = _skipped(d)
    assert skipped[SEG.format(6) + ".log.cleaned"].startswith(".cleaned file")
    assert "incomplete swap" in skipped[SEG.format(12) + ".log.swap"]
    assert audit(d.parent, rules=()) == []


def test_damage_inside_a_swap_is_told_inside_a_cleaned_file_not(tmp_path):
    """What Kafka will serve is audited: a corrupt batch in the swap segment is found on the
    `.swap` file; the same bytes in a `.cleaned` file (deleted at start-up) are no finding."""
    d = _partition(tmp_path / "a")
    _as(d, 6, ".swap")
    corrupt_file(d / (SEG.format(6) + ".log.swap"), 70)
    fs = audit(d.parent, rules=("crc-mismatch", "corrupt-batch"))
    assert [f["rule"] for f in fs] == ["crc-mismatch"]
    assert fs[0]["evidence"][0]["source"].endswith(SEG.format(6) + ".log.swap")
    twin = _partition(tmp_path / "b")
    _as(twin, 6, ".cleaned")
    corrupt_file(twin / (SEG.format(6) + ".log.cleaned"), 70)
    assert audit(twin.parent, rules=("crc-mismatch", "corrupt-batch")) == []


def test_a_swap_cut_mid_batch_replaces_up_to_its_last_whole_batch(tmp_path):
    d = _partition(tmp_path)
    _as(d, 6, ".swap")
    swap = d / (SEG.format(6) + ".log.swap")
    truncate_file(swap, 10)
    assert next_offset(str(swap), 6) == 11        # LogSegment.readNextOffset: batches 6-10 whole
    assert next_offset(str(d / "missing.log.swap"), 6) == 6


def test_inputs_are_never_modified(tmp_path):
    d = _partition(tmp_path)
    _as(d, 6, ".swap")
    _as(d, 0, ".deleted", keep=False)
    _as(d, 12, ".cleaned")

    def state():
        return {n: (os.path.getsize(d / n), os.stat(d / n).st_mtime_ns, hashlib.sha1((d / n).read_bytes()).hexdigest())
                for n in sorted(os.listdir(d))}

    before = state()
    _rows(d, "batch")
    audit(d.parent, rules=())
    assert state() == before


def _short_swap(tmp_path: Path, *, swap: bool) -> Path:
    """Segment 6 cleaned down to its first two batches (offsets 6-7; the cleaner removed 8-11):
    as a `.swap` beside the old segment renamed `.deleted` (`swap`), or as a plain segment."""
    d = _partition(tmp_path)
    old = d / (SEG.format(6) + ".log")
    data = old.read_bytes()
    first_two = 0
    for _ in range(2):
        first_two += 12 + int.from_bytes(data[first_two + 8:first_two + 12], "big")
    if swap:
        (d / (SEG.format(6) + ".log.swap")).write_bytes(data[:first_two])
        _as(d, 6, ".deleted", keep=False)
    else:
        old.write_bytes(data[:first_two])
        for ext in ("index", "timeindex"):
            (d / f"{SEG.format(6)}.{ext}").write_bytes(b"")
    return d


def test_a_swap_segment_ending_short_is_the_cleaners_a_plain_one_a_loss(tmp_path):
    """A segment read from a `.swap` file is the cleaner's output: offsets missing at its end
    (8-11, before segment 12) are compaction. The same bytes as a plain segment of a log that
    shows no compaction anywhere: offsets lost (missing-offsets)."""
    rules = ("missing-offsets", "replica-divergence")
    assert audit(_short_swap(tmp_path / "a", swap=True).parent, rules=rules) == []
    [f] = audit(_short_swap(tmp_path / "b", swap=False).parent, rules=rules)
    assert (f["rule"], f["first_offset"], f["last_offset"]) == ("missing-offsets", 8, 11)
