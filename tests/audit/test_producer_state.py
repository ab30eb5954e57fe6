"""ProducerState's sequence history: the bounded look-ups (Runs.top/bottom) answer exactly as a
scan of every stored run would, and a producer whose batches all lie above its history (log
compaction leaves a gap before nearly every batch) is answered without scanning it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.producers import producer_state as ps
from kaudit.audit.producers.producer_state import INT32_MAX, BatchView, ProducerState, Runs, sequence_parts


def _view(epoch: int, lo: int, n: int, offset: int) -> BatchView:
    hi = (lo + n - 1) % (INT32_MAX + 1)
    return BatchView("seg.log", offset * 70, offset, offset + n - 1, 7, epoch, lo, hi, n, lo, 70)


def _scan_overlaps(runs, lo, hi):
    parts = sequence_parts(lo, hi)
    return [r for r in runs if any(r.lo <= h and l <= r.hi for l, h in parts)]


def _scan_dirty(state: ProducerState) -> bool:
    if state.open_fenced is not None:
        return True
    runs = state.intervals.get(state.epoch)
    if not runs or len(runs) < 2:
        return False
    last = state.last_seq
    return any(0 < (r.hi - last) % (INT32_MAX + 1) < ps._AHEAD for r in list(runs)[:-1])


def _scan_remember(runs: list, b: BatchView, limit: int) -> None:
    """ProducerState.remember as a plain scan over a plain list (the reference)."""
    for k, (lo, hi) in enumerate(sequence_parts(b.base_sequence, b.last_sequence)):
        if runs and runs[-1][1] != INT32_MAX and lo == runs[-1][1] + 1 and not _scan_overlaps(
                [ps.Interval(a, z, None, None) for a, z in runs[:-1]], lo, hi):
            runs[-1][1] = hi
        else:
            runs.append([lo, hi])
            if len(runs) > limit:
                del runs[0]


# a step from the previous batch: go on, a gap (compaction, retention), a regression or a
# duplicate, a jump near Int.MaxValue (wrap), or far back (more than 2^30: "ahead" modulo wrap)
_STEP = st.one_of(
    st.just(("next", 0)), st.tuples(st.just("gap"), st.integers(1, 50)),
    st.tuples(st.just("back"), st.integers(1, 60)), st.tuples(st.just("near_max"), st.integers(1, 6)),
    st.tuples(st.just("far_back"), st.integers(0, 3)), st.tuples(st.just("bump"), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_STEP, st.integers(1, 5)), min_size=1, max_size=80), st.integers(2, 9))
def test_bounded_lookups_equal_a_full_scan(steps, limit):
    old = ps.MAX_INTERVALS
    ps.MAX_INTERVALS = limit   # small: the oldest runs are dropped and the bound goes loose
    try:
        state = ProducerState(0, -1, 0, None, 0)
        reference: dict[int, list] = {}
        seq, epoch, offset = 0, 0, 0
        for (kind, k), n in steps:
            if kind == "gap":
                seq += k
            elif kind == "back":
                seq = max(0, seq - k)
            elif kind == "near_max":
                seq = INT32_MAX - k
            elif kind == "far_back":
                seq = max(0, seq - (1 << 30) - k)
            elif kind == "bump":
                epoch, seq = epoch + 1, 0
            seq %= INT32_MAX + 1
            b = _view(epoch, seq, n, offset)
            runs = state.intervals.get(epoch, [])
            assert [(r.lo, r.hi) for r in ps.overlaps(runs, b.base_sequence, b.last_sequence)] == \
                [(r.lo, r.hi) for r in _scan_overlaps(list(runs), b.base_sequence, b.last_sequence)]
            state.remember(b)
            _scan_remember(reference.setdefault(epoch, []), b, limit)
            assert [[r.lo, r.hi] for r in state.intervals[epoch]] == reference[epoch]
            state.epoch, state.last_seq = epoch, b.last_sequence
            for last in (b.last_sequence, b.base_sequence, 0, INT32_MAX, (b.last_sequence + (1 << 30)) % (INT32_MAX + 1)):
                state.last_seq = last
                assert state.dirty() == _scan_dirty(state), (last, reference[epoch])
            state.last_seq = b.last_sequence
            seq, offset = (b.last_sequence + 1) % (INT32_MAX + 1), offset + n
    finally:
        ps.MAX_INTERVALS = old


def test_a_compacted_history_is_answered_without_a_scan():
    """Every batch after a gap opens a run: 4,096 runs scanned per batch made a compacted
    partition of 40,000 batches take 70 s. Above the bound nothing is scanned."""
    state = ProducerState(0, -1, 0, None, 0)
    for i in range(ps.MAX_INTERVALS + 10):
        b = _view(0, 2 * i, 1, 2 * i)
        assert ps.overlaps(state.intervals.get(0, []), b.base_sequence, b.last_sequence) == []
        state.remember(b)
        state.last_seq = b.last_sequence
        assert not state.dirty()
    runs = state.intervals[0]
    assert isinstance(runs, Runs) and len(runs) == ps.MAX_INTERVALS

    class NoScan(Runs):
        def __iter__(self):
            raise AssertionError("scanned")

    guarded = NoScan()
    guarded.extend(runs)
    guarded.top, guarded.bottom = runs.top, runs.bottom
    state.intervals[0] = guarded
    b = _view(0, 2 * (ps.MAX_INTERVALS + 10), 1, 0)
    assert ps.overlaps(guarded, b.base_sequence, b.last_sequence) == []
    state.remember(b)
    assert not state.dirty()
    # a regression must still find the run it repeats
    state.intervals[0] = runs
    again = _view(0, 2 * ps.MAX_INTERVALS, 1, 0)
    assert [(r.lo, r.hi) for r in ps.overlaps(runs, again.base_sequence, again.last_sequence)] == \
        [(again.base_sequence, again.last_sequence)]
