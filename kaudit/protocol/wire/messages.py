"""Whole requests and responses: header + body of one frame's payload, sans-IO."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire.apis import API_VERSIONS, api_name
from kaudit.protocol.wire.bodies import KIO, body_decoder, decode_body_with, post_process
from kaudit.protocol.wire.kio_walkers import compiled_walker
from kaudit.protocol.wire.headers import (
    RequestHeader,
    ResponseHeader,
    decode_request_header,
    decode_response_header,
)


@dataclass(slots=True)
class Request:
    header: RequestHeader
    body: dict | None  # None: opaque (or not decoded because of `error`)
    decoder: str  # "kio" (kio's schema) | "hand" | "opaque"
    size: int  # payload bytes (the frame's size field)
    body_offset: int  # where the body starts in the payload
    trailing: int = 0  # bytes after the decoded body (0 for a well-formed request)
    error: DecodeError | None = None  # body decode error (only with strict=False)

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def api_name(self) -> str:
        return api_name(self.header.api_key)

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def client_id(self) -> str | None:
        return self.header.client_id


@dataclass(slots=True)
class Response:
    header: ResponseHeader
    api_key: int  # from the paired request
    api_version: int
    body: dict | None
    decoder: str
    size: int
    body_offset: int
    trailing: int = 0
    error: DecodeError | None = None
    body_version: int = -1  # the version the body was read with (ApiVersions may fall back to 0)

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


def decode_request(buf, offset: int = 0, end: int | None = None, *, strict: bool = True,
                   deep: bool = False, max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """A request payload (the bytes after the size field) -> (Request, end).

    Header errors always raise. Body errors raise when `strict`, else they are kept in
    `Request.error` with the header (so the request can still be paired and reported)."""
    if end is None:
        end = len(buf)
    view = memoryview(buf)[:end]
    header, body_off = decode_request_header(view, offset)
    key, version = header.api_key, header.api_version
    how = body_decoder(key, version, "request")
    req = Request(header, None, how, end - offset, body_off - offset)
    try:
        req.body, off, req.decoder = _decode_body(key, version, "request", how, view, body_off, end,
                                                  deep, max_batch_bytes)
        req.trailing = end - off
    except DecodeError as e:
        if strict:
            raise
        req.error = e
    return req, end


def _decode_body(api_key, api_version, entity, how, view, body_off, end, deep, max_batch_bytes):
    """(body, end offset, decoder): the compiled kio walker when there is one (not --deep), else
    decode_body_with."""
    walk = None if deep or how != KIO else _kio_walker(api_key, api_version, entity)
    if walk is not None:
        body, off = walk(view, body_off)
        post_process(api_key, entity, body, deep, max_batch_bytes)
        return body, off, how
    return decode_body_with(api_key, api_version, entity, view, body_off, end, deep=deep,
                            max_batch_bytes=max_batch_bytes)


@lru_cache(maxsize=4096)
def _kio_walker(api_key: int, api_version: int, entity: str):
    """The body walker of a kio-decoded message (what decode_body_with would call), or None;
    a None is remembered too."""
    return compiled_walker(api_key, api_version, entity)


def decode_response(buf, api_key: int, api_version: int, offset: int = 0,
                    end: int | None = None, *, strict: bool = True, deep: bool = False,
                    max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """A response payload, decoded with its request's key and version -> (Response, end).

    An ApiVersions request of a version the broker does not support is answered with
    UNSUPPORTED_VERSION (35) in a version 0 body: when the body starts with error 35 and does not
    read cleanly at the request's version, it is read as version 0 (`body_version`), as Kafka's
    clients do."""
    if end is None:
        end = len(buf)
    view = memoryview(buf)[:end]
    header, body_off = decode_response_header(view, offset, api_key, api_version)
    how = body_decoder(api_key, api_version, "response")
    resp = Response(header, api_key, api_version, None, how, end - offset, body_off - offset,
                    body_version=api_version)
    try:
        resp.body, off, resp.decoder = _decode_body(api_key, api_version, "response", how, view,
                                                    body_off, end, deep, max_batch_bytes)
        resp.trailing = end - off
    except DecodeError as e:
        resp.error = e
    if (api_key == API_VERSIONS and api_version > 0 and (resp.error or resp.trailing)
            and bytes(view[body_off : body_off + 2]) == b"\x00\x23"):
        try:
            body, off, how = decode_body_with(api_key, 0, "response", view, body_off, end)
        except DecodeError:
            pass
        else:
            if off == end:
                resp.body, resp.decoder, resp.body_version = body, how, 0
                resp.trailing, resp.error = 0, None
    if resp.error is not None:
        if strict:
            raise resp.error
        resp.body = None
    return resp, end
