"""The wire source: a capture file -> TCP streams -> Kafka conversations -> rows.

Rows: `frame` (one per request/response pair), `batch` (every record batch of Produce requests
and Fetch responses, with their context), `fetch_partition`, `txn_event`, `connection`,
`decode_issue`. The file is mapped read-only; memory is bounded by the open connections'
unacknowledged bytes and the rows of one chunk.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from kaudit.capture import CaptureStreams, ConnClose, ConnOpen, StreamConflict, StreamData, StreamGap
from kaudit.model import SCHEMAS, table_from_rows
from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire.headers import DEFAULT_MAX_FRAME
from kaudit.protocol.wire.summary import error_name, frame_fields
from kaudit.protocol.wire.summary_batches import fetch_batches, fetch_partitions, produce_batches, txn_events
from kaudit.sources.batch_table import batch_row
from kaudit.sources.conversation import Conversation, endpoint

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


def _string(v):
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, default=str)


class _Rows:
    """The sink conversations report to; builds row dicts and hands out tables."""

    def __init__(self, source: str):
        self.source = source
        self.rows: dict[str, list[dict]] = {}
        self.count = 0
        self._strings = {k: tuple(f.name for f in s if pa.types.is_string(f.type)) for k, s in SCHEMAS.items()}

    def add(self, kind: str, row: dict) -> None:
        for k in self._strings[kind]:
            v = row.get(k)
            if v is not None and not isinstance(v, str):
                row[k] = _string(v)
        self.rows.setdefault(kind, []).append(row)
        self.count += 1

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        rows, self.rows, self.count = self.rows, {}, 0
        for kind, items in rows.items():
            yield kind, table_from_rows(kind, items)

    # ---- the sink protocol of Conversation ---------------------------------------------------

    def issue(self, conv, frame, issue, length, stream_offset, message) -> None:
        self.add("decode_issue", {"source": self.source, "position": frame, "issue": issue,
                                  "length": length, "message": message, "connection": conv.name,
                                  "stream_offset": stream_offset})

    def exchange(self, conv, x) -> None:
        req, resp = x.request, x.response
        f = frame_fields(req, resp)
        if req is None:
            f["correlation_id"] = x.correlation_id
        latency = None
        if x.request_ts is not None and x.response_ts is not None:
            latency = round((x.response_ts - x.request_ts) * 1000.0, 3)
        row = {k: v for k, v in f.items() if k in _FRAME_NAMES}
        if f.get("error_codes"):
            row["error_names"] = ",".join(error_name(int(c)) for c in f["error_codes"].split(","))
        row.update(source=self.source, connection=conv.name, request_frame=x.request_frame,
                   response_frame=x.response_frame, request_ts=x.request_ts,
                   response_ts=x.response_ts, latency_ms=latency, request_size=x.request_size,
                   response_size=x.response_size, complete=x.complete, decode_error=x.decode_error)
        self.add("frame", row)
        if req is None:
            return
        ctx = {"connection": conv.name, "request_ts": x.request_ts, "response_ts": x.response_ts}
        if req.api_key == 0:
            for b in produce_batches(req, resp):
                self._batch(b, "produce", x.request_frame, ctx)
        elif req.api_key == 1 and resp is not None:
            parts = fetch_partitions(req, resp)
            for p in parts:
                self._fetch_partition(p, x, ctx)
            for b in fetch_batches(req, resp, parts):
                self._batch(b, "fetch", x.response_frame, ctx)
        for ev in txn_events(req, resp):
            ev = {k: v for k, v in ev.items() if k in _TXN_NAMES}
            ev.update(source=self.source, connection=conv.name, position=x.request_frame, ts=x.request_ts)
            self.add("txn_event", ev)

    def _batch(self, b: dict, source_kind: str, position, ctx: dict) -> None:
        place = {"source": self.source, "replica": None, "log_dir": None,
                 "topic": b.get("topic") if b.get("topic") is not None else b.get("topic_id"),
                 "partition": b.get("partition")}
        row = batch_row(b["batch"], place, source_kind)
        row["position"] = position
        row.update(ctx, api_version=b.get("api_version"), correlation_id=b.get("correlation_id"),
                   client_id=b.get("client_id"), transactional_id=b.get("transactional_id"),
                   acks=b.get("acks"))
        if source_kind == "produce":
            row["response_error"] = b.get("response_error")
            row["response_base_offset"] = b.get("response_base_offset")
        else:
            row["response_error"] = b.get("error_code")
        self.add("batch", row)

    def _fetch_partition(self, p: dict, x, ctx: dict) -> None:
        aborted = p.get("aborted_transactions")
        self.add("fetch_partition", {
            "source": self.source, "connection": ctx["connection"], "position": x.response_frame,
            "request_ts": x.request_ts, "response_ts": x.response_ts,
            "api_version": p.get("api_version"), "correlation_id": p.get("correlation_id"),
            "client_id": p.get("client_id"),
            "topic": p.get("topic") if p.get("topic") is not None else p.get("topic_id"),
            "partition": p.get("partition"), "isolation_level": p.get("isolation_level"),
            "replica_id": p.get("replica_id"), "fetch_offset": p.get("fetch_offset"),
            "error_code": p.get("error_code"), "high_watermark": p.get("high_watermark"),
            "last_stable_offset": p.get("last_stable_offset"),
            "log_start_offset": p.get("log_start_offset"),
            "aborted_transactions": None if aborted is None else ",".join(f"{pid}@{off}" for pid, off in aborted),
            "preferred_read_replica": p.get("preferred_read_replica"),
            "record_set_size": p.get("record_set_size"), "batch_count": len(p.get("batches") or ()),
            "truncated_bytes": p.get("truncated_bytes"),
        })

    def connection(self, conv, opened, closed, stats) -> None:
        c = conv.client_dir or 0
        s = 1 - c
        self.add("connection", {
            "source": self.source, "connection": conv.name, "conn_id": conv.conn_id,
            "client": endpoint(*conv.client), "server": endpoint(*conv.server),
            "protocol": conv.protocol, "syn_seen": conv.syn_seen,
            "close_reason": closed.reason if closed else None,
            "first_frame": opened.frame, "last_frame": closed.frame if closed else None,
            "first_ts": opened.ts, "last_ts": closed.ts if closed else None,
            "packets": sum(stats.packets) if stats else None,
            "bytes_to_server": stats.data_bytes[c] if stats else None,
            "bytes_to_client": stats.data_bytes[s] if stats else None,
            "gaps": sum(stats.gaps) if stats else None,
            "gap_bytes": sum(stats.gap_bytes) if stats else None,
            "retransmissions": sum(stats.retransmissions) if stats else None,
            "conflicts": sum(stats.conflicts) if stats else None,
            "requests": conv.requests, "responses": conv.responses, "unanswered": conv.unanswered,
        })


_FRAME_NAMES = set(SCHEMAS["frame"].names)
_TXN_NAMES = set(SCHEMAS["txn_event"].names)


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
    rows = _Rows(path)
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
