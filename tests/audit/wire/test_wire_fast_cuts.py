"""The wire folds' cuts that leave work out without deciding anything: Outcomes.suspects (the
readers replay only responses whose batches may have aborted) and txn_wire_rows'
drop_fetched_repeats (a fetched marker's later copies never reach the replay). Each is held to
what it stands in for, on generated rows."""

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from kaudit.audit.txn.txn_wire_rows import drop_fetched_repeats
from kaudit.audit.wire.reader_replay import Outcomes

_batch = st.tuples(st.sampled_from([1, 2, 3, None]),            # producer id
                   st.integers(0, 12),                           # base offset
                   st.sampled_from(["data", "data", "COMMIT", "ABORT"]),
                   st.integers(0, 3))                            # frame


def _fetched(batches) -> pa.Table:
    rows = []
    for pid, base, what, frame in batches:
        control = what != "data"
        rows.append({"source": "c.pcap", "connection": "a -> b", "position": frame, "producer_id": pid,
                     "producer_epoch": 0, "base_sequence": None if control else base,
                     "base_offset": base, "last_offset": base if control else base + 1,
                     "is_transactional": True, "is_control": control,
                     "control_type": what if control else None})
    return pa.Table.from_pylist(rows, schema=_FETCHED)


_FETCHED = pa.schema([("source", pa.string()), ("connection", pa.string()), ("position", pa.int64()),
                      ("producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("base_sequence", pa.int32()),
                      ("base_offset", pa.int64()), ("last_offset", pa.int64()), ("is_transactional", pa.bool_()),
                      ("is_control", pa.bool_()), ("control_type", pa.string())])
_requests = st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from(["COMMIT", "ABORT"])), max_size=2)


@settings(max_examples=200, deadline=None)
@given(st.lists(_batch, min_size=1, max_size=14), _requests)
def test_a_batch_not_suspected_never_ends_in_abort(batches, requests):
    fetched = _fetched(batches)
    req = pa.Table.from_pylist([{"producer_id": p, "producer_epoch": 0, "result": r, "response_ts": 5.0,
                                 "position": 9, "source": "c.pcap", "ok": True} for p, r in requests]) \
        if requests else None
    produced = pa.Table.from_pylist([{"producer_id": pid, "producer_epoch": 0, "base_sequence": base,
                                      "request_ts": 1.0, "response_ts": 2.0, "response_error": 0}
                                     for pid, base, what, _ in batches if what == "data"])
    outcomes = Outcomes(fetched, produced, req)
    suspect = outcomes.suspects(fetched)
    for b, s in zip(fetched.to_pylist(), suspect.tolist()):
        if b["is_control"] or s:
            continue
        end = outcomes.outcome(b)
        assert end is None or end["result"] != "ABORT", (b, end)


def test_a_batch_before_an_abort_is_suspected():
    fetched = _fetched([(1, 0, "data", 0), (1, 2, "ABORT", 1), (2, 3, "data", 1), (2, 5, "COMMIT", 1)])
    suspect = Outcomes(fetched, None, None).suspects(fetched).tolist()
    assert suspect == [True, False, False, False]


_copy = st.tuples(st.sampled_from([7, 8]), st.sampled_from(["t", "t-1"]), st.sampled_from([0, 1, None]),
                  st.sampled_from([5, 6]), st.sampled_from(["COMMIT", "ABORT", None]),
                  st.sampled_from([None, 1.0, 2.0, 0.0, -0.0]), st.sampled_from([None, 1.0, 2.0]),
                  st.integers(0, 3), st.sampled_from(["fetch", "fetch", "produce"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_copy, min_size=1, max_size=12))
def test_only_strictly_later_copies_of_a_fetched_marker_go(rows):
    t = pa.Table.from_pylist([
        {"source_kind": kind, "producer_id": pid, "topic": topic, "partition": part, "base_offset": off,
         "control_type": ctype, "response_ts": resp, "request_ts": req, "position": pos}
        for pid, topic, part, off, ctype, resp, req, pos, kind in rows],
        schema=pa.schema([("source_kind", pa.string()), ("producer_id", pa.int64()), ("topic", pa.string()),
                          ("partition", pa.int32()), ("base_offset", pa.int64()), ("control_type", pa.string()),
                          ("response_ts", pa.float64()), ("request_ts", pa.float64()), ("position", pa.int64())]))
    kept = drop_fetched_repeats(t).to_pylist()
    every = t.to_pylist()

    def when(r):   # txn_wire.row_ts(...) or 0.0, position or 0: the replay's sort key
        ts = r["response_ts"] if r["response_ts"] is not None else r["request_ts"]
        return (ts or 0.0, r["position"] or 0)

    def key(r):    # what txn_fetched.fetched counts once; None: a row it ignores or no marker
        if r["source_kind"] != "fetch" or r["control_type"] not in ("COMMIT", "ABORT") or \
                None in (r["producer_id"], r["topic"], r["partition"], r["base_offset"]):
            return None
        return (r["producer_id"], f"{r['topic']}-{r['partition']}", r["base_offset"])

    first = {}
    for r in every:
        k = key(r)
        if k is not None:
            first[k] = min(first.get(k, when(r)), when(r))
    want = [r for r in every if key(r) is None or when(r) == first[key(r)]]
    assert kept == want
