"""Kafka primitive types, sans-IO: every reader is (buf, offset) -> (value, new_offset).

`buf` is any object supporting the buffer protocol (bytes, bytearray, memoryview, mmap).
Readers raise `Truncated` when the buffer ends early and `DecodeError` on invalid values.
"""

from __future__ import annotations

import struct

from kaudit.protocol.errors import DecodeError, Truncated

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


def _need(buf, offset: int, n: int, what: str) -> None:
    if offset + n > len(buf):
        raise Truncated(f"{what}: need {n} bytes at {offset}, have {len(buf) - offset}", offset, n)


def _fixed(st: struct.Struct, what: str):
    size = st.size
    unpack_from = st.unpack_from

    def read(buf, offset: int):
        if offset + size > len(buf):
            raise Truncated(f"{what}: need {size} bytes at {offset}", offset, size)
        return unpack_from(buf, offset)[0], offset + size

    read.__name__ = f"read_{what}"
    return read


read_int8 = _fixed(_I8, "int8")
read_int16 = _fixed(_I16, "int16")
read_uint16 = _fixed(_U16, "uint16")
read_int32 = _fixed(_I32, "int32")
read_uint32 = _fixed(_U32, "uint32")
read_int64 = _fixed(_I64, "int64")


def read_bool(buf, offset: int):
    v, offset = read_int8(buf, offset)
    return v != 0, offset


def read_uvarint(buf, offset: int):
    """Unsigned LEB128 varint, at most 5 bytes (Kafka's int32 varints)."""
    result = 0
    shift = 0
    start = offset
    n = len(buf)
    while True:
        if offset >= n:
            raise Truncated("varint runs past the end", start, offset - start + 1)
        b = buf[offset]
        offset += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, offset
        shift += 7
        if shift > 28:
            raise DecodeError("varint longer than 5 bytes", start)


def read_uvarlong(buf, offset: int):
    """Unsigned LEB128 varint, at most 10 bytes (Kafka's int64 varlongs)."""
    result = 0
    shift = 0
    start = offset
    n = len(buf)
    while True:
        if offset >= n:
            raise Truncated("varlong runs past the end", start, offset - start + 1)
        b = buf[offset]
        offset += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, offset
        shift += 7
        if shift > 63:
            raise DecodeError("varlong longer than 10 bytes", start)


def read_varint(buf, offset: int):
    """Zig-zag signed varint (int32)."""
    v, offset = read_uvarint(buf, offset)
    return (v >> 1) ^ -(v & 1), offset


def read_varlong(buf, offset: int):
    """Zig-zag signed varlong (int64)."""
    v, offset = read_uvarlong(buf, offset)
    return (v >> 1) ^ -(v & 1), offset


def read_raw(buf, offset: int, length: int, what: str = "bytes") -> tuple[bytes, int]:
    """`length` bytes copied out; the length is checked against the buffer before any copy."""
    if length < 0:
        raise DecodeError(f"{what}: negative length {length}", offset)
    _need(buf, offset, length, what)
    return bytes(buf[offset : offset + length]), offset + length


def read_string(buf, offset: int):
    """int16-length string; -1 is null."""
    if 0 <= offset and offset + 2 <= len(buf):   # a whole non-null string: one length read, one copy
        n = _I16.unpack_from(buf, offset)[0]
        if n >= 0 and offset + 2 + n <= len(buf):
            return _utf8(bytes(buf[offset + 2 : offset + 2 + n]), offset), offset + 2 + n
    start = offset
    n, offset = read_int16(buf, offset)
    if n == -1:
        return None, offset
    if n < -1:
        raise DecodeError(f"string length {n}", start)
    raw, offset = read_raw(buf, offset, n, "string")
    return _utf8(raw, start), offset


def read_compact_string(buf, offset: int):
    """uvarint(length+1) string; 0 is null."""
    start = offset
    n, offset = read_uvarint(buf, offset)
    if n == 0:
        return None, offset
    raw, offset = read_raw(buf, offset, n - 1, "compact string")
    return _utf8(raw, start), offset


def read_bytes(buf, offset: int):
    """int32-length bytes; -1 is null."""
    start = offset
    n, offset = read_int32(buf, offset)
    if n == -1:
        return None, offset
    if n < -1:
        raise DecodeError(f"bytes length {n}", start)
    return read_raw(buf, offset, n, "bytes")


def read_compact_bytes(buf, offset: int):
    n, offset = read_uvarint(buf, offset)
    if n == 0:
        return None, offset
    return read_raw(buf, offset, n - 1, "compact bytes")


def read_bytes_view(buf, offset: int, compact: bool = False):
    """Length-prefixed bytes as a view into `buf`, never copied (record sets): int32 length, or
    uvarint(length+1) when `compact`; null is None. The length is checked before the view."""
    start = offset
    if compact:
        n, offset = read_uvarint(buf, offset)
        n -= 1
    else:
        n, offset = read_int32(buf, offset)
    if n == -1:
        return None, offset
    if n < -1:
        raise DecodeError(f"bytes length {n}", start)
    if offset + n > len(buf):
        raise Truncated(f"{n} bytes cut", offset, n)
    return memoryview(buf)[offset : offset + n], offset + n


def read_array_len(buf, offset: int, item_min_size: int = 1):
    """int32 array length; -1 is null (returned as -1). Bounded by the bytes left."""
    start = offset
    n, offset = read_int32(buf, offset)
    _check_count(buf, offset, n, item_min_size, start)
    return n, offset


def read_compact_array_len(buf, offset: int, item_min_size: int = 1):
    """uvarint(length+1) array length; null is returned as -1."""
    start = offset
    n, offset = read_uvarint(buf, offset)
    n -= 1
    _check_count(buf, offset, n, item_min_size, start)
    return n, offset


def _check_count(buf, offset: int, n: int, item_min_size: int, start: int) -> None:
    if n < -1:
        raise DecodeError(f"array length {n}", start)
    # A count can never exceed what the remaining bytes could hold: no allocation from lies.
    if n > 0 and n * max(item_min_size, 1) > len(buf) - offset:
        raise Truncated(f"array of {n} items cannot fit in {len(buf) - offset} bytes", start)


def read_tagged_fields(buf, offset: int):
    """Tagged fields: {tag: raw bytes}. Unknown tags are kept raw."""
    count, offset = read_uvarint(buf, offset)
    if count > len(buf) - offset:
        raise Truncated(f"{count} tagged fields cannot fit", offset)
    fields = {}
    for _ in range(count):
        tag, offset = read_uvarint(buf, offset)
        size, offset = read_uvarint(buf, offset)
        fields[tag], offset = read_raw(buf, offset, size, "tagged field")
    return fields, offset


def read_uuid(buf, offset: int):
    raw, offset = read_raw(buf, offset, 16, "uuid")
    return raw, offset


def _utf8(raw: bytes, position: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"invalid UTF-8 string: {e}", position) from None


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed int32."""
    h = 0
    for unit in _utf16_units(s):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _utf16_units(s: str):
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        yield (data[i] << 8) | data[i + 1]
