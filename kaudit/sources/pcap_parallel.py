"""One capture decoded by several processes, with the very rows - in the very order - of a decode
in one process.

After TCP reassembly the connections are independent, so they are shared out: the main process
reads the capture (the capture layer runs once), decodes its own share of the connections and
ships the events of the others to worker processes (fresh interpreters, as multiprocessing's
spawn makes them but without re-running the caller's __main__; payload bytes go through a pipe,
in batches of about a megabyte). Every process logs which capture event added which rows (`KeyedRows`), and
the main process replays the logs in event order (`Merger`): rows of each kind come out in the
one-process order, cut into the same chunks (a chunk ends after the event that brings it to
FLUSH_ROWS rows, its kinds in order of first appearance).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections import deque

import pyarrow as pa

from kaudit import native
from kaudit.capture import CaptureStreams, ConnClose, ConnOpen, Diverted, StreamData
from kaudit.sources.pcap import FLUSH_ROWS, KEY_CLOSED, KEY_ISSUES, Session, capture_issues
from kaudit.sources.wire_rows import WireRows, rows_table

BATCH_BYTES = 1 << 20  # payload bytes shipped to a worker per message
BATCH_EVENTS = 4096
SEND_QUEUE = 32  # messages waiting for a worker (then the main process waits too)
# Every process tells the merger how far it got at least this often, rows or not (the merger
# holds rows until every process is past them: this bounds the main process's memory).
QUIET_BATCHES = 8
QUIET_EVENTS = 32768
# Of every 7 connections (by id) the main process keeps 2: it also reads the capture, ships the
# others' bytes and puts the rows back in order.
MAIN_WEIGHT, WORKER_WEIGHT = 2, 5
_DONE = float("inf")


def owner(conn_id: int, jobs: int) -> int:
    """Which process decodes a connection: 0 (the main one) or a worker 1..jobs-1."""
    slot = conn_id % (MAIN_WEIGHT + WORKER_WEIGHT * (jobs - 1))
    return 0 if slot < MAIN_WEIGHT else 1 + (slot - MAIN_WEIGHT) // WORKER_WEIGHT


# ---- messages on pipes: 16-byte header (head length, blob length), head, blob ----------------

_HEADER = struct.Struct(">QQ")


def _send(fd: int, head: bytes, parts=()) -> None:
    """One message: `head` and the concatenation of `parts` (bytes-like). The parts are joined
    first: writev with thousands of packet-sized pieces is far slower than one copy."""
    blob = memoryview(b"".join(parts))
    pending = [memoryview(_HEADER.pack(len(head), len(blob))), memoryview(head), blob]
    pending = [p for p in pending if len(p)]  # writev of empty parts only would write 0 forever
    i = 0
    while i < len(pending):
        n = os.writev(fd, pending[i:])
        while n:  # skip what was written (a write may stop inside a part)
            first = pending[i]
            if n >= len(first):
                n -= len(first)
                i += 1
            else:
                pending[i] = first[n:]
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


def _recv(f) -> tuple[bytes, bytearray]:
    """(head, blob) of one message; EOFError when the other end is closed."""
    header = f.read(_HEADER.size)
    if len(header) < _HEADER.size:
        if not header:
            raise EOFError("pipe closed")
        header += _read_exact(f, _HEADER.size - len(header))
    head_size, blob_size = _HEADER.unpack(header)
    return _read_exact(f, head_size), _read_exact(f, blob_size)


def _widen(fd: int) -> None:
    """Bigger pipe buffers: fewer wake-ups for megabyte messages (best effort)."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:
        pass


class KeyedRows(WireRows):
    """WireRows that also log which event added which rows: [(key, ((kind, count), ...))], the
    kinds in the order the event first touched them (the order a chunk lists its kinds in)."""

    def __init__(self, source: str):
        super().__init__(source)
        self.log: list = []
        self._touched: list = []
        self._lens: dict = {}

    def _list(self, kind: str) -> list:
        rows = super()._list(kind)
        if kind not in self._touched:
            self._touched.append(kind)
        return rows

    def mark(self, key: int) -> None:
        """The rows added since the last mark came from `key`."""
        touched = self._touched
        if touched:
            lens, rows = self._lens, self.rows
            entry = []
            for kind in touched:
                n = len(rows[kind])
                entry.append((kind, n - lens.get(kind, 0)))
                lens[kind] = n
            self.log.append((key, tuple(entry)))
            touched.clear()

    def take(self) -> tuple[list, dict]:
        """(log, {kind: table}) of the rows since the last take."""
        log, rows = self.log, self.rows
        self.log, self.rows, self.count, self._lens = [], {}, 0, {}
        return log, {kind: rows_table(kind, items) for kind, items in rows.items()}


