"""Message bodies by kio's schema, as plain dicts.

kio (https://github.com/Aiven-Open/kio) generates one frozen dataclass per api key, version and
direction from Kafka's JSON message specs: field order, Kafka types (`kafka_type` metadata),
nesting, nullability, tagged fields (`tag` metadata) and flexibility (`__flexible__`). kaudit
walks that schema with its own bounded primitives (`walk_schema`; the plan is built once per
class and cached):

- kio's native reader (`kio.serial.entity_reader(cls)`) is NOT used on captured bytes: on a
  compact array whose length lies (a few random bytes are enough) it asks Rust for hundreds of
  GB and the allocation failure aborts the whole process. It also refuses what Kafka accepts:
  an error code newer than its enum (ValueError) and an unknown tagged field (KeyError).
  `decode_kio_native` keeps it as the test oracle: on every body of the corpus both give the
  same dict, and the walk is faster than kio's reader plus the conversion to dicts.
- Field names are kio's (the JSON names in snake case), except that durations and timestamps
  are integers in milliseconds with an `_ms` suffix (`timeout` -> `timeout_ms`,
  `throttle_time` -> `throttle_time_ms`; -1 stays -1), error codes stay ints (unknown ones
  too), UUIDs are strings in Kafka's own form (base64url, as `partition.metadata` and
  Kafka's tools print them; None for null or all-zero), `records` fields are memoryviews for
  the caller to decode, absent tagged fields take kio's defaults and unknown tags are skipped.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import enum
import struct
import typing
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from kaudit.protocol.errors import DecodeError, Truncated
from kaudit.protocol.primitives import (
    read_array_len,
    read_bytes_view,
    read_bool,
    read_bytes,
    read_compact_array_len,
    read_compact_bytes,
    read_compact_string,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_raw,
    read_string,
    read_uint16,
    read_uvarint,
)
from kaudit.protocol.wire.apis import kio_class

_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def has_kio(api_key: int, api_version: int, entity: str) -> bool:
    return kio_class(api_key, api_version, entity) is not None


def decode_kio(api_key: int, api_version: int, entity: str, buf, offset: int, end: int):
    """The body between `offset` and `end` -> (dict, offset after the body), by walking kio's
    schema for (key, version, entity). Raises DecodeError subclasses only (Truncated when the
    bytes end early); never reads past `end`; positions are offsets in `buf`."""
    cls = kio_class(api_key, api_version, entity)
    if cls is None:
        raise DecodeError(f"kio has no {entity} schema for api {api_key} v{api_version}", offset)
    return walk_schema(cls, memoryview(buf)[:end], offset)


def decode_kio_native(api_key: int, api_version: int, entity: str, buf, offset: int = 0):
    """kio's own native reader + conversion to the same dicts. FOR TESTS ONLY, on trusted bytes:
    a lying array length aborts the process (see the module docstring)."""
    from kio.serial import entity_reader

    cls = kio_class(api_key, api_version, entity)
    obj, used = entity_reader(cls)(memoryview(buf)[offset:], 0)
    return _converter(cls)(obj), offset + used


# ---- kio dataclass -> dict ---------------------------------------------------------------


def _td(v):
    return None if v is None else v // _MS


def _dt(v):
    return -1 if v is None else (v - _EPOCH) // _MS


def _err(v):
    return int(v)


def _uuid(v):
    return None if v is None else kafka_uuid(v.bytes)


def _same(v):
    return v


def _list(v):
    return None if v is None else list(v)


_PRIMITIVE = {
    "timedelta_i32": _td,
    "timedelta_i64": _td,
    "datetime_i64": _dt,
    "error_code": _err,
    "uuid": _uuid,
}


def _inner_types(t) -> list:
    """The classes inside Optional[...] / tuple[..., ...] / unions."""
    args = typing.get_args(t)
    if not args:
        return [t]
    out = []
    for a in args:
        out.extend(_inner_types(a))
    return out


def _is_optional(t) -> bool:
    return type(None) in typing.get_args(t)


def _is_tuple(t) -> bool:
    if typing.get_origin(t) is tuple:
        return True
    return any(typing.get_origin(a) is tuple for a in typing.get_args(t))


def _out_name(name: str, kafka_type: str | None) -> str:
    if kafka_type in ("timedelta_i32", "timedelta_i64", "datetime_i64") and not name.endswith("_ms"):
        return name + "_ms"
    return name


@lru_cache(maxsize=None)
def _converter(cls):
    """A function turning a kio entity of `cls` into a dict (built once per class)."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        kt = f.metadata.get("kafka_type")
        t = hints[f.name]
        inner = [c for c in _inner_types(t) if isinstance(c, type) and dataclasses.is_dataclass(c)]
        seq = _is_tuple(t)
        if inner:
            sub = _converter(inner[0])
            if seq:
                def fn(v, sub=sub):
                    return None if v is None else [sub(x) for x in v]
            else:
                def fn(v, sub=sub):
                    return None if v is None else sub(v)
        else:
            prim = _PRIMITIVE.get(kt)
            if prim is None:
                enum_cls = [c for c in _inner_types(t)
                            if isinstance(c, type) and issubclass(c, enum.Enum)]
                prim = _err if enum_cls else None
            if seq:
                if prim is None:
                    fn = _list
                else:
                    def fn(v, prim=prim):
                        return None if v is None else [prim(x) for x in v]
            else:
                fn = prim or _same
        specs.append((f.name, _out_name(f.name, kt), fn))

    def convert(obj):
        return {out: fn(getattr(obj, name)) for name, out, fn in specs}

    convert.__name__ = f"convert_{cls.__name__}"
    return convert


