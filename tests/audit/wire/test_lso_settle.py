"""wire-lso's live settling (audit/wire/lso_settle.py) gives the file audit's findings: generated
partitions' read_committed responses (their LSO never going back, as on a log not truncated)
and transactional batches (each transaction's data acknowledged before the responses show its
LSO, copies fetched at any time), fed in time order with sweeps at every step, against the fold
over all the rows at once. The selection left at the end is smaller than the rows fed."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.folds import Context, run_selection
from kaudit.audit.wire import lso_settle
from kaudit.audit.wire.wire_lso import BATCH_COLUMNS, COLUMNS, FOLD
from kaudit.engine.plan import fold_selection
from kaudit.model import ROW_KINDS

OFFSETS = (10, 12, 20, 25)
TWO_PC = 7           # the producer whose InitProducerId asked Enable2Pc
INITS = {TWO_PC: ((0, True, "tx-7"),)}


def _fetch(partition: int, ts: float, pos: int, hw: int, lso: int) -> dict:
    return {"topic": "t", "partition": partition, "response_ts": ts, "position": pos, "source": "c.pcap",
            "connection": "a:1 -> b:9092", "client_id": "c", "high_watermark": hw, "last_stable_offset": lso,
            "aborted_transactions": None, "fetch_offset": 0, "topic_id": None}


def _batch(partition: int, ts: float, pos: int, offset: int, pid: int, kind: str) -> dict:
    return {"topic": "t", "partition": partition, "source": "c.pcap", "position": pos, "response_ts": ts,
            "topic_id": None, "source_kind": kind, "base_offset": offset if kind == "fetch" else -1,
            "response_base_offset": offset if kind == "produce" else -1, "producer_id": pid,
            "producer_epoch": 0, "transactional_id": f"tx-{pid}" if kind == "produce" else None}


@st.composite
def history(draw):
    """[(kind, row)] of two partitions: responses every 1-40 s, the LSO at OFFSETS or at the HW,
    never going back; the producer (2PC or not) of each LSO's data acknowledged up to 5 s before
    its first response there; fetched copies of any offset at any time."""
    rows, pos = [], 0
    for partition in (0, 1):
        t, lso_i, seen = 0.0, 0, set()
        holders = {o: draw(st.sampled_from([TWO_PC, TWO_PC, 8, None])) for o in OFFSETS}
        for _ in range(draw(st.integers(0, 25))):
            t += draw(st.sampled_from([1.0, 4.0, 9.0, 40.0]))
            lso_i = min(len(OFFSETS) - 1, lso_i + draw(st.sampled_from([0, 0, 0, 1])))
            lso = OFFSETS[lso_i]
            hw = draw(st.sampled_from([lso, lso + 3, lso + 9]))
            if lso not in seen and holders[lso] is not None:
                rows.append(("batch", _batch(partition, t - draw(st.sampled_from([0.5, 5.0])), pos, lso,
                                             holders[lso], "produce")))
                pos += 1
            seen.add(lso)
            rows.append(("fetch_partition", _fetch(partition, t, pos, hw, lso)))
            pos += 1
        for _ in range(draw(st.integers(0, 4))):
            o = draw(st.sampled_from(OFFSETS))
            if holders[o] is not None:
                rows.append(("batch", _batch(partition, draw(st.floats(0, t + 1)), pos, o, holders[o], "fetch")))
                pos += 1
    return rows


def _table(kind: str, rows: list[dict]) -> pa.Table:
    cols = COLUMNS if kind == "fetch_partition" else BATCH_COLUMNS
    schema = ROW_KINDS[kind].schema
    return pa.Table.from_pylist(rows, schema=pa.schema([schema.field(c) for c in cols]))


def _key(f: dict) -> str:
    return json.dumps([f["id"], f["severity"], f["message"], f["evidence"], f["details"]], sort_keys=True)


def _file(rows) -> list[str]:
    items = [(k, _table(k, [r for kk, r in rows if kk == k])) for k in ("batch", "fetch_partition")]
    return sorted(map(_key, run_selection(FOLD, items, Context(two_pc_inits=INITS))))


def _live(rows, sweep_s: float = 0.0) -> tuple[list[str], int, dict]:
    """Rows delivered at their time, a checkpoint after each, a sweep every `sweep_s` (LsoSettle,
    as engine/live runs it)."""
    lso_settle.SWEEP_S, sweep = sweep_s, lso_settle.SWEEP_S
    try:
        return _fed(rows)
    finally:
        lso_settle.SWEEP_S = sweep


def _fed(rows) -> tuple[list[str], int, dict]:
    settler, items, out = FOLD.live(FOLD), [], []
    for k, r in sorted(rows, key=lambda x: x[1]["response_ts"]):
        items.append((k, _table(k, [r])))
        settler.learn(Context(two_pc_inits=INITS, topic_names={}))
        settled = settler.settle(items, r["response_ts"])
        out.extend(run_selection(FOLD, settled, Context(two_pc_inits=INITS)))
    held = sum(t.num_rows for _, t in items)
    out.extend(run_selection(FOLD, items, Context(two_pc_inits=INITS)))
    return sorted(map(_key, out)), held, settler.counters()


@settings(max_examples=40, deadline=None)
@given(history(), st.sampled_from([0.0, 45.0, 150.0]))
def test_settled_as_the_file(rows, sweep_s):
    """A sweep after every row, or several runs over at once."""
    live, held, _ = _live(rows, sweep_s)
    assert live == _file(rows)
    assert held <= len(rows)


def test_selection_bounded_on_a_long_capture():
    """25 minutes of responses: a 2PC transaction holds the LSO for a while, then the partition is read
    with nothing open; other producers write all along. What is held at the end is the last
    minute's rows, not all of them."""
    rows, pos = [], 0
    rows.append(("batch", _batch(0, 0.5, pos, 10, TWO_PC, "produce")))
    for i in range(1, 300):
        t = i * 5.0
        lso = 10 if i < 50 else 10 + i
        rows.append(("fetch_partition", _fetch(0, t, pos, 10 + i, lso)))
        rows.append(("batch", _batch(0, t, pos + 1, 10 + i, 8, "produce")))
        pos += 2
    live, held, counted = _live(rows)
    assert live == _file(rows) and counted["lso_runs_settled"] == 1
    (f,) = map(json.loads, live)
    assert f[1] == "info" and "two-phase-commit" in f[2]
    assert held <= 2 * (lso_settle.LATE_S / 5.0) + 2


