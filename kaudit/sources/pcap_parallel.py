"""One capture decoded by several processes, with the very rows - in the very order - of a decode
in one process.

After TCP reassembly the connections are independent, so they are shared out by connection id:
the main process forks its workers before the decode starts (pcap_workers: they share the
capture's read-only mapping, the imports and the options), and every process walks the whole
capture - the compiled walk is cheap, and it numbers the capture events and the connections the
same way in every process - but decodes only the connections it owns, skipping the others'
segments before their bytes are looked at (`_cpcap.owned_loop`, or `owned_events` on the pure
path). Every process logs which event added which rows (`KeyedRows`); the workers send their rows
and logs to the main process, which replays the logs in event order (`Merger`): rows of each
kind come out in the one-process order, cut into the same chunks (a chunk ends after the event
that brings it to FLUSH_ROWS rows, its kinds in order of first appearance). Only rows cross a
process boundary, never payload bytes.
"""

from __future__ import annotations

from array import array

import numpy as np
import pyarrow as pa

from kaudit import native
from kaudit.model import KINDS
from kaudit.capture import CaptureStreams, ConnOpen, Diverted, StreamData
from kaudit.sources.pcap_session import FLUSH_ROWS, KEY_CLOSED, KEY_ISSUES, PcapSummary, Session, capture_issues
from kaudit.sources.pcap_workers import DONE as _DONE, Worker, send
from kaudit.sources.wire_rows import WireRows, rows_table

# Every process hands its rows on after this many events at the latest, rows or not (the merger
# holds rows until every process is past them: this bounds the main process's memory).
QUIET_EVENTS = 32768
# The main process waits for a worker more than this many events behind it (and stops reading
# one that far ahead): the rows held for the merge stay bounded.
MAX_LAG = 1 << 18
# Of every MAIN_WEIGHT + WORKER_WEIGHT * (jobs - 1) connections (by id) the main process keeps
# MAIN_WEIGHT: it also merges the rows, and its writer encodes them.
MAIN_WEIGHT, WORKER_WEIGHT = 2, 5
KIND_IDS = {kind: i for i, kind in enumerate(KINDS)}


def owner(conn_id: int, jobs: int) -> int:
    """Which process decodes a connection: 0 (the main one) or a worker 1..jobs-1."""
    slot = conn_id % (MAIN_WEIGHT + WORKER_WEIGHT * (jobs - 1))
    return 0 if slot < MAIN_WEIGHT else 1 + (slot - MAIN_WEIGHT) // WORKER_WEIGHT


class KeyedRows(WireRows):
    """WireRows that also log which event added which rows: one entry per (event, kind) it
    added rows of - the event's key, the kind's number in model.KINDS, the rows - the kinds of
    an event in the order it first touched them (the order a chunk lists its kinds in). The
    compiled row writers note the touched kinds themselves (_crows.Sink)."""

    def __init__(self, source: str):
        super().__init__(source)
        self._touched: list = []  # never replaced: _crows.Sink holds it
        self._new_log()

    def _new_log(self) -> None:
        self._keys, self._kinds, self._counts = array("q"), array("q"), array("q")
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
            for kind in touched:
                n = len(rows[kind])
                self._keys.append(key)
                self._kinds.append(KIND_IDS[kind])
                self._counts.append(n - lens.get(kind, 0))
                lens[kind] = n
            touched.clear()

    def take(self) -> tuple[tuple, dict]:
        """((keys, kinds, counts) of the log, {kind: table}) of the rows since the last take."""
        log = tuple(np.frombuffer(a, np.int64) if len(a) else np.zeros(0, np.int64)
                    for a in (self._keys, self._kinds, self._counts))
        rows = self.rows
        self.rows, self.count = {}, 0
        self._new_log()
        return log, {kind: rows_table(kind, items) for kind, items in rows.items()}


