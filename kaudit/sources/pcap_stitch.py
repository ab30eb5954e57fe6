"""Connections that span rotated capture files, reassembled across them.

tcpdump rotates its output (`-C`, `-G`), but a Kafka connection lives for hours and goes on from
one file into the next. Decoded file by file, the first file's half never closes, the next one's
starts mid-stream, the frame cut at the rotation is lost and responses no longer pair with their
requests. Here the files are decoded as the one capture they are, in two stages that suit both
engines (the Spark engine runs stage 1 per file and stage 2 per connection key after a shuffle):

Stage 1, `split_capture` (one file, independent of the others): the connections the file holds
whole (SYN to FIN or RST, `capture.open_ended`) are decoded as usual; every packet of the others
becomes a `tcp_fragment` row (`FRAGMENT_SCHEMA`: the TCP segment and its payload, with the
connection key, file index and frame number), and each key gets one `end` row per file (the
file's packet count and last packet time).

Stage 2, `stitch_fragments`: the fragment rows of each key, sorted by (key, file_index, frame),
replayed through a fresh TCP reassembler and the usual Session/Conversation: the sequence
numbers join the files (a frame cut at the rotation decodes whole, a segment missing there is a
stream gap, a new SYN on the same ports is a new connection). It yields the usual row kinds.

`decode_captures`: both stages in one process, for the local engine. The files are ranked by
their first packet's time (`file_order`), not by the order given. One file is `decode_capture`.

Where a stitched connection's rows point (the rule, identical in both engines): `source` is the
file holding the connection's first packet, on every row of the connection (so that one
connection stays one (source, connection) group for the audit), and frame numbers count on from
that file through the later files that hold packets of the same endpoints, as if they were one
capture: frame k of a later file is k plus the packets of those files before it (the numbering of
`mergecap -a` on them; a file with no packet of the connection adds nothing). Within its first
file a frame number is the file's own. `conn_id` is STITCHED_CONN_ID + the number of its first
frame (unique within the file, apart from the whole connections' ids). Rows of whole
connections are those of a single-file decode.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa

from kaudit.capture import (
    ACK, FIN, SYN, ConnClose, ConnOpen, Reassembler, StreamData, TcpSegment, open_capture, open_ended,
)
from kaudit.capture.tcp import MASK
from kaudit.protocol.errors import DecodeError
from kaudit.sources.conversation import endpoint
from kaudit.sources.pcap import FLUSH_ROWS, PcapOptions, PcapSummary, Session, decode_capture
from kaudit.sources.topics import TopicNames
from kaudit.sources.wire_rows import WireRows

FRAGMENT = "tcp_fragment"
FRAGMENT_SCHEMA = pa.schema([
    ("key", pa.string()),         # the connection's two endpoints, sorted: "ip:port-ip:port"
    ("file_index", pa.int32()),   # the file's rank among the captures (file_order)
    ("frame", pa.int64()),        # frame number in the file (from 1); an `end` row: packets + 1
    ("event", pa.string()),       # segment | end (the file's part of the key is over)
    ("source", pa.string()),      # the file's path
    ("ts", pa.float64()),         # the packet's time; an `end` row: the file's last packet time
    ("src", pa.string()),
    ("sport", pa.int32()),
    ("dst", pa.string()),
    ("dport", pa.int32()),
    ("seq", pa.int64()),
    ("ack", pa.int64()),
    ("flags", pa.int16()),        # TCP flag bits
    ("payload", pa.binary()),     # the captured TCP payload
    ("truncated", pa.int32()),    # payload bytes on the wire that the capture cut (snaplen)
])
SORT_KEYS = ("key", "file_index", "frame")  # stage 2's input order
SEGMENT, END = "segment", "end"
FLUSH_BYTES = 8 << 20  # payload bytes per fragment chunk (or FLUSH_ROWS rows)
STITCHED_CONN_ID = 1 << 32
_NAMES = tuple(FRAGMENT_SCHEMA.names)


def connection_key(src: str, sport: int, dst: str, dport: int) -> str:
    """The key of a TCP connection whichever way a packet goes: its endpoints, sorted."""
    a, b = endpoint(src, sport), endpoint(dst, dport)
    return f"{a}-{b}" if a <= b else f"{b}-{a}"


# ---- stage 1 ------------------------------------------------------------------------------------

class Fragments:
    """Stage 1's writer for one file (decode_capture's `fragments` hook): `prepare` picks the
    connections to hand on, `add` takes each of their packets (True: a chunk is full), `end`
    closes the file's part of every key, `tables` hands the chunks out."""

    def __init__(self, path: str, file_index: int):
        self.path, self.file_index = path, file_index
        self.divert = None  # the 4-tuples handed on (None: none)
        self._keys: dict = {}  # 4-tuple -> key
        self._rows: list = []
        self._bytes = 0

    def prepare(self, buf) -> None:
        self.divert = open_ended(buf) or None

    def add(self, ev) -> bool:
        seg = ev.segment
        four = (seg.src, seg.sport, seg.dst, seg.dport)
        key = self._keys.get(four)
        if key is None:
            key = self._keys[four] = connection_key(*four)
        payload = bytes(seg.payload)
        self._rows.append((key, self.file_index, ev.frame, SEGMENT, self.path, ev.ts, seg.src, seg.sport,
                           seg.dst, seg.dport, seg.seq, seg.ack, seg.flags, payload, seg.truncated))
        self._bytes += len(payload)
        return len(self._rows) >= FLUSH_ROWS or self._bytes >= FLUSH_BYTES

    def end(self, packets: int, last_ts: float | None) -> None:
        for key in sorted(set(self._keys.values())):
            self._rows.append((key, self.file_index, packets + 1, END, self.path, last_ts)
                              + (None,) * (len(_NAMES) - 6))

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        if self._rows:
            rows, self._rows, self._bytes = self._rows, [], 0
            yield FRAGMENT, fragment_table(rows)


