"""ClientHello and ServerHello: the facts the record layer needs (RFC 5246 7.4.1, RFC 8446 4.1).

`client_hello(body)` -> ClientHello(random, legacy version, extension types offered);
`server_hello(body)` -> ServerHello(random, version negotiated (supported_versions wins),
cipher suite, encrypt_then_mac, hello retry request). DecodeError on a body that is cut or
inconsistent; nothing here allocates by a length read from the input.
"""

from __future__ import annotations

from dataclasses import dataclass

from kaudit.protocol.errors import DecodeError

EXT_ENCRYPT_THEN_MAC = 22
EXT_EXTENDED_MASTER_SECRET = 23
EXT_SUPPORTED_VERSIONS = 43
TLS12, TLS13 = 0x0303, 0x0304
# RFC 8446 4.1.3: a ServerHello with this random is a HelloRetryRequest
HRR_RANDOM = bytes.fromhex("CF21AD74E59A6111BE1D8C021E65B891C2A211167ABB8C5E079E09E2C8A8339C")


@dataclass(frozen=True)
class ClientHello:
    random: bytes
    version: int
    extensions: frozenset


@dataclass(frozen=True)
class ServerHello:
    random: bytes
    version: int
    cipher_suite: int
    encrypt_then_mac: bool
    retry: bool          # a HelloRetryRequest: a second ClientHello and ServerHello follow


def _vec(body, off: int, width: int):
    """(bytes of a length-prefixed vector, new offset)."""
    if off + width > len(body):
        raise DecodeError("hello cut in a vector length", off)
    n = int.from_bytes(body[off:off + width], "big")
    end = off + width + n
    if end > len(body):
        raise DecodeError(f"hello vector of {n} bytes past the message end", off)
    return body[off + width:end], end


def _extensions(body, off: int) -> dict:
    """extension type -> data (the last wins); empty when the hello has none."""
    if off == len(body):
        return {}
    block, _ = _vec(body, off, 2)
    out, i = {}, 0
    while i + 4 <= len(block):
        etype = int.from_bytes(block[i:i + 2], "big")
        data, i = _vec(block, i + 2, 2)
        out[etype] = data
    return out


def client_hello(body) -> ClientHello:
    if len(body) < 35:
        raise DecodeError("ClientHello cut", 0)
    version, random = int.from_bytes(body[0:2], "big"), bytes(body[2:34])
    _, off = _vec(body, 34, 1)      # session id
    _, off = _vec(body, off, 2)     # cipher suites
    _, off = _vec(body, off, 1)     # compression methods
    return ClientHello(random, version, frozenset(_extensions(body, off)))


def server_hello(body) -> ServerHello:
    if len(body) < 35:
        raise DecodeError("ServerHello cut", 0)
    version, random = int.from_bytes(body[0:2], "big"), bytes(body[2:34])
    _, off = _vec(body, 34, 1)      # session id
    if off + 3 > len(body):
        raise DecodeError("ServerHello cut before its cipher suite", off)
    suite = int.from_bytes(body[off:off + 2], "big")
    ext = _extensions(body, off + 3)
    sv = ext.get(EXT_SUPPORTED_VERSIONS)
    if sv is not None and len(sv) == 2:
        version = int.from_bytes(sv, "big")
    return ServerHello(random, version, suite, EXT_ENCRYPT_THEN_MAC in ext, random == HRR_RANDOM)
