"""The wire transaction fold's fast replay (column-wise rows, Produce rows kept without a row dict,
indexed marker lookups, its prepare column by column) gives what the reference replay gives
(txn_reference.py: the functions as they were): the same findings - ids, messages, evidence,
stories - and the same `kaudit txn` rows, on generated selections of several producers' requests,
Produce batches, served markers and frames."""

from __future__ import annotations

import dataclasses
import json
from contextlib import ExitStack
from unittest import mock

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaudit.audit import folds
from kaudit.audit.folds import Context
from kaudit.audit.txn import txn_fetched, txn_model, txn_rules, txn_wire, txn_wire_feed, txn_wire_rows
from tests.audit.wire import txn_reference as ref

maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
small = st.integers(-1, 3)
PIDS = st.sampled_from([7, 7, 8, -1, None])
TPS = ["t-0", "t-1", "u-0", "__consumer_offsets-3"]
CONNS = ["a:1 -> b:9092", "x:3 -> c:9093", None]
EVENTS = ("INIT_PRODUCER_ID", "ADD_PARTITIONS", "ADD_OFFSETS", "TXN_OFFSET_COMMIT", "END_TXN", "WRITE_MARKERS",
          "STATE")

EVENT_SCHEMA = pa.schema([
    ("source", pa.string()), ("connection", pa.string()), ("position", pa.int64()), ("ts", pa.float64()),
    ("event", pa.string()), ("transactional_id", pa.string()), ("producer_id", pa.int64()),
    ("producer_epoch", pa.int16()), ("partitions", pa.string()), ("result", pa.string()),
    ("coordinator_epoch", pa.int32()), ("timeout_ms", pa.int64()), ("group_id", pa.string()),
    ("new_producer_id", pa.int64()), ("new_producer_epoch", pa.int16()), ("error_codes", pa.string()),
    ("transaction_version", pa.int8()), ("enable_2pc", pa.bool_()), ("keep_prepared_txn", pa.bool_())])
BATCH_SCHEMA = pa.schema([
    ("source_kind", pa.string()), ("source", pa.string()), ("connection", pa.string()), ("position", pa.int64()),
    ("request_ts", pa.float64()), ("response_ts", pa.float64()), ("topic", pa.string()), ("topic_id", pa.string()),
    ("partition", pa.int32()), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()),
    ("base_sequence", pa.int32()), ("last_sequence", pa.int32()), ("record_count", pa.int32()),
    ("transactional_id", pa.string()), ("response_error", pa.int16()), ("response_base_offset", pa.int64()),
    ("correlation_id", pa.int32()), ("client_id", pa.string()), ("base_offset", pa.int64()),
    ("is_control", pa.bool_()), ("control_type", pa.string()), ("coordinator_epoch", pa.int32())])
FRAME_SCHEMA = pa.schema([
    ("source", pa.string()), ("connection", pa.string()), ("request_frame", pa.int64()),
    ("response_ts", pa.float64()), ("api_key", pa.int16()), ("client_id", pa.string()), ("api_version", pa.int16()),
    ("partition_errors", pa.string()), ("markers", pa.string())])
API = {"INIT_PRODUCER_ID": 22, "ADD_PARTITIONS": 24, "ADD_OFFSETS": 25, "END_TXN": 26, "WRITE_MARKERS": 27,
       "TXN_OFFSET_COMMIT": 28}


@st.composite
def event(draw, tps=TPS, pids=PIDS):
    ev = draw(st.sampled_from(EVENTS))
    return {
        "source": "c.pcap", "connection": draw(st.sampled_from(CONNS)), "position": draw(st.integers(0, 40)),
        "ts": draw(maybe(st.sampled_from([0.0, 1.0, 1.5, 2.0, 30.0]))), "event": ev,
        "transactional_id": draw(maybe(st.sampled_from(["tx", "ty"]))), "producer_id": draw(pids),
        "producer_epoch": draw(maybe(small)),
        "partitions": draw(maybe(st.lists(st.sampled_from(tps), min_size=1, max_size=3).map(",".join))),
        "result": draw(maybe(st.sampled_from(["COMMIT", "ABORT", "VERIFY"]))), "coordinator_epoch": draw(maybe(small)),
        "timeout_ms": draw(maybe(st.sampled_from([0, 1000, 2**31 - 1]))), "group_id": draw(maybe(st.just("g"))),
        "new_producer_id": draw(maybe(st.sampled_from([-1, 7, 8]))), "new_producer_epoch": draw(maybe(small)),
        "error_codes": draw(maybe(st.sampled_from(["0", "", "51", "47,90", "0,3"]))),
        "transaction_version": draw(maybe(st.integers(0, 2))), "enable_2pc": draw(maybe(st.booleans())),
        "keep_prepared_txn": draw(maybe(st.booleans())),
    }


