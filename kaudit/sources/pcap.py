"""The wire source: a capture file -> TCP streams -> Kafka conversations -> rows.

Rows: `frame` (one per request/response pair), `batch` (every record batch of Produce requests
and Fetch responses, with their context), `fetch_partition`, `txn_event`, `connection`,
`decode_issue`. The file is mapped read-only; memory is bounded by the open connections'
unacknowledged bytes and the rows of one chunk. Big captures can be decoded by several processes
(`pcap_parallel`; `auto_jobs` says when), with the same rows in the same order and chunks.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from kaudit import native
from kaudit.capture import (
    CaptureStreams, ConnClose, ConnOpen, Diverted, StreamConflict, StreamData, StreamGap,
)
from kaudit.capture.tls.keylog import KeyLog
from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire.headers import DEFAULT_MAX_FRAME
from kaudit.sources import cores
from kaudit.sources.conversation import Conversation
from kaudit.sources.wire_rows import WireRows

# Rows per chunk: each chunk costs the Parquet writer, the audit's selections and facts a fixed
# amount. Measured on the 500k-packet bench capture (issue 19, interleaved, best of two): 8,192
# decode 1.03 s / audit 1.38 s; 16,384 0.90 / 1.31; 32,768 0.88 / 1.34; 65,536 0.90 / 1.25 s,
# peak RSS +10 MB. A live window holds far fewer rows: it is cut by its bytes (capture/live.py).
FLUSH_ROWS = 65536
# Where rows come from, as sortable keys (a parallel decode puts its processes' rows back in this
# order): the capture event that caused them (its number), then at the end the connection rows
# (by the number of the close event, then of the open event for connections left open), then the
# capture file's issues.
KEY_CLOSED, KEY_OPEN, KEY_ISSUES = 1 << 40, 2 << 40, 3 << 40
MIN_PARALLEL_BYTES = cores.MIN_PARALLEL_BYTES  # smaller captures: one process (jobs=None)
DEFAULT_KAFKA_PORTS = frozenset({9092})


@dataclass
class PcapOptions:
    kafka_ports: frozenset = DEFAULT_KAFKA_PORTS
    deep: bool = False
    max_batch_bytes: int = DEFAULT_MAX_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME
    # processes for one capture (None: by its size and the CPUs; 1: this process only). The
    # rows and their order are the same whatever the number.
    jobs: int | None = None
    # TLS key log (capture.tls.KeyLog from --tls-keylog files; None: none given). A pcapng's
    # Decryption Secrets Blocks add to it for that capture.
    tls_keys: object = None


@dataclass
class PcapSummary:
    """What the capture held, for coverage lines and the report header."""

    packets: int = 0
    tcp_packets: int = 0
    connections: int = 0
    kafka_connections: int = 0
    last_ts: float | None = None
    dropped: dict = field(default_factory=dict)
    tls: dict = field(default_factory=dict)  # TLS connections by outcome (decrypted, no-key, ...)


def decode_capture(path: str, options: PcapOptions | None = None, summary: PcapSummary | None = None,
                   fragments=None) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks for one capture file. Raises DecodeError if it is no capture.

    `fragments` (pcap_stitch.Fragments, for rotated captures): the connections the file does not
    hold whole are not decoded but handed to it as TCP segments, and its chunks come out among
    the rows'."""
    options = options or PcapOptions()
    summary = summary if summary is not None else PcapSummary()
    with open(path, "rb") as f:  # read-only: kaudit never writes to what it audits
        if os.fstat(f.fileno()).st_size == 0:
            raise DecodeError(f"{path}: empty file, not a capture")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        if fragments is not None:
            fragments.prepare(mm)
        jobs = options.jobs if options.jobs is not None else auto_jobs(len(mm), options.deep)
        if jobs > 1:
            from kaudit.sources.pcap_parallel import decode_parallel

            yield from decode_parallel(mm, path, options, summary, jobs, fragments)
        else:
            yield from _decode(mm, path, options, summary, fragments)
    finally:
        try:
            mm.close()
        except BufferError:  # views still held by rows being written: the GC unmaps it
            pass


