"""kio's message schemas as walk plans (kio_bodies' module docstring says what a body decodes to):
for each kio entity class, once, the plan of its fields - fixed runs unpacked by one struct,
bounded readers for the rest, its tagged fields - and the generic walk of a body by that plan.
The compiled walkers (kio_walkers) are generated from the same plans, and its `walk_schema`
runs them first; a nested entity is walked by the `nested` walker the plan is built with."""

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

_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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
def _walk_plan(cls, nested):
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
                return nested(sub_cls, buf, off)
        elif inner:
            def item(buf, off, sub_cls=inner[0]):
                return nested(sub_cls, buf, off)
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


def _walk_generic(cls, buf, off, nested):
    flexible, steps, tagged = _walk_plan(cls, nested)
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
