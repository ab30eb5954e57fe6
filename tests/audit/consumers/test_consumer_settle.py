"""The live capture's settler of the consumers fold (consumers/settle.py): the plain batches of a
response partition merged into one row give the same served ranges and the same transactional
batches to the rules (fold.serves_of) - whatever the responses (read_committed listing aborted
transactions or not, null offsets and keys, control batches), and rows of a response whose
partition row is elsewhere stay as they are."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.consumers import fold
from kaudit.audit.consumers.settle import ConsumersSettle, merged_plain
from kaudit.model import SCHEMAS

maybe = lambda s: st.one_of(st.none(), s)   # noqa: E731
KEY = {"connection": maybe(st.sampled_from(["c1", "c2"])), "position": maybe(st.integers(0, 3)),
       "topic": maybe(st.sampled_from(["a", "b"])), "partition": st.integers(0, 1)}
FETCH = KEY | {"position": st.integers(0, 3), "fetch_offset": maybe(st.integers(0, 9)), "error_code": maybe(st.sampled_from([0, 1])),
               "high_watermark": st.integers(0, 12), "isolation_level": st.sampled_from(["read_committed",
                                                                                          "read_uncommitted"]),
               "aborted_transactions": st.sampled_from(["", "7@3", "7@3,8@5"]), "response_ts": st.just(1.0)}
BATCH = KEY | {"base_offset": maybe(st.integers(0, 9)), "last_offset": maybe(st.integers(0, 11)),
               "producer_id": st.sampled_from([7, 8, 9]), "is_transactional": maybe(st.booleans()),
               "is_control": maybe(st.booleans()), "control_type": st.sampled_from([None, "ABORT", "COMMIT"])}


def _table(kind: str, rows: list[dict]) -> pa.Table:
    base = {"source": "c.pcap", "source_kind": "fetch"} if kind == "batch" else {"source": "c.pcap"}
    t = pa.Table.from_pylist([base | r for r in rows], schema=SCHEMAS[kind])
    return t.select(list(fold.FOLD.inputs[kind]))


def _served(fetch: pa.Table, batches: pa.Table):
    serves, txn = fold.serves_of(fetch, batches)
    rows = sorted((dataclasses.astuple(s) for s in serves.all()), key=lambda r: repr(r))
    return rows, sorted(map(repr, txn.to_pylist())) if txn is not None else []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries(FETCH), max_size=8), st.lists(st.fixed_dictionaries(BATCH), max_size=20))
def test_merged_plain_batches_serve_the_same(fetch_rows, batch_rows):
    fetch, batches = _table("fetch_partition", fetch_rows), _table("batch", batch_rows)
    merged = merged_plain(batches, fetch)
    assert merged.schema == batches.schema and merged.num_rows <= batches.num_rows
    assert _served(fetch, merged) == _served(fetch, batches)
    # the rows stay in their order (each group where its first row was): no sort at the end
    key = lambda t: list(zip(*(t.column(c).to_pylist() for c in ("connection", "position", "topic", "partition"))))
    it = iter(key(batches))
    assert all(k in it for k in key(merged))


def test_only_answered_responses_not_replayed_are_merged():
    fetch = _table("fetch_partition", [
        {"connection": "c1", "position": 1, "topic": "a", "partition": 0, "isolation_level": "read_uncommitted",
         "aborted_transactions": "", "high_watermark": 20},
        {"connection": "c1", "position": 2, "topic": "a", "partition": 0, "isolation_level": "read_committed",
         "aborted_transactions": "7@4", "high_watermark": 20}])
    plain = lambda pos, lo, hi: {"connection": "c1", "position": pos, "topic": "a", "partition": 0,
                                 "base_offset": lo, "last_offset": hi, "producer_id": 9}
    batches = _table("batch", [plain(1, 0, 2), plain(1, 3, 5), plain(1, 6, 6),
                               plain(2, 0, 2), plain(2, 3, 5),      # replayed batch by batch: kept
                               plain(3, 0, 2), plain(3, 3, 5)])     # its response row not at hand: kept
    got = merged_plain(batches, fetch)
    rows = sorted((r["position"], r["base_offset"], r["last_offset"]) for r in got.to_pylist())
    assert rows == [(1, 0, 6), (2, 0, 2), (2, 3, 5), (3, 0, 2), (3, 3, 5)]


def test_the_settler_gathers_and_merges_every_round():
    s = ConsumersSettle()
    s.COMPACT_ROWS = 1
    fetch = _table("fetch_partition", [{"connection": "c1", "position": 1, "topic": "a", "partition": 0,
                                        "isolation_level": "read_uncommitted", "high_watermark": 9}])
    b = _table("batch", [{"connection": "c1", "position": 1, "topic": "a", "partition": 0, "base_offset": o,
                          "last_offset": o, "producer_id": 9} for o in range(4)])
    items = [("batch", b.slice(0, 2)), ("fetch_partition", fetch), ("batch", b.slice(2))]
    s.settle(items, 0.0)
    assert [(k, t.num_rows) for k, t in items] == [("batch", 1), ("fetch_partition", 1)]
    assert s.counters() == {"consumer_batch_rows_merged": 3}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.fixed_dictionaries(FETCH), max_size=8), st.lists(st.fixed_dictionaries(BATCH), max_size=20))
def test_responses_replayed_a_few_at_a_time_serve_the_same(fetch_rows, batch_rows):
    """fold._replays takes REPLAY_ROWS responses at a time (their batches become Python rows): one
    at a time gives the same served ranges."""
    fetch, batches = _table("fetch_partition", fetch_rows), _table("batch", batch_rows)
    whole = _served(fetch, batches)
    old = fold.REPLAY_ROWS
    try:
        fold.REPLAY_ROWS = 1
        assert _served(fetch, batches) == whole
    finally:
        fold.REPLAY_ROWS = old
