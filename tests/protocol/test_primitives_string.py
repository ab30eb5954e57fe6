"""primitives.read_string: the one-read path for a whole non-null string gives what the field by
field reader gives (value, offset, or the same error at the same position) on any bytes at any
offset - null, negative and cut lengths, invalid UTF-8."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.primitives import _utf8, read_int16, read_raw, read_string


def _reference(buf, offset):   # read_string before its one-read path
    start = offset
    n, offset = read_int16(buf, offset)
    if n == -1:
        return None, offset
    if n < -1:
        raise DecodeError(f"string length {n}", start)
    raw, offset = read_raw(buf, offset, n, "string")
    return _utf8(raw, start), offset


def _outcome(f, buf, offset):
    try:
        return f(buf, offset)
    except DecodeError as e:   # Truncated included
        return type(e).__name__, e.message, e.position
    except struct.error as e:   # a negative offset (no caller passes one): the same either way
        return type(e).__name__, str(e)


@st.composite
def strings(draw):
    body = draw(st.one_of(st.binary(max_size=12), st.text(max_size=6).map(lambda t: t.encode())))
    n = draw(st.one_of(st.just(len(body)), st.integers(-3, 20)))
    buf = draw(st.binary(max_size=3)) + n.to_bytes(2, "big", signed=True) + body + draw(st.binary(max_size=3))
    return buf, draw(st.integers(-2, len(buf) + 1))


@settings(max_examples=300, deadline=None)
@given(strings(), st.booleans())
def test_one_read_agrees_with_the_field_reads(case, view):
    buf, offset = case
    buf = memoryview(buf) if view else buf
    assert _outcome(read_string, buf, offset) == _outcome(_reference, buf, offset)


@pytest.mark.parametrize("buf,want", [(b"\x00\x03abc", ("abc", 5)), (b"\xff\xff", (None, 2)), (b"\x00\x00", ("", 2))])
def test_read_string(buf, want):
    assert read_string(buf, 0) == want
