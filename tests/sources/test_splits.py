"""Splits: a segment cut at its `.index` positions decodes, range by range, to the rows of the
whole file (the Spark engine's tasks rely on it)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fixtures.builder import files
from fixtures.builder.bench import write_bench_segment
from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target
from kaudit.sources.splits import cut_points, decode_split, fold_key, keyed_split_plan, split_plan


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


@pytest.mark.parametrize("whole_key_bytes", [1, 64 << 10, 1 << 40])
def test_keyed_plan_holds_small_partitions_whole_in_one_task(corpus, whole_key_bytes):
    """The Spark engine folds a partition in the task that reads it when the task holds all of
    it: each such partition in one `whole` task, in log order; the others cut as split_plan cuts."""
    p = plan([str(corpus / "real-kafka-3.0.2" / "logdirs-final")])
    tasks = keyed_split_plan(p, 64 << 10, whole_key_bytes=whole_key_bytes)
    splits = sorted((s for t, _ in tasks for s in t), key=lambda s: s.index)
    assert [s.index for s in splits] == list(range(len(splits)))
    # plan order: the targets in order, a file's ranges by position
    assert [(s.target.path, s.start) for s in splits] == sorted(
        ((s.target.path, s.start) for s in splits), key=lambda x: ([t.path for t in p.targets].index(x[0]), x[1]))
    sizes: dict = {}
    for t in p.targets:
        if fold_key(t) is not None:
            sizes[fold_key(t)] = sizes.get(fold_key(t), 0) + t.size
    home: dict = {}
    for i, (task, whole) in enumerate(tasks):
        assert [s.index for s in task] == sorted(s.index for s in task)
        for s in task:
            k = fold_key(s.target)
            if whole:
                assert k is not None and sizes[k] <= whole_key_bytes and s.stop is None
                assert home.setdefault(k, i) == i   # the whole partition in this one task
            else:
                assert k is None or sizes[k] > whole_key_bytes
    assert len(home) == sum(1 for size in sizes.values() if size <= whole_key_bytes)
    decoded = _rows((k, t) for s in splits for k, t in decode_split(s, Options()))
    whole_rows = _whole(p)
    for kind in whole_rows:
        assert decoded[kind].equals(whole_rows[kind]), kind


def test_keyed_plan_shares_equal_partitions_out_one_a_task(tmp_path):
    for i in range(4):
        d = tmp_path / f"t-{i}"
        d.mkdir()
        write_bench_segment(d / "00000000000000000000.log", target_bytes=256 << 10, producer_id=i)
    p = plan([str(tmp_path)])
    tasks = keyed_split_plan(p, 300 << 10, whole_key_bytes=1 << 20)
    assert [(sorted({s.target.topic for s in t}), whole) for t, whole in tasks] == [
        (["t"], True)] * 4
    assert sorted({s.target.partition for s in t}.pop() for t, _ in tasks) == [0, 1, 2, 3]