def fragment_table(rows: list[tuple]) -> pa.Table:
    """A tcp_fragment table from tuples in FRAGMENT_SCHEMA order."""
    columns = zip(*rows) if rows else [()] * len(_NAMES)
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, FRAGMENT_SCHEMA)],
                                schema=FRAGMENT_SCHEMA)


def split_capture(path: str, file_index: int, options: PcapOptions | None = None,
                  summary: PcapSummary | None = None) -> Iterator[tuple[str, pa.Table]]:
    """Stage 1 for one capture file: (kind, table) chunks of the connections it holds whole,
    and `tcp_fragment` chunks of the others. Raises DecodeError if it is no capture."""
    yield from decode_capture(path, options, summary, fragments=Fragments(path, file_index))


def first_packet_ts(path: str) -> float | None:
    """The time of a capture's first packet (None: it has none). DecodeError if no capture."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise DecodeError(f"{path}: empty file, not a capture")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        records = open_capture(mm).records()
        first = next(records, None)
        records.close()
        return None if first is None else first[1]
    finally:
        try:
            mm.close()
        except BufferError:
            pass


def file_order(paths: Iterable[str], first_ts: dict | None = None) -> list[str]:
    """The captures in stitching order, which gives each its file_index: by first packet time
    (files without packets last), then by path. `first_ts`: path -> time, when already known."""
    ts = first_ts if first_ts is not None else {p: first_packet_ts(p) for p in paths}
    return sorted(paths, key=lambda p: (ts[p] is None, ts[p] or 0.0, p))


# ---- stage 2 ------------------------------------------------------------------------------------

class _Replay:
    """One key's packets, file after file, through its own reassembler and Session. Frame
    numbers go in as the key's (counting on across its files) and come out of each connection
    as its own (counting from the file of its first packet: see the module docstring)."""

    def __init__(self, options, rows: WireRows, counts: dict):
        self.reassembler = Reassembler()
        self.session = Session("", options, rows)
        self.rows = rows
        self.counts = counts  # source -> [connections, kafka connections, {TLS outcome: n}]
        self.file = None  # the file being fed (its file_index) and its path
        self.path = None
        self.base = 0  # the key's frame number of the packet before this file's first
        self.packets = None  # this file's packets (from its end row)
        self.last = -1  # the frame of the last row (in this file), to check the order
        self.end = None  # (frame, ts) where the capture of this key ends (this file's end row)
        self.conns: dict = {}  # the reassembler's conn_id -> (source, base)
        self.next_seq: dict = {}  # (src, sport) -> the sequence number that continues it
        self.last_ts = None
        self.prev_end = None  # where the previous file's part of the key ended
        self.check = False  # the next segment is the first of a later file: does it continue?

    def row(self, r: tuple) -> None:
        """One tcp_fragment row (a tuple in FRAGMENT_SCHEMA order)."""
        _key, file_index, frame, event, source, ts, src, sport, dst, dport, seq, ack, flags, payload, truncated = r
        if file_index != self.file:
            if self.file is not None:
                if file_index < self.file:
                    self._disorder(file_index, frame)
                self.base += self.packets if self.packets is not None else self.last
            self.prev_end, self.check = self.end, self.file is not None
            self.file, self.path, self.packets, self.end = file_index, source, None, None
        elif frame <= self.last:
            self._disorder(file_index, frame)
        self.last = frame
        if event == END:
            self.packets = frame - 1
            self.end = (self.base + frame - 1, ts)
            return
        if self.check:
            self.check = False
            if not self._continues(src, sport, dst, dport, seq, ack, flags, ts):
                # the same endpoints, another connection (captures that are not one rotated
                # capture, or a port reused): what the earlier files held ends where they end
                end, old = self.prev_end, self.reassembler
                self._dispatch(old.flush(*end) if end else old.flush())
                # a fresh reassembler: the closed one would take the new packets for its own
                self.reassembler = Reassembler(first_conn_id=old.next_conn_id)
                self.next_seq.clear()
        n = len(payload or b"") + (truncated or 0) + bool(flags & SYN) + bool(flags & FIN)
        self.next_seq[(src, sport)] = (seq + n) & MASK
        self.last_ts = ts if self.last_ts is None else max(self.last_ts, ts)
        events = self.reassembler.feed(
            TcpSegment(src, dst, sport, dport, seq, ack, flags, payload or b"", truncated or 0),
            self.base + frame, ts)
        if events:
            self._dispatch(events)

    def _continues(self, src, sport, dst, dport, seq, ack, flags, ts) -> bool:
        """Whether a later file's first segment of the key goes on with the earlier files'
        connection: not before their last packet, its sequence number (else its
        acknowledgement) within CONTINUE_WINDOW of where that direction stopped. A lost segment
        at the cut stays a gap; an unrelated connection's initial sequence numbers are random."""
        if flags & SYN:
            return True   # a new connection anyway: the reassembler starts it
        if self.last_ts is not None and ts < self.last_ts:
            return False
        mine, other = self.next_seq.get((src, sport)), self.next_seq.get((dst, dport))
        if mine is not None:
            return _near(seq, mine)
        if other is not None and flags & ACK:
            return _near(ack, other)
        return True   # nothing to compare with

    def _disorder(self, file_index, frame):
        raise ValueError(f"tcp_fragment rows out of order: file {file_index} frame {frame} after file "
                         f"{self.file} frame {self.last}; sort them by {SORT_KEYS}")

    def _dispatch(self, events) -> None:
        session, rows = self.session, self.rows
        for ev in events:
            t = type(ev)
            if t is ConnOpen:
                place = self.conns[ev.conn_id] = (self.path, self.base)
            else:
                place = self.conns[ev.conn_id]
            rows.source, base = place
            if t is StreamData:
                ev.first_frame -= base
                ev.last_frame -= base
                session.convs[ev.conn_id].data(ev)
                continue
            ev.frame -= base
            if t is ConnClose:
                conv = session.convs.get(ev.conn_id)
                session.event(ev)
                if conv is not None:
                    have = self.counts.setdefault(place[0], [0, 0, {}])
                    have[1] += conv.protocol == "kafka"
                    if conv.tls is not None and conv.tls.status is not None and (
                            conv.port_client is not None or conv.protocol == "kafka"):
                        have[2][conv.tls.status] = have[2].get(conv.tls.status, 0) + 1
            else:
                session.event(ev)
                if t is ConnOpen:
                    session.convs[ev.conn_id].conn_id = STITCHED_CONN_ID + ev.frame
                    self.counts.setdefault(place[0], [0, 0, {}])[0] += 1

    def finish(self) -> None:
        """The capture of the key is over: close what is open (as at the end of a capture),
        then the connection rows (Session.finish, each with its own source)."""
        self._dispatch(self.reassembler.flush(*self.end) if self.end else self.reassembler.flush())
        rows, session = self.rows, self.session
        for conv, op, close, _number in session.closed:
            rows.source = self.conns[close.conn_id][0]
            rows.connection(conv, op, close, close.stats)
        for cid, conv in session.convs.items():  # the reassembler closes everything: a guard
            rows.source = self.conns[cid][0]
            conv.finish()
            rows.connection(conv, session.opened[cid][0], None, None)


