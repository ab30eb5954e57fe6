"""Test helper: Kafka wire primitives as bytes, to write golden messages field by field.

Independent of kaudit's decoders on purpose (struct only).
"""

from __future__ import annotations

import struct


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string(s: str | None) -> bytes:
    """int16 length + UTF-8; -1 for null."""
    if s is None:
        return i16(-1)
    raw = s.encode()
    return i16(len(raw)) + raw


def cstring(s: str | None) -> bytes:
    """Compact string: uvarint(length + 1); 0 for null."""
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def nbytes(b: bytes | None) -> bytes:
    return i32(-1) if b is None else i32(len(b)) + b


def cbytes(b: bytes | None) -> bytes:
    return uvarint(0) if b is None else uvarint(len(b) + 1) + b


def array(n: int | None) -> bytes:
    """int32 array length (the items follow)."""
    return i32(-1 if n is None else n)


def carray(n: int | None) -> bytes:
    """Compact array length: uvarint(n + 1), 0 for null."""
    return uvarint(0 if n is None else n + 1)


TAGS0 = b"\x00"  # an empty tagged-field section


def frame(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


def request_header(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   flexible: bool) -> bytes:
    h = i16(api_key) + i16(version) + i32(correlation_id) + string(client_id)
    return h + (TAGS0 if flexible else b"")


def response_header(correlation_id: int, flexible: bool) -> bytes:
    return i32(correlation_id) + (TAGS0 if flexible else b"")
