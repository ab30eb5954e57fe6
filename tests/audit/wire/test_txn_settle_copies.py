"""The live settling of the wire transaction fold (txn_settle) and the fetched copies of writes it
now holds (txn_fetched.stored_copy): a consumer's copy says nothing of its producer's activity -
it neither keeps a producer from settling nor brings a settled one back - it goes with its
producer, and a copy whose producer has no row kept is dropped once FRAME_KEEP_S old (a consumer
reading old data keeps no memory)."""

from __future__ import annotations

import pyarrow as pa

from kaudit.audit.thresholds import DEFAULT_TIMEOUT_S, MARKER_FETCH_WAIT_S, TXN_MARGIN_S
from kaudit.audit.txn.txn_settle import FRAME_KEEP_S, TxnSettle
from kaudit.audit.txn.txn_wire import FOLD

LATE = DEFAULT_TIMEOUT_S + TXN_MARGIN_S + MARKER_FETCH_WAIT_S   # a producer silent this long is settled


def _rows(*rows) -> pa.Table:
    """Batch rows (kind, producer id, time): a write ("produce") or a fetched copy ("fetch")."""
    return pa.table({"source_kind": [k for k, _, _ in rows], "producer_id": pa.array([p for _, p, _ in rows], pa.int64()),
                     "request_ts": [t for _, _, t in rows], "response_ts": [t for _, _, t in rows],
                     "is_control": [False] * len(rows)})


def _pids(items) -> list:
    return sorted((k, p) for kind, t in items for k, p in zip(t.column("source_kind").to_pylist(),
                                                               t.column("producer_id").to_pylist()))


def test_a_copy_neither_delays_its_producers_settling_nor_stays_behind_it():
    s = TxnSettle(FOLD)
    items = [("batch", _rows(("produce", 7, 0.0), ("fetch", 7, 100.0)))]
    settled, kept = s.split(items, LATE + 1.0)   # 100 s after the copy, past its producer's time
    assert _pids(settled) == [("fetch", 7), ("produce", 7)] and kept == []


def test_a_copy_of_a_producer_with_no_row_kept_is_dropped_once_old():
    s = TxnSettle(FOLD)
    now = FRAME_KEEP_S + 10.0
    items = [("batch", _rows(("produce", 7, now), ("fetch", 9, 0.0), ("fetch", 9, now), ("fetch", 7, 0.0)))]
    settled, kept = s.split(items, now)
    # 9's old copy goes; its recent one may be a write's whose row is still to come; 7's stays with it
    assert settled == [] and _pids(kept) == [("fetch", 7), ("fetch", 9), ("produce", 7)]


def test_a_copy_of_a_settled_producer_does_not_bring_it_back():
    s = TxnSettle(FOLD)
    s.split([("batch", _rows(("produce", 7, 0.0)))], LATE + 1.0)
    s.note("batch", _rows(("fetch", 7, LATE + 2.0)))
    assert s.back == set()
    s.note("batch", _rows(("produce", 7, LATE + 3.0)))
    assert s.back == {7}
