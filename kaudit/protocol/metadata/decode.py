"""Sans-IO decode of KRaft metadata records and control records from the schemas (schemas.py).

A metadata record's value (MetadataRecordSerde / AbstractApiMessageSerde) is a frame:
unsigned varint frame version (1; 0 was the 2.8 preview, which Kafka refuses), unsigned varint
api key, unsigned varint record version, then the message in that version - flexible in every
version: compact strings and arrays, each struct ending with its tagged fields. A KRaft control
record's value is the message alone, beginning with its int16 Version field.

Every length is checked against the bytes left before anything is allocated; an unknown api key,
a version newer than the schemas know and bytes after the message are said (`issue`), never
guessed at: the record is named, its fields are not read.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass

from kaudit.protocol.errors import DecodeError, Truncated
from kaudit.protocol.metadata.schemas import BY_KEY, CONTROL, OPAQUE, Field, Message, in_versions
from kaudit.protocol.primitives import (
    read_array_len, read_compact_array_len, read_int8, read_int16, read_int32, read_int64, read_raw,
    read_uint16, read_uvarint,
)

FRAME_VERSION = 1
_F64 = struct.Struct(">d")
_FIXED = {"int8": (read_int8, 1), "int16": (read_int16, 2), "int32": (read_int32, 4),
          "int64": (read_int64, 8), "uint16": (read_uint16, 2), "bool": (read_int8, 1),
          "float64": (None, 8), "uuid": (None, 16)}


@dataclass
class Decoded:
    """One record: its schema (None: an api key kaudit does not know), version, fields by their
    spec names (None when not read), and what stopped a full decode (`issue`, `message`)."""

    message: Message | None
    api_key: int | None
    version: int | None
    data: dict | None
    issue: str | None = None
    detail: str | None = None
    unknown_tags: tuple = ()

    @property
    def record_type(self) -> str:
        if self.message is not None:
            return self.message.dump_type
        return f"UNKNOWN({self.api_key})"


def uuid_str(raw) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode("ascii")


def decode_metadata_record(value, schemas: dict | None = None) -> Decoded:
    """A __cluster_metadata record value (or a snapshot's; `schemas`: another table of the same
    frame, __remote_log_metadata's) -> Decoded. Never raises on content: bytes that do not
    decode come back as an issue with the position."""
    if value is None:
        return Decoded(None, None, None, None, "null-value", "metadata record without a value")
    buf = memoryview(value)
    try:
        frame, off = read_uvarint(buf, 0)
        api_key, off = read_uvarint(buf, off)
        version, off = read_uvarint(buf, off)
    except DecodeError as e:
        return Decoded(None, None, None, None, "corrupt", f"record frame: {e.message}")
    if frame != FRAME_VERSION:
        return Decoded((BY_KEY if schemas is None else schemas).get(api_key), api_key, version, None,
                       "unknown-frame-version",
                       f"frame version {frame} (Kafka reads only {FRAME_VERSION})")
    msg = (BY_KEY if schemas is None else schemas).get(api_key)
    if msg is None:
        return Decoded(None, api_key, version, None, "unknown-record-type",
                       f"metadata record api key {api_key} is newer than kaudit's schemas")
    return _body(msg, api_key, version, buf, off)


def decode_control_value(control_type: str, value) -> Decoded:
    """A KRaft control record's value (LEADER_CHANGE, SNAPSHOT_HEADER/FOOTER, KRAFT_VERSION,
    KRAFT_VOTERS) -> Decoded; None for the transaction markers (COMMIT/ABORT) and unknown types."""
    msg = CONTROL.get(control_type)
    if msg is None:
        return None
    if value is None or len(value) < 2:
        return Decoded(msg, None, None, None, "corrupt", f"{control_type} value shorter than its version")
    version = struct.unpack_from(">h", value, 0)[0]
    return _body(msg, None, version, memoryview(value), 0)


def _body(msg: Message, api_key, version: int, buf, off: int) -> Decoded:
    lo, hi = msg.valid
    if version > hi or version < lo:
        return Decoded(msg, api_key, version, None, "unknown-version",
                       f"{msg.name} version {version} is outside the versions kaudit knows ({lo}-{hi})")
    if msg.api_key in OPAQUE:
        return Decoded(msg, api_key, version, None, "not-decoded", f"{msg.name}: not read (may hold secrets)")
    flexible = in_versions(msg.flexible, version)
    unknown: list = []
    try:
        data, end = _struct(msg.fields, buf, off, len(buf), version, flexible, unknown)
    except DecodeError as e:
        return Decoded(msg, api_key, version, None, e.kind, f"{msg.name} v{version}: {e.message}")
    d = Decoded(msg, api_key, version, data, unknown_tags=tuple(unknown))
    if end != len(buf):
        # Kafka refuses such a record ("garbage after"); the fields read are kept and it is said
        d.issue, d.detail = "trailing-bytes", f"{len(buf) - end} byte(s) after {msg.name} v{version}"
    return d


def _struct(fields, buf, off: int, end: int, version: int, flexible: bool, unknown: list):
    out: dict = {}
    tagged: dict[int, Field] = {}
    for f in fields:
        if not in_versions(f.versions, version):
            out[f.name] = f.default
        elif f.tag is not None:
            out[f.name] = f.default
            if flexible:
                tagged[f.tag] = f
        else:
            out[f.name], off = _value(f, buf, off, end, version, flexible, unknown)
    if flexible:
        count, off = read_uvarint(buf, off)
        if count > end - off:
            raise Truncated(f"{count} tagged fields cannot fit in {end - off} bytes", off)
        for _ in range(count):
            tag, off = read_uvarint(buf, off)
            size, off = read_uvarint(buf, off)
            if off + size > end:
                raise Truncated(f"tagged field {tag} of {size} bytes cut", off, size)
            f = tagged.get(tag)
            if f is None:
                unknown.append(tag)
            else:
                value, stop = _value(f, buf, off, off + size, version, flexible, unknown)
                if stop != off + size:
                    raise DecodeError(f"tagged field {f.name} holds {off + size - stop} more bytes", stop)
                out[f.name] = value
            off += size
    return out, off


def _value(f: Field, buf, off: int, end: int, version: int, flexible: bool, unknown: list):
    t = f.type
    nullable = in_versions(f.nullable, version)
    if t.startswith("[]"):
        elem = t[2:]
        n, off = (read_compact_array_len if flexible else read_array_len)(buf, off, _min_size(elem))
        if off > end:
            raise Truncated(f"{f.name} runs past its field", off)
        if n < 0:
            if not nullable:
                raise DecodeError(f"{f.name} is null but not nullable in v{version}", off)
            return None, off
        items = []
        for _ in range(n):
            if elem in _FIXED or elem == "string":
                v, off = _scalar(elem, f, buf, off, end, flexible, nullable=False)
            else:
                v, off = _struct(f.fields, buf, off, end, version, flexible, unknown)
            items.append(v)
        return items, off
    if t == "{}":
        return _struct(f.fields, buf, off, end, version, flexible, unknown)
    return _scalar(t, f, buf, off, end, flexible, nullable)


def _sized(kind: str, f: Field, buf, off: int, end: int, flexible: bool, nullable: bool, read_fixed):
    """A length-prefixed value's raw bytes (None for a null): a compact length (n + 1) in flexible
    versions, else `read_fixed`'s; a length past `end` is a cut record, never an allocation."""
    if flexible:
        n, off = read_uvarint(buf, off)
        n -= 1
    else:
        n, off = read_fixed(buf, off)
    if n < 0:
        if n == -1 and nullable:
            return None, off
        raise DecodeError(f"{f.name}: {kind} length {n}", off)
    if off + n > end:
        raise Truncated(f"{f.name}: " + (f"string of {n} bytes cut" if kind == "string" else f"{n} bytes cut"), off, n)
    return read_raw(buf, off, n, f.name)


