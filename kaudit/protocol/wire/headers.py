"""Request and response headers, sans-IO, and the plausibility checks used to find Kafka
connections on any port and to resynchronise a byte stream after lost bytes.

Request header v0 = `api_key int16 | api_version int16 | correlation_id int32`; v1 adds
`client_id nullable string` (int16 length, never compact); v2 adds tagged fields. Response header
v0 = `correlation_id int32`; v1 adds tagged fields. Which version applies: `apis`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kaudit.protocol.errors import Truncated
from kaudit.protocol.primitives import read_int32, read_string, read_tagged_fields
from kaudit.protocol.wire.apis import (
    max_version,
    request_header_version,
    response_header_version,
)

_REQ_FIXED = struct.Struct(">hhi")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

MIN_REQUEST_SIZE = 10  # api_key, api_version, correlation_id, client_id length
MIN_RESPONSE_SIZE = 4  # correlation_id
MAX_CLIENT_ID = 1024  # longer client ids are legal but never plausible when searching
DEFAULT_MAX_FRAME = 100 * 1024 * 1024


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    tagged_fields: dict = field(default_factory=dict)


@dataclass(slots=True)
class ResponseHeader:
    correlation_id: int
    header_version: int
    tagged_fields: dict = field(default_factory=dict)


def decode_request_header(buf, offset: int):
    """-> (RequestHeader, offset of the body). The header version follows (api_key, version);
    an unknown key is read as v1 (its tagged fields, if any, stay in the opaque body)."""
    n = len(buf)
    if offset + 8 > n:
        raise Truncated("request header cut", offset, 8)
    api_key, api_version, correlation_id = _REQ_FIXED.unpack_from(buf, offset)
    hv = _request_hv(api_key, api_version)
    off = offset + 8
    client_id = None
    if hv >= 1:
        # read_string, inline for a well-formed client id
        size = _I16.unpack_from(buf, off)[0] if off + 2 <= n else -2
        if size == -1:
            off += 2
        elif 0 <= size and off + 2 + size <= n:
            try:
                client_id = str(buf[off + 2 : off + 2 + size], "utf-8")
            except UnicodeDecodeError:
                client_id, off = read_string(buf, off)  # raises the precise error
            else:
                off += 2 + size
        else:
            client_id, off = read_string(buf, off)  # raises the precise error
    if hv >= 2:
        if off < n and buf[off] == 0:
            return RequestHeader(api_key, api_version, correlation_id, client_id, hv, {}), off + 1
        tagged, off = read_tagged_fields(buf, off)
        return RequestHeader(api_key, api_version, correlation_id, client_id, hv, tagged), off
    return RequestHeader(api_key, api_version, correlation_id, client_id, hv, {}), off


_HV_CACHE: dict = {}


def _request_hv(api_key: int, api_version: int) -> int:
    """The request header version of (key, version); an unknown key is read as v1."""
    hv = _HV_CACHE.get((api_key, api_version))
    if hv is None:
        hv = request_header_version(api_key, api_version) if max_version(api_key) >= 0 else 1
        if len(_HV_CACHE) < 4096:
            _HV_CACHE[(api_key, api_version)] = hv
    return hv


def decode_response_header(buf, offset: int, api_key: int, api_version: int):
    """-> (ResponseHeader, offset of the body), for the paired request's key and version."""
    correlation_id, off = read_int32(buf, offset)
    hv = _RESPONSE_HV.get((api_key, api_version))
    if hv is None:
        hv = response_header_version(api_key, api_version)
        if len(_RESPONSE_HV) < 4096:
            _RESPONSE_HV[(api_key, api_version)] = hv
    tagged = {}
    if hv >= 1:
        if off < len(buf) and buf[off] == 0:
            return ResponseHeader(correlation_id, hv, tagged), off + 1
        tagged, off = read_tagged_fields(buf, off)
    return ResponseHeader(correlation_id, hv, tagged), off


_RESPONSE_HV: dict = {}


def peek_correlation_id(buf, offset: int = 0) -> int:
    """A response's correlation id (its first 4 bytes), to find the paired request."""
    return read_int32(buf, offset)[0]


