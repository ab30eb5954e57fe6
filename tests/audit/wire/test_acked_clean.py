"""acked_clean.certified against wire_acked's full check: a partition it certifies has no finding
(generated partitions of acknowledged writes and fetched batches, and crafted ones), it places
a request's batches where acked_writes._placed does, and it certifies the common clean shape
(idempotent writes fetched back by several consumers)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import event, given, settings, strategies as st

from kaudit.audit.producers import acked_clean as C
from kaudit.audit.producers import acked_writes as A
from kaudit.audit.producers import wire_acked as W

SCHEMA = pa.schema([
    ("source_kind", pa.string()), ("source", pa.string()), ("connection", pa.string()), ("position", pa.int64()),
    ("request_ts", pa.float64()), ("response_ts", pa.float64()), ("topic", pa.string()), ("topic_id", pa.string()),
    ("partition", pa.int32()), ("correlation_id", pa.int32()), ("client_id", pa.string()), ("acks", pa.int16()),
    ("transactional_id", pa.string()), ("is_transactional", pa.bool_()), ("is_control", pa.bool_()),
    ("control_type", pa.string()), ("crc_ok", pa.bool_()), ("last_sequence", pa.int32()),
    ("partition_leader_epoch", pa.int32()), ("response_error", pa.int16()), ("response_base_offset", pa.int64()),
    ("magic", pa.int8()), ("crc", pa.uint32()), ("batch_size", pa.int32()), ("attributes", pa.int16()),
    ("base_offset", pa.int64()), ("last_offset", pa.int64()), ("base_timestamp_ms", pa.int64()),
    ("max_timestamp_ms", pa.int64()), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()),
    ("base_sequence", pa.int32()), ("record_count", pa.int32()), ("codec", pa.string())])

maybe = lambda s: st.one_of(st.none(), s)   # noqa: E731
WRITE = {
    "source": st.sampled_from(["a.pcap", "b.pcap"]), "connection": st.sampled_from(["c1", "c2", None]),
    "position": st.integers(0, 2), "correlation_id": maybe(st.integers(0, 1)), "topic_id": st.sampled_from([None, "x", "y"]),
    "response_error": st.sampled_from([0, 0, 0, 0, 0, 1, None]),
    "response_base_offset": st.sampled_from([0, 1, 2, 3, 5, 0, 1, 2, 3, 5, None, -1]),
    "is_control": st.sampled_from([False, False, False, False, None, True]),
    "response_ts": st.one_of(st.floats(0, 3), st.floats(0, 3), st.floats(0, 3), st.none()),
    "request_ts": maybe(st.floats(0, 3)), "base_offset": st.sampled_from([0, 0, 2, None]),
    "last_offset": maybe(st.integers(0, 2)), "record_count": maybe(st.integers(0, 3)),
    "producer_id": st.sampled_from([-1, None, 7, 8]), "producer_epoch": st.sampled_from([0, 1, -1, None]),
    "base_sequence": st.sampled_from([0, 1, 3, None]), "magic": st.sampled_from([2, 2, 1, None]),
    "crc": maybe(st.integers(0, 3)), "batch_size": maybe(st.integers(61, 64)), "attributes": st.sampled_from([0, 1, None]),
    "base_timestamp_ms": st.sampled_from([0, 5]), "max_timestamp_ms": st.sampled_from([0, 5]),
    "codec": st.sampled_from([None, "", "none", "lz4"]), "acks": st.sampled_from([-1, 1]),
    "is_transactional": st.sampled_from([False, True, None]),
}
COPIED = ("topic_id", "last_offset", "record_count", "producer_id", "producer_epoch", "base_sequence", "magic", "crc",
          "batch_size", "attributes", "base_timestamp_ms", "max_timestamp_ms", "codec")


def _row(**kw) -> dict:
    r = {"topic": "orders", "partition": 0, "client_id": "app"} | kw
    return {f.name: r.get(f.name) for f in SCHEMA}


@st.composite
def partitions(draw) -> pa.Table:
    """Writes, and fetched batches: copies of them at their acknowledged offsets with a few
    fields drawn anew (the verdicts' corner cases), independent ones, and COMMIT markers."""
    writes = [_row(source_kind="produce", **draw(st.fixed_dictionaries(WRITE)))
              for _ in range(draw(st.integers(0, 5)))]
    fetched = []
    for w in writes:
        for _ in range(draw(st.integers(0, 2))):
            c = {k: w[k] for k in COPIED}
            for k in draw(st.sets(st.sampled_from(COPIED), max_size=2)):
                c[k] = draw(WRITE[k])
            base = w["response_base_offset"] if (w["response_base_offset"] or -1) >= 0 else draw(st.integers(0, 4))
            shift = (c["last_offset"] or 0) - (w["base_offset"] or 0)
            c["last_offset"] = None if c["last_offset"] is None else base + draw(st.sampled_from([shift, shift, 0, 1]))
            fetched.append(_row(source_kind="fetch", source="r.pcap", connection="r1", position=len(fetched),
                                request_ts=draw(st.sampled_from([4.0, 4.0, 1.0, None])), response_ts=4.5,
                                base_offset=base, is_control=draw(st.sampled_from([False, None])), **c))
    for _ in range(draw(st.integers(0, 2))):
        f = draw(st.fixed_dictionaries({k: WRITE[k] for k in COPIED}))
        fetched.append(_row(source_kind="fetch", source="r.pcap", connection="r1", position=len(fetched),
                            request_ts=draw(st.sampled_from([4.0, None])), response_ts=4.5,
                            base_offset=draw(st.integers(0, 5)), is_control=False, **f))
    if draw(st.booleans()):
        fetched.append(_row(source_kind="fetch", source="r.pcap", connection="r1", position=len(fetched),
                            request_ts=4.0, response_ts=4.5, base_offset=9, last_offset=9, record_count=1,
                            is_control=True, control_type="COMMIT", producer_id=7, producer_epoch=0, magic=2))
    rows = writes + fetched
    order = draw(st.permutations(range(len(rows))))
    return pa.Table.from_pylist([rows[i] for i in order], schema=SCHEMA)


def _full(t: pa.Table) -> list[dict]:
    """wire_acked's full check of the partition, the certificate off."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(W, "CERTIFY", False)
        p = W.AckedPartition(("orders", 0))
        p.feed("batch", t)
        return p.finish()


@settings(max_examples=80, deadline=None)
@given(partitions())
def test_a_certified_partition_has_no_finding(t):
    """Of the rules it certifies (a write lost): an unanswered write a Fetch served is told apart
    from the certificate (stored_unanswered)."""
    ok = C.certified(t)
    found = [f for f in _full(t) if f["rule"] in ("offset-acknowledged-twice", "acknowledged-records-replaced")]
    event(f"certified: {ok}, findings: {bool(found)}")
    assert not (ok and found)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.fixed_dictionaries({k: WRITE[k] for k in (
    "source", "connection", "position", "correlation_id", "response_base_offset", "response_ts", "last_offset",
    "record_count", "base_offset")}), min_size=1, max_size=6))
def test_batches_of_one_request_are_placed_as_acked_writes_places_them(rows):
    """In the table's order (the full check sorts by answer first): each row's first offset."""
    t = pa.Table.from_pylist([_row(source_kind="produce", response_error=0, is_control=False, **r) for r in rows],
                             schema=SCHEMA)
    ok = pc.greater_equal(pc.fill_null(t.column("response_base_offset"), -1), 0)
    acked = np.flatnonzero(ok.to_numpy(zero_copy_only=False))
    got = C._placed(C.Columns(t), acked)
    mine = sorted(zip((repr(r) for r in t.take(acked).to_pylist()), got.tolist()))
    want = sorted((repr(w.row), w.lo) for w in A.acked_batches_table(W._by_answer(t)))
    assert mine == want    # rows alike in every column are interchangeable


def _write(lo: int, pid: int, seq: int, n: int = 3, **kw) -> dict:
    return _row(source_kind="produce", source="p.pcap", connection="p1", position=lo, correlation_id=lo,
                response_error=0, response_base_offset=lo, response_ts=1.0, request_ts=0.9, is_control=False,
                base_offset=0, last_offset=n - 1, record_count=n, producer_id=pid, producer_epoch=0,
                base_sequence=seq, magic=2, crc=1000 + lo, batch_size=100, attributes=0, base_timestamp_ms=0,
                max_timestamp_ms=0, codec="none", acks=1, is_transactional=False) | kw


def _copy(w: dict, position: int, **kw) -> dict:
    lo = w["response_base_offset"]
    return w | dict(source_kind="fetch", source="r.pcap", connection="r1", position=position, request_ts=2.0,
                    response_ts=2.1, response_error=None, response_base_offset=None, base_offset=lo,
                    last_offset=lo + w["last_offset"] - w["base_offset"]) | kw


def _partition(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def test_writes_fetched_back_by_several_consumers_are_certified():
    writes = [_write(3 * k, 7, 3 * k) for k in range(5)] + [_write(15, -1, -1, crc=5)]
    copies = [_copy(w, 10 * c + k) for c in range(3) for k, w in enumerate(writes)]
    t = _partition(writes + copies)
    assert C.certified(t) and _full(t) == []


def test_a_request_of_two_batches_placed_one_after_the_other_is_certified():
    a, b = _write(0, 7, 0), _write(0, 7, 3, crc=77)
    b["correlation_id"] = a["correlation_id"]
    b["position"] = a["position"]
    t = _partition([a, b, _copy(a, 0), _copy(b, 1, base_offset=3, last_offset=5)])
    assert C.certified(t)
    # the second batch fetched at the first one's offsets is another write there
    assert not C.certified(_partition([a, b, _copy(b, 1, base_offset=0, last_offset=2)]))


def test_losses_are_not_certified():
    w = _write(5, 7, 0)
    cases = {
        "acknowledged twice": [w, _write(5, 8, 0, position=50, correlation_id=50)],
        "another producer fetched": [w, _copy(w, 0, producer_id=9)],
        "other non-idempotent records": [_write(5, -1, -1), _copy(_write(5, -1, -1), 0, crc=1, batch_size=90)],
        "more records at the offsets": [_write(5, -1, -1), _copy(_write(5, -1, -1), 0, record_count=4, last_offset=9)],
    }
    for name, rows in cases.items():
        t = _partition(rows)
        assert not C.certified(t), name
        assert _full(t), name


def test_what_the_full_check_does_not_judge_is_certified():
    w = _write(5, 7, 0)
    cases = {
        "fetched before the acknowledgement": [w, _copy(w, 0, producer_id=9, request_ts=0.5)],
        "another topic incarnation": [w | {"topic_id": "x"}, _copy(w, 0, producer_id=9, topic_id="y")],
        "old message format": [w, _copy(w, 0, producer_id=9, magic=1)],
        "recompressed": [_write(5, -1, -1), _copy(_write(5, -1, -1), 0, crc=1, codec="gzip")],
        "the same write acknowledged twice": [w, w | {"position": 99, "correlation_id": 99, "response_ts": 1.5}],
        "a rejected write": [w | {"response_error": 6}, _write(5, 8, 0)],
    }
    for name, rows in cases.items():
        t = _partition(rows)
        assert C.certified(t), name
        assert _full(t) == [], name


def test_input_it_does_not_read_goes_to_the_full_check():
    w = _write(5, 7, 0)
    t = _partition([w, _copy(w, 0)])
    assert not C.certified(t.drop_columns(["codec"]))
    assert not C.certified(_partition([w, _copy(w, 0, base_offset=None)]))     # a span without its base
    assert not C.certified(_partition([w | {"response_ts": float("nan")}, _copy(w, 0)]))
    far = w | {"response_base_offset": C.MAX_OFFSET}
    assert not C.certified(_partition([far, _copy(far, 0)]))     # int64 sums could wrap
    assert C.certified(_partition([_copy(w, 0)]))      # nothing acknowledged: nothing to lose


@settings(max_examples=60, deadline=None)
@given(st.lists(partitions(), min_size=1, max_size=3), st.randoms(use_true_random=False))
def test_rows_cut_from_the_whole_selection_certify_as_their_own_table(parts, rnd):
    """certified_rows (a partition's rows cut from the whole selection's columns, the fold's
    prepare) answers as certified does of that partition's own table, and the prepared fold
    finds what the fold without its prepare finds (its unanswered writes a consumer was served
    too: stored_unanswered)."""
    from kaudit.audit.folds import Context, key_runs, run_selection
    tables = [t.set_column(t.schema.get_field_index("partition"), "partition",
                           pa.array([i] * t.num_rows, pa.int32())) for i, t in enumerate(parts)]
    whole = pa.concat_tables(tables)
    rows = list(range(whole.num_rows))
    rnd.shuffle(rows)
    whole = whole.take(pa.array(rows, pa.int64()))
    order, starts = key_runs(whole, W.KEY, list(W.KEY + W.ORDER))
    cols = C.Sorted(whole, order)
    for s, e in zip(starts.tolist(), np.append(starts[1:], order.size).tolist()):
        part = whole.take(pa.array(order[s:e]))
        assert C.certified_rows(cols, s, e) == C.certified(part)
    fetched = whole.filter(pc.equal(whole.column("source_kind"), "fetch")).to_pylist()
    responses = {(r["source"], r["connection"], r["position"], r["partition"]): r for r in fetched}
    fetch = pa.Table.from_pylist([
        {"source": s, "connection": c, "position": p, "response_ts": 4.5, "topic": "orders", "partition": n,
         "isolation_level": rnd.choice(["read_committed", "read_uncommitted"]), "replica_id": -1, "error_code": 0,
         "fetch_offset": 0, "high_watermark": rnd.choice([0, 3, 9]), "last_stable_offset": rnd.choice([0, 3, 9]),
         "client_id": "r"} for (s, c, p, n) in responses] + [
        {"source": "r.pcap", "connection": "r9", "position": 0, "response_ts": 4.5, "topic": "orders",
         "partition": 7, "isolation_level": "read_committed", "replica_id": -1, "error_code": 0,
         "fetch_offset": 0, "high_watermark": 3, "last_stable_offset": 3, "client_id": "r"}])
    fetch = fetch.set_column(fetch.schema.get_field_index("partition"), "partition",
                             fetch.column("partition").cast(pa.int32()))
    items = [("batch", whole), ("fetch_partition", fetch)]
    plain = dataclasses.replace(W.FOLD, prepare=None)
    got = list(run_selection(W.FOLD, list(items), Context()))
    assert got == list(run_selection(plain, list(items), Context()))
    event(f"findings: {bool(got)}")
    event(f"an unanswered write told stored: {any(f['rule'] == 'produce-outcome' for f in got)}")