class Merger:
    """The rows of `parts` processes put back in one-process order (see the module docstring).
    `add` takes a part's log and tables with its mark (every key up to it is logged); `ready`
    yields the chunks every part has got past; `finish` the rest, once every part is done."""

    def __init__(self, parts: int):
        self.logs = [deque() for _ in range(parts)]
        self.marks = [-1] * parts
        self.tables = [{} for _ in range(parts)]  # part -> kind -> [tables not yet emitted]
        self.used = [{} for _ in range(parts)]  # part -> kind -> rows of those tables emitted
        self.chunk: dict = {}  # kind -> [[part, first row, count], ...] of the chunk being built
        self.count = 0

    def add(self, part: int, log: list, tables: dict, mark) -> None:
        self.logs[part].extend(log)
        for kind, t in tables.items():
            if t.num_rows:
                self.tables[part].setdefault(kind, []).append(t)
        self.marks[part] = mark

    def ready(self):
        limit = min(self.marks)
        logs = self.logs
        while True:
            best = None
            for p, log in enumerate(logs):
                if log and log[0][0] <= limit and (best is None or log[0][0] < logs[best][0][0]):
                    best = p
            if best is None:
                return
            key, entry = logs[best].popleft()
            used = self.used[best]
            for kind, n in entry:
                runs = self.chunk.get(kind)
                if runs is None:
                    runs = self.chunk[kind] = []
                start = used.get(kind, 0)
                if runs and runs[-1][0] == best and runs[-1][1] + runs[-1][2] == start:
                    runs[-1][2] += n
                else:
                    runs.append([best, start, n])
                used[kind] = start + n
                self.count += n
            if key < KEY_CLOSED and self.count >= FLUSH_ROWS:
                yield from self._emit()

    def finish(self):
        self.marks = [_DONE] * len(self.marks)
        yield from self.ready()
        if self.chunk:
            yield from self._emit()

    def _emit(self):
        chunk, self.chunk, self.count = self.chunk, {}, 0
        for kind, runs in chunk.items():
            parts = {p for p, _, _ in runs}
            whole, base = [], {}
            at = 0
            for p in sorted(parts):
                t = pa.concat_tables(self.tables[p][kind]) if len(self.tables[p][kind]) > 1 else self.tables[p][kind][0]
                whole.append(t)
                base[p] = at
                at += t.num_rows
            table = whole[0] if len(whole) == 1 else pa.concat_tables(whole)
            if len(runs) == 1:
                p, start, n = runs[0]
                if start or n != table.num_rows:
                    table = table.slice(start, n)
            else:
                index: list = []
                for p, start, n in runs:
                    b = base[p] + start
                    index.extend(range(b, b + n))
                table = table.take(pa.array(index, pa.int64()))
            for t, p in zip(whole, sorted(parts)):
                left = t.slice(self.used[p][kind])
                self.tables[p][kind] = [left] if left.num_rows else []
                self.used[p][kind] = 0
            yield kind, table.combine_chunks()


# ---- the worker process ----------------------------------------------------------------------


def worker_main() -> None:
    """Entry point of a worker process: `python -c "..." IN_FD OUT_FD` (see _Worker)."""
    inbox = os.fdopen(int(sys.argv[1]), "rb", buffering=0)
    outbox = int(sys.argv[2])
    head, _ = _recv(inbox)
    path, options = pickle.loads(head)
    try:
        _serve(path, options, inbox, outbox)
    finally:
        os.close(outbox)


def feeder(rows):
    """(feed, data): Conversation.feed and .data of the session's conversations, compiled
    (sources/_cpcap.Feeder) when the compiled core is in use."""
    c = native.module("kaudit.sources._cpcap")
    if c is None:
        return (lambda conv, *a: conv.feed(*a)), (lambda conv, ev: conv.data(ev))
    f = c.Feeder(rows)
    return f.feed, f.data