class Session:
    """The conversations of the connections one process decodes: capture events in, rows out
    (to `rows`, a WireRows). `event` handles every event but StreamData, which goes straight to
    `convs[conn_id].data` (the hot path); `finish` adds the rows written at the end."""

    def __init__(self, path: str, options: PcapOptions, rows):
        self.path, self.options, self.rows = path, options, rows
        self.convs: dict[int, Conversation] = {}
        self.opened: dict[int, tuple] = {}  # conn_id -> (ConnOpen, event number)
        self.closed: list = []  # (conversation, ConnOpen, ConnClose, event number of the close)
        self.kafka_connections = 0
        self.tls_status: dict[str, int] = {}  # TLS connections by outcome (capture/tls STATUS_*)
        # the key log given, plus the secrets a pcapng carries (Decryption Secrets Blocks):
        # one object that the conversations share, so secrets met later reach them too
        self.tls_keys = options.tls_keys.copy() if options.tls_keys is not None else KeyLog()

    def attach(self, streams) -> None:
        """Take the TLS secrets of the capture's pcapng Decryption Secrets Blocks as the walk
        meets them (they precede the packets they are for)."""
        if getattr(streams.capture, "format", None) == "pcapng":
            streams.capture.on_secrets = self._secrets

    def _secrets(self, secrets_type: int, data) -> None:
        self.tls_keys.add_dsb(secrets_type, data)

    def event(self, ev, number: int = 0) -> None:
        t = type(ev)
        convs, rows = self.convs, self.rows
        if t is StreamData:
            convs[ev.conn_id].data(ev)
        elif t is ConnOpen:
            self.opened[ev.conn_id] = (ev, number)
            conv = convs[ev.conn_id] = Conversation(ev.conn_id, ev.a, ev.b, ev.syn_seen, self.options.kafka_ports,
                                                    self.options, rows)
            conv.tls_keys = self.tls_keys
        elif t is StreamGap:
            conv = convs[ev.conn_id]
            rows.issue(conv, ev.frame, "stream-gap", ev.length, ev.stream_offset,
                       f"{ev.length} bytes missing from the capture ({ev.reason})")
            conv.gap(ev)
        elif t is StreamConflict:
            rows.issue(convs[ev.conn_id], ev.frame, "tcp-conflict", ev.length, ev.stream_offset,
                       "retransmitted bytes differ from the first copy (the first was kept)")
        elif t is ConnClose:
            conv = convs.pop(ev.conn_id)
            conv.finish()
            self.kafka_connections += conv.protocol == "kafka"
            op = self.opened.pop(ev.conn_id)[0]
            if conv.tls is not None and not conv.tls_other:
                self.tls_outcome(conv, op)
            # the row waits for the end: packets after the close (the last ACK) still count
            self.closed.append((conv, op, ev, number))

    def tls_outcome(self, conv, op) -> None:
        """Count a TLS connection's outcome; one that was not decrypted gets a "tls" issue
        saying why (the client random for a missing key)."""
        tls = conv.tls
        # TLS off the Kafka ports counts only once decrypted as Kafka: undecrypted, it may be
        # anything (HTTPS beside the brokers), so it does not make a capture Kafka traffic
        if conv.port_client is not None or conv.protocol == "kafka":
            self.tls_status[tls.status] = self.tls_status.get(tls.status, 0) + 1
        if tls.status != "decrypted":
            self.rows.issue(conv, op.frame, "tls", None, None,
                            f"TLS connection not decrypted ({tls.status}): {tls.detail}")

    def write_closed(self, gone) -> int:
        """A live capture's connection rows, written once `gone(conn_id)`: the reassembler
        forgot the connection, so no later packet can count in its row. The number written."""
        keep, done = [], 0
        for item in self.closed:
            conv, op, close, _ = item
            if gone(close.conn_id):
                self.rows.connection(conv, op, close, close.stats)
                done += 1
            else:
                keep.append(item)
        self.closed = keep
        return done

    def in_flight_since(self, api_keys=(0,)) -> float | None:
        """The send time of the oldest request of `api_keys` (Produce) still waiting for its
        response on any open connection (None: none waits): no row still to come is about an
        earlier request of those."""
        oldest = None
        for conv in self.convs.values():
            for req, _frame, ts, _size, _complete in conv.pending.values():
                if getattr(req, "api_key", None) not in api_keys:
                    continue
                if ts is not None and (oldest is None or ts < oldest):
                    oldest = ts
        return oldest

    def finish(self, mark=None, stats=None) -> None:
        """The connection rows, in the order of the closes, then the connections the capture
        layer left open (a guard). `mark(key)` after each connection's rows (a process of a
        parallel decode: keys place them among the other processes' rows); `stats`: conn_id ->
        final ConnStats where the ConnClose events carry none."""
        rows = self.rows
        for conv, op, close, number in self.closed:
            st = close.stats if stats is None else stats.get(close.conn_id, close.stats)
            rows.connection(conv, op, close, st)
            if mark is not None:
                mark(KEY_CLOSED + number)
        for conv in self.convs.values():  # the capture layer closes every connection; this is a guard
            conv.finish()
            op, number = self.opened[conv.conn_id]
            rows.connection(conv, op, None, None)
            if mark is not None:
                mark(KEY_OPEN + number)


