"""The compiled twins of the sources layer's small state: the column builder (sources/_ccolumns)
against a list of tuples + table_from_tuples, and conversation._Direction's chunks in C
(sources/_cpcap.Direction) against the pure class."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit import native
from kaudit.model import SCHEMAS
from kaudit.sources.conversation import _Direction
from kaudit.sources.wire_rows import COLUMNAR, table_from_tuples

cols = native.module("kaudit.sources._ccolumns")
cpcap = native.module("kaudit.sources._cpcap")
pytestmark = pytest.mark.skipif(cols is None or cpcap is None, reason="the compiled core is not built")

_VALUES = {
    "string": st.one_of(st.none(), st.text(max_size=12)),
    "int8": st.one_of(st.none(), st.integers(-128, 127)),
    "int16": st.one_of(st.none(), st.integers(-(1 << 15), (1 << 15) - 1)),
    "int32": st.one_of(st.none(), st.integers(-(1 << 31), (1 << 31) - 1)),
    "int64": st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1)),
    "uint32": st.one_of(st.none(), st.integers(0, (1 << 32) - 1)),
    "double": st.one_of(st.none(), st.floats(allow_nan=False)),
    "bool": st.one_of(st.none(), st.booleans()),
}


def _row(kind):
    return st.tuples(*[_VALUES[str(f.type)] for f in SCHEMAS[kind]])


@pytest.mark.parametrize("kind", sorted(COLUMNAR))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_column_builder_gives_the_table_of_its_tuples(kind, data):
    rows = data.draw(st.lists(_row(kind), max_size=20))
    c = cols.Columns(kind, SCHEMAS[kind])
    for r in rows:
        c.append(r)
    assert len(c) == len(rows)
    assert c.table().equals(table_from_tuples(kind, rows))
    assert len(c) == 0 and c.table().num_rows == 0  # it starts again


def test_column_builder_refuses_what_pyarrow_refuses():
    c = cols.Columns("frame", SCHEMAS["frame"])
    row = [None] * len(SCHEMAS["frame"])
    for column, value in (("api_key", 1 << 20), ("api_key", True), ("client_id", 5), ("complete", 1)):
        bad = list(row)
        bad[SCHEMAS["frame"].names.index(column)] = value
        with pytest.raises((OverflowError, TypeError)):
            c.append(tuple(bad))
    c.append(tuple(row))  # a refused row leaves nothing behind
    assert c.table().equals(table_from_tuples("frame", [tuple(row)]))


_op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 60), st.integers(1, 10),
              st.one_of(st.none(), st.floats(0, 1e9, allow_nan=False))),
    st.tuples(st.just("locate"), st.integers(-5, 700), st.integers(0, 80), st.none()),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_op, max_size=80))
def test_direction_chunks_locate_as_the_pure_class(ops):
    pure, twin = _Direction(), cpcap.Direction()
    at, frame = 0, 0
    for op, a, b, ts in ops:
        if op == "add":
            frame += 1
            start = at + a
            at = start + b
            pure.add(start, at, frame, frame, ts)
            twin.add(start, at, frame, frame, ts)
        else:
            assert twin.locate(a, a + b) == pure.locate(a, a + b)


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                 st.floats(-1e7, 1e7), st.integers(-10**9, 10**9).map(lambda i: i / 2000),
                 st.tuples(st.floats(1.6e9, 1.8e9), st.floats(0, 60)).map(lambda t: (t[0] + t[1] - t[0]) * 1000.0)))
def test_latency_rounding_is_pythons(x):
    """The frame row's latency_ms: round(x, 3) computed in C (ties left to Python)."""
    import math

    r = native.module("kaudit.sources._crows").round3(x)
    assert r == round(x, 3) and math.copysign(1, r) == math.copysign(1, round(x, 3))
