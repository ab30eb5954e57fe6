"""folds.constant: its answers kept for the chunks folds ask about again never answer for
another column (another chunk, a slice of the same buffers, another type)."""

from __future__ import annotations

import pyarrow as pa

from kaudit.audit.folds import constant


def test_answers_follow_the_column_not_the_memo():
    a = pa.chunked_array([pa.array(["x"] * 5 + ["y"] * 5)])
    assert constant(a) == (False, None)
    assert constant(a) == (False, None)
    assert constant(a.slice(0, 5)) == (True, "x")
    assert constant(a.slice(5, 5)) == (True, "y")
    assert constant(a.slice(3, 4)) == (False, None)
    b = pa.chunked_array([pa.array([7] * 4, pa.int32())])
    assert constant(b) == (True, 7)
    assert constant(b.cast(pa.int64())) == (True, 7)
    for i in range(20):   # many columns in turn: each its own answer
        c = pa.chunked_array([pa.array([f"s{i}"] * 3)])
        assert constant(c) == (True, f"s{i}") and constant(c) == (True, f"s{i}")
    assert constant(pa.chunked_array([pa.array(["z", None])])) == (False, None)
    assert constant(pa.chunked_array([pa.array(["z"]), pa.array(["z"])])) == (True, "z")
