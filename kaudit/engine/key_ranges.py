"""A buffered fold's selection cut into contiguous ranges of its sorted keys, so that two processes
can each fold a range of a fold whose findings are each key's alone (`Fold.per_key`): the ranges'
findings, concatenated in range order, are the whole selection's, in its order.

The ranges follow the order `folds.sorted_keyed` gives the keys - Python's order of the tuples
`((v is None, v), ...)`, a null after every value -, cut where the rows (the cost a fold's keys
have in common) come closest to equal shares. Keys of integer or string columns only: those
Arrow and Python order alike (strings by code point, which UTF-8's byte order is); a key of
another type is not cut (`weights` None)."""

from __future__ import annotations

from bisect import bisect_left

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def order(k: tuple) -> tuple:
    """A key's place in folds.sorted_keyed's order."""
    return tuple((v is None, v) for v in k)


def _cuttable(typ: pa.DataType) -> bool:
    return pa.types.is_integer(typ) or pa.types.is_string(typ) or pa.types.is_large_string(typ)


def weights(key: tuple[str, ...], tables: list[pa.Table]) -> dict[tuple, int] | None:
    """Rows per key over `tables` (None: a key column of a type not cut, or no key)."""
    if not key or any(not _cuttable(t.schema.field(c).type) for t in tables for c in key):
        return None
    out: dict[tuple, int] = {}
    for t in tables:
        if t.num_rows:
            for k, n in _counts(t, key):
                out[k] = out.get(k, 0) + n
    return out


def _counts(t: pa.Table, key: tuple[str, ...]):
    """(key, rows) of one table: each column's values numbered (a null too), the numbers of a
    row's columns made one (mixed radix), counted by numpy - not Arrow's group_by, whose engine
    takes ~0.025 s to start in each process."""
    code = np.zeros(t.num_rows, dtype=np.int64)
    values, radix = [], 1
    for c in key:
        col = t.column(c)
        enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col,
                                   null_encoding="encode")
        n = len(enc.dictionary)
        radix *= n
        if radix >= 1 << 62:   # not one int64: Arrow's group_by
            g = t.select(list(key)).group_by(list(key), use_threads=False).aggregate([([], "count_all")])
            return zip(zip(*(g.column(c).to_pylist() for c in key)), g.column("count_all").to_pylist())
        code = code * n + np.asarray(enc.indices, dtype=np.int64)
        values.append((enc.dictionary.to_pylist(), n))
    uniq, counts = np.unique(code, return_counts=True)
    cols = []
    for vals, n in reversed(values):
        cols.append([vals[i] for i in (uniq % n).tolist()])
        uniq = uniq // n
    return zip(zip(*reversed(cols)), counts.tolist())


def cuts(rows: dict[tuple, int], parts: int) -> list[tuple]:
    """The keys that start ranges 2..`parts` (ascending, distinct; fewer where the keys are fewer),
    each where the rows before it come closest to its share of the total."""
    keys = sorted(rows, key=order)
    before = [0]
    for k in keys:
        before.append(before[-1] + rows[k])
    out: list[tuple] = []
    last = 0   # the index of the previous cut: each range keeps one key at least
    for j in range(1, parts):
        if last + 1 > len(keys) - 1:
            break
        target = before[-1] * j / parts
        i = bisect_left(before, target, last + 1, len(keys) - 1)
        if i > last + 1 and target - before[i - 1] <= before[i] - target:
            i -= 1
        out.append(keys[i])
        last = i
    return out


def below(t: pa.Table, key: tuple[str, ...], pivot: tuple) -> pa.ChunkedArray | pa.Array:
    """Which rows of `t` have a key before `pivot` in `order`."""
    result = None
    same = None   # the rows equal to the pivot on the columns before this one
    for c, p in zip(key, pivot):
        col = t.column(c)
        if p is None:   # every value is before a null; a null is not
            lt, eq = pc.is_valid(col), pc.is_null(col)
        else:
            s = pa.scalar(p, col.type)
            lt, eq = pc.fill_null(pc.less(col, s), False), pc.fill_null(pc.equal(col, s), False)
        lt = lt if same is None else pc.and_(same, lt)
        result = lt if result is None else pc.or_(result, lt)
        same = eq if same is None else pc.and_(same, eq)
    return result


def part(tables: list[tuple[str, pa.Table]], key: tuple[str, ...], cut: list[tuple], i: int) -> list[tuple[str, pa.Table]]:
    """The rows of range `i` (0-based) of the ranges `cut` makes: keys from cut[i-1] to cut[i]."""
    if i > len(cut):   # fewer keys than ranges
        return []
    if not cut:
        return list(tables)
    out = []
    for kind, t in tables:
        mask = None
        if i < len(cut):
            mask = below(t, key, cut[i])
        if i > 0:
            after = pc.invert(below(t, key, cut[i - 1]))
            mask = after if mask is None else pc.and_(mask, after)
        sub = t.filter(mask)
        if sub.num_rows:
            out.append((kind, sub))
    return out
