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