class Merger:
    """The rows of `parts` processes put back in one-process order (see the module docstring).
    `add` takes a part's log and tables with its mark (every key up to it is logged); `ready`
    yields the chunks every part has got past; `finish` the rest, once every part is done."""

    def __init__(self, parts: int):
        self.marks = [-1] * parts
        self.logs: list = []  # [(keys, parts, kinds, counts)] not yet placed in a chunk
        self.chunk = tuple(np.zeros(0, np.int64) for _ in range(4))  # the chunk being built
        self.streams: dict = {}  # (part, kind) -> [tables of rows not yet emitted]

    def add(self, part: int, log: tuple, tables: dict, mark) -> None:
        keys, kinds, counts = log
        if len(keys):
            self.logs.append((keys, np.full(len(keys), part, np.int64), kinds, counts))
        for kind, t in tables.items():
            if t.num_rows:
                self.streams.setdefault((part, KIND_IDS[kind]), []).append(t)
        self.marks[part] = mark

    def ready(self):
        limit = min(self.marks)
        logs = [self.chunk] + self.logs
        keys, parts, kinds, counts = (np.concatenate(c) for c in zip(*logs))
        order = np.argsort(keys, kind="stable")  # one event's entries are from one process
        keys, parts, kinds, counts = keys[order], parts[order], kinds[order], counts[order]
        final = int(np.searchsorted(keys, limit, side="right")) if limit != _DONE else len(keys)
        later = tuple(c[final:] for c in (keys, parts, kinds, counts))
        self.logs = [later] if len(later[0]) else []
        keys, parts, kinds, counts = keys[:final], parts[:final], kinds[:final], counts[:final]
        # a chunk ends after the event that brings it to FLUSH_ROWS rows (not among the rows
        # written at the end)
        start = 0
        total = np.cumsum(counts)
        while start < len(keys):
            before = total[start - 1] if start else 0
            i = int(np.searchsorted(total, before + FLUSH_ROWS, side="left"))
            if i >= len(keys) or keys[i] >= KEY_CLOSED:
                break
            end = int(np.searchsorted(keys, keys[i], side="right"))
            yield from self._emit(parts[start:end], kinds[start:end], counts[start:end])
            start = end
        self.chunk = (keys[start:], parts[start:], kinds[start:], counts[start:])

    def finish(self):
        self.marks = [_DONE] * len(self.marks)
        yield from self.ready()
        parts, kinds, counts = self.chunk[1:]
        if len(parts):
            yield from self._emit(parts, kinds, counts)

    def _emit(self, parts, kinds, counts):
        ids, first = np.unique(kinds, return_index=True)
        for kind in ids[np.argsort(first)]:
            sel = kinds == kind
            p, n = parts[sel], counts[sel]
            which = [q for q in np.unique(p).tolist() if n[p == q].sum()]
            pieces = [self._rows(q, int(kind), int(n[p == q].sum())) for q in which]
            if not which:  # touched, no row added: an empty table, as one process gives
                table = rows_table(KINDS[kind], [])
            elif len(which) == 1:
                table = pieces[0]
            else:  # the parts' rows interleaved: each entry's rows, in the entries' order
                base = dict(zip(which, np.cumsum([0] + [t.num_rows for t in pieces[:-1]]).tolist()))
                start = np.zeros(len(n), np.int64)
                for q in which:
                    at = p == q
                    start[at] = base[q] + np.cumsum(n[at]) - n[at]
                index = np.repeat(start - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
                table = pa.concat_tables(pieces).take(pa.array(index))
            yield KINDS[kind], table.combine_chunks()

    def _rows(self, part: int, kind: int, n: int) -> pa.Table:
        """The next `n` rows of a part's stream of a kind."""
        stream = self.streams[(part, kind)]
        whole = stream[0] if len(stream) == 1 else pa.concat_tables(stream)
        left = whole.slice(n)
        stream[:] = [left] if left.num_rows else []
        return whole.slice(0, n)


# ---- every process's loop ---------------------------------------------------------------------

def _owned(streams, session, rows, fragments, summary, part: int, jobs: int):
    """The loop of one process: yields event numbers where its rows are to be handed on, and
    the chunks of `fragments`."""
    mine = lambda conn_id: owner(conn_id, jobs)  # noqa: E731
    c = native.module("kaudit.sources._cpcap")
    if c is not None and streams.compiled:
        return c.owned_loop(streams, session, rows, fragments, summary, part, mine, FLUSH_ROWS // 2,
                            QUIET_EVENTS)
    return owned_events(streams, session, rows, fragments, summary, part, mine, FLUSH_ROWS // 2, QUIET_EVENTS)


def owned_events(streams, session, rows, fragments, summary, part, owner_of, hand_rows, quiet):
    """The pure twin of `_cpcap.owned_loop` (see there)."""
    convs = session.convs
    mark, touched = rows.mark, rows._touched
    handed = 0
    for number, ev in enumerate(streams.events()):
        t = type(ev)
        mine = False
        if t is Diverted:
            if fragments is not None and fragments.add(ev):
                yield from fragments.tables()
        elif t is ConnOpen:
            summary.connections += 1
            if owner_of(ev.conn_id) == part:
                mine = True
                session.event(ev, number)
        elif ev.conn_id in convs:
            mine = True
            if t is StreamData:
                convs[ev.conn_id].data(ev)
            else:
                session.event(ev, number)
        if mine and touched:
            mark(number)
        if rows.count >= hand_rows or number - handed >= quiet:
            handed = number
            yield number


def _work(mm, path, options, divert, jobs):
    """What a worker runs: its share of the capture, its rows sent to `fd`."""
    def run(part: int, fd: int) -> None:
        streams = CaptureStreams(mm, divert=divert)
        rows = KeyedRows(path)
        session = Session(path, options, rows)
        session.attach(streams)
        for number in _owned(streams, session, rows, None, PcapSummary(), part, jobs):
            send(fd, (number, *rows.take(), None))
        session.finish(mark=rows.mark)
        send(fd, (_DONE, *rows.take(), (session.kafka_connections, session.tls_status)))
    return run


# ---- the main process ------------------------------------------------------------------------


def decode_parallel(mm, path: str, options, summary, jobs: int, fragments=None):
    """`pcap._decode` with `jobs` processes (the rows and chunks are the same). `fragments`: as
    in `pcap._decode` (the main process writes them; they are not rows, so not merged)."""
    divert = fragments.divert if fragments is not None else None
    streams = CaptureStreams(mm, divert=divert)  # raises for input that is no capture, before any fork
    workers: list[Worker] = []
    done = False
    try:
        run = _work(mm, path, options, divert, jobs)
        for part in range(1, jobs):
            workers.append(Worker(part, run))
        for w in workers:
            w.start()
        yield from _run(streams, path, options, summary, jobs, workers, fragments)
        done = True
    finally:
        for w in workers:
            w.close(wait=done)


def _take(merger: Merger, workers, block_behind=None) -> None:
    """The workers' messages so far into the merger; a worker `block_behind` events or more
    behind is waited for, one that far ahead is not read (its pipe fills and it waits)."""
    for w in workers:
        if block_behind is not None and w.mark > block_behind + 2 * MAX_LAG:
            continue
        for upto, log, tables, _ in w.results():
            merger.add(w.part, log, tables, upto)
        while block_behind is not None and w.mark < block_behind and not w.finished:
            for upto, log, tables, _ in w.results(block=True):
                merger.add(w.part, log, tables, upto)
                break


def _run(streams, path, options, summary, jobs, workers, fragments=None):
    rows = KeyedRows(path)
    session = Session(path, options, rows)
    session.attach(streams)
    merger = Merger(jobs)
    for item in _owned(streams, session, rows, fragments, summary, 0, jobs):
        if type(item) is not int:
            yield item  # a chunk of fragments
            continue
        merger.add(0, *rows.take(), item)
        _take(merger, workers, item - MAX_LAG)
        yield from merger.ready()
    if fragments is not None:
        fragments.end(streams.packets, streams.last_ts)
        yield from fragments.tables()
    session.finish(mark=rows.mark)
    capture_issues(rows, path, streams)
    rows.mark(KEY_ISSUES)
    merger.add(0, *rows.take(), _DONE)
    yield from merger.ready()
    for w in workers:
        for upto, log, tables, _ in w.results(block=True):
            merger.add(w.part, log, tables, upto)
            yield from merger.ready()
    yield from merger.finish()
    summary.kafka_connections = session.kafka_connections + sum(w.extra[0] for w in workers)
    tls = dict(session.tls_status)
    for w in workers:
        for status, n in w.extra[1].items():
            tls[status] = tls.get(status, 0) + n
    summary.tls = tls
    summary.packets, summary.tcp_packets = streams.packets, streams.tcp_packets
    summary.last_ts, summary.dropped = streams.last_ts, dict(streams.dropped)
