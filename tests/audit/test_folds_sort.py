"""folds: the buffered folds' sort (sorted_keyed hands each key's slice on with its key, which a
keyed state takes without splitting it again) and np_mask (numpy masks into Arrow without
pa.array)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.folds import (Context, Fold, FoldState, KeyedState, np_mask, run_selection, sort_indices, sorted_keyed,
                                sorted_stream, split_by_key)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=70))
def test_np_mask_equals_pa_array(values):
    m = np.array(values, dtype=bool)
    got = np_mask(m)
    assert got.type == pa.bool_() and got.null_count == 0
    assert got.to_pylist() == values
    assert got.equals(pa.array(values, pa.bool_()))


def test_np_mask_filters_a_table():
    t = pa.table({"a": list(range(10))})
    m = np.arange(10) % 3 == 0
    assert t.filter(np_mask(m)).column("a").to_pylist() == [0, 3, 6, 9]


class _Group:
    def __init__(self, key):
        self.key, self.rows = key, []

    def feed(self, kind, t):
        self.rows.extend((kind, r["v"]) for r in t.to_pylist())
        return []

    def finish(self):
        return [{"key": self.key, "rows": self.rows}]


class _Flat(FoldState):
    """The same fold without KeyedState: splits every chunk itself."""

    def __init__(self):
        self.inner = KeyedState(("k", "j"), _Group)

    def feed(self, kind, t):
        return self.inner.feed(kind, t)

    def finish(self):
        return self.inner.finish()


def _items():
    rng = np.random.default_rng(7)
    out = []
    for kind in ("b", "a", "b"):
        n = 40
        k = rng.choice(["x", "y", None], n).tolist()
        j = rng.integers(0, 3, n).tolist()
        out.append((kind, pa.table({"k": pa.array(k, pa.string()), "j": pa.array(j, pa.int64()),
                                    "o": rng.integers(0, 5, n), "v": np.arange(n)})))
    return out


def test_sorted_keyed_gives_each_slice_its_key():
    fold = Fold("t", {"a": ("k", "j", "o", "v"), "b": ("k", "j", "o", "v")}, ("k", "j"), ("o",),
                lambda ctx: KeyedState(("k", "j"), _Group))
    keyed = list(sorted_keyed(fold, _items()))
    plain = list(sorted_stream(fold, _items()))
    assert [(k, t.to_pylist()) for k, _, t in keyed] == [(k, t.to_pylist()) for k, t in plain]
    for kind, key, part in keyed:
        assert [k for k, _ in split_by_key(part, ("k", "j"))] == [key]


def test_keyed_feed_finds_what_a_split_feed_finds():
    def fold(make):
        return Fold("t", {"a": ("k", "j", "o", "v"), "b": ("k", "j", "o", "v")}, ("k", "j"), ("o",), make)

    keyed = list(run_selection(fold(lambda ctx: KeyedState(("k", "j"), _Group)), _items(), Context()))
    flat = list(run_selection(fold(lambda ctx: _Flat()), _items(), Context()))
    assert keyed == flat and len(keyed) == 9   # (x|y|None) x (0|1|2)


_values = {
    "s": st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é", "10.0.0.1:1 -> 10.0.0.2:9092"])),
    "i": st.one_of(st.none(), st.integers(-3, 3)),
    "f": st.one_of(st.none(), st.sampled_from([float("nan"), -1.5, 0.0, 2.25, float("inf")])),
    "b": st.one_of(st.none(), st.booleans()),
}
_types = {"s": pa.string(), "i": pa.int64(), "f": pa.float64(), "b": pa.bool_()}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries(_values), max_size=40),
       st.permutations(["s", "i", "f", "b"]), st.integers(1, 4))
def test_sort_indices_equals_arrows(rows, order, n):
    t = pa.table({c: pa.array([r[c] for r in rows], _types[c]) for c in _types})
    cols = list(order[:n])
    want = pc.sort_indices(t, [(c, "ascending") for c in cols]).to_pylist()
    assert sort_indices(t, cols).to_pylist() == want


def test_sort_indices_leaves_other_types_to_arrow():
    t = pa.table({"l": pa.array([[2], [1], None], pa.list_(pa.int64())), "i": [1, 1, 0]})
    assert sort_indices(t, ["i"]).to_pylist() == [2, 0, 1]
    ts = pa.table({"t": pa.array([3, 1, 2], pa.timestamp("ms"))})
    assert sort_indices(ts, ["t"]).to_pylist() == [1, 2, 0]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries(_values), max_size=40), st.permutations(["s", "i", "f", "b"]),
       st.integers(1, 3), st.integers(0, 2), st.booleans())
def test_sorted_split_equals_take_and_split(rows, order, n_key, n_order, sorted_first):
    """sorted_split (the sort's own keys, no copy of rows in order or of one-valued columns) gives
    the slices of the general take and split_by_key, float keys (NaN unequal to itself) too."""
    from kaudit.audit.folds import sorted_split
    t = pa.table({c: pa.array([r[c] for r in rows], _types[c]) for c in _types})
    t = t.append_column("const", pa.array(["x"] * len(rows), pa.string())).append_column("v", pa.array(range(len(rows))))
    key = tuple(order[:n_key]) + ("const",)
    cols = list(key) + list(order[n_key:n_key + n_order])
    if sorted_first:   # rows already in order: the identity
        t = t.take(sort_indices(t, cols))
    want = [(k, p.to_pylist()) for k, p in split_by_key(t.take(sort_indices(t, cols)), key)]
    got = [(k, p.to_pylist()) for k, p in sorted_split(t, key, cols)]
    assert repr(got) == repr(want)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-5, 5), max_size=30))
def test_unique_ints_equals_numpys(values):
    from kaudit.audit.folds import unique_ints
    a = np.array(values, dtype=np.int64)
    assert unique_ints(a).tolist() == np.unique(a).tolist()


def test_sorted_split_of_an_empty_table_without_the_key_columns():
    """A kind with no rows may come as a table without the key's columns (a fold's prepare that
    found nothing of it): nothing to split, as split_by_key says."""
    from kaudit.audit.folds import sorted_split

    empty = pa.table({"x": pa.array([], pa.int64())})
    assert list(sorted_split(empty, ("producer_id",), ["x"])) == []


def test_split_by_key_of_a_null_typed_key_column():
    """A key column of Arrow type null (every row null: a chunk whose rows name no topic) is one
    key, not a crash (pc.not_equal has no null kernel): it crashed the audit of a real capture
    cut at a fifth of its packets."""
    from kaudit.audit.fold_tables import split_by_key

    t = pa.table({"topic": pa.array([None, None, None], pa.null()), "p": pa.array([0, 0, 1])})
    assert [(k, s.num_rows) for k, s in split_by_key(t, ("topic", "p"))] == [((None, 0), 2), ((None, 1), 1)]
