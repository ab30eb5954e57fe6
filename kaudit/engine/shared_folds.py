"""The local engine's buffered folds on two cores: once the input is decoded, a forked child and
the main process take the folds one at a time from a shared pipe of task numbers (whichever is
free takes the next), the child sends each task's findings back, and the main process puts them
in the folds' order - the findings and internal errors are the ones `Work.run_folds` gives.

The tasks are taken biggest first by an estimate (`Fold.cost`, the CPU per row measured, x the
rows selected), so that the last ones, which leave a process idle while the other ends, are
small (the 500k-packet bench capture: wire-txn, a third of the folds' CPU, used to come third
and end last). A fold whose findings are each key's alone (`Fold.per_key`) is cut in PARTS
tasks, contiguous ranges of its sorted keys (engine.key_ranges, cut where the rows come closest
to equal shares), where the estimate says that ends sooner: a fold bigger than the others
together no longer sets the end. A process that takes a range names, prepares and cuts the
fold's selection once (a cut costs each process ~0.01-0.03 s of CPU: the price of no messages).

Why a fork: the folds are Python (one core under the GIL); after the decode the selections are
already in memory, which a fork shares without copying. Measured on the 500k-packet bench
capture (2 cores): the five wire folds 0.38-0.43 s one after the other, 0.25-0.34 s shared, the
audit 1.30 -> 1.19 s (best of 8, interleaved) for ~0.14 s more CPU. Below SHARE_MIN_ROWS rows
outside the biggest selection a fork (a few ms, then copy-on-write faults) costs more than the
other process could take.

Shared only when it is safe and can pay: Linux (macOS's system libraries are not safe to use in
a forked child) with 2+ usable CPUs, `--jobs` not 1, no other Python thread alive (a thread
holding a lock at the fork would leave the child a lock no one releases), 2+ folds with rows,
SHARE_MIN_ROWS of them outside the biggest selection. A child that dies or fails a fold sends
nothing for it: the main process runs that fold itself (and so raises its error, if it has one)."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading

import pyarrow as pa

from kaudit.audit.folds import run_prepared, weighed
from kaudit.engine import key_ranges
from kaudit.engine.children import kill_child, reap, reap_ending
from kaudit.engine.plan import named
from kaudit.sources.cores import usable_cpus
from kaudit.sources.pcap_workers import recv, send   # the pcap workers' pipe messages

SHARE_MIN_ROWS = 50_000
PARTS = 2   # the key ranges a per-key fold (Fold.per_key) is cut in
SPLIT_COST = 1.15   # a fold cut in ranges: its estimated CPU, all ranges together
SPLIT_GAIN = 0.05   # the least share of the estimated end a cut must save


def should_share(work, jobs: int | None, min_rows: int | None = None) -> bool:
    """Whether `work`'s buffered folds are worth sharing with a forked child (`jobs`: --jobs): their
    rows counted as `estimates` counts them (Fold.weigh)."""
    min_rows = SHARE_MIN_ROWS if min_rows is None else min_rows
    rows = sorted((sum(weighed(f, k, t) for k, t in work.selected[f.name]), getattr(f, "per_key", False))
                  for f in work.audit.buffered if work.selected.get(f.name))
    if not rows:
        return False
    # the rows besides the biggest selection, and half of it if its keys may be cut in ranges:
    # what the other process could take (the disk audit's transactions fold beside a replicas
    # fold of a few rows gains nothing)
    biggest, cuttable = rows[-1]
    other = sum(n for n, _ in rows[:-1]) + (biggest // 2 if cuttable else 0)
    return (len(rows) >= 2 or cuttable) and other >= min_rows and can_fork(jobs)


def can_fork(jobs: int | None) -> bool:
    """Whether folds may be shared with a forked process here: Linux (macOS's system libraries
    are not safe in a forked child), 2+ usable CPUs, `--jobs` not 1, no other thread alive (one
    holding a lock at the fork would leave the child a lock no one releases)."""
    return (jobs != 1 and sys.platform.startswith("linux") and usable_cpus() >= 2
            and threading.active_count() == 1)


def estimates(work, folds) -> list[float]:
    """Each fold's estimated CPU: `Fold.cost` (per row, as measured) x the rows it selected
    (Fold.weigh: those it does not drop in `prepare`)."""
    return [getattr(f, "cost", 1.0) * sum(weighed(f, k, t) for k, t in work.selected.get(f.name) or ()) for f in folds]


def tasks_of(work, folds, busy: float = 0.0) -> list[tuple[int, int, int]]:
    """The tasks (fold number, range, ranges) in the order they are taken: the biggest first by
    their estimated CPU (`Fold.cost` x the rows selected), so that the last ones are small; a
    per-key fold cut in PARTS ranges where that shortens the estimated end by SPLIT_GAIN (a cut
    costs: each process names, prepares and cuts the selection, SPLIT_COST). `busy`: the
    estimate of what the second process does before it takes any (engine.helper_folds)."""
    est = estimates(work, folds)
    cut: set[int] = set()

    def plan(cut):
        tasks = [((i, part, PARTS), est[i] * SPLIT_COST / PARTS) if i in cut else ((i, 0, 1), est[i])
                 for i in range(len(folds)) for part in range(PARTS if i in cut else 1)]
        tasks.sort(key=lambda t: -t[1])   # stable: ranges of a fold together, in key order
        return tasks, _end([e for _, e in tasks], busy=busy)

    tasks, end = plan(cut)
    for i in sorted(range(len(folds)), key=lambda i: -est[i]):
        if getattr(folds[i], "per_key", False):
            trial, trial_end = plan(cut | {i})
            if trial_end > end * (1 - SPLIT_GAIN):
                break
            cut, tasks, end = cut | {i}, trial, trial_end
    return [t for t, _ in tasks]


def _end(costs: list[float], workers: int = 2, busy: float = 0.0) -> float:
    """When `workers` taking `costs` in order, each the next when free, are done (the last
    one's `busy` before its first)."""
    free = [0.0] * (workers - 1) + [busy]
    for c in costs:
        free[free.index(min(free))] += c
    return max(free)


def run_shared(work, folds) -> list[dict]:
    """`Work.run_folds(folds)`, shared with a forked child (see the module's docstring)."""
    folds = list(folds)
    reap_ending()
    tasks = tasks_of(work, folds)
    if len(tasks) > 255:
        return work.run_folds(folds)
    tokens_r, tokens_w = os.pipe()
    os.write(tokens_w, bytes(range(len(tasks))))   # < 64 KiB: the pipe holds them all
    os.close(tokens_w)
    results_r, results_w = os.pipe()
    cut: dict = {}   # fold number -> its rows cut in key ranges, in the process that cut them
    pid = os.fork()
    if pid == 0:   # the child: never returns
        os.close(results_r)
        _child(work, folds, tasks, cut, tokens_r, results_w)
    os.close(results_w)
    received: list[tuple] = []
    reader = threading.Thread(target=receive, args=(results_r, received), daemon=True)
    reader.start()
    done: dict[int, tuple[list, list]] = {}
    try:
        while (t := take(tokens_r)) is not None:
            done[t] = run_task(work, folds, tasks[t], cut)
        if reader.is_alive():   # the child is still at it: load what comes next meanwhile
            warm()
        reader.join()
        reap(pid)
        pid = None
    finally:
        os.close(tokens_r)
        if pid is not None:   # the main process failed (or Ctrl-C): the child's work is moot
            kill_child(pid)
    for t, found, internal in received:
        done.setdefault(t, (found, internal))
    out = []
    for t in sorted(range(len(tasks)), key=lambda t: tasks[t][:2]):   # the folds' order, ranges in key order
        found, internal = done[t] if t in done else run_task(work, folds, tasks[t], cut)   # the child's, unsent
        out.extend(found)
        work.internal.extend(internal)
    for f in folds:
        work.selected.pop(f.name, None)
    return out


AFTER = ("kaudit.audit.stories.clusters", "kaudit.report.findings")   # the modules a run imports after its folds


def warm() -> None:
    """Loads what the run imports after its folds, while another process folds (~4 ms)."""
    import importlib

    for name in AFTER:
        importlib.import_module(name)


def run_task(work, folds, task: tuple[int, int, int], cut: dict) -> tuple[list, list]:
    """A fold's findings and the internal errors it added (`_run_one`), or those of one range of
    its keys (`part` of `parts`): its selection named, prepared and cut once in each process."""
    i, part, parts = task
    if parts == 1:
        return _run_one(work, folds[i])
    fold = folds[i]
    ctx = work.audit.context(work.ctx, work.facts, fold)
    if i not in cut:
        cut[i] = _cut(fold, work.selected[fold.name], ctx, parts)
    tables, cuts = cut[i]
    mark, keep = len(work.internal), work.audit.keep
    found = [x for x in run_prepared(fold, key_ranges.part(tables, fold.key, cuts, part), ctx, work.internal)
             if keep(x)]
    internal = work.internal[mark:]
    del work.internal[mark:]
    return found, internal


def _cut(fold, items: list, ctx, parts: int) -> tuple[list, list]:
    """A per-key fold's selection, named and prepared as `fold_selection` does, one table per
    kind, and the keys that start its ranges (none: not cut, the first range has it all)."""
    items = named(list(items), ctx)
    if fold.prepare is not None:
        items = fold.prepare(items, ctx)
    by_kind: dict[str, list] = {}
    for kind, t in items:
        by_kind.setdefault(kind, []).append(t)
    tables = [(kind, pa.concat_tables(ts) if len(ts) > 1 else ts[0]) for kind, ts in by_kind.items()]
    rows = key_ranges.weights(fold.key, [t for _, t in tables])
    return tables, ([] if rows is None else key_ranges.cuts(rows, parts))


def _run_one(work, fold) -> tuple[list, list]:
    """One fold's findings and the internal errors it added (taken back out of work.internal,
    so that they can be put back in the folds' order)."""
    mark = len(work.internal)
    found = work.run_folds([fold])
    internal = work.internal[mark:]
    del work.internal[mark:]
    return found, internal


def take(fd: int) -> int | None:
    b = os.read(fd, 1)   # one byte: a pipe read is atomic, so no fold is taken twice
    return b[0] if b else None


def _child(work, folds, tasks, cut: dict, tokens: int, results: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)   # Ctrl-C ends it at once, no traceback
    serve(work, folds, tasks, cut, tokens, results)


def serve(work, folds, tasks, cut: dict, tokens: int, results: int) -> None:
    """A forked process's share: the tasks it takes from the `tokens` pipe run, each one's
    findings and internal errors sent on `results` as it ends; then its exit (never returns). A
    task that fails ends the process: its findings are not sent, the other process runs it."""
    code = 1
    try:
        while (t := take(tokens)) is not None:
            send(results, (t, *run_task(work, folds, tasks[t], cut)))
        code = 0
    finally:
        # closed before the exit, which unmaps the memory first (~0.01-0.04 s measured): the
        # main process sees the end of the messages at once
        for fd in (results, tokens):
            try:
                os.close(fd)
            except OSError:
                pass
        os._exit(code)   # no atexit handlers, no flushing of the main process's buffers


def receive(fd: int, into: list) -> None:
    """The child's messages until it closes its end (a message it was cut off in is dropped)."""
    with os.fdopen(fd, "rb") as f:
        while True:
            try:
                into.append(recv(f))
            except (EOFError, pickle.UnpicklingError, ValueError):
                return
