"""A clean certificate for one partition of wire_acked's check, column-wise over the partition's
whole batch table: True only where the full check (wire_acked.AckedPartition) would find no
acknowledged write lost - no two different writes acknowledged at overlapping offsets
(`offset-acknowledged-twice`) and no fetched batch, requested after a write's acknowledgement,
that is another write at its offsets (`acknowledged-records-replaced`). Then the partition has
no finding, and what the full check would note besides (reads, commits) names nothing.

It never decides a finding: False sends the partition to the full check, which alone tells.
It compares a superset of the full check's pairs - every fetched data batch, not only those
wire_acked._near keeps - so a pair it cannot clear (a verdict False, or input the full check
reads differently) only costs the full check. No Python per row: writes are placed
(acked_writes._placed: the k-th batch of one partition in one request starts where the earlier
ones end) and paired (acked_pairs.pairs) in numpy; the records' checksums
(record_content.records_crc) are computed only where a pair of non-idempotent batches needs them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import np_col, np_indices
from kaudit.audit.producers import acked_pairs as P
from kaudit.audit.producers.record_content import records_crc

# the columns read: a table without one goes to the full check
COLUMNS = ("source_kind", "source", "connection", "position", "correlation_id", "topic", "partition",
           "response_error", "response_base_offset", "is_control", "request_ts", "response_ts", "topic_id",
           "base_offset", "last_offset", "record_count", "producer_id", "producer_epoch", "base_sequence",
           "magic", "crc", "codec")
CONTENT = ("crc", "batch_size", "magic", "attributes")   # what records_crc needs (acked_writes.table_contents)
MAX_OFFSET = 1 << 40         # offsets (and spans) at or beyond: the full check
MAX_TWICE_PAIRS = 2_000_000   # candidate pairs of overlapping writes beyond which the full check runs
STRINGS = ("source", "connection", "topic")
PLACE_KEY = ("source", "connection", "position", "correlation_id", "topic", "partition", "response_base_offset")


def certified(b: pa.Table) -> bool:
    """Whether the partition's batch rows (wire_acked's `batch` selection) certainly hold no loss."""
    if not set(COLUMNS) <= set(b.column_names):
        return False
    return _certified(Columns(b))


def certified_rows(whole: "Sorted", s: int, e: int) -> bool:
    """certified(the rows s:e of `whole`'s table in its order), from the whole table's columns
    converted and ordered once: one partition's rows, in the fold's order, of wire_acked's
    selection (wire_acked.certify_clean)."""
    if not set(COLUMNS) <= set(whole.cols.b.column_names):
        return False
    return _certified(_Rows(whole, s, e))


def _certified(cols: "Columns") -> bool:
    produce = cols.eq("source_kind", "produce")
    control = cols.flag("is_control")
    ok0 = cols.eq("response_error", 0)
    rbo = cols.i("response_base_offset", -1)
    acked = np.flatnonzero(produce & ok0 & (rbo >= 0) & ~control)
    if not acked.size:
        return True     # no acknowledged write: nothing to lose
    if any((np.isnan(cols.f(c)) & ~cols.null(c)).any() for c in ("response_ts", "request_ts")):
        return False    # a NaN time compares unlike a missing one in the full check
    if any(np.abs(cols.i(c, 0)).max(initial=0) >= MAX_OFFSET for c in ("response_base_offset", "base_offset",
                                                                         "last_offset", "record_count")):
        return False    # int64 sums of such offsets could wrap where Python's do not
    lo = _placed(cols, acked)
    a = cols.side(acked, lo)
    order = np.argsort(a["lo"], kind="stable")
    a = {k: v[order] for k, v in a.items()}
    if not _twice_clean(cols, a):
        return False
    fetched = cols.eq("source_kind", "fetch") & ~control & ~cols.null("last_offset")
    if (fetched & cols.null("base_offset")).any():
        return False    # an offset span without its base: the full check cannot place it either
    rows = np.flatnonzero(fetched)
    if not rows.size:
        return True
    return _refetched_clean(cols, a, cols.side(rows, cols.i("base_offset", 0)[rows]))


def _np(a) -> np.ndarray:
    """A boolean column as numpy, null as False."""
    return pc.fill_null(a, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


class Columns:
    """The batch table's columns as numpy, each converted once."""

    def __init__(self, b: pa.Table):
        self.b, self.cache = b, {}

    def _get(self, key, make):
        v = self.cache.get(key)
        if v is None:
            v = self.cache[key] = make()
        return v

    def null(self, name: str) -> np.ndarray:
        return self._get(("null", name), lambda: self.b.column(name).is_null().to_numpy(zero_copy_only=False))

    def eq(self, name: str, value) -> np.ndarray:
        """column == value, null as False."""
        return self._get(("eq", name, value), lambda: _np(pc.equal(self.b.column(name), value)))

    def flag(self, name: str) -> np.ndarray:
        """A boolean column, null as False."""
        return self._get(("flag", name), lambda: _np(self.b.column(name)))

    def i(self, name: str, fill: int) -> np.ndarray:
        return self._get(("i", name, fill), lambda: np_col(self.b, name, fill, np.int64))

    def f(self, name: str) -> np.ndarray:
        return self._get(("f", name), lambda: np_col(self.b, name, np.nan, np.float64))

    def code(self, name: str, falsy: bool = False) -> np.ndarray:
        """Small ints for equality (acked_pairs.Codes): 0 for null (and '' with `falsy`)."""
        def make():
            col = self.b.column(name)
            col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            if pa.types.is_null(col.type) or col.null_count == len(col):
                return np.zeros(len(col), np.int64)
            idx = pc.fill_null(col.dictionary_encode().indices, -1)
            out = idx.to_numpy(zero_copy_only=False).astype(np.int64) + 1
            if falsy:
                out[_np(pc.equal(col, ""))] = 0
            return out
        return self._get(("code", name, falsy), make)

    def side(self, rows: np.ndarray, lo: np.ndarray) -> dict:
        """acked_pairs' columns of the batches `rows` placed at `lo` (A.batch_of), content left
        for later (`content_of`)."""
        base, count = self.i("base_offset", 0)[rows], self.i("record_count", 0)[rows]
        both = ~(self.null("base_offset")[rows] | self.null("last_offset")[rows])
        span = np.where(both, self.i("last_offset", 0)[rows] - base, np.maximum(np.where(count == 0, 1, count) - 1, 0))
        return {"row": rows, "lo": lo, "hi": lo + np.maximum(span, 0), "pid": self.i("producer_id", -1)[rows],
                "epoch": self.i("producer_epoch", -1)[rows], "seq": self.i("base_sequence", -1)[rows],
                "magic": self.i("magic", 2)[rows], "count": count, "crc": self.i("crc", 0)[rows],
                "has_crc": ~self.null("crc")[rows], "topic": self.code("topic_id")[rows], "ts": self.f("response_ts")[rows],
                "asked": self.f("request_ts")[rows]}

    def content_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """records_crc of `rows` and whether it is known (acked_writes.table_contents)."""
        def make():
            if not set(CONTENT) <= set(self.b.column_names):
                return np.zeros(self.b.num_rows, np.int64), np.zeros(self.b.num_rows, bool)
            ok = np.ones(self.b.num_rows, bool)
            for c in CONTENT:
                ok &= ~self.null(c)
            out = np.zeros(self.b.num_rows, np.int64)
            if ok.any():
                out[ok] = records_crc(self.b, ok).astype(np.int64)
            return out, ok
        content, ok = self._get(("content",), make)
        return content[rows], ok[rows]


class Sorted:
    """A table's Columns in the order `order`, each column converted and ordered once, to be cut
    into runs of rows (`_Rows`)."""

    def __init__(self, b: pa.Table, order: np.ndarray):
        self.cols, self.order, self.cache = Columns(b), order, {}

    def get(self, how: str, *args) -> np.ndarray:
        v = self.cache.get((how, *args))
        if v is None:
            v = self.cache[(how, *args)] = getattr(self.cols, how)(*args)[self.order]
        return v


class _Rows(Columns):
    """The rows s:e of a Sorted table: the same columns as Columns(table.take(order[s:e])), as
    views of the whole ones. Codes differ from that table's own, but they are only compared for
    equality and cut into runs (_runs), never read as values. The table itself is taken only
    where the records' checksums are needed."""

    def __init__(self, whole: Sorted, s: int, e: int):
        self.whole, self.s, self.e, self.cache, self._b = whole, s, e, {}, None

    @property
    def b(self) -> pa.Table:
        if self._b is None:
            self._b = self.whole.cols.b.take(np_indices(self.whole.order[self.s:self.e]))
        return self._b

    def _cut(self, how: str, *args) -> np.ndarray:
        return self._get((how, *args), lambda: self.whole.get(how, *args)[self.s:self.e])

    def null(self, name: str) -> np.ndarray:
        return self._cut("null", name)

    def eq(self, name: str, value) -> np.ndarray:
        return self._cut("eq", name, value)

    def flag(self, name: str) -> np.ndarray:
        return self._cut("flag", name)

    def i(self, name: str, fill: int) -> np.ndarray:
        return self._cut("i", name, fill)

    def f(self, name: str) -> np.ndarray:
        return self._cut("f", name)

    def code(self, name: str, falsy: bool = False) -> np.ndarray:
        return self._cut("code", name, falsy)


def _placed(cols: Columns, acked: np.ndarray) -> np.ndarray:
    """The acknowledged rows' first offsets (acked_writes._placed): the response's base offset,
    after the records of the same request's earlier batches of the partition - earlier in the
    order the answers came (wire_acked._by_answer: response time, 0 where unknown, then row)."""
    rbo = cols.i("response_base_offset", -1)[acked]
    if acked.size < 2:
        return rbo
    # rows apart on part of the key are apart on all of it: the strings are read only where
    # needed, and first the frames alone (one request's batches share one)
    if not cols.null("position")[acked].any():
        pos = np.sort(cols.i("position", 0)[acked])
        if (pos[1:] != pos[:-1]).all():
            return rbo
    if _runs(cols, acked, [k for k in PLACE_KEY if k not in STRINGS], [])[1].all():
        return rbo      # one batch per request and partition: each at its base offset
    order, start = _runs(cols, acked, PLACE_KEY, [np.nan_to_num(cols.f("response_ts")[acked], nan=0.0)])
    if start.all():
        return rbo
    side = cols.side(acked, rbo)
    width = (side["hi"] - side["lo"] + 1)[order]
    before = np.cumsum(width) - width
    run = np.cumsum(start) - 1
    lo = np.empty(acked.size, np.int64)
    lo[order] = rbo[order] + before - before[np.flatnonzero(start)][run]
    return lo


def _runs(cols: Columns, acked: np.ndarray, names, then: list) -> tuple[np.ndarray, np.ndarray]:
    """The rows `acked` sorted by the key columns `names` (nulls apart), then by `then` and row
    order; and where each run of one key starts."""
    keys = [(cols.code(k) if k in STRINGS else cols.i(k, 0))[acked] for k in names]
    keys += [cols.null(k)[acked] for k in names if k not in STRINGS]     # codes tell null apart
    order = np.lexsort([np.arange(acked.size)] + then + keys)
    start = np.ones(acked.size, bool)
    start[1:] = np.logical_or.reduce([k[order][1:] != k[order][:-1] for k in keys])
    return order, start


def _verdicts(cols: Columns, a: dict, x: dict, wi: np.ndarray, fi: np.ndarray, stored: bool) -> np.ndarray:
    """acked_pairs.same_columns of the pairs, the records' checksums and codecs read where a
    pair of non-idempotent batches can need them."""
    pa_, px = {k: v[wi] for k, v in a.items()}, {k: v[fi] for k, v in x.items()}
    plain = (pa_["pid"] < 0) & (px["pid"] < 0)
    for side in (pa_, px):
        if plain.any():
            side["content"], side["has_content"] = cols.content_of(side["row"])
            side["codec"] = cols.code("codec", True)[side["row"]]
        else:   # read only for pairs of non-idempotent batches
            side["content"], side["has_content"] = np.zeros(wi.size, np.int64), np.zeros(wi.size, bool)
            side["codec"] = np.zeros(wi.size, np.int64)
    return P.same_columns(pa_, px, stored=stored)


def _twice_clean(cols: Columns, a: dict) -> bool:
    """No pair of different writes acknowledged at overlapping offsets (wire_acked._twice), `a`
    sorted by first offset."""
    lo, hi = a["lo"], a["hi"]
    before = np.maximum.accumulate(hi)
    if lo.size < 2 or (before[:-1] < lo[1:]).all():
        return True
    span = int((hi - lo).max())
    first = np.searchsorted(lo, lo - span, side="left")
    # every earlier write (by first offset) that can reach this one: ties of `lo` both ways
    last = np.searchsorted(lo, lo, side="right")
    n = last - first
    if int(n.sum()) > MAX_TWICE_PAIRS:
        return False
    j = np.repeat(np.arange(lo.size), n)
    i = first[j] + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    keep = (i != j) & (lo[i] <= hi[j]) & (lo[j] <= hi[i])
    ti, tj = a["topic"][i], a["topic"][j]
    keep &= (ti == 0) | (tj == 0) | (ti == tj)
    i, j = i[keep], j[keep]
    return not i.size or bool((_verdicts(cols, a, a, i, j, stored=False) != 0).all())


def _refetched_clean(cols: Columns, a: dict, x: dict) -> bool:
    """No fetched batch, requested after a write's acknowledgement, that is another write at its
    offsets (wire_acked._refetched over every fetched data batch)."""
    i, n = P.spans(a, x)
    runs = P.blocks(n)
    if runs is None:
        return False
    for run in runs:
        fi, wi = P.pairs(a, x, i, n, run)
        if fi.size and not (_verdicts(cols, a, x, wi, fi, stored=True) != 0).all():
            return False
    return True
