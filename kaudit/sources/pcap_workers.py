"""The worker processes of a parallel capture decode (sources/pcap_parallel) and their pipes.

A worker is a fork of the main process, made before the decode starts: it has the capture's
read-only mapping, the imports and the options already, so it starts in about a millisecond and
nothing but rows ever crosses a process boundary. It walks the whole capture itself (the compiled
walk is cheap; every process numbers the events and the connections alike), decodes the
connections it owns and sends the main process its rows (Arrow tables, pickled) with the log of
which event added them. It leaves with `os._exit`, never returning into the caller's code.

The main process reads each worker's pipe on a thread into a bounded queue (a worker far ahead
waits on its pipe: memory stays bounded); a worker that fails says why, one that dies is seen
by the end of its pipe, and every worker is killed and reaped if the decode stops early.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import queue
import signal
import struct
import threading
import traceback

_COUNT = _HEADER = struct.Struct(">Q")
_IOV_MAX = 512
RECV_QUEUE = 8  # messages read ahead from one worker (then its pipe fills and it waits)
DONE = float("inf")  # the mark of a worker's last message: every key is logged


# ---- messages on pipes: lengths, a pickle, its buffers (the tables' bytes, not copied) --------

def send(fd: int, obj) -> None:
    buffers: list = []
    data = pickle.dumps(obj, 5, buffer_callback=buffers.append)
    parts = [memoryview(data)] + [b.raw() for b in buffers]
    head = _COUNT.pack(len(parts)) + b"".join(_HEADER.pack(len(p)) for p in parts)
    pending = [memoryview(head)] + [p for p in parts if len(p)]
    while pending:  # writev may stop anywhere: go on from there
        n = os.writev(fd, pending[:_IOV_MAX])
        while n:
            if n >= len(pending[0]):
                n -= len(pending.pop(0))
            else:
                pending[0] = pending[0][n:]
                n = 0


def _read_exact(f, size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = f.readinto(view[got:])
        if not n:
            raise EOFError("pipe closed mid-message")
        got += n
    return buf


def recv(f):
    """One message (its tables over the bytes read: no copy); EOFError when the other end is closed."""
    header = f.read(_COUNT.size)
    if not header:
        raise EOFError("pipe closed")
    if len(header) < _COUNT.size:
        header += _read_exact(f, _COUNT.size - len(header))
    (count,) = _COUNT.unpack(header)
    sizes = struct.unpack(f">{count}Q", _read_exact(f, 8 * count))
    whole = memoryview(_read_exact(f, sum(sizes)))
    parts, at = [], 0
    for size in sizes:
        parts.append(whole[at:at + size])
        at += size
    return pickle.loads(parts[0], buffers=parts[1:])


def recv_parts(f):
    """One message of `send`, each of its buffers read into its own bytes (recv reads them into
    one): a fold that keeps a few columns of a chunk keeps only their bytes, not the whole
    chunk's (engine.forked_folds). EOFError when the other end is closed."""
    header = f.read(_COUNT.size)
    if len(header) < _COUNT.size:
        raise EOFError("pipe closed")
    (count,) = _COUNT.unpack(header)
    sizes = struct.unpack(f">{count}Q", _read_exact(f, 8 * count))
    parts = [_read_exact(f, size) for size in sizes]
    return pickle.loads(parts[0], buffers=parts[1:])


def widen(fd: int) -> None:
    """A bigger pipe buffer: fewer wake-ups for megabyte messages (best effort)."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:
        pass


class WorkerFailed(RuntimeError):
    pass


class Worker:
    """The main process's end of one forked worker: `results()` its messages (upto, log,
    tables, extra) as they come, `close()` reaps it (killing it unless it finished)."""

    def __init__(self, part: int, run):
        """Forks; the child runs `run(part, fd)` (it sends its messages to fd) and exits."""
        self.part = part
        r, w = os.pipe()
        widen(w)
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            code = 0
            try:
                os.close(r)
                signal.signal(signal.SIGINT, signal.SIG_DFL)  # the main process reports an interrupt
                try:
                    run(part, w)
                except BaseException as e:  # noqa: BLE001 - the main process says it
                    code = 1
                    send(w, ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"))
            finally:
                os._exit(code)
        os.close(w)
        self.pid = pid
        self.status = None
        self.pipe = os.fdopen(r, "rb", buffering=1 << 20)
        self.queue: queue.Queue = queue.Queue(RECV_QUEUE)
        self.mark = -1
        self.finished = False
        self.extra = None  # what its last message adds (the Kafka connections it found)
        self.closing = False
        self.thread = None

    def start(self) -> None:
        """Starts reading its pipe (after every fork: no thread runs in a process being forked)."""
        self.thread = threading.Thread(target=self._read, name=f"kaudit-pcap-{self.part}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                item = recv(self.pipe)
                if not self._put(item) or item[0] == DONE or item[0] == "error":
                    return
        except BaseException as e:  # noqa: BLE001 - results() says it
            self._put(("died", e))

    def _put(self, item) -> bool:
        """Queues a message (False: the decode stopped, nobody will read it)."""
        while not self.closing:
            try:
                self.queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def results(self, block: bool = False):
        """The messages received so far (block: until the last one)."""
        while not self.finished:
            try:
                item = self.queue.get(block=block)
            except queue.Empty:
                return
            if item[0] == "error":
                raise WorkerFailed(f"pcap worker {self.part} failed: {item[1]}")
            if item[0] == "died":
                raise WorkerFailed(f"pcap worker {self.part} died ({self._exit_status()})")
            self.mark = item[0]
            if item[0] == DONE:
                self.finished, self.extra = True, item[3]
            yield item

    def _exit_status(self) -> str:
        status = self._wait(timeout=2.0)
        if status is None:
            return "its pipe closed"
        if os.WIFSIGNALED(status):
            return f"killed by signal {os.WTERMSIG(status)}"
        return f"exit code {os.waitstatus_to_exitcode(status)}"

    def _wait(self, timeout: float):
        """Its wait status once it has exited (None: still running after `timeout` seconds)."""
        if self.status is not None:
            return self.status
        waited = 0.0
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                return status
            if waited >= timeout:
                return None
            threading.Event().wait(0.01)
            waited += 0.01

    def close(self, wait: bool = True) -> None:
        """Reaps the worker: given `wait` seconds' grace once it finished, killed otherwise."""
        if self._wait(timeout=5.0 if wait and self.finished else 0.0) is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, self.status = os.waitpid(self.pid, 0)
        self.closing = True  # its pipe is closed now: the reading thread ends
        if self.thread is not None:
            self.thread.join()
        self.pipe.close()
