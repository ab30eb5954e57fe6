"""The live settling of the wire transaction fold (txn_settle) and the fetched copies of writes it
now holds (txn_fetched.stored_copy): a consumer's copy says nothing of its producer's activity -
it neither keeps a producer from settling nor brings a settled one back - it goes with its
producer, and once FRAME_KEEP_S old it is kept only as a copy of a kept write the capture holds
no answer to (the one thing the file's audit reads it for): a consumer reading its producers'
data keeps no memory. And an engine's estimate of the fold's work counts no copy (Fold.weigh):
`prepare` drops them but the few it keeps, so they would only skew which process folds what."""

from __future__ import annotations

import pyarrow as pa

from kaudit.audit.thresholds import DEFAULT_TIMEOUT_S, MARKER_FETCH_WAIT_S, TXN_MARGIN_S
from kaudit.audit.txn.txn_settle import FRAME_KEEP_S, TxnSettle
from kaudit.audit.folds import weighed
from kaudit.audit.txn.txn_wire import FOLD

LATE = DEFAULT_TIMEOUT_S + TXN_MARGIN_S + MARKER_FETCH_WAIT_S   # a producer silent this long is settled


def _rows(*rows) -> pa.Table:
    """Batch rows (kind, producer id, time[, answered]): a write ("produce") - answered unless
    told - or a fetched copy ("fetch"), all of the same batch (partition, epoch, sequence)."""
    n = len(rows)
    answered = [r[3] if len(r) > 3 else True for r in rows]
    return pa.table({"source_kind": [r[0] for r in rows], "producer_id": pa.array([r[1] for r in rows], pa.int64()),
                     "request_ts": [r[2] for r in rows],
                     "response_ts": [r[2] if a else None for r, a in zip(rows, answered)],
                     "is_control": [False] * n, "topic": ["t"] * n, "partition": [0] * n,
                     "producer_epoch": [0] * n, "base_sequence": [0] * n})


def _pids(items) -> list:
    return sorted((k, p) for kind, t in items for k, p in zip(t.column("source_kind").to_pylist(),
                                                               t.column("producer_id").to_pylist()))


def test_a_copy_neither_delays_its_producers_settling_nor_stays_behind_it():
    s = TxnSettle(FOLD)
    items = [("batch", _rows(("produce", 7, 0.0), ("fetch", 7, 100.0)))]
    settled, kept = s.split(items, LATE + 1.0)   # 100 s after the copy, past its producer's time
    assert _pids(settled) == [("fetch", 7), ("produce", 7)] and kept == []


def test_an_old_copy_is_kept_only_for_a_write_without_its_answer():
    s = TxnSettle(FOLD)
    now = FRAME_KEEP_S + 10.0
    items = [("batch", _rows(("produce", 7, now), ("fetch", 7, 0.0), ("fetch", 9, 0.0), ("fetch", 9, now),
                             ("produce", 8, now, False), ("fetch", 8, 0.0)))]
    settled, kept = s.split(items, now)
    # 7's old copy (its write answered) and 9's (no write) go; 9's recent one may be a write's
    # whose row is still to come; 8's old one gives its unanswered write an offset
    assert settled == [] and _pids(kept) == [("fetch", 8), ("fetch", 9), ("produce", 7), ("produce", 8)]


def test_a_copy_of_a_settled_producer_does_not_bring_it_back():
    s = TxnSettle(FOLD)
    s.split([("batch", _rows(("produce", 7, 0.0)))], LATE + 1.0)
    s.note("batch", _rows(("fetch", 7, LATE + 2.0)))
    assert s.back == set()
    s.note("batch", _rows(("produce", 7, LATE + 3.0)))
    assert s.back == {7}


def test_an_engines_estimate_counts_no_copy():
    t = _rows(("produce", 7, 0.0), ("fetch", 7, 1.0), ("fetch", 9, 1.0))
    assert weighed(FOLD, "batch", t) == 1 and weighed(FOLD, "txn_event", t) == 3
