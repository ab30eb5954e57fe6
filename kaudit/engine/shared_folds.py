"""The local engine's buffered folds on two cores: once the input is decoded, a forked child and
the main process take the folds one at a time from a shared pipe of fold numbers (whichever is
free takes the next), the child sends each fold's findings back, and the main process puts them
in the folds' order - the findings and internal errors are the ones `Work.run_folds` gives.

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

from kaudit.sources.cores import usable_cpus
from kaudit.sources.pcap_workers import recv, send   # the pcap workers' pipe messages

SHARE_MIN_ROWS = 50_000


def should_share(work, jobs: int | None, min_rows: int | None = None) -> bool:
    """Whether `work`'s buffered folds are worth sharing with a forked child (`jobs`: --jobs)."""
    min_rows = SHARE_MIN_ROWS if min_rows is None else min_rows
    rows = sorted(sum(t.num_rows for _, t in work.selected[f.name])
                  for f in work.audit.buffered if work.selected.get(f.name))
    # the rows besides the biggest selection: what the other process could take (the disk
    # audit's transactions fold beside a replicas fold of a few rows gains nothing)
    return (jobs != 1 and len(rows) >= 2 and sum(rows[:-1]) >= min_rows and sys.platform.startswith("linux")
            and usable_cpus() >= 2 and threading.active_count() == 1)


def run_shared(work, folds) -> list[dict]:
    """`Work.run_folds(folds)`, shared with a forked child (see the module's docstring)."""
    folds = list(folds)
    if len(folds) > 255:
        return work.run_folds(folds)
    tokens_r, tokens_w = os.pipe()
    os.write(tokens_w, bytes(range(len(folds))))   # < 64 KiB: the pipe holds them all
    os.close(tokens_w)
    results_r, results_w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: never returns
        os.close(results_r)
        _child(work, folds, tokens_r, results_w)
    os.close(results_w)
    received: list[tuple] = []
    reader = threading.Thread(target=_receive, args=(results_r, received), daemon=True)
    reader.start()
    done: dict[int, tuple[list, list]] = {}
    try:
        while (i := _take(tokens_r)) is not None:
            done[i] = _run_one(work, folds[i])
        reader.join()
        _wait(pid)
        pid = None
    finally:
        os.close(tokens_r)
        if pid is not None:   # the main process failed (or Ctrl-C): the child's work is moot
            _kill(pid)
    for i, found, internal in received:
        done.setdefault(i, (found, internal))
    out = []
    for i, f in enumerate(folds):
        found, internal = done[i] if i in done else _run_one(work, f)   # the child's, unsent
        work.selected.pop(f.name, None)
        out.extend(found)
        work.internal.extend(internal)
    return out


def _run_one(work, fold) -> tuple[list, list]:
    """One fold's findings and the internal errors it added (taken back out of work.internal,
    so that they can be put back in the folds' order)."""
    mark = len(work.internal)
    found = work.run_folds([fold])
    internal = work.internal[mark:]
    del work.internal[mark:]
    return found, internal


def _take(fd: int) -> int | None:
    b = os.read(fd, 1)   # one byte: a pipe read is atomic, so no fold is taken twice
    return b[0] if b else None


def _child(work, folds, tokens: int, results: int) -> None:
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)   # Ctrl-C ends it at once, no traceback
        while (i := _take(tokens)) is not None:
            send(results, (i, *_run_one(work, folds[i])))
        code = 0
    finally:
        os._exit(code)   # no atexit handlers, no flushing of the main process's buffers


def _receive(fd: int, into: list) -> None:
    """The child's messages until it closes its end (a message it was cut off in is dropped)."""
    with os.fdopen(fd, "rb") as f:
        while True:
            try:
                into.append(recv(f))
            except (EOFError, pickle.UnpicklingError, ValueError):
                return


def _wait(pid: int) -> None:
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except InterruptedError:
            continue
        except ChildProcessError:
            return


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _wait(pid)
