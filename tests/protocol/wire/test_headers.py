"""Request/response headers, header versions per (api key, version), plausibility checks."""

from __future__ import annotations

import pytest
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from wirebytes import TAGS0, i16, i32, string, uvarint

from kaudit.protocol.errors import DecodeError, Truncated
from kaudit.protocol.wire import apis
from kaudit.protocol.wire.headers import (
    decode_request_header,
    decode_response_header,
    peek_correlation_id,
    plausible_request,
    plausible_response,
)


def _kio_classes():
    from pkgutil import resolve_name

    for key, name in api_key_map.items():
        for version, types in schema_name_map[name].items():
            yield key, version, resolve_name(types[EntityType.request]), resolve_name(
                types[EntityType.response])


def test_header_versions_agree_with_kio_for_every_key_and_version():
    n = 0
    for key, version, req_cls, resp_cls in _kio_classes():
        req_hv = int(req_cls.__header_schema__.__module__.split(".")[-2][1:])
        resp_hv = int(resp_cls.__header_schema__.__module__.split(".")[-2][1:])
        assert apis.request_header_version(key, version) == req_hv, (key, version)
        assert apis.response_header_version(key, version) == resp_hv, (key, version)
        n += 1
    assert n > 250


@pytest.mark.parametrize("key,versions,flexible_from", [
    (0, range(0, 3), 9),  # Produce v0-2: removed from kio, never flexible
    (1, range(0, 4), 12),  # Fetch v0-3
    (2, range(0, 1), 6),  # ListOffsets v0
    (8, range(0, 2), 8),  # OffsetCommit v0-1
    (9, range(0, 1), 6),  # OffsetFetch v0
    (27, range(0, 1), 1),  # WriteTxnMarkers v0 (v1 = the same, flexible)
])
def test_versions_kio_dropped_use_non_flexible_headers(key, versions, flexible_from):
    for v in versions:
        assert apis.request_header_version(key, v) == 1
        assert apis.response_header_version(key, v) == 0
    assert apis.is_flexible(key, flexible_from) and not apis.is_flexible(key, flexible_from - 1)


def test_known_first_flexible_versions_agree_with_kio():
    # the table spares importing every old schema module; kio's schemas are the authority
    for key in apis.SNAKE_NAMES:
        if key in apis.KNOWN_FIRST_FLEXIBLE:
            assert apis.KNOWN_FIRST_FLEXIBLE[key] == apis._first_flexible_from_kio(key), key


def test_special_header_versions():
    assert apis.request_header_version(7, 0) == 0  # ControlledShutdown v0: no client id
    assert apis.request_header_version(7, 3) == 2
    assert apis.request_header_version(4, 4) == 2 and apis.request_header_version(4, 3) == 1
    for v in range(5):  # ApiVersions responses: always header v0
        assert apis.response_header_version(18, v) == 0
    assert apis.request_header_version(18, 3) == 2
    # APIs flexible from their first version stay flexible below kio's oldest version
    assert apis.is_flexible(56, 0)  # AlterPartition (ex AlterIsr) "flexibleVersions": "0+"
    assert apis.api_name(24) == "AddPartitionsToTxn" and apis.api_name(4) == "LeaderAndIsr"
    assert apis.api_name(999) == "Unknown(999)"


def test_request_header_golden_v1_and_v2():
    v1 = (i16(0)  # api_key: Produce
          + i16(2)  # api_version 2 -> header v1
          + i32(7)  # correlation_id
          + string("producer-1"))  # client_id
    h, off = decode_request_header(v1 + b"BODY", 0)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.header_version) == (
        0, 2, 7, "producer-1", 1)
    assert off == len(v1)
    v2 = (i16(18)  # ApiVersions
          + i16(3)  # v3 -> header v2
          + i32(1)  # correlation_id
          + string(None)  # client_id: null (int16 -1, never compact)
          + uvarint(1) + uvarint(5) + uvarint(2) + b"hi")  # one tagged field: tag 5, 2 bytes
    h, off = decode_request_header(v2, 0)
    assert (h.client_id, h.header_version, h.tagged_fields) == (None, 2, {5: b"hi"})
    assert off == len(v2)
    v0 = i16(7) + i16(0) + i32(3)  # ControlledShutdown v0: no client id
    h, off = decode_request_header(v0 + i32(1), 0)
    assert (h.client_id, h.header_version, off) == (None, 0, 8)


