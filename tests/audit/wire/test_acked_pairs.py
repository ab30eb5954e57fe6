"""acked_pairs.py against its reference: same_columns is acked_writes.same_write over every pair at
once, and the pairs are the ones wire_acked's reference loop compares (generated batches)."""

from __future__ import annotations

import bisect

import numpy as np
import pyarrow as pa
from hypothesis import given, settings, strategies as st

from kaudit.audit.producers import acked_pairs as P
from kaudit.audit.producers import acked_writes as A

small = st.integers(0, 1)
maybe = lambda s: st.one_of(st.none(), s)   # noqa: E731

FIELDS = {
    "base_offset": small, "last_offset": maybe(st.integers(0, 2)), "record_count": maybe(st.integers(0, 2)),
    "producer_id": maybe(st.integers(-1, 1)), "producer_epoch": maybe(st.integers(-1, 1)),
    "base_sequence": maybe(st.integers(-1, 1)), "magic": maybe(st.integers(1, 2)), "crc": maybe(st.integers(0, 2)),
    "codec": st.sampled_from([None, "", "none", "lz4"]), "content": maybe(st.integers(0, 2)),
    "topic_id": st.sampled_from([None, "", "a", "b"]), "request_ts": maybe(st.floats(0, 3)),
    "response_ts": st.one_of(st.floats(0, 3), st.none()),
}
row = st.fixed_dictionaries(FIELDS)


@st.composite
def near_copies(draw, rows: list[dict]) -> list[dict]:
    """Fetched rows: copies of acknowledged ones with a few fields drawn anew (the verdicts'
    corner cases are met far more often than among independent rows), and independent rows."""
    out = []
    for r in rows:
        changed = draw(st.sets(st.sampled_from(sorted(FIELDS)), max_size=3))
        c = {k: (draw(FIELDS[k]) if k in changed else v) for k, v in r.items()}
        c["request_ts"] = draw(st.one_of(st.just(4.0), FIELDS["request_ts"]))   # mostly after the answer
        out.append(c)
    return out + draw(st.lists(row, max_size=2))


def _batch(r: dict) -> A.Batch:
    return A.batch_of(r, r["base_offset"], r["content"])


def _table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("base_offset", pa.int64()), ("last_offset", pa.int64()), ("record_count", pa.int64()),
        ("producer_id", pa.int64()), ("producer_epoch", pa.int64()), ("base_sequence", pa.int64()),
        ("magic", pa.int64()), ("crc", pa.int64()), ("codec", pa.string()), ("content", pa.int64()),
        ("topic_id", pa.string()), ("request_ts", pa.float64()), ("response_ts", pa.float64())]))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_pairs_and_verdicts_are_the_reference_loops(data):
    acked_rows = data.draw(st.lists(row, min_size=1, max_size=5))
    fetched_rows = data.draw(near_copies(acked_rows))
    if not fetched_rows:
        return
    order = sorted((_batch(r) for r in acked_rows), key=lambda w: w.lo)
    t = _table(fetched_rows)
    sums = [r["content"] for r in fetched_rows]
    codecs, topics = P.Codes(True), P.Codes(False)
    a, x = P.acked_columns(order, codecs, topics), P.fetched_columns(t, sums, codecs, topics)
    i, n = P.spans(a, x)
    got = []
    for run in P.blocks(n, data.draw(st.integers(1, 4))):
        fi, wi = P.pairs(a, x, i, n, run)
        got += zip(fi.tolist(), wi.tolist(), P.compared(a, x, fi, wi).tolist())
    # the reference: wire_acked._refetched's loop and checks
    los = [w.lo for w in order]
    span = max(w.hi - w.lo for w in order)
    want = []
    for f, r in enumerate(fetched_rows):
        xb = _batch(r)
        for w in range(bisect.bisect_left(los, xb.lo - span), bisect.bisect_right(los, xb.hi)):
            wb = order[w]
            ta, tx = wb.row.get("topic_id"), r.get("topic_id")
            if not A.overlaps(wb, xb) or not (ta is None or tx is None or ta == tx):
                continue
            asked = r.get("request_ts")
            if asked is None or wb.row.get("response_ts") is None or asked <= wb.row["response_ts"]:
                continue
            same = A.same_write(wb, xb)
            want.append((f, w, {True: 1, False: 0, None: -1}[same]))
    assert got == want


def test_no_pairs():
    a = {k: np.zeros(0, np.int64) for k in ("lo", "hi", "topic")} | {"ts": np.zeros(0)}
    x = {"lo": np.array([0]), "hi": np.array([1]), "topic": np.array([0]), "asked": np.array([1.0])}
    i, n = P.spans(a, x)
    assert P.blocks(n) == [(0, 1)]
    fi, wi = P.pairs(a, x, i, n, (0, 1))
    assert fi.size == 0 and wi.size == 0


def test_blocks_cover_the_rows_in_order():
    n = np.array([0, 3, 1, 0, 5, 2])
    assert P.blocks(n, 3) == [(0, 2), (2, 4), (4, 5), (5, 6)]   # a row over the size alone
    assert P.blocks(np.zeros(0, np.int64), 3) == []