@st.composite
def frame_of(draw, e):
    """A frame answering event `e` (or none)."""
    return {
        "source": e["source"], "connection": e["connection"], "request_frame": e["position"],
        "response_ts": draw(maybe(st.sampled_from([1.0, 2.5, 31.0]))),
        "api_key": draw(st.sampled_from([API.get(e["event"], 22), 61])),
        "client_id": draw(st.sampled_from(["broker-1-txn-marker-sender", "adminclient-1", "app", "AddPartitionsManager-client-1", None])),
        "api_version": draw(maybe(st.integers(0, 5))),
        "partition_errors": draw(maybe(st.sampled_from(['[["tx", "t", 0, 0]]', '[["tx", "t", 1, 51]]', "not json"]))),
        "markers": draw(maybe(st.sampled_from(['[[7, 1, "COMMIT", 0, "t", 0, 0]]', '[[8, 0, "ABORT", 0, "t", 1, 0]]',
                                               "{}"]))),
    }


@st.composite
def batch(draw, topics=("t", "u", "__consumer_offsets"), partitions=st.integers(0, 1), pids=PIDS):
    fetch = draw(st.booleans())
    return {
        "source_kind": "fetch" if fetch else draw(st.sampled_from(["produce", "produce", None])),
        "source": "c.pcap", "connection": draw(st.sampled_from(CONNS[:2])), "position": draw(st.integers(0, 40)),
        "request_ts": draw(maybe(st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0, 30.0]))),
        "response_ts": draw(maybe(st.sampled_from([0.0, 1.2, 2.0, 31.0]))),
        "topic": draw(st.sampled_from(topics)), "topic_id": None,
        "partition": draw(partitions), "producer_id": draw(pids), "producer_epoch": draw(maybe(small)),
        "base_sequence": draw(maybe(small)), "last_sequence": draw(maybe(small)),
        "record_count": draw(maybe(st.integers(0, 3))), "transactional_id": draw(maybe(st.just("tx"))),
        "response_error": draw(maybe(st.sampled_from([0, 0, 47, 51]))),
        "response_base_offset": draw(maybe(st.integers(-1, 12))), "correlation_id": draw(st.integers(0, 9)),
        "client_id": "app", "base_offset": draw(maybe(st.integers(0, 14))), "is_control": fetch,
        "control_type": draw(maybe(st.sampled_from(["COMMIT", "ABORT"]))) if fetch else None,
        "coordinator_epoch": draw(maybe(small)) if fetch else None,
    }


@st.composite
def selection(draw, dense=False):
    """Several producers' rows; `dense`: one producer's on one partition (its markers, written
    and served, meet its data more often)."""
    one = dict(tps=["t-0"], pids=st.just(7)) if dense else {}
    events = draw(st.lists(event(**one), max_size=14))
    frames = [draw(frame_of(e)) for e in events if draw(st.booleans())]
    batches = draw(st.lists(batch(**(dict(topics=("t",), partitions=st.just(0), pids=st.just(7)) if dense else {})),
                            max_size=18))
    cut = draw(st.integers(0, len(batches)))   # two chunks: the selection comes in pieces
    items = [("txn_event", pa.Table.from_pylist(events, schema=EVENT_SCHEMA)),
             ("frame", pa.Table.from_pylist(frames, schema=FRAME_SCHEMA)),
             ("batch", pa.Table.from_pylist(batches[:cut], schema=BATCH_SCHEMA)),
             ("batch", pa.Table.from_pylist(batches[cut:], schema=BATCH_SCHEMA))]
    return items, draw(st.sampled_from([None, 0, 10**9, 2 * 10**9]))


def _reference() -> ExitStack:
    """The reference functions in place of the fast ones."""
    stack = ExitStack()
    for target, name, value in (
            (txn_wire.ProducerWire, "feed", ref.feed), (txn_wire, "prepare", ref.prepare),
            (txn_fetched, "fetched", ref.fetched), (txn_fetched, "ends_unseen", ref.ends_unseen),
            (txn_wire_feed.WireFeed, "batch", ref.batch), (txn_wire_rows, "_produce_text", ref._produce_text),
            (txn_rules, "judged_ranges", ref.judged_ranges), (txn_model, "match_markers", ref.match_markers)):
        stack.enter_context(mock.patch.object(target, name, value))
    return stack


def _run(items, now, fold) -> str:
    """The fold's findings and `kaudit txn`'s rows, as JSON; or the error either raised (the
    fast replay must fail where the reference does, and only there)."""
    out = []
    for run in (lambda: list(folds.run_selection(fold, [(k, t) for k, t in items], Context(reference_time_ms=now))),
                lambda: txn_wire.listed([(k, t) for k, t in items], Context(reference_time_ms=now))):
        try:
            out.append(run())
        except Exception as e:  # noqa: BLE001 - compared, not hidden
            out.append(f"raised {type(e).__name__}")
    return json.dumps(out, default=str, sort_keys=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.one_of(selection(), selection(dense=True)))