def kafka_uuid(raw: bytes) -> str | None:
    """16 bytes as Kafka writes a Uuid (org.apache.kafka.common.Uuid.toString: URL-safe base64
    without padding, 22 characters - the form of `partition.metadata`, kafka-topics.sh and
    Kafka's JSON), None for the all-zero Uuid.ZERO_UUID."""
    raw = bytes(raw)
    if raw == bytes(16):
        return None
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_str(raw: bytes | None) -> str | None:
    """16 raw bytes of a uuid field -> kafka_uuid (None for null/zero)."""
    return None if raw is None else kafka_uuid(raw)


# ---- the schema walk -----------------------------------------------------------------------


def _read_uuid(buf, off):
    raw, off = read_raw(buf, off, 16, "uuid")
    return uuid_str(raw), off


def _read_datetime(buf, off):
    return read_int64(buf, off)  # already milliseconds; -1 stays -1


def _read_float64(buf, off):
    raw, off = read_raw(buf, off, 8, "float64")
    return struct.unpack(">d", raw)[0], off


def _records_view(flexible):
    def read(buf, off):
        return read_bytes_view(buf, off, flexible)
    return read


_FIXED_READERS = {
    "int8": read_int8, "int16": read_int16, "int32": read_int32, "int64": read_int64,
    "uint16": read_uint16, "bool": read_bool, "error_code": read_int16,
    "timedelta_i32": read_int32, "timedelta_i64": read_int64, "datetime_i64": _read_datetime,
    "uuid": _read_uuid, "float64": _read_float64,
}


def _prim_reader(kafka_type: str, flexible: bool):
    if kafka_type == "string":
        return read_compact_string if flexible else read_string
    if kafka_type == "bytes":
        return read_compact_bytes if flexible else read_bytes
    if kafka_type == "records":
        return _records_view(flexible)
    try:
        return _FIXED_READERS[kafka_type]
    except KeyError:
        raise DecodeError(f"unknown schema type {kafka_type}") from None


# Fixed-size Kafka types: consecutive ones are read with one struct.unpack_from.
_FIXED_FORMATS = {
    "int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "bool": "?",
    "error_code": "h", "timedelta_i32": "i", "timedelta_i64": "q", "datetime_i64": "q",
    "float64": "d", "uuid": "16s",
}
_FIELD, _FIXED, _TAGGED = 0, 1, 2