def _serve(path: str, options, inbox, outbox: int) -> None:
    rows = KeyedRows(path)
    session = Session(path, options, rows)
    convs = session.convs
    feed, _ = feeder(rows)
    mark = rows.mark
    touched = rows._touched
    quiet = 0  # batches since the last message to the main process
    while True:
        head, blob = _recv(inbox)
        head = pickle.loads(head)
        if head[0] == "end":
            session.finish(mark=mark, stats=head[1])
            log, tables = rows.take()
            _send(outbox, pickle.dumps((_DONE, log, tables, session.kafka_connections), pickle.HIGHEST_PROTOCOL))
            return
        upto, events = head[1], head[2]
        blob = memoryview(blob).toreadonly()
        for ev in events:
            if len(ev) == 9:  # data: (number, conn_id, direction, offset, start, end, first, last, ts)
                number, conn_id, direction, offset, start, end, first, last, ts = ev
                feed(convs[conn_id], direction, offset, blob[start:end], first, last, ts)
            else:
                number, other = ev
                session.event(other, number)
            if touched:
                mark(number)
        quiet += 1
        # rows (or, now and then, only how far it got: the main process holds the other
        # processes' rows until every one is past them)
        if rows.count >= FLUSH_ROWS // 2 or quiet >= QUIET_BATCHES:
            log, tables = rows.take()
            _send(outbox, pickle.dumps((upto, log, tables, None), pickle.HIGHEST_PROTOCOL))
            quiet = 0


# A fresh interpreter, refusing the modules it never uses (kaudit.lean: it starts that much sooner).
_WORKER_BOOT = """
from kaudit.lean import refuse
refuse()
from kaudit.sources.pcap_parallel import worker_main
worker_main()
"""


