"""The vectorised index reader says exactly what the sans-IO decoder says."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.model import table_from_rows
from kaudit.protocol import logfiles
from kaudit.sources.index_table import index_table

PLACE = {"source": "s", "replica": "1", "log_dir": "d", "topic": "t", "partition": 0}


def _same(data: bytes, base: int, kind: str) -> None:
    decode = logfiles.decode_offset_index if kind == "offset" else logfiles.decode_time_index
    rows, info = decode(data, base)
    table, tail = index_table(data, base, kind, PLACE)
    assert table.to_pylist() == table_from_rows("index_entry", [dict(PLACE, **r) for r in rows]).to_pylist()
    assert tail == info


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(
    st.binary(max_size=200),
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 9)), max_size=20).map(
        lambda xs: b"".join(a.to_bytes(4, "big") + b.to_bytes(4, "big") for a, b in xs) + b"\0" * 16)),
    base=st.integers(0, 2**40), kind=st.sampled_from(["offset", "time"]))
def test_matches_sans_io_decoder(data, base, kind):
    _same(data, base, kind)


def test_matches_on_every_corpus_index(corpus):
    n = 0
    for dirpath, _, files in os.walk(corpus):
        for f in files:
            if f.endswith((".index", ".timeindex")):
                data = open(os.path.join(dirpath, f), "rb").read()
                _same(data, int(f.split(".")[0]), "offset" if f.endswith(".index") else "time")
                n += 1
    assert n > 100
