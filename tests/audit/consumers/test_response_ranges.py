"""consumers.fold._response_ranges (numpy: the batches grouped by one integer response key)
against _response_ranges_joined (Arrow's group_by and join, the reference): the same ranges and
masks for every fetch row, with null keys (matching nothing), duplicate responses, control
batches, batches compaction emptied (no data) and null offsets."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.consumers import fold

maybe = lambda s: st.one_of(st.none(), s)   # noqa: E731
KEY = {"connection": maybe(st.sampled_from(["c1", "c2", ""])), "position": maybe(st.integers(0, 3)),
       "topic": maybe(st.sampled_from(["a", "b"])), "partition": maybe(st.integers(0, 2))}
BATCH = KEY | {"base_offset": maybe(st.integers(-2, 9)), "last_offset": maybe(st.integers(-2, 9)),
               "is_control": maybe(st.booleans()), "record_count": maybe(st.integers(0, 2))}
TYPES = {"connection": pa.string(), "position": pa.int64(), "topic": pa.string(), "partition": pa.int32(),
         "base_offset": pa.int64(), "last_offset": pa.int64(), "is_control": pa.bool_(),
         "record_count": pa.int32()}


def _table(rows: list[dict], names) -> pa.Table:
    return pa.table({n: pa.array([r[n] for r in rows], TYPES[n]) for n in names})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries(KEY), max_size=12), st.lists(st.fixed_dictionaries(BATCH), max_size=25),
       st.sampled_from([0, 1 << 40]))
def test_numpy_ranges_equal_the_joined_ones(fetch_rows, batch_rows, shift):
    fetch = _table(fetch_rows, KEY)
    batches = _table(batch_rows, BATCH)
    if shift:   # positions far apart (the key still fits one integer)
        fetch = fetch.set_column(1, "position", pa.array([None if p is None else p * shift for p in
                                                          fetch.column("position").to_pylist()], pa.int64()))
    got, want = fold._response_ranges(fetch, batches), fold._response_ranges_joined(fetch, batches)
    assert set(got) == set(want)
    for name in want:
        assert np.array_equal(got[name][1], want[name][1]), name
        assert np.array_equal(np.where(got[name][1], got[name][0], 0), np.where(want[name][1], want[name][0], 0)), name


def test_a_key_too_wide_for_one_integer_takes_the_join():
    fetch = _table([{"connection": "c", "position": p, "topic": "a", "partition": 0} for p in (0, 1 << 62)], KEY)
    batches = _table([{"connection": "c", "position": 1 << 62, "topic": "a", "partition": 0, "base_offset": 3,
                       "last_offset": 5, "is_control": False, "record_count": 3}], BATCH)
    assert fold._response_keys(fetch, batches) is None
    got = fold._response_ranges(fetch, batches)
    assert got["lo"][1].tolist() == [False, True] and got["hi"][0][1] == 5