def test_response_header_golden():
    h, off = decode_response_header(i32(42) + TAGS0 + b"x", 0, 0, 9)  # Produce v9: flexible
    assert (h.correlation_id, h.header_version, off) == (42, 1, 5)
    h, off = decode_response_header(i32(42) + b"\x00\x23", 0, 18, 4)  # ApiVersions v4: v0
    assert (h.header_version, off) == (0, 4)
    assert peek_correlation_id(i32(-3)) == -3


def test_truncated_headers_raise_truncated():
    full = i16(18) + i16(3) + i32(1) + string("abc") + TAGS0
    for i in range(len(full)):
        with pytest.raises(Truncated):
            decode_request_header(full[:i], 0)
    with pytest.raises(DecodeError):
        decode_request_header(i16(3) + i16(1) + i32(1) + b"\x00\x02\xff\xfe", 0)  # bad UTF-8


def _frame_start(key=3, version=1, corr=5, client="client-a", size=None, tags=False):
    head = i16(key) + i16(version) + i32(corr) + string(client) + (TAGS0 if tags else b"")
    return i32(size if size is not None else len(head) + 4) + head + b"\x00" * 4


def test_plausible_request():
    assert plausible_request(_frame_start(), 0) is True
    assert plausible_request(_frame_start(key=18, version=3, tags=True), 0) is True
    assert plausible_request(b"zz" + _frame_start(), 2) is True
    assert plausible_request(_frame_start(key=200), 0) is False  # unknown api key
    assert plausible_request(_frame_start(key=0, version=99), 0) is False  # unknown version
    assert plausible_request(_frame_start(corr=-1), 0) is False
    assert plausible_request(_frame_start(client="bad\x01id"), 0) is False
    assert plausible_request(_frame_start(size=5), 0) is False  # smaller than a header
    assert plausible_request(_frame_start(size=300 << 20), 0) is False  # above the bound
    assert plausible_request(_frame_start(size=300), 0, max_size=200) is False
    assert plausible_request(_frame_start(client=None), 0) is True
    # too few bytes to decide: None, unless the prefix already disqualifies
    full = _frame_start()
    for i in range(14 + len("client-a")):
        assert plausible_request(full[:i], 0) is None, i
    assert plausible_request(_frame_start(key=200)[:7], 0) is False


def test_plausible_response():
    assert plausible_response(i32(10) + i32(3), 0) is True
    assert plausible_response(i32(10) + i32(3), 0, correlation_ids={3}) is True
    assert plausible_response(i32(10) + i32(3), 0, correlation_ids={4}) is False
    assert plausible_response(i32(10) + i32(-3), 0) is False
    assert plausible_response(i32(2) + i32(3), 0) is False
    assert plausible_response(i32(10) + i32(3)[:2], 0) is None
    assert plausible_response(i32(-1), 0) is False
    # chained: an unknown id believed only when a known one follows right after it
    two = i32(6) + i32(9) + b"xx" + i32(4) + i32(10)
    assert plausible_response(two, 0, correlation_ids={10}) is False
    assert plausible_response(two, 0, correlation_ids={10}, chain=True) is True
    assert plausible_response(two[:12], 0, correlation_ids={10}, chain=True) is None
    assert plausible_response(two, 0, correlation_ids={11}, chain=True) is None  # need more
    assert plausible_response(two + i32(-1), 0, correlation_ids={11}, chain=True) is False
