"""Column helpers of the folds (audit.folds): a selection's stable sort by a fold's key and order
in numpy where that is exact (strings by rank, nulls last, as Arrow sorts), its split into each
key's rows, one-valued columns told at once, and numpy <-> Arrow bridges that avoid numpy.ma.
Kept apart from the fold contract so that the contract reads alone; audit.folds re-exports them."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def sort_indices(t: pa.Table, cols: list[str]) -> pa.Array:
    """The stable ascending order of `t` by `cols`, nulls last, as Arrow's sort_indices gives it:
    numpy's lexsort over integer keys (strings by their rank among the column's distinct values,
    a null or NaN flag before a value that has them), ~2x faster than Arrow's multi-column sort;
    a column of another type leaves it to Arrow. Columns with one value throughout are skipped."""
    enc = _encoded(t, cols)
    if enc is None:
        return pc.sort_indices(t, [(c, "ascending") for c in cols])
    keys = [k for c in cols for k in enc[c]]   # numpy's lexsort: the last key is the primary one
    return np_indices(np.lexsort(keys[::-1]) if keys else np.arange(t.num_rows))


def _encoded(t: pa.Table, cols: list[str]) -> dict[str, list[np.ndarray]] | None:
    """Each column's numpy sort keys (`_sort_keys`; none for a column with one value throughout),
    None where one is of a type left to Arrow."""
    out: dict[str, list[np.ndarray]] = {}
    for c in cols:
        if c in out:
            continue
        col = t.column(c)
        enc = [] if constant(col)[0] else _sort_keys(col)
        if enc is None:
            return None
        out[c] = enc
    return out


def sorted_split(t: pa.Table, key: tuple[str, ...], cols: list[str]) -> Iterator[tuple[tuple, pa.Table]]:
    """split_by_key(t sorted by `cols`, key), told from the sort's own integer keys: rows already
    in order are not copied, nor the key and order columns with one value throughout (any order
    of them is themselves), and a key's runs are where its sort keys change. A float key column
    (NaN is unequal to itself in split_by_key) or a column of a type left to Arrow: the general
    take and split."""
    if t.num_rows == 0:   # nothing to split (an empty kind's table may lack the key columns)
        return
    runs = _key_runs(t, key, cols)
    if runs is None:
        yield from split_by_key(t.take(sort_indices(t, cols)), key)
        return
    idx, change, enc = runs
    if idx is not None:
        same = {c for c in cols if not enc[c]}   # one value throughout, no null
        taken = np_indices(idx)
        t = pa.Table.from_arrays([t.column(i).combine_chunks() if name in same else t.column(i).take(taken)
                                  for i, name in enumerate(t.schema.names)], schema=t.schema)
    if t.num_rows:
        yield from _runs_of(t, key, change)


def key_runs(t: pa.Table, key: tuple[str, ...], cols: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """The rows of `t` as sorted_split cuts them, without copying any: (the sort's row numbers,
    where each key's run starts among them); None where sorted_split takes the general way."""
    runs = _key_runs(t, key, cols)
    if runs is None:
        return None
    idx, change, _ = runs
    return (np.arange(t.num_rows) if idx is None else idx), np.flatnonzero(change)


def _key_runs(t: pa.Table, key: tuple[str, ...], cols: list[str]):
    """(the sort's row numbers, None for the identity; True where a key's run starts, in that
    order; the columns' sort keys), or None (see sorted_split)."""
    enc = _encoded(t, cols)
    if enc is None or any(pa.types.is_floating(t.schema.field(c).type) for c in key):
        return None
    major = [k for c in key for k in enc[c]]
    minor = [k for c in cols[len(key):] if c not in key for k in enc[c]] if cols[:len(key)] == list(key) else None
    one = _merged(major) if minor is not None else None
    if one is not None:
        # one integer for the key: a stable sort by it alone, kept where the rows of each key
        # are already in order (a capture's rows come in time order): the lexsort's own order
        idx = np.argsort(one, kind="stable")
        if not _in_order(one[idx], [k[idx] for k in minor]):
            idx = np.lexsort((major + minor)[::-1])
    else:
        keys = [k for c in cols for k in enc[c]]
        idx = np.lexsort(keys[::-1]) if keys else np.arange(t.num_rows)
    if bool((idx[1:] > idx[:-1]).all()):
        idx = None   # the identity: the rows are in order already
    change = np.zeros(t.num_rows, dtype=bool)
    change[:1] = True
    for k in major:
        k = k if idx is None else k[idx]
        change[1:] |= k[1:] != k[:-1]
    return idx, change, enc


def _merged(keys: list[np.ndarray]) -> np.ndarray | None:
    """Integer sort keys (major first) as one, in the same order, where their ranges multiply
    below 2**62: as uint16 (numpy's radix sort) where they fit; None: not so."""
    if not keys:
        return None
    out, span = None, 1
    for k in keys:
        k = k.astype(np.int64, copy=False)
        lo, hi = (int(k.min()), int(k.max())) if k.size else (0, 0)
        width = hi - lo + 1
        span *= width
        if span >= 1 << 62:
            return None
        out = k - lo if out is None else out * width + (k - lo)
    return out.astype(np.uint16) if span <= 1 << 16 else out


def _in_order(major: np.ndarray, minor: list[np.ndarray]) -> bool:
    """Whether each run of equal `major` values is in ascending (lexicographic) `minor` order."""
    if major.size < 2 or not minor:
        return True
    open_ = major[1:] == major[:-1]   # pairs within one key: still to be decided
    for k in minor:
        a, b = k[:-1], k[1:]
        if (open_ & (a > b)).any():
            return False
        open_ &= a == b
    return True


def _sort_keys(col) -> list[np.ndarray] | None:
    """`col` as numpy sort keys, major first (None: a type left to Arrow)."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    typ = col.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_binary(typ):
        enc = pc.dictionary_encode(col)
        rank = np.asarray(pc.rank(enc.dictionary, sort_keys="ascending", tiebreaker="dense"), dtype=np.int64)
        codes = enc.indices.fill_null(len(rank)).to_numpy() if enc.null_count else enc.indices.to_numpy()
        return [np.append(rank, len(rank) + 1)[codes]]   # a null: after every value
    if pa.types.is_floating(typ):
        v = col.fill_null(0.0).to_numpy(zero_copy_only=False) if col.null_count else col.to_numpy()
        nan = np.isnan(v)
        out = [np.where(nan, 0.0, v)]
        if nan.any():
            out.insert(0, nan)   # Arrow: NaN after every number, before the nulls
        if col.null_count:
            out.insert(0, col.is_null().to_numpy(zero_copy_only=False))
        return out
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        if col.null_count:
            return [col.is_null().to_numpy(zero_copy_only=False),
                    col.fill_null(False if pa.types.is_boolean(typ) else 0).to_numpy(zero_copy_only=False)]
        return [col.to_numpy(zero_copy_only=False)]
    return None


def constant(col) -> tuple[bool, object]:
    """(True, value) when every row of `col` holds one non-null value: one comparison pass, no
    hashing (a chunk of batches comes from one file, one partition). Several folds ask of the
    same column of a chunk (source, replica, topic, partition): the last answers are kept."""
    if len(col) == 0 or col.null_count:
        return False, None
    key = _memo_key(col)
    if key is not None:
        for k, chunk, answer in tuple(_CONSTANT_MEMO):
            if k == key:
                return answer
    first = col[0]
    answer = (True, first.as_py()) if pc.all(pc.equal(col, first)).as_py() else (False, None)
    if key is not None:
        _CONSTANT_MEMO.append((key, col.chunk(0), answer))
    return answer


# (buffer addresses, offset, length, type) -> answer. An entry holds its chunk, so no other
# live array can have those addresses while it is kept; only small chunks are kept (bounded pins)
_CONSTANT_MEMO: deque = deque(maxlen=8)
_MEMO_MAX_BYTES = 4 << 20


def _memo_key(col):
    if not isinstance(col, pa.ChunkedArray) or col.num_chunks != 1:
        return None
    chunk = col.chunk(0)
    bufs = chunk.buffers()
    if sum(b.size for b in bufs if b is not None) > _MEMO_MAX_BYTES:
        return None
    return (tuple(b.address if b is not None else 0 for b in bufs), chunk.offset, len(chunk), str(chunk.type))


def split_by_key(table: pa.Table, key: tuple[str, ...]) -> Iterator[tuple[tuple, pa.Table]]:
    """(key values, contiguous slice) for each run of equal keys in `table`."""
    n = table.num_rows
    if n == 0:
        return
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for name in key:
        col = table.column(name)
        if constant(col)[0] or pa.types.is_null(col.type):   # null-typed: every row null, one key
            continue
        a = col.slice(1)
        b = col.slice(0, n - 1)
        ne = pc.fill_null(pc.not_equal(a, b), True)
        # both null: the same key
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        ne = pc.and_(ne, pc.invert(both_null))
        change[1:] |= ne.to_numpy(zero_copy_only=False)
    yield from _runs_of(table, key, change)


def _runs_of(table: pa.Table, key: tuple[str, ...], change: np.ndarray) -> Iterator[tuple[tuple, pa.Table]]:
    """(key values, slice) of each run of `table` starting where `change` is True (row 0 is)."""
    n = table.num_rows
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], n)
    # every run's key values at once (one take per column, not a scalar per run and column)
    firsts = np_indices(starts)
    keys = list(zip(*(table.column(name).take(firsts).to_pylist() for name in key))) if key else \
        [()] * starts.size
    for k, s, e in zip(keys, starts.tolist(), ends.tolist()):
        yield k, table.slice(s, e - s)


def np_mask(mask: np.ndarray) -> pa.BooleanArray:
    """A numpy boolean mask as an Arrow array. Not pa.array: its first numpy argument imports
    numpy.ma (to check for masked arrays), ~0.01-0.02 s of a command's run."""
    bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def np_indices(idx: np.ndarray) -> pa.Int64Array:
    """Row numbers for `take`, not through pa.array (numpy.ma, as np_mask says)."""
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(idx), [None, pa.py_buffer(idx)])


def unique_ints(a: np.ndarray) -> np.ndarray:
    """np.unique of an integer array, without its check for masked arrays (which imports
    numpy.ma, as np_mask says)."""
    a = np.sort(np.ravel(a))
    return a[np.r_[True, a[1:] != a[:-1]]] if a.size else a


def np_col(table: pa.Table, name: str, fill, dtype) -> np.ndarray:
    """A column as a numpy array, nulls replaced by `fill`."""
    col = table.column(name)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return col.to_numpy().astype(dtype, copy=False)
