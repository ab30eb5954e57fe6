"""engine.coverage's inventory of what the inputs hold: a chunk of many topics gives the same
"topic-partition" pairs as the rows' own Python pairs - nulls, negative and extreme partition
numbers, empty names and names with dashes included, in one chunk or several."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.engine import coverage

TOPICS = st.sampled_from([None, "", "a", "orders", "orders-1", "x-y-z"])
PARTS = st.one_of(st.none(), st.integers(-2**31, 2**31 - 1), st.sampled_from([0, 1, 7]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(TOPICS, PARTS), min_size=1, max_size=80), st.integers(0, 80))
def test_pairs_are_the_rows_distinct_pairs(rows, cut):
    topics, parts = [t for t, _ in rows], [p for _, p in rows]
    t = pa.table({"topic": pa.array(topics, pa.string()), "partition": pa.array(parts, pa.int32())})
    cut = min(cut, t.num_rows)
    if 0 < cut < t.num_rows:
        t = pa.concat_tables([t.slice(0, cut), t.slice(cut)])   # a chunked column
    assert sorted(coverage._pairs(t)) == sorted({f"{a}-{b}" for a, b in rows})


def test_a_chunk_of_many_topics_fills_the_inventory():
    seen = coverage.new_seen()
    t = pa.table({"topic": ["a", "b", "a", None], "partition": pa.array([0, 1, 0, 2], pa.int32())})
    coverage.note_seen(seen, "batch", t)
    assert sorted(seen["partitions"]) == ["None-2", "a-0", "b-1"]