@lru_cache(maxsize=None)
def _walk_plan(cls):
    """(flexible, steps, tagged) for a kio class, built once. Steps, in field order:
    (_FIXED, struct, names, uuid positions) for a run of fixed-size fields,
    (_FIELD, name, reader) for any other positional field,
    (_TAGGED, name, default) for a tagged field (its default until read);
    tagged: {tag: (name, reader)}."""
    hints = typing.get_type_hints(cls)
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list = []
    tagged = {}
    run: list = []  # the current run of fixed-size fields: [(name, format)]

    def close_run():
        if run:
            fmt = ">" + "".join(f for _, f in run)
            uuids = tuple(i for i, (_, f) in enumerate(run) if f == "16s")
            steps.append((_FIXED, struct.Struct(fmt), tuple(n for n, _ in run), uuids))
            run.clear()

    for f in dataclasses.fields(cls):
        kt = f.metadata.get("kafka_type")
        tag = f.metadata.get("tag")
        t = hints[f.name]
        name = _out_name(f.name, kt)
        inner = [c for c in _inner_types(t) if isinstance(c, type) and dataclasses.is_dataclass(c)]
        seq = _is_tuple(t)
        if tag is None and not inner and not seq and kt in _FIXED_FORMATS:
            run.append((name, _FIXED_FORMATS[kt]))
            continue
        close_run()
        if inner and not seq and tag is None and _is_optional(t):
            # a nullable struct: an int8 marker first (-1 null, 1 present; Kafka's generated
            # readers, e.g. ConsumerGroupHeartbeatResponse.Assignment)
            def item(buf, off, sub_cls=inner[0]):
                present, off = read_int8(buf, off)
                if present < 0:
                    return None, off
                return walk_schema(sub_cls, buf, off)
        elif inner:
            def item(buf, off, sub_cls=inner[0]):
                return walk_schema(sub_cls, buf, off)
        else:
            item = _prim_reader(kt, flexible)
        reader = _array_reader(item, flexible) if seq else item
        if tag is None:
            steps.append((_FIELD, name, reader))
            continue
        default = None
        if f.default is not dataclasses.MISSING:
            default = f.default
            if dataclasses.is_dataclass(default):
                default = _converter(type(default))(default)
            elif isinstance(default, tuple):
                default = list(default)
            else:
                default = _PRIMITIVE.get(kt, _same)(default)
        steps.append((_TAGGED, name, default))
        tagged[tag] = (name, reader)
    close_run()
    return flexible, tuple(steps), tagged


def _array_reader(item, flexible):
    def read(buf, off):
        if flexible:
            n, off = read_compact_array_len(buf, off)
        else:
            n, off = read_array_len(buf, off)
        if n < 0:
            return None, off
        out = []
        for _ in range(n):
            v, off = item(buf, off)
            out.append(v)
        return out, off
    return read


def walk_schema(cls, buf, off):
    """Decode one kio entity class -> (dict, new offset); the dict kio's reader would give,
    converted (see the module docstring).

    The compiled walker of the class (`kio_walkers.compiled`) runs first; it only ever gives up, never
    differs: on any problem (cut or invalid bytes, an unusual tagged field) the plain walk below
    decodes the same bytes again and raises the precise error."""
    fast = _compiled(cls)
    if fast is not None:
        try:
            return fast(buf, off)
        except Exception:  # noqa: BLE001 - the generic walk decides what is wrong
            pass
    return _walk_generic(cls, buf, off)


def _walk_generic(cls, buf, off):
    flexible, steps, tagged = _walk_plan(cls)
    out = {}
    for step in steps:
        kind = step[0]
        if kind == _FIXED:
            _, st, names, uuids = step
            if off + st.size > len(buf):
                raise Truncated(f"{st.size} bytes of fixed fields cut", off, st.size)
            values = st.unpack_from(buf, off)
            if uuids:
                values = list(values)
                for i in uuids:
                    values[i] = uuid_str(values[i])
            out.update(zip(names, values))
            off += st.size
        elif kind == _FIELD:
            out[step[1]], off = step[2](buf, off)
        else:
            out[step[1]] = _fresh(step[2])
    if flexible:
        count, off = read_uvarint(buf, off)
        if count > len(buf) - off:
            raise Truncated(f"{count} tagged fields cannot fit", off)
        for _ in range(count):
            tag, off = read_uvarint(buf, off)
            size, off = read_uvarint(buf, off)
            if off + size > len(buf):
                raise Truncated(f"tagged field of {size} bytes cut", off, size)
            known = tagged.get(tag)
            if known is not None:
                name, reader = known
                out[name], used = reader(buf[: off + size], off)
                if used != off + size:
                    raise DecodeError(f"tagged field {tag} size {size} disagrees", off)
            off += size  # unknown tags are skipped, as Kafka does
    return out, off


def _immutable(v) -> bool:
    return v is None or isinstance(v, (int, float, str, bytes))


def _copier(default):
    """How to give a tagged field's default as a new object (callers may mutate containers):
    a shallow copy when the container holds immutable values only, else a deep copy."""
    if isinstance(default, dict):
        return dict.copy if all(_immutable(v) for v in default.values()) else copy.deepcopy
    if isinstance(default, list):
        return list.copy if all(_immutable(v) for v in default) else copy.deepcopy
    return None


def _fresh(default):
    """A tagged field's default, as a new object when it is a container."""
    how = _copier(default)
    return default if how is None else how(default)


# The compiled walkers (kio_walkers) build on the plan and the schema walk above.
from kaudit.protocol.wire.kio_walkers import compiled as _compiled  # noqa: E402
