"""Cutting a plan into splits for an engine that decodes in parallel tasks (docs/architecture.md §5).

A split is a file path and a byte range, never file contents. A big `.log` segment is cut at
positions its own `.index` names (each is the first byte of a batch), about every `split_bytes`;
a cut whose batch does not look whole (magic, length, CRC) is not used, so every range starts
where the one before it stops decoding and the ranges of a file give the rows of the whole file.
Small files are packed together into one task. The order of the splits is the plan's order, so
an engine can put rows back in the local engine's order with (split, row).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kaudit.protocol.batch_scan import plausible_v2
from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.sources.targets import Plan, Target
from kaudit.sources.segment_log import open_readonly
from kaudit.sources.segments import Options, decode_target

DEFAULT_SPLIT_BYTES = 128 << 20
MAX_INDEX_BYTES = 64 << 20  # an index bigger than this is not read for cuts (the file stays whole)


@dataclass(frozen=True)
class Split:
    index: int          # place in the plan's order (rows sort by it, then by their row number)
    target: Target
    start: int = 0
    stop: int | None = None  # None: to the end of the file


def cut_points(log_path: str, size: int, split_bytes: int, max_batch_bytes: int = DEFAULT_MAX_BYTES
               ) -> list[int]:
    """Positions in a segment, from its `.index`, where a range may start: about `split_bytes`
    apart, each the first byte of a whole-looking batch. [] when the file stays whole."""
    if size <= split_bytes:
        return []
    # a swap segment (sources.swap_recovery) has its own index renamed the same way
    swap = ".swap" if log_path.endswith(".log.swap") else ""
    positions = _index_positions(log_path[: -len(".log" + swap)] + ".index" + swap)
    if positions.size == 0:
        return []
    cuts = []
    mm = open_readonly(log_path)   # only the headers at the cuts are touched
    if mm is None:
        return []
    try:
        want = split_bytes
        for p in positions.tolist():
            if p < want or p >= size:
                continue
            if plausible_v2(mm, p, len(mm), max_batch_bytes):
                cuts.append(p)
                want = p + split_bytes
    finally:
        mm.close()
    return cuts


def _index_positions(index_path: str) -> np.ndarray:
    """The physical positions an offset index names, strictly increasing (preallocated zero
    entries and anything out of order are dropped)."""
    try:
        with open(index_path, "rb") as f:  # read-only
            data = f.read(MAX_INDEX_BYTES)
    except OSError:
        return np.empty(0, dtype=np.int64)
    n = len(data) // 8
    if n == 0:
        return np.empty(0, dtype=np.int64)
    pos = np.frombuffer(data[: n * 8], dtype=">i4").reshape(n, 2)[:, 1].astype(np.int64)
    keep = pos > 0
    if keep.any():
        running = np.maximum.accumulate(np.where(keep, pos, 0))
        keep &= pos >= running  # a position behind an earlier one is no cut
        keep[1:] &= pos[1:] != pos[:-1]
    return pos[keep]


def split_plan(p: Plan, split_bytes: int = DEFAULT_SPLIT_BYTES,
               max_batch_bytes: int = DEFAULT_MAX_BYTES) -> list[list[Split]]:
    """Tasks, each a list of splits: a big segment's ranges one task each, small files packed
    together up to `split_bytes`. Splits are numbered in plan order."""
    tasks: list[list[Split]] = []
    current: list[Split] = []
    current_bytes = 0
    n = 0
    for t in p.targets:
        if t.kind == "log" and t.size > split_bytes:
            if current:  # tasks stay in plan order
                tasks.append(current)
                current, current_bytes = [], 0
            cuts = cut_points(t.path, t.size, split_bytes, max_batch_bytes)
            bounds = [0] + cuts + [None]
            for a, b in zip(bounds[:-1], bounds[1:]):
                tasks.append([Split(n, t, a, b)])
                n += 1
            continue
        current.append(Split(n, t))
        n += 1
        current_bytes += t.size
        if current_bytes >= split_bytes:
            tasks.append(current)
            current, current_bytes = [], 0
    if current:
        tasks.append(current)
    return tasks


def fold_key(t: Target) -> tuple | None:
    """The per-partition folds' key of a file's rows (replica, topic, partition); None for a file
    outside partition folders."""
    if t.topic is None or t.partition is None:
        return None
    return (t.log_dir.replica if t.log_dir else None, t.topic, t.partition)


def key_sizes(p: Plan, kind: str | None = None) -> dict:
    """Bytes per fold key over the plan's files (only those of `kind`, e.g. "log", if given)."""
    sizes: dict = {}
    for t in p.targets:
        k = fold_key(t)
        if k is not None and (kind is None or t.kind == kind):
            sizes[k] = sizes.get(k, 0) + t.size
    return sizes


