"""The consumers' whole-column paths (serve_table.py, certify.py) against the per-row ones: the
served ranges computed over columns equal the ranges computed response by response, and the
certifiers change no finding: the rules with them and with every row sent to the full check
(nothing certified) say the same, on crafted and generated consumers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.consumers import certify, fold, rules, rules_poll
from kaudit.audit.consumers.serve_table import ServeTable
from kaudit.audit.consumers.timeline import Serve, Timelines

CONNS = ("10.0.0.9:1 -> 10.0.0.2:9092", "10.0.0.9:2 -> 10.0.0.2:9092", "10.0.0.8:1 -> 10.0.0.2:9092")
ISOS = ("read_uncommitted", "read_committed", None)


def _serve(i, conn, tp, iso, fo, error, served, data):
    s = Serve(1.0 + i // 2, 10 + i, "gen.pcap", CONNS[conn], (CONNS[conn].split(":")[0], "gen"), "gen", tp,
              ISOS[iso], fo, error, 10**6, 10**6, 0)
    if served is not None:
        s.first, s.end = served, served + 5
        if data is not None:
            s.data_first, s.data_end = served + data, served + 5
    return s


SERVE = st.tuples(st.integers(0, 2), st.sampled_from([("t", 0), ("t", 1)]), st.integers(0, 2),
                  st.none() | st.integers(-1, 40), st.sampled_from([None, 0, 0, 1]),
                  st.none() | st.integers(0, 40), st.none() | st.integers(0, 4))


def _judge(specs, batches=(), full=False, monkeypatch=None):
    serves = [_serve(i, *spec) for i, spec in enumerate(specs)]
    if full:   # every row to the full check: nothing certified
        monkeypatch.setattr(rules_poll, "poll_suspects", lambda t: np.arange(t.n))
        monkeypatch.setattr(rules_poll, "aborted_read_suspects", lambda b, t: np.arange(b.num_rows))
    try:
        return rules.judge(Timelines([], serves, []), list(batches))
    finally:
        if monkeypatch is not None:
            monkeypatch.undo()


def _same(specs, batches=()):
    with pytest.MonkeyPatch.context() as mp:
        assert _judge(specs, batches) == _judge(specs, batches, full=True, monkeypatch=mp)


@settings(max_examples=50, deadline=None)
@given(st.lists(SERVE, max_size=24))
def test_the_poll_certifier_changes_no_finding(specs):
    _same(specs)


def test_a_step_back_and_a_jump_are_left_to_the_full_check():
    clean = [(0, ("t", 0), 0, 0, 0, 0, 0), (0, ("t", 0), 0, 5, 0, 5, 0), (0, ("t", 0), 0, 10, 0, None, None)]
    t = ServeTable.of_serves([_serve(i, *s) for i, s in enumerate(clean)])
    assert len(certify.poll_suspects(t)) == 0
    for fo, rule in ((3, "consumer-nonmonotonic-poll"), (12, "consumer-poll-skip")):
        bad = clean[:2] + [(0, ("t", 0), 0, fo, 0, None, None)] + [(1, ("t", 1), 0, 0, 0, 0, 0)]
        t = ServeTable.of_serves([_serve(i, *s) for i, s in enumerate(bad)])
        assert certify.poll_suspects(t).tolist() == [0, 1, 2]   # that sequence, not the clean one
        assert [f["rule"] for f in _judge(bad)] == [rule]
        _same(bad)


def test_an_error_or_another_isolation_level_breaks_the_pair():
    # an empty answer at a known fetch offset is where the client stood; an error forgets it
    specs = [(0, ("t", 0), 0, 0, 0, 0, 0), (0, ("t", 0), 0, 5, 1, None, None), (0, ("t", 0), 0, 2, 0, None, None),
             (0, ("t", 0), 1, 0, 0, None, None)]
    t = ServeTable.of_serves([_serve(i, *s) for i, s in enumerate(specs)])
    assert len(certify.poll_suspects(t)) == 0 and _judge(specs) == []


def test_columns_int64_cannot_hold_certify_nothing():
    s = _serve(0, 0, ("t", 0), 0, 0, 0, 0, 0)
    s.end = 2**63
    t = ServeTable.of_serves([s, _serve(1, 0, ("t", 0), 0, 5, 0, None, None)])
    assert not t.certifiable and certify.poll_suspects(t).tolist() == [0, 1]


# ---- uncommitted-aborted-read ------------------------------------------------------------------

def _batch(position, base, last, pid, control=None, conn=0, txn=True, count=1):
    return {"source": "gen.pcap", "connection": CONNS[conn], "position": position, "topic": "t", "partition": 0,
            "base_offset": base, "last_offset": last, "producer_id": pid, "producer_epoch": 0,
            "is_transactional": txn, "is_control": control is not None, "control_type": control,
            "record_count": count}


BATCH = st.tuples(st.integers(0, 5), st.integers(0, 30), st.integers(0, 3), st.integers(1, 2),
                  st.sampled_from([None, None, "ABORT", "COMMIT"]), st.integers(0, 2), st.booleans())


@settings(max_examples=50, deadline=None)
@given(st.lists(SERVE, min_size=1, max_size=6), st.lists(BATCH, max_size=20))
def test_the_aborted_read_certifier_changes_no_finding(specs, raw):
    # batches of the generated responses (positions 10 + i), some at positions no response has
    batches = [_batch(10 + p, b, b + n, pid, c, conn, txn) for p, b, n, pid, c, conn, txn in raw]
    _same(specs, batches)


def test_the_next_marker_decides():
    ru = [(0, ("t", 0), 0, 0, 0, 0, 0)]   # a read_uncommitted response with records, position 10
    data = _batch(10, 0, 4, 7)
    for markers, found in (([], 0), ([("COMMIT", 4)], 0), ([("ABORT", 4)], 0), ([("ABORT", 5)], 1),
                           ([("COMMIT", 5), ("ABORT", 9)], 0), ([("COMMIT", 5), ("ABORT", 5)], 1),
                           ([("ABORT", 9), ("COMMIT", 6)], 0)):
        batches = [data] + [_batch(11, at, at, 7, kind) for kind, at in markers]
        tl = Timelines([], [_serve(0, *ru[0])], [])
        tl.batches = batches
        assert len(certify.aborted_read_suspects(tl.batch_table, tl.table)) == found
        assert len(_judge(ru, batches)) == found
        _same(ru, batches)


# ---- served ranges over columns against response by response -----------------------------------

FETCH = st.tuples(st.integers(0, 1), st.integers(0, 4), st.integers(0, 1), st.sampled_from(ISOS),
                  st.none() | st.integers(0, 30), st.sampled_from([None, 0, 1]), st.booleans(),
                  st.floats(0, 3) | st.none())
# the last: the record count (0: a batch compaction emptied)
FETCHED = st.tuples(st.integers(0, 1), st.integers(0, 4), st.integers(0, 1), st.integers(0, 30), st.integers(0, 4),
                    st.integers(1, 2), st.sampled_from([None, "ABORT", "COMMIT"]), st.booleans(),
                    st.sampled_from([1, 1, 0]))


def _tables(fetches, fetched):
    fetch = pa.Table.from_pylist([
        {"source": "gen.pcap", "connection": CONNS[c], "position": p, "request_ts": None, "response_ts": ts,
         "client_id": "gen", "topic": "t", "topic_id": None, "partition": part, "isolation_level": iso,
         "replica_id": -1, "fetch_offset": fo, "error_code": err, "high_watermark": 100, "last_stable_offset": 100,
         "log_start_offset": 0, "aborted_transactions": "1@0,2@3" if listing else ""}
        for c, p, part, iso, fo, err, listing, ts in fetches],
        schema=pa.schema([(n, pa.string()) for n in ("source", "connection")] + [
            ("position", pa.int64()), ("request_ts", pa.float64()), ("response_ts", pa.float64()),
            ("client_id", pa.string()), ("topic", pa.string()), ("topic_id", pa.string()),
            ("partition", pa.int32()), ("isolation_level", pa.string()), ("replica_id", pa.int32()),
            ("fetch_offset", pa.int64()), ("error_code", pa.int16()), ("high_watermark", pa.int64()),
            ("last_stable_offset", pa.int64()), ("log_start_offset", pa.int64()),
            ("aborted_transactions", pa.string())]))
    batches = pa.Table.from_pylist([
        dict(_batch(p, b, b + n, pid, kind, c, txn, count), partition=part, topic_id=None, source_kind="fetch")
        for c, p, part, b, n, pid, kind, txn, count in fetched])
    if fetched:   # the decoder's types
        batches = batches.set_column(batches.schema.get_field_index("partition"), "partition",
                                     batches.column("partition").cast(pa.int32()))
    return fetch, (batches if fetched else None)


def _per_row(fetch: pa.Table, batches: pa.Table | None) -> list[tuple]:
    """The served ranges response by response (as serves_of computed them before the columns)."""
    by_key: dict = {}
    for b in ([] if batches is None else batches.to_pylist()):
        by_key.setdefault((b["connection"], b["position"], b["topic"], b["partition"]), []).append(b)
    out = []
    for i, r in enumerate(fetch.to_pylist()):
        bs = by_key.get((r["connection"], r["position"], r["topic"], r["partition"]), [])
        ds = [b for b in bs if not b["is_control"] and b["record_count"] != 0]
        first = end = data_first = data_end = None
        if bs and r["error_code"] in (0, None):
            lo, hi = min(b["base_offset"] for b in bs), max(b["last_offset"] for b in bs)
            start = lo if r["fetch_offset"] is None else max(lo, r["fetch_offset"])
            if hi >= start:
                first, end = start, hi + 1
                if r["aborted_transactions"] and r["isolation_level"] == "read_committed":
                    ordered = [b for b in bs if b["is_transactional"] or b["is_control"]] + \
                        [b for b in bs if not (b["is_transactional"] or b["is_control"])]
                    data_first, data_end = fold._delivered(first, ordered, r["aborted_transactions"]) or (None, None)
                elif ds and max(b["last_offset"] for b in ds) >= first:
                    data_first = max(min(b["base_offset"] for b in ds), first)
                    data_end = max(b["last_offset"] for b in ds) + 1
        out.append((r["response_ts"] or 0.0, r["position"], i, r["connection"], (r["topic"], r["partition"]),
                    r["fetch_offset"], r["error_code"], first, end, data_first, data_end))
    return [o[:2] + o[3:] for o in sorted(out, key=lambda o: o[:3])]


@settings(max_examples=50, deadline=None)
@given(st.lists(FETCH, max_size=12), st.lists(FETCHED, max_size=16))
def test_served_ranges_over_columns_equal_the_per_response_ones(fetches, fetched):
    fetch, batches = _tables(fetches, fetched)
    table, _ = fold.serves_of(fetch, batches)
    got = [(s.ts, s.position, s.connection, s.tp, s.fetch_offset, s.error, s.first, s.end, s.data_first,
            s.data_end) for s in table.all()]
    assert got == _per_row(fetch, batches)


def test_a_range_ending_at_the_largest_offset_is_told_exactly():
    fetch, batches = _tables([(0, 1, 0, "read_uncommitted", 0, 0, False, 1.0)],
                             [(0, 1, 0, 0, 0, 1, None, False, 1)])
    batches = batches.set_column(batches.schema.get_field_index("last_offset"), "last_offset",
                                 pa.array([2**63 - 1]))
    table, _ = fold.serves_of(fetch, batches)
    [s] = table.all()
    assert (s.first, s.end, s.data_first, s.data_end) == (0, 2**63, 0, 2**63) and not table.certifiable