def _package_root() -> str:
    """The folder holding the kaudit package (the worker imports it from there)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Worker:
    """The main process's end of one worker: batches of events out (a sender thread), results
    in (a receiver thread), so that neither process ever waits on a full pipe for the other."""

    def __init__(self, part: int, path: str, options):
        self.part = part
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        # a fresh interpreter (like multiprocessing's spawn, without re-running __main__)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, str(in_r), str(out_w)], pass_fds=(in_r, out_w), env=env,
            stdin=subprocess.DEVNULL)
        os.close(in_r)
        os.close(out_w)
        _widen(in_w)
        _widen(out_r)
        inbox = in_w
        outbox = os.fdopen(out_r, "rb", buffering=0)
        self.events: list = []
        self.views: list = []
        self.size = 0
        self.sendq: queue.Queue = queue.Queue(SEND_QUEUE)
        self.recvq: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.sender = threading.Thread(target=self._send_loop, args=(inbox,), daemon=True)
        self.receiver = threading.Thread(target=self._recv_loop, args=(outbox,), daemon=True)
        self.sender.start()
        self.receiver.start()
        self._put((pickle.dumps((path, options), pickle.HIGHEST_PROTOCOL), ()))

    def data(self, number: int, ev) -> None:
        n = len(ev.data)
        self.events.append((number, ev.conn_id, ev.direction, ev.stream_offset, self.size, self.size + n,
                            ev.first_frame, ev.last_frame, ev.ts))
        self.views.append(ev.data)
        self.size += n

    def event(self, number: int, ev) -> None:
        if type(ev) is ConnClose:  # its stats are sent at the end, when they are final
            ev = ConnClose(ev.conn_id, ev.reason, ev.ts, ev.frame, None)
        self.events.append((number, ev))

    def ship(self, upto: int, force: bool = False) -> None:
        if self.events and (force or self.size >= BATCH_BYTES or len(self.events) >= BATCH_EVENTS):
            head = pickle.dumps(("events", upto, self.events), pickle.HIGHEST_PROTOCOL)
            self._put((head, self.views))
            self.events, self.views, self.size = [], [], 0

    def end(self, upto: int, stats: dict) -> None:
        self.ship(upto, force=True)
        self._put((pickle.dumps(("end", stats), pickle.HIGHEST_PROTOCOL), ()))
        self._put(None)

    def results(self, block: bool = False):
        while True:
            try:
                item = self.recvq.get(block=block, timeout=1.0 if block else None)
            except queue.Empty:
                if block:
                    self._check()
                    continue
                return
            if isinstance(item, BaseException):
                raise RuntimeError(f"pcap worker {self.part} failed: {item}") from item
            yield item
            if item[0] == _DONE:
                return

    def _put(self, item) -> None:
        while True:
            self._check()
            try:
                self.sendq.put(item, timeout=1.0)
                return
            except queue.Full:
                continue

    def _check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"pcap worker {self.part} failed: {self.error}") from self.error
        code = self.proc.poll()
        if code not in (0, None):
            raise RuntimeError(f"pcap worker {self.part} exited with code {code}")

    def _send_loop(self, fd: int) -> None:
        try:
            while True:
                item = self.sendq.get()
                if item is None:
                    return
                _send(fd, *item)
        except BaseException as e:  # noqa: BLE001 - surfaced by _check
            self.error = e
        finally:
            os.close(fd)

    def _recv_loop(self, f) -> None:
        try:
            while True:
                item = pickle.loads(_recv(f)[0])
                self.recvq.put(item)
                if item[0] == _DONE:
                    return
        except BaseException as e:  # noqa: BLE001 - surfaced by results()
            self.recvq.put(e)
        finally:
            f.close()

    def close(self, wait: bool = True) -> None:
        if wait:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ---- the main process ------------------------------------------------------------------------


def decode_parallel(mm, path: str, options, summary, jobs: int, fragments=None):
    """`pcap._decode` with `jobs` processes (the rows and chunks are the same). `fragments`: as
    in `pcap._decode` (the main process writes them; they are not rows, so not merged)."""
    # raises for input that is no capture, before any spawn
    streams = CaptureStreams(mm, divert=fragments.divert if fragments is not None else None)
    workers = [_Worker(part, path, options) for part in range(1, jobs)]
    done = False
    try:
        yield from _run(streams, path, options, summary, jobs, workers, fragments)
        done = True
    finally:
        for w in workers:
            w.close(wait=done)


def _run(streams, path, options, summary, jobs, workers, fragments=None):
    rows = KeyedRows(path)
    session = Session(path, options, rows)
    merger = Merger(jobs)
    convs = session.convs
    _, data = feeder(rows)
    owners: dict[int, int] = {}
    closes: dict[int, dict] = {w.part: {} for w in workers}
    mark = rows.mark
    touched = rows._touched
    number = -1
    handed = 0  # the main process's rows are in the merger up to this event
    for number, ev in enumerate(streams.events()):
        if type(ev) is StreamData:
            part = owners[ev.conn_id]
            if part == 0:
                data(convs[ev.conn_id], ev)
                if touched:
                    mark(number)
            else:
                workers[part - 1].data(number, ev)
        elif type(ev) is Diverted:
            if fragments.add(ev):
                yield from fragments.tables()
        else:
            if type(ev) is ConnOpen:
                part = owners[ev.conn_id] = owner(ev.conn_id, jobs)
                summary.connections += 1
            else:
                part = owners[ev.conn_id]
            if part == 0:
                session.event(ev, number)
                mark(number)
            else:
                workers[part - 1].event(number, ev)
                if type(ev) is ConnClose:
                    closes[part][ev.conn_id] = ev
        if number & 255 == 0:
            for w in workers:
                w.ship(number)
                for upto, log, tables, _ in w.results():
                    merger.add(w.part, log, tables, upto)
            if rows.count >= FLUSH_ROWS // 2 or number - handed >= QUIET_EVENTS:
                merger.add(0, *rows.take(), number)
                handed = number
            yield from merger.ready()
    if fragments is not None:
        fragments.end(streams.packets, streams.last_ts)
        yield from fragments.tables()
    for w in workers:  # final stats: packets after a close (the last ACK) still count
        w.end(number, {cid: close.stats for cid, close in closes[w.part].items()})
    session.finish(mark=mark)
    capture_issues(rows, path, streams)
    mark(KEY_ISSUES)
    merger.add(0, *rows.take(), _DONE)
    yield from merger.ready()
    kafka = session.kafka_connections
    for w in workers:
        for upto, log, tables, extra in w.results(block=True):
            merger.add(w.part, log, tables, upto)
            if upto == _DONE:
                kafka += extra
        yield from merger.ready()
    yield from merger.finish()
    summary.kafka_connections = kafka
    summary.packets, summary.tcp_packets = streams.packets, streams.tcp_packets
    summary.last_ts, summary.dropped = streams.last_ts, dict(streams.dropped)
