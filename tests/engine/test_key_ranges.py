"""engine.key_ranges: a per-key fold's selection cut in contiguous key ranges gives, range after
range, the findings and internal errors of the whole selection in its order - keys of integers
and strings with nulls, several kinds, any number of ranges."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.folds import Context, Fold, KeyedState, run_prepared, run_selection
from kaudit.engine import key_ranges

KEY = ("t", "p")


class Group:
    def __init__(self, key):
        self.key, self.rows = key, []

    def feed(self, kind, table):
        self.rows.extend((kind, r["t"], r["p"], r["o"]) for r in table.to_pylist())
        return []

    def finish(self):
        return [{"key": list(self.key), "rows": self.rows}]


FOLD = Fold("f", {"a": ("t", "p", "o"), "b": ("t", "p", "o")}, KEY, ("o",),
            lambda ctx: KeyedState(KEY, Group), per_key=True)

topics = st.one_of(st.none(), st.sampled_from(["x", "y", "é", "Z", ""]))
parts = st.one_of(st.none(), st.integers(-3, 3))
rows = st.lists(st.tuples(topics, parts, st.integers(0, 9)), max_size=40)


def _table(rs):
    return pa.table({"t": pa.array([r[0] for r in rs], pa.string()), "p": pa.array([r[1] for r in rs], pa.int32()),
                     "o": pa.array([r[2] for r in rs], pa.int64())})


@settings(max_examples=60, deadline=None)
@given(a=rows, b=rows, n=st.integers(1, 5))
def test_the_ranges_findings_are_the_whole_selections(a, b, n):
    tables = [(k, _table(rs)) for k, rs in (("a", a), ("b", b)) if rs]
    whole = list(run_selection(FOLD, list(tables), Context(), []))
    weights = key_ranges.weights(KEY, [t for _, t in tables])
    assert sum(weights.values()) == len(a) + len(b)
    cut = key_ranges.cuts(weights, n)
    assert len(cut) <= n - 1 and cut == sorted(set(cut), key=key_ranges.order)
    ranges = [key_ranges.part(tables, KEY, cut, i) for i in range(n)]
    assert sum(t.num_rows for r in ranges for _, t in r) == len(a) + len(b)
    assert [x for r in ranges for x in run_prepared(FOLD, r, Context(), [])] == whole


def test_cuts_share_the_rows_and_keep_a_key_in_each_range():
    rows = {(k,): n for k, n in zip(range(6), (10, 1, 1, 1, 1, 10))}
    assert key_ranges.cuts(rows, 2) == [(3,)]   # 12 | 12
    assert key_ranges.cuts({(0,): 10, (1,): 4, (2,): 11}, 2) == [(2,)]   # 14 | 11 (1.5 past 12.5, not 2.5 short)
    assert key_ranges.cuts({(0,): 10, (1,): 6, (2,): 9}, 2) == [(1,)]    # 10 | 15 (2.5 short, not 3.5 past)
    assert key_ranges.cuts({(1,): 99}, 2) == []   # one key: not cut
    assert key_ranges.cuts({(None,): 5, (1,): 5}, 2) == [(None,)]   # a null key last
    assert key_ranges.cuts({(k,): 1 for k in range(3)}, 5) == [(1,), (2,)]


def test_a_key_of_another_type_is_not_cut():
    t = pa.table({"t": pa.array([1.5, 2.5]), "p": pa.array([1, 2])})
    assert key_ranges.weights(("t", "p"), [t]) is None
    assert key_ranges.part([("a", t)], ("t", "p"), [], 0) == [("a", t)]
    assert key_ranges.part([("a", t)], ("t", "p"), [], 1) == []
