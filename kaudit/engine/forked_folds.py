"""The local engine's folds in a forked child while the main process decodes, for log dirs whose
decode is Python under the GIL: the records of the internal topics (`__transaction_state`,
`__consumer_offsets`, `__cluster_metadata`) decode in pure Python, and folds on a second thread
of the same process (engine.local.execute) only take turns with it. Here the main process
decodes and sends each chunk (pickled: the tables' buffers out of band, not copied) down a pipe
from a writer thread, at most `behind` chunks ahead (engine.local.FOLDS_BEHIND); the child notes and folds them exactly
as execute's folds thread would, finishes (sharing its buffered folds with a child of its own
where that pays, engine.shared_folds), and sends back its findings, facts and internal errors.

Measured on the transaction bench (100k transactions, 55 MB of `__transaction_state`, 2 cores):
the folds are ~3.4 s of CPU beside a ~11 s decode; on a thread they add to it (audit 16.1 s
against the decode's 12.5 s), in the child they overlap it. The chunks cost the main process a
pickle and a copy into the pipe (~0.4 GB there), which is why a decode that is compiled code
(ordinary topics: the batch walk, which leaves the folds' numpy and Arrow calls room beside it)
keeps the thread. A capture's decode is compiled too, but it builds its rows under the GIL: the
selections on a thread only take turns with it (FORK_MIN_CAPTURE_BYTES); the capture summaries
the decode fills are sent to the child after the last chunk.

Used only when it is safe and can pay (`should_fork`): no tap (a tap's rows are the main
process's), Linux with 2+ usable CPUs, `--jobs` not 1, no other Python thread alive at the fork;
FORK_MIN_BYTES of internal topics' logs, or FORK_MIN_CAPTURE_BYTES of captures decoded in this
process alone (its pcap workers would be forked beside the pipe's thread). A child that fails says
why and the main process raises that error; one that dies is seen at the end of its pipes
(FoldsProcessDied)."""

from __future__ import annotations

import os
import pickle
import queue
import signal
import sys
import threading
import traceback

from kaudit.sources.cores import usable_cpus
from kaudit.engine.children import kill_child, reap, reap_ending, wait_child
from kaudit.sources.pcap_workers import recv_parts, send, widen
from kaudit.sources.records import METADATA_TOPIC, OFFSETS_TOPIC, REMOTE_TOPIC, TXN_TOPIC

# internal topics' log bytes from which the fork pays: their records decode in Python at ~8 MB/s
# (the folds beside them ~1/3 of that), against a few ms for the fork and ~0.1 s per 100 MB of
# chunks through the pipe
FORK_MIN_BYTES = 8 << 20
# capture bytes from which the wire audit's folds pay in a child: the decode is compiled but holds
# the GIL, so a selection on a second thread only takes turns with it; in the child it runs beside
# it. Measured on the 500k-packet bench capture (419 MB, 2 cores, 12 alternated runs): audit 1.32
# s best, 1.43 s median, against 1.36 / 1.48 s with the folds' thread. The chunks through the pipe
# cost ~0.1 s per 100 MB of rows, about what a capture of 64 MiB saves.
FORK_MIN_CAPTURE_BYTES = 64 << 20
MIN_BYTES_ENV = "KAUDIT_FORK_FOLDS_MIN_BYTES"   # another threshold (0: always, where it is safe)
PYTHON_DECODED = (TXN_TOPIC, OFFSETS_TOPIC, METADATA_TOPIC, REMOTE_TOPIC)
_END = "end"   # the main process's last message: every chunk was sent


class FoldsProcessDied(RuntimeError):
    """The folds' child ended without its findings (killed, out of memory)."""


def should_fork(audit, jobs: int | None, min_bytes: int | None = None) -> bool:
    """Whether `audit`'s folds run in a forked child while this process decodes (`jobs`: --jobs)."""
    if audit.side == "wire":
        return should_fork_captures(getattr(audit, "paths", ()), getattr(audit, "options", None), audit.tap, jobs,
                                    min_bytes)
    if audit.tap is not None or jobs == 1 or audit.layout is None:
        return False
    python = sum(t.size for t in audit.layout.targets if t.kind == "log" and t.topic in PYTHON_DECODED)
    return python >= _min_bytes(min_bytes, FORK_MIN_BYTES) and _safe()


def should_fork_captures(paths, options, tap, jobs: int | None, min_bytes: int | None = None) -> bool:
    """should_fork for the wire audit of `paths`, told before its plan is made (the plan, and the
    rules' modules it loads, can then be made in the child)."""
    if tap is not None or jobs == 1:
        return False
    return _capture_bytes(paths, options) >= _min_bytes(min_bytes, FORK_MIN_CAPTURE_BYTES) and _safe()


def _min_bytes(given: int | None, default: int) -> int:
    if given is None:
        env = os.environ.get(MIN_BYTES_ENV, "").strip()
        given = int(env) if env.isdigit() else None
    return default if given is None else given


def _safe() -> bool:
    return sys.platform.startswith("linux") and usable_cpus() >= 2 and threading.active_count() == 1


