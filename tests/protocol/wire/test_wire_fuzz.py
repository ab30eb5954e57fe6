"""Bad input: truncation at every position, random and mutated bytes. Only kaudit DecodeError
subclasses may escape a decoder; nothing is allocated from a length that lies."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wiregolden import GOLDEN
from wiregolden_txn import GOLDEN_TXN

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire import apis
from kaudit.protocol.wire.bodies import FULLY_DECODED, body_decoder, decode_body
from kaudit.protocol.wire.headers import plausible_request, plausible_response
from kaudit.protocol.wire.messages import decode_request, decode_response
from kaudit.protocol.wire.records import decode_record_set

ALL_GOLDEN = GOLDEN + GOLDEN_TXN


def _decode(kind, key, version, payload, strict=True):
    if kind == "request":
        return decode_request(payload, strict=strict)
    return decode_response(payload, key, version, strict=strict)


def _ok_or_decode_error(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except DecodeError:
        return None


@pytest.mark.parametrize("name,kind,key,version,payload", ALL_GOLDEN,
                         ids=[f"{g[0]} {g[1]}" for g in ALL_GOLDEN])
def test_golden_messages_truncated_at_every_position(name, kind, key, version, payload):
    msg, _ = _decode(kind, key, version, payload)
    assert msg.error is None and msg.trailing == 0
    for cut in range(len(payload)):
        part = payload[:cut]
        _ok_or_decode_error(_decode, kind, key, version, part)
        lenient = _ok_or_decode_error(_decode, kind, key, version, part, strict=False)
        if lenient is not None:  # the header decoded: the body error is kept, not raised
            m = lenient[0]
            assert m.error is None or isinstance(m.error, DecodeError)
        plausible_request(part, 0)
        plausible_response(part, 0, {1, 2}, chain=True)


DECODABLE = sorted(
    (key, version, entity)
    for key in FULLY_DECODED
    for version in range(apis.max_version(key) + 1)
    for entity in ("request", "response")
    if body_decoder(key, version, entity) != "opaque"
)


def test_every_fully_decoded_api_has_bodies_for_every_version():
    for key in FULLY_DECODED:
        for version in range(apis.max_version(key) + 1):
            for entity in ("request", "response"):
                assert (key, version, entity) in DECODABLE, (apis.api_name(key), version, entity)
    assert len(DECODABLE) > 150


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DECODABLE), st.binary(max_size=200))
def test_random_bodies(target, data):
    key, version, entity = target
    _ok_or_decode_error(decode_body, key, version, entity, data, 0, deep=True)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ALL_GOLDEN), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                               min_size=1, max_size=6))
def test_mutated_golden_messages(golden, flips):
    _, kind, key, version, payload = golden
    data = bytearray(payload)
    for at, value in flips:
        data[at % len(data)] = value
    _ok_or_decode_error(_decode, kind, key, version, bytes(data))
    m = _ok_or_decode_error(_decode, kind, key, version, bytes(data), strict=False)
    # a flipped header byte may name another api: the body is the decoded message's
    if m is not None and m[0].body is not None and kind == "request" and m[0].api_key == 0:
        for t in m[0].body["topic_data"] or ():
            for p in t["partition_data"] or ():
                rs = p["records"]
                assert rs is None or rs.error is None or isinstance(rs.error, DecodeError)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.integers(0, 100), st.integers(0, 10))
def test_random_requests_and_responses(data, key, version):
    _ok_or_decode_error(decode_request, data)
    _ok_or_decode_error(decode_request, data, strict=False)
    _ok_or_decode_error(decode_response, data, key, version)
    _ok_or_decode_error(decode_response, data, key, version, strict=False)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_random_record_sets(data, tail_may_be_cut):
    rs = decode_record_set(data, tail_may_be_cut=tail_may_be_cut, deep=True)
    assert rs.size == len(data)
    assert rs.error is None or isinstance(rs.error, DecodeError)
    used = sum(b.batch_size for b in rs.batches)
    assert used + rs.truncated <= len(data)


def test_lying_lengths_are_never_allocated():
    # Fetch v4 response whose topic array claims 2^31-1 entries and whose records claim 2 GiB
    from wirebytes import array, i16, i32, i64, response_header, string

    lie = response_header(1, False) + i32(0) + array(0x7FFFFFFF) + string("t")
    with pytest.raises(DecodeError):
        decode_response(lie, 1, 4)
    lie = (response_header(1, False) + i32(0) + array(1) + string("t") + array(1) + i32(0)
           + i16(0) + i64(0) + i64(0) + array(0) + i32(0x7FFFFFFF))
    with pytest.raises(DecodeError):
        decode_response(lie, 1, 4)
    lie = (response_header(1, False) + array(1) + string("t") + array(1) + i32(0) + i16(0)
           + i64(0) + i32(0x7FFFFFFF))
    with pytest.raises(DecodeError):
        decode_response(lie, 1, 0)  # the hand-written Fetch v0