def keyed_split_plan(p: Plan, split_bytes: int = DEFAULT_SPLIT_BYTES,
                     max_batch_bytes: int = DEFAULT_MAX_BYTES, whole_key_bytes: int = 0
                     ) -> list[tuple[list[Split], bool]]:
    """Tasks as (splits, whole): every partition (fold key) of at most `whole_key_bytes` lies
    whole in one task (`whole` True: its per-partition folds can run where it is decoded, no
    shuffle), such partitions packed by size into tasks of about `split_bytes` (largest first,
    each to the least loaded task); the bigger partitions and the files outside partition
    folders are cut as `split_plan` cuts them (`whole` False). Splits are numbered in plan order
    and listed in that order within a task, so a task streams each of its partitions in log order."""
    sizes = key_sizes(p)
    whole = {k for k, size in sizes.items() if size <= whole_key_bytes}
    rest = Plan(targets=[t for t in p.targets if fold_key(t) not in whole], errors=[])
    cut = split_plan(rest, split_bytes, max_batch_bytes)
    # one numbering in plan order (target, then position) for the whole files and the cut ones
    place = {id(t): i for i, t in enumerate(p.targets)}
    mine = [Split(0, t) for t in p.targets if fold_key(t) in whole]
    ranked = sorted(mine + [s for task in cut for s in task], key=lambda s: (place[id(s.target)], s.start))
    renum = {id(s): i for i, s in enumerate(ranked)}
    tasks: list[tuple[list[Split], bool]] = []
    if mine:
        total = sum(sizes[k] for k in whole)
        bins = max(1, min(len(whole), -(-total // max(split_bytes, 1))))
        load = [0] * bins
        where = {}
        for k in sorted(whole, key=lambda k: (-sizes[k], str(k))):
            j = min(range(bins), key=lambda i: (load[i], i))
            load[j] += sizes[k]
            where[k] = j
        grouped: list[list[Split]] = [[] for _ in range(bins)]
        for s in mine:
            grouped[where[fold_key(s.target)]].append(Split(renum[id(s)], s.target))
        tasks.extend((g, True) for g in grouped if g)
    for task in cut:
        tasks.append(([Split(renum[id(s)], s.target, s.start, s.stop) for s in task], False))
    return tasks


def decode_split(s: Split, options: Options) -> Iterator[tuple[str, pa.Table]]:
    """The (kind, table) chunks of one split: a range of a segment, or a whole file."""
    yield from decode_target(s.target, options, start=s.start, stop=s.stop)


def _decode_task(args):
    splits, options = args
    return [c for s in splits for c in decode_split(s, options)]


def decode_parallel(p: Plan, options: Options, jobs: int, split_bytes: int) -> Iterator[tuple[str, pa.Table]]:
    """The rows of the plan in its order, decoded by `jobs` worker processes: big segments are
    cut at their own index positions, every range decodes alone and the results are taken in
    plan order, at most 2 x jobs tasks ahead of the one being handed on."""
    import multiprocessing as mp
    from collections import deque

    tasks = split_plan(p, split_bytes, options.max_batch_bytes)
    ctx = mp.get_context("spawn")
    with ctx.Pool(jobs) as pool:
        pending: deque = deque()
        queued = iter(tasks)
        for task in queued:
            pending.append(pool.apply_async(_decode_task, ((task, options),)))
            if len(pending) >= 2 * jobs:
                break
        while pending:
            chunks = pending.popleft().get()
            task = next(queued, None)
            if task is not None:
                pending.append(pool.apply_async(_decode_task, ((task, options),)))
            yield from chunks