def _scalar(t: str, f: Field, buf, off: int, end: int, flexible: bool, nullable: bool):
    if t == "bytes":
        raw, off = _sized("bytes", f, buf, off, end, flexible, nullable, read_int32)
        return (None if raw is None else base64.b64encode(bytes(raw)).decode("ascii")), off
    if t == "string":
        raw, off = _sized("string", f, buf, off, end, flexible, nullable, read_int16)
        if raw is None:
            return None, off
        try:
            return bytes(raw).decode("utf-8"), off
        except UnicodeDecodeError as e:
            raise DecodeError(f"{f.name}: invalid UTF-8 ({e.reason})", off - len(raw)) from None
    reader, size = _FIXED.get(t, (None, None))
    if size is None:
        raise DecodeError(f"{f.name}: type {t} unknown to the decoder", off)
    if off + size > end:
        raise Truncated(f"{f.name}: need {size} bytes at {off}", off, size)
    if t == "uuid":
        raw, off = read_raw(buf, off, 16, f.name)
        return uuid_str(raw), off
    if t == "float64":
        return _F64.unpack_from(buf, off)[0], off + 8
    v, off = reader(buf, off)
    return (v != 0 if t == "bool" else v), off


def _min_size(elem: str) -> int:
    return _FIXED.get(elem, (None, 1))[1] or 1


def dump_json(d: Decoded) -> dict | None:
    """The record as kafka-dump-log's --cluster-metadata-decoder prints its `data`: camelCase
    names, the fields of its version, tagged fields only where they differ from their default."""
    if d.data is None or d.message is None:
        return None
    return _dump_struct(d.message.fields, d.data, d.version)


def _dump_struct(fields, data: dict, version: int) -> dict:
    out = {}
    for f in fields:
        if not in_versions(f.versions, version):
            continue
        v = data.get(f.name)
        if f.tag is not None and _is_default(f, v):
            continue
        if f.fields and isinstance(v, list):
            v = [_dump_struct(f.fields, x, version) for x in v]
        elif f.fields and isinstance(v, dict):
            v = _dump_struct(f.fields, v, version)
        out[f.name[0].lower() + f.name[1:]] = v
    return out


def _is_default(f: Field, v) -> bool:
    if f.default in ((), None) and f.type.startswith("[]"):
        return v is None if f.default is None else (v is not None and len(v) == 0)
    return v == f.default