CONTINUE_WINDOW = 16 << 20   # bytes a stream may have lost (or re-sent) at a rotation


def _near(a: int, b: int) -> bool:
    d = (a - b) & MASK
    return d <= CONTINUE_WINDOW or d >= (1 << 32) - CONTINUE_WINDOW


class Stitcher:
    """Stage 2's engine. `feed(table)` takes tcp_fragment chunks (Arrow tables or record
    batches, any chunking), `finish()` ends every key; both yield (kind, table) row chunks.
    contiguous=True (stitch_fragments): each key's rows arrive together, a key is finished when
    the next one starts. False (decode_captures): the keys interleave, file after file, and all
    stay open until `finish`. Either way each key's rows must come in (file_index, frame) order."""

    def __init__(self, options: PcapOptions | None = None, contiguous: bool = True):
        self.options = options or PcapOptions()
        self.contiguous = contiguous
        self.rows = WireRows("")
        self.replays: dict[str, _Replay] = {}
        self.done: set = set()
        self.counts: dict = {}  # source -> [connections, kafka connections] of stitched connections

    def feed(self, table) -> Iterator[tuple[str, pa.Table]]:
        if not table.num_rows:
            return
        columns = [table.column(name).to_pylist() for name in _NAMES]
        rows, replays = self.rows, self.replays
        for r in zip(*columns):
            key = r[0]
            rep = replays.get(key)
            if rep is None:
                if key in self.done:
                    raise ValueError(f"tcp_fragment rows of key {key} are not contiguous; sort them by {SORT_KEYS}")
                if self.contiguous:
                    yield from self._finish_all()
                rep = replays[key] = _Replay(self.options, rows, self.counts)
            rep.row(r)
            if rows.count >= FLUSH_ROWS:
                yield from rows.tables()

    def _finish_all(self) -> Iterator[tuple[str, pa.Table]]:
        for key in sorted(self.replays):
            self.replays.pop(key).finish()
            self.done.add(key)
            if self.rows.count >= FLUSH_ROWS:
                yield from self.rows.tables()

    def finish(self, summaries: dict | None = None) -> Iterator[tuple[str, pa.Table]]:
        """The rest of the rows. `summaries` (source -> PcapSummary): the stitched connections
        are counted in their source's."""
        yield from self._finish_all()
        yield from self.rows.tables()
        if summaries is not None:
            for source, (conns, kafka, tls) in self.counts.items():
                s = summaries.get(source)
                if s is not None:
                    s.connections += conns
                    s.kafka_connections += kafka
                    for status, n in tls.items():
                        s.tls[status] = s.tls.get(status, 0) + n
            self.counts = {}


