"""A producer's long life on one partition (thousands of transactions): the transaction rules'
lookups are indexed, not a walk of every part or step for every part or finding - each
against the plain walk it replaces, on random histories.
- the story's steps of one transaction (txn_findings._Say._steps: a finding's timeline);
- whether a part after a data-less marker holds its transaction's data (txn_rules._check_stray)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.txn import txn_rules
from kaudit.audit.txn.txn_findings import _Say


def _say(times: list[float]) -> _Say:
    say = object.__new__(_Say)
    say.pt = SimpleNamespace(timeline=[(t, k, f"step {k}") for k, t in enumerate(times)])
    say._ms = None
    return say


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 30).map(lambda x: x / 4), max_size=25), st.booleans(),
       st.integers(0, 8000), st.integers(0, 8000) | st.just(float("inf")))
def test_a_transactions_steps_are_the_scans(times, ordered, lo, hi):
    times = sorted(times) if ordered else times
    ks = [k for k, t in enumerate(times) if lo <= t * 1000 <= hi]
    assert _say(times)._steps(lo, hi) == ((ks[0], ks[-1]) if ks else None)


def _part(coord, data: bool, marker: str | None, previous=None):
    m = None if marker is None else SimpleNamespace(result=marker, writer=None, epoch=0, offset=None, position=1)
    return SimpleNamespace(coord=coord, data=[1] if data else [], marker=m, previous=previous)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.sampled_from([None, "COMMIT", "ABORT"])),
                max_size=12))
def test_a_later_part_of_the_same_transaction_is_found_as_the_walk_finds_it(spec):
    coords = [SimpleNamespace(start_ms=10 * i, result=r) for i, r in enumerate(["COMMIT", "ABORT", None, "COMMIT"])]
    parts, prev = [], None
    for c, data, marker in spec:
        prev = _part(coords[c] if c < 3 else None, data, marker, prev)
        parts.append(prev)
    seen = []
    real = txn_rules._stray
    walked = [txn_rules.stray_marker(p, parts[i + 1:]) for i, p in enumerate(parts)]
    txn_rules._stray = lambda j, part, later: seen.append(txn_rules.stray_marker(part, later)) or iter(())
    try:
        list(txn_rules._check_stray(SimpleNamespace(pt=SimpleNamespace(partitions={"t-0": parts}))))
    finally:
        txn_rules._stray = real
    assert seen == walked


# txn_lost._Lost: the transactions a part's data may belong to where its own marker is missing,
# indexed by completion - against the walk of every coordinator transaction it replaces
def _reference_cut(p, before, view, slack_ms):
    from kaudit.audit.thresholds import MATCH_WINDOW_MS
    from kaudit.audit.txn.txn_parts import _Nearest, create_ms

    m = p.marker
    if m is None or m.ts is None or not p.data or p.borrowed_marker:
        return None
    e, t0 = p.data[0]["producer_epoch"], create_ms(p.data[0])
    if e is None or t0 is None:
        return None
    for t in view.txns:
        if (t.epoch == e and p.tp in t.partitions and t.complete_ts is not None and m.ts > t.complete_ts
                and t.prepare_ts is not None and t.start_ms is not None
                and t.start_ms - MATCH_WINDOW_MS <= t0 <= t.prepare_ts + slack_ms
                and (before is None or before.ts is None or before.ts < t.prepare_ts)):
            cands = [c for c in view.txns if p.tp in c.partitions]
            same = [c for c in cands if c.result is None or c.result == p.marker.result] or cands
            if _Nearest(same).nearest(p.marker.ts)[0].index > t.index:
                i = next((k for k, b in enumerate(p.data) if b["producer_epoch"] != e), None)
                return None if i is None or p.data[i]["producer_epoch"] is None else (i, t)
    return None


_ms = st.integers(0, 20_000)


@st.composite
def _lost_case(draw):
    """Coordinator transactions of a partition (some of another), a part with data of epoch 0 and
    maybe 1 after it, its marker and the one before it: times close enough to match often."""
    txns = []
    for i in range(draw(st.integers(1, 8))):
        start = draw(_ms)
        prepare = draw(st.none() | st.integers(start - 500, start + 5_000))
        complete = draw(st.none() | st.integers((prepare or start) - 500, (prepare or start) + 2_000))
        txns.append(SimpleNamespace(epoch=draw(st.sampled_from([0, 0, 1])),
                                    partitions={draw(st.sampled_from(["t-0", "t-0", "t-0", "t-1"]))},
                                    complete_ts=complete, prepare_ts=prepare,
                                    start_ms=draw(st.sampled_from([start, start, None])),
                                    index=i, result=draw(st.sampled_from(["COMMIT", "ABORT", None]))))
    if draw(st.booleans()):   # the windows one after another, the data in one, the marker after another
        at = 0
        for t in txns:
            t.start_ms, at = at, at + draw(st.integers(100, 3_000))
            t.prepare_ts, at = at, at + draw(st.integers(0, 200))
            t.complete_ts, at = at, at + draw(st.integers(0, 200))
        t0 = draw(st.integers(0, at))
        ts = draw(st.integers(t0, at + 500))
    else:
        t0, ts = draw(_ms), draw(st.integers(0, 30_000))
    epochs = [0] + draw(st.lists(st.sampled_from([0, 1, None]), max_size=3))
    data = [{"producer_epoch": e, "base_timestamp_ms": t0 if k == 0 else draw(_ms)} for k, e in enumerate(epochs)]
    marker = SimpleNamespace(ts=ts, result=draw(st.sampled_from(["COMMIT", "ABORT"])))
    p = SimpleNamespace(tp="t-0", marker=marker, data=data, borrowed_marker=False)
    before = draw(st.none() | st.builds(lambda ts: SimpleNamespace(ts=ts), _ms))
    return SimpleNamespace(txns=txns), p, before, draw(st.sampled_from([0, 1_000]))


@settings(max_examples=400, deadline=None)
@given(_lost_case())
def test_a_lost_markers_transaction_is_the_walks(case):
    from kaudit.audit.txn import txn_lost

    view, p, before, slack = case
    got = txn_lost._lost_marker_cut(p, before, txn_lost._Lost("t-0", view, slack))
    assert got == _reference_cut(p, before, view, slack)
