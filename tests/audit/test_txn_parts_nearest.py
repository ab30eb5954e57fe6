"""txn_parts._Nearest: the bisection over chained windows (each ends no later than the next
begins, touching included) picks what a scan of every window picks - the first of the least
distance in the coordinator's order."""

from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from kaudit.audit.txn import txn_parts


def _scan(txns, ts):
    best, dist = None, None
    for t in txns:
        d = txn_parts._distance(t, ts)
        if dist is None or d < dist:
            best, dist = t, d
    return best, dist


# (gap before the window, its length, no end, a prepare time) per transaction
_windows = st.lists(st.tuples(st.integers(-1, 2), st.integers(0, 3), st.booleans(), st.booleans()),
                    min_size=1, max_size=6)


def _txns(spec):
    txns, at = [], 0
    for gap, length, open_, prepared in spec:
        lo = at + gap
        hi = None if open_ else lo + length
        txns.append(SimpleNamespace(prepare_ts=lo if prepared else None, start_ms=lo if not prepared else lo - 1,
                                    complete_ts=hi))
        at = lo if hi is None else hi
    return txns


@settings(max_examples=300, deadline=None)
@given(_windows)
def test_nearest_is_the_scan(spec):
    txns = _txns(spec)
    near = txn_parts._Nearest(txns)
    top = max(t.complete_ts or t.start_ms + 1 for t in txns)
    for ts in range(-3, top + 4):
        got, want = near.nearest(ts), _scan(txns, ts)
        assert got[0] is want[0] and got[1] == want[1]


def test_touching_windows_are_chained():
    # a CompleteX and the next PrepareX in one ms: the bisection, and the first of a tie
    txns = _txns([(0, 2, False, True), (0, 0, False, True), (0, 3, False, True)])
    near = txn_parts._Nearest(txns)
    assert near.sorted
    assert near.nearest(2)[0] is txns[0]
    assert near.nearest(4)[0] is txns[2]
    assert near.nearest(9) == (txns[2], 4)


# txn_parts._Inside: the transaction a part's marker came inside of (its [start, PrepareX) window),
# by bisection over chained windows, is what _ended_early's scan finds
_inside_windows = st.lists(st.tuples(st.integers(-2, 3), st.integers(0, 4), st.booleans()), min_size=0, max_size=7)


def _coord(spec):
    txns, at = [], 0
    for gap, length, known in spec:
        lo = at + gap
        txns.append(SimpleNamespace(start_ms=lo if known else None, prepare_ts=lo + length))
        at = lo + length
    return txns


@settings(max_examples=300, deadline=None)
@given(_inside_windows, st.integers(-3, 30), st.integers(-8, 30), st.sampled_from([None, "admin"]))
def test_inside_is_the_scan(spec, ts, first, writer):
    txns = _coord(spec)
    inside = txn_parts._Inside(txns)
    p = SimpleNamespace(marker=SimpleNamespace(ts=ts, writer=writer), first_ts=first, data=[1])
    assert inside.first(p) is txn_parts._ended_early(txns, p)


def test_a_long_partition_is_bisected():
    txns = [SimpleNamespace(start_ms=10 * i, prepare_ts=10 * i + 5) for i in range(20_000)]
    inside = txn_parts._Inside(txns)
    assert inside.chained
    p = SimpleNamespace(marker=SimpleNamespace(ts=123_452, writer=None), first_ts=123_451, data=[1])
    assert inside.first(p) is txns[12_345]
