"""fetch_partition rows of KIP-227 fetch sessions: an incremental Fetch response leaves out the
partitions with nothing new, yet the request named them with their fetch offsets - one row each
(error_code and every response field null, no batches) after the answered ones. The generic path
(summary_batches.fetch_partitions), the fast pure path (WireRows._fetch) and the compiled one
(sources/_crows) give the same rows."""

from __future__ import annotations

import pytest

from kaudit import native
from kaudit.protocol.wire.messages import decode_request, decode_response
from kaudit.protocol.wire.summary_batches import fetch_partitions
from kaudit.sources import pcap
from kaudit.sources.pcap import PcapOptions, PcapSummary
from tests.audit.wire import wirecraft_group as g
from tests.sources.pcap.craft import Conn, write_capture

KEY = ("correlation_id", "topic", "partition", "fetch_offset", "error_code", "high_watermark",
       "log_start_offset", "batch_count")

FULL = g.fetch_session(1, "c", 77, 0, [(0, 0), (1, 5)], [(0, 0, 10, 0, g.records(0, 10)), (1, 0, 5, 0, b"")])
# incremental: partition 1 answered with records, partition 0 left out (nothing new at 10)
INCREMENTAL = g.fetch_session(2, "c", 77, 1, [(0, 10), (1, 5)], [(1, 0, 8, 0, g.records(5, 3))])
EMPTY = g.fetch_session(3, "c", 77, 2, [(0, 10), (1, 8)], [])
# the session is gone: the broker answered no partition (nothing says where they stood)
LOST = g.fetch_session(4, "c", 77, 3, [(1, 8)], [], error=70)


def _rows(tmp_path, messages, compiled: bool) -> list[tuple]:
    path = tmp_path / "s.pcap"
    write_capture(path, [Conn(messages)])
    with native.pure(not compiled):
        chunks = list(pcap._decode(path.read_bytes(), "capture", PcapOptions(), PcapSummary()))
    return [tuple(r[k] for k in KEY) for kind, t in chunks if kind == "fetch_partition" for r in t.to_pylist()]


def _generic(messages) -> list[tuple]:
    out = []
    for (_, req_frame), (_, resp_frame) in zip(messages[::2], messages[1::2]):
        req, _ = decode_request(req_frame[4:])
        resp, _ = decode_response(resp_frame[4:], req.api_key, req.api_version)
        for p in fetch_partitions(req, resp):
            p["batch_count"] = len(p["batches"])
            out.append(tuple(p[k] for k in KEY))
    return out


EXPECTED = [
    (1, "orders", 0, 0, 0, 10, 0, 1), (1, "orders", 1, 5, 0, 5, 0, 0),
    (2, "orders", 1, 5, 0, 8, 0, 1), (2, "orders", 0, 10, None, None, None, 0),
    (3, "orders", 0, 10, None, None, None, 0), (3, "orders", 1, 8, None, None, None, 0),
]


def test_the_generic_path_keeps_the_partitions_the_response_left_out():
    assert _generic(FULL + INCREMENTAL + EMPTY + LOST) == EXPECTED


def test_the_fast_pure_path_gives_the_same_rows(tmp_path):
    assert _rows(tmp_path, FULL + INCREMENTAL + EMPTY + LOST, compiled=False) == EXPECTED


@pytest.mark.skipif(native.module("kaudit.sources._crows") is None, reason="the compiled core is not built")
def test_the_compiled_path_gives_the_same_rows(tmp_path):
    assert _rows(tmp_path, FULL + INCREMENTAL + EMPTY + LOST, compiled=True) == EXPECTED


def test_a_partition_named_twice_is_one_row_with_the_last_offset(tmp_path):
    twice = g.fetch_session(5, "c", 77, 4, [(0, 10), (0, 12)], [])
    expected = [(5, "orders", 0, 12, None, None, None, 0)]
    assert _generic(twice) == expected
    assert _rows(tmp_path, twice, compiled=False) == expected
    if native.module("kaudit.sources._crows") is not None:
        assert _rows(tmp_path, twice, compiled=True) == expected