# ---- plausibility --------------------------------------------------------------------------


def _printable(raw) -> bool:
    for b in raw:
        if b < 0x20 or b > 0x7E:
            return False
    return True


def plausible_request(buf, offset: int, max_size: int = DEFAULT_MAX_FRAME) -> bool | None:
    """Does a request frame (`size int32 | header`) plausibly start at `offset`?

    True / False, or None when more bytes are needed to decide. Checks: a size from the
    minimal header to `max_size`; a known api key and a version from 0 to the highest known;
    a non-negative correlation id; a null or printable-ASCII client id of at most 1 KiB that fits
    in the frame; for flexible headers a tagged-field count that fits.
    """
    n = len(buf)
    if offset + 14 > n:
        return _partial_request_check(buf, offset, max_size)
    size = _I32.unpack_from(buf, offset)[0]
    if size < MIN_REQUEST_SIZE or size > max_size:
        return False
    api_key, api_version, correlation_id = _REQ_FIXED.unpack_from(buf, offset + 4)
    if correlation_id < 0 or not 0 <= api_version <= max_version(api_key):
        return False
    hv = request_header_version(api_key, api_version)
    if hv == 0:
        return True
    cid_len = struct.unpack_from(">h", buf, offset + 12)[0]
    if cid_len < -1 or cid_len > MAX_CLIENT_ID or 10 + max(cid_len, 0) > size:
        return False
    if cid_len > 0:
        start = offset + 14
        avail = min(n, start + cid_len)
        if not _printable(buf[start:avail]):
            return False
        if avail < start + cid_len:
            return None
    if hv == 2:
        tf = offset + 14 + max(cid_len, 0)
        if tf >= n:
            return None
        if 10 + max(cid_len, 0) + 1 > size or buf[tf] > 0x7F:  # tagged-field count fits one byte
            return False
    return True


def _partial_request_check(buf, offset: int, max_size: int) -> bool | None:
    """Reject early on whatever prefix is there; None if nothing disqualifies it yet."""
    have = bytes(buf[offset:])
    if len(have) >= 4:
        size = _I32.unpack(have[:4])[0]
        if size < MIN_REQUEST_SIZE or size > max_size:
            return False
    if len(have) >= 6 and max_version(struct.unpack(">h", have[4:6])[0]) < 0:
        return False
    if len(have) >= 8:
        api_key, api_version = struct.unpack(">hh", have[4:8])
        if not 0 <= api_version <= max_version(api_key):
            return False
    if len(have) >= 12 and _I32.unpack(have[8:12])[0] < 0:
        return False
    return None


def plausible_response(buf, offset: int, correlation_ids=None,
                       max_size: int = DEFAULT_MAX_FRAME, chain: bool = False,
                       _depth: int = 0) -> bool | None:
    """Does a response frame plausibly start at `offset`? True / False / None (need more).

    A size from 4 to `max_size` and a non-negative correlation id. When `correlation_ids` is
    given (the ids of the requests still awaiting an answer on the connection: the strong
    check), the id must be one of them. With `chain` (a stream joined mid-connection, whose
    first responses answer requests the capture never saw), an unknown id is also accepted when
    the frame is at most 64 KiB and is directly followed by such frames (at most 4) and then by
    a response with a known id.
    """
    n = len(buf)
    if offset + 4 > n:
        return None
    size = _I32.unpack_from(buf, offset)[0]
    if size < MIN_RESPONSE_SIZE or size > max_size:
        return False
    if offset + 8 > n:
        return None
    cid = _I32.unpack_from(buf, offset + 4)[0]
    if cid < 0:
        return False
    if correlation_ids is None or cid in correlation_ids:
        return True
    if not chain or _depth >= _CHAIN_DEPTH or size > _CHAIN_HORIZON:
        return False
    return plausible_response(buf, offset + 4 + size, correlation_ids, max_size, True, _depth + 1)


_CHAIN_DEPTH = 4
_CHAIN_HORIZON = 64 * 1024
