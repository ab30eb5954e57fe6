"""Splits: a segment cut at its `.index` positions decodes, range by range, to the rows of the
whole file (the Spark engine's tasks rely on it)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fixtures.builder import files
from fixtures.builder.bench import write_bench_segment
from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target
from kaudit.sources.splits import cut_points, decode_split, split_plan


def _rows(chunks) -> dict[str, pa.Table]:
    by_kind: dict[str, list] = {}
    for kind, t in chunks:
        by_kind.setdefault(kind, []).append(t)
    return {k: pa.concat_tables(v) for k, v in by_kind.items()}


def _whole(p):
    return _rows((k, t) for tg in p.targets for k, t in decode_target(tg, Options()))


def _split(p, split_bytes):
    tasks = split_plan(p, split_bytes)
    splits = [s for task in tasks for s in task]
    assert [s.index for s in splits] == list(range(len(splits)))
    return tasks, _rows((k, t) for s in splits for k, t in decode_split(s, Options()))


@pytest.fixture(scope="module")
def big_segment(tmp_path_factory):
    d = tmp_path_factory.mktemp("split") / "t-0"
    d.mkdir()
    write_bench_segment(d / "00000000000000000000.log", target_bytes=3 << 20, producer_id=7)
    return d


def test_a_segment_bigger_than_a_split_decodes_identically(big_segment):
    p = plan([str(big_segment)])
    tasks, split = _split(p, 256 << 10)
    log_tasks = [t for t in tasks if t[0].target.kind == "log"]
    assert len(log_tasks) >= 10  # really cut
    assert all(s.start % 1 == 0 for t in log_tasks for s in t)
    whole = _whole(p)
    assert set(split) == set(whole)
    for kind in whole:
        assert split[kind].equals(whole[kind]), kind


def test_cuts_start_at_batches_the_index_names(big_segment):
    log = big_segment / "00000000000000000000.log"
    cuts = cut_points(str(log), log.stat().st_size, 256 << 10)
    batches = _whole(plan([str(big_segment)]))["batch"]
    starts = set(batches.column("position").to_pylist())
    assert cuts and set(cuts) <= starts
    assert all(b - a >= 256 << 10 for a, b in zip(cuts, cuts[1:]))


def test_a_corrupt_cut_is_not_used_and_a_cut_tail_stays_in_the_last_range(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    log = d / "00000000000000000000.log"
    write_bench_segment(log, target_bytes=2 << 20, producer_id=7)
    first = cut_points(str(log), log.stat().st_size, 256 << 10)[0]
    files.corrupt_file(log, first + 70)   # the batch at the first cut fails its CRC
    files.truncate_file(log, 100)         # and the segment ends mid-batch
    p = plan([str(d)])
    assert first not in cut_points(str(log), log.stat().st_size, 256 << 10)
    _, split = _split(p, 256 << 10)
    whole = _whole(p)
    for kind in whole:
        assert split[kind].equals(whole[kind]), kind
    assert "truncated-tail" in whole["decode_issue"].column("issue").to_pylist()


def test_no_index_means_no_cut(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    write_bench_segment(d / "00000000000000000000.log", target_bytes=1 << 20, index=False, timeindex=False)
    tasks = split_plan(plan([str(d)]), 64 << 10)
    assert [len(t) for t in tasks] == [1]


def test_small_files_are_packed_together(corpus):
    p = plan([str(corpus / "real-kafka-3.0.2" / "logdirs-final")])
    tasks = split_plan(p, 1 << 20)
    assert len(tasks) < len(p.targets) / 4


def test_corpus_log_dirs_split_at_every_index_entry_decode_identically(corpus):
    p = plan([str(corpus / "real-kafka-3.0.2" / "logdirs-final")])
    tasks, split = _split(p, 4096)   # Kafka indexes every 4 KiB: cut wherever it can
    assert sum(1 for t in tasks if t[0].stop is not None) > 5
    whole = _whole(p)
    for kind in whole:
        assert split[kind].equals(whole[kind]), kind