def test_two_runs_of_one_lso_in_one_sweep():
    """Two stuck runs at LSO 10 apart by one response at the HW, both over by the next sweep:
    two findings, as the file's (each run settled with the response that closed it)."""
    rows = [("batch", _batch(0, 0.5, 0, 10, TWO_PC, "produce"))]
    points = [(13, 10)] * 4 + [(10, 10)] + [(14, 10)] * 4 + [(30, 30)] * 20
    rows += [("fetch_partition", _fetch(0, 5.0 * (i + 1), i + 1, hw, lso)) for i, (hw, lso) in enumerate(points)]
    live, _, counted = _live(rows, 120.0)   # a sweep at the first row, the next at 125 s: both runs over
    assert live == _file(rows) and len(live) == 2 and counted["lso_runs_settled"] == 2


def test_rows_naming_their_topic_by_an_unnamed_id_wait():
    """Responses that name their topic by an id the capture has not named yet (Fetch v13+) would
    key apart from the same partition's rows named later: that partition is left alone until
    the id is named, then settled as the file's audit (which names every row first) tells it."""
    rows = [("batch", _batch(0, 0.5, 0, 10, TWO_PC, "produce"))]
    points = [(13, 10)] * 4 + [(30, 30)] * 20
    for i, (hw, lso) in enumerate(points):
        r = _fetch(0, 5.0 * (i + 1), i + 1, hw, lso)
        r.update(topic=None, topic_id="id-t")
        rows.append(("fetch_partition", r))
    settler = FOLD.live(FOLD)
    items = [(k, _table(k, [r for kk, r in rows if kk == k])) for k in ("batch", "fetch_partition")]
    lso_settle.SWEEP_S, sweep = 0.0, lso_settle.SWEEP_S
    try:
        settler.learn(Context(two_pc_inits=INITS, topic_names={}))
        assert settler.settle(items, 200.0) == [] and sum(t.num_rows for _, t in items) == len(rows)
        settler.learn(Context(two_pc_inits=INITS, topic_names={"id-t": "t"}))
        settled = settler.settle(items, 200.0)
    finally:
        lso_settle.SWEEP_S = sweep
    ctx = Context(two_pc_inits=INITS, topic_names={"id-t": "t"})
    (f,) = fold_selection(FOLD, settled, ctx)
    assert f["severity"] == "info" and f["topic"] == "t" and f["first_offset"] == 10
    assert settler.counters()["lso_runs_settled"] == 1


def test_a_closer_and_a_later_run_of_its_lso_settled_together_stay_apart():
    """Found by the property above: a stuck run at LSO 10 closed by a response at LSO 12 (below
    its high watermark, a run of one), then responses at the high watermark, then a stuck run
    at 12, both settled in one sweep. Folded with only each run and its closer, the closer and
    the later run made one run of four responses since 14 s; the file's is three since 23 s."""
    rows = [("batch", _batch(0, 0.5, 0, 10, TWO_PC, "produce")), ("batch", _batch(0, 13.5, 6, 12, TWO_PC, "produce"))]
    points = [(1.0, 10, 10), (2.0, 10, 10), (3.0, 13, 10), (4.0, 13, 10), (13.0, 13, 10), (14.0, 15, 12)]
    points += [(15.0 + i, 12, 12) for i in range(8)] + [(23.0, 15, 12), (24.0, 15, 12), (33.0, 15, 12), (34.0, 12, 12),
                                                          (74.0, 12, 12), (114.0, 12, 12)]
    rows += [("fetch_partition", _fetch(0, ts, 100 + i, hw, lso)) for i, (ts, hw, lso) in enumerate(points)]
    live, _, counted = _live(rows)
    assert live == _file(rows) and counted["lso_runs_settled"] == 2
    details = [json.loads(f)[4] for f in live]
    assert sorted((json.loads(d) if isinstance(d, str) else d)["responses"] for d in details) == [3, 3]