def stitch_fragments(tables: Iterable, options: PcapOptions | None = None,
                     summaries: dict | None = None) -> Iterator[tuple[str, pa.Table]]:
    """Stage 2: the rows of the connections in `tables` (tcp_fragment chunks, sorted by
    SORT_KEYS, each key's rows contiguous, chunked any way). `summaries`: see Stitcher.finish."""
    stitcher = Stitcher(options, contiguous=True)
    for t in tables:
        yield from stitcher.feed(t)
    yield from stitcher.finish(summaries)


# ---- both stages, in process --------------------------------------------------------------------

def decode_captures(paths: list[str], options: PcapOptions | None = None, summaries: dict | None = None,
                    errors: list | None = None) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks of capture files decoded as one capture (the local composition of
    split_capture and stitch_fragments: the fragments go to the stitcher as each file produces
    them, so memory is bounded by the open connections, not by the files). `summaries[path]` is
    filled for each file. `errors`: where "path: reason" goes for a file that is no capture or
    cannot be read (it is left out); None: the error is raised. Topics named by id only get
    their names from the captures' Metadata responses (sources.topics: a response later in the
    captures counts)."""
    return TopicNames().resolve_stream(_decode_captures(paths, options, summaries, errors))


def _decode_captures(paths, options, summaries, errors) -> Iterator[tuple[str, pa.Table]]:
    """decode_captures before the topic ids are named."""
    options = options or PcapOptions()
    summaries = summaries if summaries is not None else {}
    if len(paths) == 1:  # nothing to stitch: the plain decode, fast path and all
        summaries[paths[0]] = PcapSummary()
        yield from _guarded(paths[0], decode_capture(paths[0], options, summaries[paths[0]]), errors)
        return
    for p in paths:
        summaries[p] = PcapSummary()
    ordered, failed = capture_order(paths)
    for p, e in failed:
        _failed(p, e, errors)
    if len(ordered) == 1:
        yield from _guarded(ordered[0], decode_capture(ordered[0], options, summaries[ordered[0]]), errors)
        return
    stitcher = Stitcher(options, contiguous=False)
    for i, p in enumerate(ordered):
        for kind, t in _guarded(p, split_capture(p, i, options, summaries[p]), errors):
            if kind == FRAGMENT:
                yield from stitcher.feed(t)
            else:
                yield kind, t
    yield from stitcher.finish(summaries)


def _guarded(path: str, chunks: Iterator, errors: list | None) -> Iterator:
    try:
        yield from chunks
    except (DecodeError, OSError) as e:
        _failed(path, e, errors)


def capture_order(paths: list[str]) -> tuple[list[str], list[tuple[str, Exception]]]:
    """(the captures ranked by their first packet's time, the files that are no capture or
    cannot be read with why) of files decoded as one capture (every engine ranks them so)."""
    first_ts, failed = {}, []
    for p in paths:
        try:
            first_ts[p] = first_packet_ts(p)
        except (DecodeError, OSError) as e:
            failed.append((p, e))
    return file_order(list(first_ts), first_ts), failed


def failure(path: str, e: Exception) -> str:
    """"path: reason" for a capture that could not be read."""
    why = e.message if isinstance(e, DecodeError) else str(e.strerror or e)
    return why if why.startswith(f"{path}:") else f"{path}: {why}"   # the reader may name the path already


def _failed(path: str, e: Exception, errors: list | None) -> None:
    if errors is None:
        raise e
    errors.append(failure(path, e))
