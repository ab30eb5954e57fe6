"""The wire source: a capture file -> TCP streams -> Kafka conversations -> rows.

Rows: `frame` (one per request/response pair), `batch` (every record batch of Produce requests
and Fetch responses, with their context), `fetch_partition`, `txn_event`, `connection`,
`decode_issue`. The file is mapped read-only; memory is bounded by the open connections'
unacknowledged bytes and the rows of one chunk.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from kaudit.capture import CaptureStreams, ConnClose, ConnOpen, StreamConflict, StreamData, StreamGap
from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire.headers import DEFAULT_MAX_FRAME
from kaudit.sources.conversation import Conversation
from kaudit.sources.wire_rows import WireRows

FLUSH_ROWS = 8192
DEFAULT_KAFKA_PORTS = frozenset({9092})


@dataclass
class PcapOptions:
    kafka_ports: frozenset = DEFAULT_KAFKA_PORTS
    deep: bool = False
    max_batch_bytes: int = DEFAULT_MAX_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME


@dataclass
class PcapSummary:
    """What the capture held, for coverage lines and the report header."""

    packets: int = 0
    tcp_packets: int = 0
    connections: int = 0
    kafka_connections: int = 0
    last_ts: float | None = None
    dropped: dict = field(default_factory=dict)


def decode_capture(path: str, options: PcapOptions | None = None, summary: PcapSummary | None = None
                   ) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks for one capture file. Raises DecodeError if it is no capture."""
    options = options or PcapOptions()
    summary = summary if summary is not None else PcapSummary()
    with open(path, "rb") as f:  # read-only: kaudit never writes to what it audits
        if os.fstat(f.fileno()).st_size == 0:
            raise DecodeError(f"{path}: empty file, not a capture")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield from _decode(mm, path, options, summary)
    finally:
        try:
            mm.close()
        except BufferError:  # views still held by rows being written: the GC unmaps it
            pass


def _decode(mm, path, options, summary):
    streams = CaptureStreams(mm)
    rows = WireRows(path)
    convs: dict[int, Conversation] = {}
    opened: dict[int, ConnOpen] = {}
    closed: list = []
    for ev in streams.events():
        t = type(ev)
        if t is StreamData:
            convs[ev.conn_id].data(ev)
        elif t is ConnOpen:
            opened[ev.conn_id] = ev
            convs[ev.conn_id] = Conversation(ev.conn_id, ev.a, ev.b, ev.syn_seen, options.kafka_ports, options, rows)
            summary.connections += 1
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
            summary.kafka_connections += conv.protocol == "kafka"
            if conv.protocol == "tls":
                rows.issue(conv, opened[ev.conn_id].frame, "tls", None, None,
                           "TLS connection: encrypted, not decodable (see its connection row)")
            # the row waits for the end: packets after the close (the last ACK) still count
            closed.append((conv, opened.pop(ev.conn_id), ev))
        if rows.count >= FLUSH_ROWS:
            yield from rows.tables()
    for conv, op, close in closed:
        rows.connection(conv, op, close, close.stats)
    for conv in convs.values():  # the capture layer closes every connection; this is a guard
        conv.finish()
        rows.connection(conv, opened[conv.conn_id], None, None)
    for issue in streams.issues:
        where = f" (after frame {issue.frame_no})" if issue.frame_no else ""
        rows.add("decode_issue", {"source": path, "position": issue.position, "issue": f"capture-{issue.kind}",
                                  "length": issue.skipped, "message": issue.message + where})
    summary.packets, summary.tcp_packets = streams.packets, streams.tcp_packets
    summary.last_ts, summary.dropped = streams.last_ts, dict(streams.dropped)
    yield from rows.tables()
