"""Command-line values coerced without pydantic where that is plain.

Typer (from 0.2x) coerces every value through a pydantic TypeAdapter: importing pydantic and
building the adapters cost ~0.06 s of each command's start-up (measured with -X importtime), for
values that are strings, decimal numbers, paths and enum choices. `install()` puts a coercion in
front of typer's: a value it is sure of (a str for `str`, ASCII digits within the option's
bounds for `int`, a member's exact name for an enum, a str for a Path: typer's own path checks
then run) is converted here; anything else - a value out of bounds, an odd spelling, another
annotation - goes to typer's own coercion, built only then, so errors and edge cases are
typer's, word for word. A typer without this hook (an older or newer one) is left as it is.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import get_args, get_origin

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?[0-9]+(\.[0-9]*)?")
_NO = object()   # "not sure": typer's own coercion decides


def _in_bounds(v, info) -> bool:
    return (info.min is None or v >= info.min) and (info.max is None or v <= info.max)


def _number(kind, pattern, value, info):
    if info.clamp:
        return _NO
    if isinstance(value, str) and pattern.fullmatch(value):
        v = kind(value)
    elif type(value) is kind:
        v = value
    else:
        return _NO
    return v if _in_bounds(v, info) else _NO


def _choice(enum, value, info, ctx):
    if isinstance(value, enum):
        return value
    if not isinstance(value, str) or (ctx is not None and ctx.token_normalize_func is not None):
        return _NO
    for member in enum:
        name = member.value if isinstance(member.value, str) else None
        if name is not None and (name == value or (not info.case_sensitive and name.casefold() == value.casefold())):
            return member
    return _NO


def _path(annotation, value, info, param, ctx):
    from typer._param_types import coerce_cli_path

    if not isinstance(value, (str, Path)) or info.parser is not None:
        return _NO
    return coerce_cli_path(Path(value) if isinstance(value, str) else value, info, path_type=annotation,
                           param=param, ctx=ctx)


def coerce_one(annotation, value, info, param=None, ctx=None):
    """`value` for a leaf annotation, or _NO."""
    if info.parser is not None:
        return _NO
    if annotation is str:
        return value if isinstance(value, str) else _NO
    if annotation is int:
        return _number(int, _INT, value, info)
    if annotation is float:
        return _number(float, _FLOAT, value, info)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(annotation, value, info, ctx)
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return _path(annotation, value, info, param, ctx)
    return _NO


def coerce(annotation, value, info, param=None, ctx=None):
    """`value` for an annotation (a leaf, or a list of one), or _NO."""
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        if not isinstance(value, (list, tuple)):
            return _NO
        out = [coerce_one(item, v, info, param, ctx) for v in value]
        return _NO if any(v is _NO for v in out) else out
    return coerce_one(annotation, value, info, param, ctx)


def install() -> None:
    """Put the plain coercion in front of typer's (once)."""
    try:
        from dataclasses import dataclass, field

        from typer import core
        from typer._coercion import RuntimeParam
    except ImportError:
        return
    typers = getattr(core, "build_runtime_param", None)
    if typers is None or getattr(typers, "_kaudit", False):
        return

    @dataclass(frozen=True)
    class PlainFirst(RuntimeParam):
        descriptor: object = None
        fallback: list = field(default_factory=list)   # typer's own, built on first need

        def _coerce_value(self, value, param, ctx):
            v = coerce(self.annotation, value, self.parameter_info, param, ctx)
            if v is not _NO:
                return v
            if not self.fallback:
                self.fallback.append(typers(self.descriptor))
            return self.fallback[0]._coerce_value(value, param=param, ctx=ctx)

    def build(descriptor):
        if descriptor.file_annotation is not None:
            return typers(descriptor)
        return PlainFirst(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                          descriptor=descriptor)

    build._kaudit = True
    core.build_runtime_param = build
