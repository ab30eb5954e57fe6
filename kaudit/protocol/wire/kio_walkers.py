"""Compiled kio walkers: the plan of `kio_schema._walk_plan` turned into one straight-line Python
function per class (fixed runs unpacked into locals, compact lengths read inline, arrays of
entities looped in place, arrays of fixed-size values read with one struct call, the dict built
at once in field order). Same dict, same key order, same offsets as the schema walk
(`kio_schema._walk_generic`); any exception makes the caller fall back to that walk, which
raises the real error. Steps the generator does not specialise call the generic step reader.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from functools import lru_cache

from kaudit.protocol.primitives import read_uvarint
from kaudit.protocol.wire import kio_schema as kb
from kaudit.protocol.wire.apis import kio_class


class _GiveUp(Exception):
    pass


_GIVE_UP = _GiveUp()


def _tags(out, tagged, buf, off):
    """The tagged-field section after its first byte said "some": exactly the generic loop."""
    count, off = read_uvarint(buf, off)
    if count > len(buf) - off:
        raise _GIVE_UP
    for _ in range(count):
        tag, off = read_uvarint(buf, off)
        size, off = read_uvarint(buf, off)
        if off + size > len(buf):
            raise _GIVE_UP
        known = tagged.get(tag)
        if known is not None:
            name, reader = known
            out[name], used = reader(buf[: off + size], off)
            if used != off + size:
                raise _GIVE_UP
        off += size
    return off


@lru_cache(maxsize=4096)
def _fixed_array(fmt: str, n: int):
    """unpack_from of n big-endian values of format `fmt` (the struct, built once per n)."""
    return struct.Struct(f">{n}{fmt}").unpack_from


def _length_code(var: str, flexible: bool, lines: list, ind: str, width: int = 4) -> None:
    """Code reading a length prefix into `var` (-1 for null): uvarint - 1 when flexible, else
    a big-endian int of `width` bytes (4: arrays, bytes; 2: strings); below -1 gives up."""
    if not flexible:
        lines.append(f"{ind}{var}, = I{width * 8}(buf, off)")
        lines.append(f"{ind}off += {width}")
        lines.append(f"{ind}if {var} < -1:")
        lines.append(f"{ind}    raise GIVE_UP")
        return
    lines.append(f"{ind}b = buf[off]")
    lines.append(f"{ind}if b < 128:")
    lines.append(f"{ind}    {var} = b - 1")
    lines.append(f"{ind}    off += 1")
    lines.append(f"{ind}else:")
    lines.append(f"{ind}    {var}, off = uvarint(buf, off)")
    lines.append(f"{ind}    {var} -= 1")


def _sized_code(var: str, flexible: bool, width: int, value: str, lines: list) -> None:
    """Code reading a length-prefixed field: None when null, else `value` (an expression of
    buf, off and e, the field's end) after checking the field fits."""
    _length_code("n", flexible, lines, "    ", width)
    lines.append("    if n < 0:")
    lines.append(f"        {var} = None")
    lines.append("    else:")
    lines.append("        e = off + n")
    lines.append("        if e > L:")
    lines.append("            raise GIVE_UP")
    lines.append(f"        {var} = {value}")
    lines.append("        off = e")


@lru_cache(maxsize=None)
def compiled(cls):
    """The compiled walker of `cls`, or None when its plan cannot be compiled."""
    try:
        return _compile(cls)
    except Exception:  # noqa: BLE001 - the generic walk still works
        return None


def _compile(cls):
    flexible, steps, tagged = kb._walk_plan(cls, walk_schema)
    hints = typing.get_type_hints(cls)
    fields = {kb._out_name(f.name, f.metadata.get("kafka_type")): f for f in dataclasses.fields(cls)}
    env = {"uvarint": read_uvarint, "GIVE_UP": _GIVE_UP, "uuid_str": kb.uuid_str,
           "tags": _tags, "TAGGED": tagged, "I16": struct.Struct(">h").unpack_from,
           "I32": struct.Struct(">i").unpack_from, "memoryview": memoryview,
           "fixed_array": _fixed_array}
    lines = ["def walk(buf, off):", "    L = len(buf)"]
    names = []  # (output name, local variable or expression)
    for i, step in enumerate(steps):
        kind = step[0]
        if kind == kb._FIXED:
            _, st, fnames, uuids = step
            env[f"S{i}"] = st.unpack_from
            locs = [f"v{i}_{j}" for j in range(len(fnames))]
            lines.append(f"    {', '.join(locs)}{',' if len(locs) == 1 else ''} = S{i}(buf, off)")
            lines.append(f"    off += {st.size}")
            for j in uuids:
                lines.append(f"    {locs[j]} = uuid_str({locs[j]})")
            names.extend(zip(fnames, locs))
            continue
        if kind == kb._TAGGED:
            env[f"D{i}"] = step[2]
            how = kb._copier(step[2])
            if how is not None:
                env[f"C{i}"] = how
            names.append((step[1], f"D{i}" if how is None else f"C{i}(D{i})"))
            continue
        name = step[1]
        names.append((name, _field_code(i, step, fields[name], hints, flexible, env, lines)))
    items = ", ".join(f"{k!r}: {v}" for k, v in names)
    lines.append(f"    out = {{{items}}}")
    if flexible:
        lines.append("    if buf[off] == 0:")
        lines.append("        return out, off + 1")
        lines.append("    return out, tags(out, TAGGED, buf, off)")
    else:
        lines.append("    return out, off")
    src = "\n".join(lines) + "\n"
    code = compile(src, f"<kio walker {cls.__module__}.{cls.__qualname__}>", "exec")
    exec(code, env)  # noqa: S102 - generated from kio's schema only
    walk = env["walk"]
    walk.__qualname__ = walk.__name__ = f"walk_{cls.__name__}"
    return walk


def _field_code(i: int, step, f, hints: dict, flexible: bool, env: dict, lines: list[str]) -> str:
    """The walker's lines that read field `f` (step `i`: a generic step's name and reader), its
    helpers put in `env`; the local variable that holds its value."""
    var = f"v{i}"
    kt = f.metadata.get("kafka_type")
    t = hints[f.name]
    inner = [c for c in kb._inner_types(t) if isinstance(c, type) and dataclasses.is_dataclass(c)]
    seq = kb._is_tuple(t)
    if inner and seq:
        sub = compiled(inner[0])
        if sub is None:
            raise ValueError("nested class not compiled")
        env[f"W{i}"] = sub
        _length_code("n", flexible, lines, "    ")
        lines.append("    if n < 0:")
        lines.append(f"        {var} = None")
        lines.append("    else:")
        lines.append("        if n > L - off:")
        lines.append("            raise GIVE_UP")
        lines.append(f"        {var} = []")
        lines.append(f"        ap = {var}.append")
        lines.append("        for _ in range(n):")
        lines.append(f"            x, off = W{i}(buf, off)")
        lines.append("            ap(x)")
    elif not inner and seq and kt in kb._FIXED_FORMATS and kt != "uuid":
        # an array of fixed-size values: one struct call for all of them
        size = struct.calcsize(">" + kb._FIXED_FORMATS[kt])
        _length_code("n", flexible, lines, "    ")
        lines.append("    if n < 0:")
        lines.append(f"        {var} = None")
        lines.append("    else:")
        lines.append(f"        e = off + n * {size}")
        lines.append("        if e > L:")
        lines.append("            raise GIVE_UP")
        lines.append(f"        {var} = list(fixed_array({kb._FIXED_FORMATS[kt]!r}, n)(buf, off))")
        lines.append("        off = e")
    elif not inner and not seq and kt == "string":
        _sized_code(var, flexible, 2, "str(buf[off:e], 'utf-8')", lines)
    elif not inner and not seq and kt == "records":
        _sized_code(var, flexible, 4, "memoryview(buf)[off:e]", lines)
    else:  # anything else: the generic step reader
        env[f"R{i}"] = step[2]
        lines.append(f"    {var}, off = R{i}(buf, off)")
    return var


def compiled_walker(api_key: int, api_version: int, entity: str):
    """`decode_kio` as one function `(buf, offset) -> (dict, new offset)` for (key, version,
    entity), reading up to the end of `buf`; None where kio has no schema. The compiled walker
    runs first and the schema walk decides (and raises) when it gives up, as in `walk_schema`."""
    cls = kio_class(api_key, api_version, entity)
    if cls is None:
        return None
    fast = compiled(cls)
    if fast is None:
        return lambda buf, off: kb._walk_generic(cls, buf, off, walk_schema)

    def walk(buf, off):
        try:
            return fast(buf, off)
        except Exception:  # noqa: BLE001 - the generic walk decides what is wrong
            return kb._walk_generic(cls, buf, off, walk_schema)

    return walk


def walk_schema(cls, buf, off):
    """Decode one kio entity class -> (dict, new offset); the dict kio's reader would give,
    converted (see kio_bodies' module docstring).

    The compiled walker of the class (`compiled`) runs first; it only ever gives up, never
    differs: on any problem (cut or invalid bytes, an unusual tagged field) the plain walk below
    decodes the same bytes again and raises the precise error."""
    fast = compiled(cls)
    if fast is not None:
        try:
            return fast(buf, off)
        except Exception:  # noqa: BLE001 - the generic walk decides what is wrong
            pass
    return kb._walk_generic(cls, buf, off, walk_schema)
