"""Feeding a fold group generated rows in chunks, as the engines cut them."""

from __future__ import annotations

import pyarrow as pa


def fed(group, kind: str, rows: list[dict], schema: pa.Schema, cuts) -> list[dict]:
    """The findings of a fold group (`feed`, `finish`) given `rows` as tables cut at `cuts`."""
    out, a = [], 0
    for b in sorted(set(cuts)) + [len(rows)]:
        if b > a:
            out.extend(group.feed(kind, pa.Table.from_pylist(rows[a:b], schema=schema)))
            a = b
    return out + group.finish()
