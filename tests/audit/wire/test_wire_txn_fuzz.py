"""The wire feed of the transaction model never fails on what a capture may hold: any order of
transaction requests and Produce batches, answered or not, with errors, odd epochs, other
producers' ids, null fields and unknown writers gives facts and findings, never an exception."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaudit.audit.txn import txn_findings, txn_view, txn_wire
from kaudit.audit.folds import Context

EVENTS = ("INIT_PRODUCER_ID", "ADD_PARTITIONS", "ADD_OFFSETS", "TXN_OFFSET_COMMIT", "END_TXN", "WRITE_MARKERS")
small = st.integers(-2, 4)
maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731


@st.composite
def event(draw):
    ev = draw(st.sampled_from(EVENTS))
    parts = draw(maybe(st.lists(st.sampled_from(["t-0", "t-1", "__consumer_offsets-3", "u-2"]), min_size=1,
                                max_size=3).map(",".join)))
    return ("txn_event", {
        "source": "c.pcap", "connection": draw(st.sampled_from(["a:1 -> b:9092", "b:2 -> c:9093", None])),
        "position": draw(st.integers(0, 50)), "ts": draw(st.floats(0, 100, allow_nan=False)),
        "event": ev, "transactional_id": draw(maybe(st.sampled_from(["tx", "ty"]))), "producer_id": 7,
        "producer_epoch": draw(maybe(small)), "partitions": parts,
        "result": draw(maybe(st.sampled_from(["COMMIT", "ABORT", "VERIFY"]))),
        "coordinator_epoch": draw(maybe(small)), "timeout_ms": draw(maybe(st.sampled_from([0, 1000, 2**31 - 1]))),
        "group_id": draw(maybe(st.just("g"))), "new_producer_id": draw(maybe(st.sampled_from([-1, 7, 8]))),
        "new_producer_epoch": draw(maybe(small)), "error_codes": draw(maybe(st.sampled_from(["", "51", "47,90"]))),
        "transaction_version": draw(maybe(st.integers(0, 2))), "enable_2pc": draw(maybe(st.booleans())),
        "keep_prepared_txn": draw(maybe(st.booleans())), "response_ts": draw(maybe(st.floats(0, 100))),
        "client_id": draw(st.sampled_from(["broker-1-txn-marker-sender", "adminclient-1", "app", None])),
        "api_version": draw(maybe(st.integers(0, 6))), "partition_errors": draw(maybe(st.sampled_from(
            ['[["tx", "t", 0, 0]]', '[["tx", "t", 1, 51]]', "not json", "[[1]]"]))),
        "markers": draw(maybe(st.sampled_from(['[[7, 1, "COMMIT", 0, "t", 0, 0]]', "{}", "[[7]]"]))),
        "admin_clients": draw(maybe(st.just(["adminclient-1"]))),
    })


@st.composite
def batch(draw):
    return ("batch", {
        "source": "c.pcap", "connection": draw(st.sampled_from(["a:1 -> b:9092", "x:3 -> b:9092"])),
        "position": draw(st.integers(0, 50)), "request_ts": draw(st.floats(0, 100, allow_nan=False)),
        "response_ts": draw(maybe(st.floats(0, 100))), "topic": draw(st.sampled_from(["t", "u"])),
        "topic_id": None, "partition": draw(st.integers(0, 2)), "producer_id": 7,
        "producer_epoch": draw(small), "base_sequence": draw(small), "last_sequence": draw(small),
        "record_count": draw(maybe(st.integers(0, 3))), "transactional_id": None,
        "response_error": draw(maybe(st.sampled_from([0, 0, 47, 51]))),
        "response_base_offset": draw(maybe(st.integers(-1, 20))), "correlation_id": draw(st.integers(0, 9)),
        "client_id": "app",
    })


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(event(), batch()), max_size=25), st.sampled_from([None, 0, 10**9]))
def test_any_sequence_gives_facts_and_findings(rows, now):
    ctx = Context(reference_time_ms=now)
    tuples = [((r["ts"] if k == "txn_event" else r["request_ts"]) or 0.0, r["position"] or 0, k, r) for k, r in rows]
    pt = txn_wire.producer_facts(7, tuples, ctx)
    for f in txn_findings.judge(pt, now):
        assert f["rule"] and f["message"] and f["id"]
    txn_view.describe(pt)
