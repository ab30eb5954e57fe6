"""The live capture's settler of wire-acked (acked_settle.AckedSettle): what it lets go of and what it
keeps. The findings of every crafted wire-acked case through it are the file's
(tests/engine/test_live_crafted.py); here, the cases its rules are made of."""

from __future__ import annotations

import pyarrow as pa

from kaudit.audit.folds import concat_by_kind
from kaudit.audit.producers.acked_settle import AckedSettle, disjoint
from kaudit.audit.producers.wire_acked import FOLD
from kaudit.model import SCHEMAS


def _batches(rows: list[dict]) -> pa.Table:
    base = {"source": "c.pcap", "connection": "c1", "crc_ok": True, "is_control": False, "is_transactional": False,
            "producer_epoch": 0, "base_sequence": 0, "record_count": 1, "magic": 2}
    t = pa.Table.from_pylist([{**base, **r} for r in rows], schema=SCHEMAS["batch"])
    return t.select(list(FOLD.inputs["batch"]))


def _write(topic, lo, hi, pid, *, acks=1, txn=False, position=1, seq=0):
    return {"source_kind": "produce", "topic": topic, "partition": 0, "base_offset": 0, "last_offset": hi - lo,
            "record_count": hi - lo + 1, "producer_id": pid, "base_sequence": seq, "acks": acks,
            "is_transactional": txn, "response_error": 0, "response_base_offset": lo, "position": position,
            "correlation_id": position, "response_ts": 10.0}


def _fetched(topic, lo, hi, pid, *, position, seq=0, control=None, at=20.0, hw=100, lso=None, iso=None):
    return {"source_kind": "fetch", "topic": topic, "topic_id": None if topic else "AAAAAAAAAAAAAAAAAAAAAA",
            "partition": 0, "base_offset": lo, "last_offset": hi, "record_count": hi - lo + 1,
            "producer_id": pid, "base_sequence": seq, "position": position, "request_ts": at,
            "response_ts": at + 0.5, "is_control": control is not None, "control_type": control,
            # (the response's partition row: _responses)
            "hw": hw, "lso": lso, "iso": iso}


def _responses(fetched) -> pa.Table:
    rows = [{"source": "c.pcap", "connection": "c1", "position": f["position"], "topic": f["topic"], "partition": 0,
             "error_code": 0, "high_watermark": f["hw"], "last_stable_offset": f["lso"], "isolation_level": f["iso"],
             "replica_id": -1} for f in fetched]
    return pa.Table.from_pylist(rows, schema=SCHEMAS["fetch_partition"]).select(list(FOLD.inputs["fetch_partition"]))


def _round(s: AckedSettle, fetched: list[dict]) -> tuple[list, pa.Table]:
    items = [("batch", _batches([{k: v for k, v in f.items() if k not in ("hw", "lso", "iso")} for f in fetched])),
             ("fetch_partition", _responses(fetched))]
    s.done = 0   # (each round its own list: the chunks the executor added since the last)
    s.settle(items, 0.0)
    kept = dict(items)
    got = [(r["topic"], r["base_offset"], r["position"]) for r in kept["batch"].to_pylist() if r["source_kind"] == "fetch"]
    return got, kept.get("fetch_partition")


def _settler(writes: list[dict]) -> AckedSettle:
    s = AckedSettle(FOLD)
    s.COMPACT_ROWS = 1
    s.note("batch", _batches(writes))
    return s


def _settled(writes: list[dict], fetched: list[dict]) -> tuple[list, pa.Table]:
    return _round(_settler(writes), fetched)


def test_a_fetch_of_another_topic_at_the_acknowledged_offsets_is_let_go():
    got, resp = _settled([_write("a", 10, 14, 7)],
                         [_fetched("a", 10, 14, 7, position=100), _fetched("b", 10, 14, 8, position=101),
                          _fetched(None, 12, 12, 9, position=102)])
    # the same topic and a batch named by topic id only (any topic) stay; topic b's goes
    assert got == [("a", 10, 100), (None, 12, 102)]
    assert resp.column("position").to_pylist() == [100, 102]


def test_offsets_next_to_an_acknowledged_write_are_not_its_own():
    got, resp = _settled([_write("a", 10, 14, 7), _write("a", 20, 24, 7, position=2, seq=5)],
                         [_fetched("a", 15, 19, 9, position=100), _fetched("a", 14, 15, 9, position=101)])
    assert got == [("a", 14, 101)]
    assert resp.column("position").to_pylist() == [101]


