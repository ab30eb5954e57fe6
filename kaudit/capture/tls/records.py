"""TLS records and handshake messages, sans-IO: `(buf, offset) -> (value, new_offset)`.

A record is a 5-byte header (content type, legacy version, length) and its fragment. RFC 8446
5.2 and RFC 5246 6.2.3 bound the fragment at 2^14 + 2048 bytes (TLS 1.3: 2^14 + 256): a larger
length is an error (the bytes are not TLS, or the stream lost its place), never an allocation.
"""

from __future__ import annotations

import struct

from kaudit.protocol.errors import DecodeError, LimitExceeded, Truncated

CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA = 20, 21, 22, 23
CONTENT_TYPES = frozenset({CHANGE_CIPHER_SPEC, ALERT, HANDSHAKE, APPLICATION_DATA})
HEADER = 5
MAX_FRAGMENT = (1 << 14) + 2048
# handshake message types
CLIENT_HELLO, SERVER_HELLO, FINISHED, KEY_UPDATE = 1, 2, 20, 24
MAX_HANDSHAKE = 1 << 20   # a handshake message (a certificate chain) larger than this is refused
_HDR = struct.Struct(">BHH")


def read_record(buf, off: int):
    """((content type, version, fragment), new offset) of the record at `off`. Truncated when
    `buf` ends inside it; DecodeError for a header that is no TLS record."""
    if len(buf) - off < HEADER:
        raise Truncated("TLS record header cut", off, HEADER)
    ctype, version, length = _HDR.unpack_from(buf, off)
    if ctype not in CONTENT_TYPES or version >> 8 != 3:
        raise DecodeError(f"not a TLS record header (type {ctype}, version {version:#06x})", off)
    if length > MAX_FRAGMENT:
        raise LimitExceeded(f"TLS record length {length} exceeds 2^14+2048", off)
    end = off + HEADER + length
    if end > len(buf):
        raise Truncated("TLS record cut", off, end - len(buf))
    return (ctype, version, buf[off + HEADER:end]), end


def record_chain(buf, limit: int = HEADER + MAX_FRAGMENT, need: int = 2) -> int | None:
    """Where, in the first `limit` bytes of `buf` (a stream joined mid-record), at least `need`
    application data record headers (TLS 1.2/1.3: 0x17 0x03 0x03) follow one another up to the
    end of `buf` (the last record may be cut); None if nowhere."""
    n, i = len(buf), bytes(buf[:limit + 3]).find(b"\x17\x03\x03")
    while i != -1 and i < limit:
        j, count = i, 0
        while j + HEADER <= n:
            ctype, version, length = _HDR.unpack_from(buf, j)
            if ctype not in CONTENT_TYPES or version >> 8 != 3 or length > MAX_FRAGMENT:
                break
            count += 1
            j += HEADER + length
        if count >= need and j >= n:
            return i
        i = bytes(buf[:limit + 3]).find(b"\x17\x03\x03", i + 1)
    return None


def read_handshake(buf, off: int):
    """((message type, body), new offset) of the handshake message at `off` (Truncated: more
    bytes are needed; LimitExceeded: too long to hold)."""
    if len(buf) - off < 4:
        raise Truncated("handshake header cut", off, 4)
    mtype = buf[off]
    length = int.from_bytes(buf[off + 1:off + 4], "big")
    if length > MAX_HANDSHAKE:
        raise LimitExceeded(f"handshake message of {length} bytes", off)
    end = off + 4 + length
    if end > len(buf):
        raise Truncated("handshake message cut", off, end - len(buf))
    return (mtype, bytes(buf[off + 4:end])), end


class HandshakeReader:
    """Handshake messages out of the handshake records of one direction (a message may span
    records, a record may hold several): `feed(fragment)` -> [(type, body)]."""

    __slots__ = ("buf",)

    def __init__(self):
        self.buf = bytearray()

    def feed(self, fragment) -> list:
        self.buf += fragment
        out, off = [], 0
        while True:
            try:
                msg, off2 = read_handshake(self.buf, off)
            except Truncated:
                break
            out.append(msg)
            off = off2
        del self.buf[:off]
        return out