def test_fast_replay_is_the_reference(sel):
    items, now = sel
    fast = _run(items, now, txn_wire.FOLD)
    with _reference():
        slow = _run(items, now, dataclasses.replace(txn_wire.FOLD, prepare=ref.prepare))
    assert fast == slow


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(selection())
def test_prepare_gives_the_reference_tables(sel):
    items, _ = sel
    fast = txn_wire.prepare([(k, t) for k, t in items], Context())
    slow = ref.prepare([(k, t) for k, t in items], Context())
    assert [k for k, _ in fast] == [k for k, _ in slow]
    for (_, a), (_, b) in zip(fast, slow):
        assert a.schema == b.schema and a.to_pylist() == b.to_pylist()


def test_reference_is_exercised():
    """The generated selections reach the paths the fast versions replace (a guard against a
    strategy that tests nothing): served markers after data, several producers, findings."""
    items = [("txn_event", pa.Table.from_pylist([], schema=EVENT_SCHEMA)),
             ("frame", pa.Table.from_pylist([], schema=FRAME_SCHEMA)),
             ("batch", pa.Table.from_pylist([
                 {"source_kind": "produce", "source": "c.pcap", "connection": CONNS[0], "position": 1,
                  "request_ts": 1.0, "response_ts": 1.1, "topic": "t", "partition": 0, "producer_id": 7,
                  "producer_epoch": 0, "base_sequence": 0, "last_sequence": 0, "record_count": 1,
                  "transactional_id": "tx", "response_error": 0, "response_base_offset": 5, "correlation_id": 1,
                  "client_id": "app", "is_control": False},
                 {"source_kind": "fetch", "source": "c.pcap", "connection": CONNS[1], "position": 3,
                  "request_ts": 2.0, "response_ts": 2.1, "topic": "t", "partition": 0, "producer_id": 7,
                  "producer_epoch": 0, "base_offset": 6, "is_control": True, "control_type": "COMMIT",
                  "coordinator_epoch": 0},
                 {"source_kind": "produce", "source": "c.pcap", "connection": CONNS[0], "position": 4,
                  "request_ts": 3.0, "response_ts": 3.1, "topic": "t", "partition": 0, "producer_id": 7,
                  "producer_epoch": 0, "base_sequence": 1, "last_sequence": 1, "record_count": 1,
                  "transactional_id": "tx", "response_error": 0, "response_base_offset": 7, "correlation_id": 2,
                  "client_id": "app", "is_control": False}], schema=BATCH_SCHEMA))]
    fast = _run(items, 10**9, txn_wire.FOLD)
    with _reference():
        slow = _run(items, 10**9, dataclasses.replace(txn_wire.FOLD, prepare=ref.prepare))
    assert fast == slow
    found, rows = json.loads(fast)
    assert found and len(rows) == 2   # the served COMMIT ends the first transaction, the second stays open
    assert [f["rule"] for f in found] == ["hanging-transaction"] and found[0]["first_offset"] == 7   # reference time: 1970 + 10**6 s


def _recent_reference(rows, offset, window, reach):
    """txn_reference._recent with its window and reach as parameters (64 and 4096 there)."""
    k = len(rows)
    while k > 0 and (rows[k - 1]["last_offset"] is None or rows[k - 1]["last_offset"] >= offset):
        k -= 1
        if len(rows) - k > reach:
            break
    return list(rows[max(0, k - window):min(len(rows), k + window)])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("row"), maybe(st.integers(0, 30))),
                          st.tuples(st.just("ask"), st.integers(-1, 32))), max_size=60),
       st.integers(1, 6), st.integers(0, 12))
def test_recent_rows_bisect_as_the_scan_does(steps, window, reach):
    """txn_fetched._recent (a stack of the rows below every later one, bisected, kept up to date
    as rows come) finds the rows the reference's scan back from the newest row finds, between
    any appends."""
    feed = txn_wire_feed.WireFeed(7, Context())
    rows = feed.data_by_tp.setdefault(("t", 0), [])
    for what, value in steps:
        if what == "row":
            rows.append({"last_offset": value})
        else:
            got = txn_fetched._recent(feed, ("t", 0), value, window, reach)
            assert [id(d) for d in got] == [id(d) for d in _recent_reference(rows, value, window, reach)]


def test_recent_rows_reach_as_far_as_the_scan():
    """Past its 4096 rows the reference's scan stops: so does the bisection."""
    feed = txn_wire_feed.WireFeed(7, Context())
    rows = feed.data_by_tp.setdefault(("t", 0), [])
    rows.extend({"last_offset": lo} for lo in [5] * 10 + [100] * 4100)
    for offset in (4, 6, 101):
        got = txn_fetched._recent(feed, ("t", 0), offset)
        assert [id(d) for d in got] == [id(d) for d in ref._recent(rows, offset)]