def test_a_copy_of_a_settled_write_is_let_go_unless_acknowledged_twice():
    copy = _fetched("a", 10, 14, 7, position=100)
    other = _fetched("a", 10, 14, 7, position=101, seq=3)       # other records at its offsets: kept
    got, _ = _settled([_write("a", 10, 14, 7, acks=-1)], [copy, other])
    assert got == [("a", 10, 101)]
    # acks=1, or transactional: its copies tell whether it was committed - kept
    got, _ = _settled([_write("a", 10, 14, 7, acks=1)], [copy])
    assert got == [("a", 10, 100)]
    got, _ = _settled([_write("a", 10, 14, 7, acks=-1, txn=True)], [copy])
    assert got == [("a", 10, 100)]
    # offsets acknowledged to two writes: there a copy of one is other records for the other
    got, _ = _settled([_write("a", 10, 14, 7, acks=-1), _write("a", 12, 12, 8, acks=-1, position=2)], [copy])
    assert got == [("a", 10, 100)]


def test_copies_after_the_one_that_showed_a_write_committed_are_let_go():
    s = _settler([_write("a", 10, 14, 7, acks=1)])   # answered at 10.0
    early = _fetched("a", 10, 14, 7, position=100, at=5.0)            # asked before the answer: told nothing
    below = _fetched("a", 10, 14, 7, position=101, at=20.0, hw=14)    # high watermark not past it
    shows = _fetched("a", 10, 14, 7, position=102, at=30.0, hw=15)    # past it: committed
    later = _fetched("a", 10, 14, 7, position=103, at=40.0)
    got, resp = _round(s, [later, shows, below, early])
    assert [p for _, _, p in got] == [102, 101, 100]
    assert sorted(resp.column("position").to_pylist()) == [100, 101, 102]
    # a later round: a copy answered before the one that showed it stays, one after goes
    got, _ = _round(s, [_fetched("a", 10, 14, 7, position=104, at=25.0), _fetched("a", 10, 14, 7, position=105, at=50.0)])
    assert [p for _, _, p in got] == [104]


def test_a_transactional_write_is_shown_committed_only_by_a_read_committed_read():
    s = _settler([_write("a", 10, 14, 7, acks=1, txn=True)])
    plain = _fetched("a", 10, 14, 7, position=100, at=20.0, hw=50)          # read_uncommitted: tells nothing
    rc = _fetched("a", 10, 14, 7, position=101, at=30.0, lso=15, iso="read_committed")
    later = _fetched("a", 10, 14, 7, position=102, at=40.0)
    got, _ = _round(s, [plain, rc, later])
    assert [p for _, _, p in got] == [100, 101]


def test_copies_where_two_writes_were_acknowledged_all_stay():
    s = _settler([_write("a", 10, 14, 7, acks=1), _write("a", 10, 14, 7, acks=1, position=2)])
    got, _ = _round(s, [_fetched("a", 10, 14, 7, position=100, at=30.0), _fetched("a", 10, 14, 7, position=101, at=40.0)])
    assert [p for _, _, p in got] == [100, 101]


def test_commit_markers_are_kept_wherever_they_are():
    got, _ = _settled([_write("a", 10, 14, 7)], [_fetched("b", 90, 90, 7, position=100, control="COMMIT"),
                                               _fetched("b", 91, 91, 7, position=101, control="ABORT")])
    assert got == [("b", 90, 100)]


def test_disjoint_merges_overlaps_only():
    s, e = disjoint([(20, 24), (10, 14), (15, 19), (12, 16)])
    assert s.tolist() == [10, 20] and e.tolist() == [19, 24]
    s, e = disjoint([(10, 14), (15, 19)])
    assert s.tolist() == [10, 15] and e.tolist() == [14, 19]


def test_concat_by_kind_keeps_every_row_in_order():
    a1, a2 = pa.table({"x": [1, 2]}), pa.table({"x": [3]})
    b1 = pa.table({"y": ["p"]})
    out = concat_by_kind([("a", a1), ("b", b1), ("a", a2), ("b", b1.slice(0, 0))])
    assert [(k, t.to_pydict()) for k, t in out] == [("a", {"x": [1, 2, 3]}), ("b", {"y": ["p"]})]
    assert all(t.column(0).num_chunks == 1 for _, t in out)
