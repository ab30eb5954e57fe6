"""Wire-layer fixtures: every corpus capture split into frames and decoded once per session."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from wirecorpus import Direction, streams

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire import (
    Frame,
    FrameSplitter,
    decode_request,
    decode_response,
    peek_correlation_id,
)

CAPTURE_GLOBS = ("real-kafka-3.0.2/pcap/*.pcap*", "real-kafka-3.0.2-extra/*/*.pcap",
                 "librdkafka-mock/pcap/*.pcap", "public/deepflow/*.pcap",
                 "public/go-sniffer/*.pcap", "public/nDPI/*.pcapng",
                 "real-kafka-4.1.0/*/*.pcap", "real-kafka-4.1.0/*/*.pcapng")


@dataclass
class Exchange:
    request_frame: Frame
    request: object
    response_frame: Frame | None = None
    response: object = None
    request_time: float = 0.0


@dataclass
class Connection:
    client: Direction
    server: Direction | None
    request_events: list = field(default_factory=list)
    response_events: list = field(default_factory=list)
    exchanges: list = field(default_factory=list)  # in request order
    unpaired_responses: list = field(default_factory=list)  # frames
    errors: list = field(default_factory=list)  # (what, frame offset, DecodeError)


def decode_capture(path: Path) -> list[Connection]:
    dirs = streams(str(path))
    by_conn: dict = {}
    for d in dirs:
        by_conn.setdefault(frozenset((d.src, d.dst)), []).append(d)
    out = []
    for ds in by_conn.values():
        client = next((d for d in ds if d.is_client), None)
        server = next((d for d in ds if not d.is_client), None)
        if client is None:
            continue
        conn = Connection(client, server)
        sp = FrameSplitter("request", synced=client.saw_syn)
        conn.request_events = sp.feed(client.data) + sp.finish()
        pending = {}
        for e in conn.request_events:
            if not isinstance(e, Frame) or not e.complete:
                continue
            try:
                req, _ = decode_request(e.payload)
            except DecodeError as err:
                conn.errors.append(("request", e.offset, err))
                continue
            ex = Exchange(e, req, request_time=client.time_at(e.offset))
            conn.exchanges.append(ex)
            pending[req.correlation_id] = ex
        if server is not None:
            sp = FrameSplitter("response", synced=server.saw_syn, correlation_ids=pending)
            conn.response_events = sp.feed(server.data) + sp.finish()
            for e in conn.response_events:
                if not isinstance(e, Frame) or not e.complete:
                    continue
                ex = pending.pop(peek_correlation_id(e.payload), None)
                if ex is None:
                    conn.unpaired_responses.append(e)
                    continue
                ex.response_frame = e
                try:
                    ex.response, _ = decode_response(e.payload, ex.request.api_key,
                                                     ex.request.api_version)
                except DecodeError as err:
                    conn.errors.append(("response", e.offset, err))
        out.append(conn)
    return out


@pytest.fixture(scope="session")
def wire_captures(corpus) -> dict:
    """{capture path relative to the corpus: [Connection]} for every corpus capture."""
    out = {}
    for pattern in CAPTURE_GLOBS:
        for path in sorted(corpus.glob(pattern)):
            if path.suffix in (".pcap", ".pcapng"):
                out[str(path.relative_to(corpus))] = decode_capture(path)
    assert len(out) >= 35
    return out