def auto_jobs(size: int, deep: bool = False) -> int:
    """Processes for a capture of `size` bytes when the options do not say: KAUDIT_PCAP_JOBS
    (or KAUDIT_JOBS) if set; for `--deep` with the compiled core `cores.auto_jobs` (one per CPU
    from MIN_PARALLEL_BYTES on); else one.

    Measured (issue 19; 2 cores, shared): one process spends ~0.9 s of CPU on the bench capture
    (500,813 packets, 395 MB) after start-up - ~0.6 s decoding, the capture walk ~0.14 s of it,
    and ~0.28 s encoding Parquet on the writer's thread beside it - so it already keeps ~1.35
    cores busy and two cores could save it at most ~0.2 s. Two processes (pcap_parallel) cost
    ~0.6 s of CPU more - every process walks the whole capture, the worker's rows (~50 MB) cross
    a pipe and the merge interleaves them (Arrow take) - and took 0.75x the speed of one on the
    bench capture, 0.63x on 2M packets. On the pure path they cost ~30% more CPU (0.73-0.93x).
    With `--deep` the decode is ~10 s of CPU and two processes add ~6%: 1.34x on 100k packets
    (best of three), but 0.9-0.96x on 500k while the machine was busy: kaudit's processes share
    one scheduling group with the machine's other users (autogroup), so on a loaded machine more
    processes gain nothing."""
    env = os.environ.get("KAUDIT_PCAP_JOBS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if os.environ.get("KAUDIT_JOBS", "").strip() or (deep and native.module("kaudit.sources._cpcap") is not None):
        return cores.auto_jobs(size)
    return 1


def _decode(mm, path, options, summary, fragments=None):
    streams = CaptureStreams(mm, divert=fragments.divert if fragments is not None else None)
    rows = WireRows(path)
    session = Session(path, options, rows)
    session.attach(streams)
    c = native.module("kaudit.sources._cpcap")
    if c is not None and streams.compiled:  # the compiled twin of the loop below
        yield from c.events_loop(streams, session, rows, fragments, summary, FLUSH_ROWS)
    else:
        yield from _events_loop(streams, session, rows, fragments, summary)
    if fragments is not None:
        fragments.end(streams.packets, streams.last_ts)
        yield from fragments.tables()
    session.finish()
    capture_issues(rows, path, streams)
    summary.kafka_connections = session.kafka_connections
    summary.tls = dict(session.tls_status)
    summary.packets, summary.tcp_packets = streams.packets, streams.tcp_packets
    summary.last_ts, summary.dropped = streams.last_ts, dict(streams.dropped)
    yield from rows.tables()


def _events_loop(streams, session, rows, fragments, summary):
    """The capture events into the session's conversations (chunks of rows come out)."""
    convs = session.convs
    for ev in streams.events():
        if type(ev) is StreamData:
            convs[ev.conn_id].data(ev)
        elif type(ev) is Diverted:
            if fragments.add(ev):
                yield from fragments.tables()
        else:
            session.event(ev)
            summary.connections += type(ev) is ConnOpen
        if rows.count >= FLUSH_ROWS:
            yield from rows.tables()


def capture_issues(rows, path: str, streams) -> None:
    """decode_issue rows for the capture file's own problems (cut records, bad blocks)."""
    for issue in streams.issues:
        where = f" (after frame {issue.frame_no})" if issue.frame_no else ""
        rows.add("decode_issue", {"source": path, "position": issue.position, "issue": f"capture-{issue.kind}",
                                  "length": issue.skipped, "message": issue.message + where})