def _capture_bytes(paths, options) -> int:
    """The captures' bytes when they decode in this process alone (pcap workers are forked once
    the decode starts, when the pipe's writer thread is alive: no fork then); else 0."""
    from kaudit.sources.pcap import auto_jobs

    sizes = []
    for p in paths or ():
        try:
            sizes.append(os.path.getsize(p))
        except (OSError, TypeError):
            return 0   # stdin, a file that went away: the decode says so
    deep, jobs = bool(getattr(options, "deep", False)), getattr(options, "jobs", None)
    if not sizes or (jobs if jobs is not None else max(auto_jobs(n, deep) for n in sizes)) != 1:
        return 0
    return sum(sizes)


def run_forked(work, chunks, finish, behind: int = 4, ending=None, share: bool = False,
               jobs: int | None = None, meanwhile=None) -> tuple[list, object, list]:
    """(findings, facts, internal errors) of `work` over `chunks`, folded in a forked child;
    `work`: a plan.Work, or a function that makes it in the child (the rules' modules then load
    there, beside the decode, not before it). `finish(work)` gives the findings once every chunk
    is folded (in the child). `ending()`:
    facts this process learnt while decoding (a dict of Facts attributes: the capture summaries),
    sent after the last chunk and set in the child's facts before it finishes. `share`: the
    buffered folds may be shared with a helper the child forks at once (engine.helper_folds;
    `jobs`: --jobs). `meanwhile()`: this process's own work once the child has everything,
    run while it folds (after the end is sent: the child never waits for it)."""
    reap_ending()
    chunks_r, chunks_w = os.pipe()
    results_r, results_w = os.pipe()
    widen(chunks_w)
    pid = os.fork()
    if pid == 0:   # the child: never returns
        os.close(chunks_w)
        os.close(results_r)
        _child(work, finish, chunks_r, results_w, share, jobs)
    os.close(chunks_r)
    os.close(results_w)
    writer = _Writer(chunks_w, behind)
    try:
        for item in chunks:
            if not writer.put(item):
                break   # the child is gone: what it said (or not) is below
        writer.close(ending() if ending is not None else None)
        if meanwhile is not None:
            meanwhile()
        with os.fdopen(results_r, "rb") as f:
            results_r = None
            try:
                message = recv_parts(f)
            except (EOFError, pickle.UnpicklingError, ValueError):
                message = None
        if message is None:
            status = wait_child(pid)
        else:   # its results are in: its exit (~15-40 ms to free the selections) need not be waited for
            reap(pid)
        pid = None
    finally:
        if pid is not None:   # the main process failed (or Ctrl-C): the child's work is moot
            kill_child(pid)
        writer.close()   # (a dead child's pipe: the writer drops what is left)
        if results_r is not None:
            os.close(results_r)
    if message is None:
        raise FoldsProcessDied(f"the folds' process ended without its findings (wait status {status})")
    if message[0] == "error":
        raise message[1]
    return message[1], message[2], message[3]


class _Writer:
    """Sends the chunks from a thread (a blocked write leaves the GIL to the decode), at most
    `behind` queued; after the child closes its end, takes and drops what it is given."""

    def __init__(self, fd: int, behind: int):
        self.fd = fd
        self.queue: queue.Queue = queue.Queue(behind)
        self.broken = False
        self.thread = threading.Thread(target=self._run, name="kaudit-folds-pipe", daemon=True)
        self.thread.start()

    def put(self, item) -> bool:
        if self.broken:
            return False
        self.queue.put(item)
        return True

    def close(self, facts: dict | None = None) -> None:
        if self.thread is None:
            return
        if not self.broken:
            self.queue.put((_END, facts))
        self.queue.put(None)
        self.thread.join()
        self.thread = None
        os.close(self.fd)

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.broken:
                continue
            try:
                send(self.fd, item)
            except OSError:   # EPIPE: the child closed its end (it failed or died)
                self.broken = True


def _with_helper(helper):
    return lambda work: work.finish(runner=helper.run)


def _child(work, finish, chunks: int, results: int, share: bool = False, jobs: int | None = None) -> None:
    code = 1
    f = os.fdopen(chunks, "rb", buffering=1 << 20)
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)   # Ctrl-C ends it at once, no traceback
        if callable(work):
            work = work()
        helper = None
        from kaudit.engine import helper_folds   # (the child's: the main process decodes without it)

        if share and helper_folds.should_start(work, jobs):
            helper = helper_folds.Helper(work, close=(chunks, results))
            finish = _with_helper(helper)
        while (item := recv_parts(f))[0] != _END:
            work.note(*item)
            work.fold(*item)
            if helper is not None:
                helper.forward(work)
        for name, value in (item[1] or {}).items():
            setattr(work.facts, name, value)
        f.close()
        send(results, ("done", finish(work), work.facts, work.internal))
        code = 0
    except BaseException as e:  # noqa: BLE001 - the main process raises it
        f.close()   # first: the main process's writes fail rather than wait on this one
        _send_error(results, e)
    finally:
        os._exit(code)   # no atexit handlers, no flushing of the main process's buffers


def _send_error(fd: int, e: BaseException) -> None:
    if isinstance(e, EOFError):   # the main process is gone: no one to tell
        return
    e.add_note("(in the folds' process)\n" + traceback.format_exc(limit=12))
    try:
        pickle.dumps(e)
    except Exception:  # noqa: BLE001 - an error that does not pickle is told by its text
        e = RuntimeError(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=12)}")
    try:
        send(fd, ("error", e))
    except OSError:
        pass
