"""_after_markers (txn_wire_order): which coordinator marker a write racing it lands after, chosen
by `_Later` without comparing every write with every marker - against the reference, the plain
comparison of each write with each marker, on random partitions' histories (ties, unanswered
writes, markers answered out of order, epochs bumped by fencing or version 2)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.txn import txn_wire_order
from kaudit.audit.txn.txn_model import ADMIN


def reference(data, markers, v2: bool) -> None:
    """The plain rule: of the markers ranked after the write, sent by its answer and whose epoch
    it lands after, the last ranked (max(): the first of them on a tie)."""
    coord = [m for m in markers if m.get("writer") != ADMIN and m.get("producer_epoch") is not None]
    ends = {} if v2 else txn_wire_order._ended_epochs(data, coord)
    for d in data:
        e = d.get("producer_epoch")
        if e is None:
            continue
        done = d.get("answered") or float("inf")
        later = [m for m in coord if d["rank"] < m["rank"] and m["sent"] <= done
                 and (e > m["producer_epoch"] or (e == m["producer_epoch"] and (v2 or ends[id(m)] < e)))]
        if later:
            m = max(later, key=lambda m: m["rank"])
            d["rank"] = (m["rank"][0], m["position"], d["position"])


times = st.integers(0, 40).map(float)
epochs = st.integers(0, 4)


@st.composite
def history(draw):
    data = []
    for i in range(draw(st.integers(0, 14))):
        ts = draw(times)
        answered = draw(st.none() | st.integers(0, 12).map(lambda x: ts + x))
        data.append({"rank": (ts, 1000 + i), "position": 1000 + i, "producer_epoch": draw(st.none() | epochs),
                     "answered": answered})
    markers = []
    for i in range(draw(st.integers(0, 10))):
        sent = draw(times)
        answered = sent + draw(st.integers(0, 8))
        position = draw(st.integers(0, 3)) if draw(st.booleans()) else 2000 + i   # ranks may tie
        markers.append({"rank": (answered, position), "position": position, "sent": sent,
                        "producer_epoch": draw(st.none() | epochs), "writer": draw(st.sampled_from([None, ADMIN]))})
    markers.sort(key=lambda m: m["sent"])   # as order_races gives them
    return data, markers, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(history())
def test_the_fast_choice_is_the_reference(h):
    data, markers, v2 = h
    fast = [dict(d) for d in data]
    ref = [dict(d) for d in data]
    txn_wire_order._after_markers(fast, markers, v2)
    reference(ref, markers, v2)
    assert [d["rank"] for d in fast] == [d["rank"] for d in ref]


def test_a_long_partition_history_is_not_quadratic(monkeypatch):
    """20,000 transactions of one producer on one partition (a write and its marker each): the
    reference compares 4e8 pairs; the choice looks at a few markers per write."""
    n = 20_000
    data = [{"rank": (float(10 * i), i), "position": i, "producer_epoch": 0, "answered": 10 * i + 1.0}
            for i in range(n)]
    markers = [{"rank": (10 * i + 6.0, n + i), "position": n + i, "sent": 10 * i + 5.0, "producer_epoch": 0,
                "writer": None} for i in range(n)]
    calls = []
    real = txn_wire_order._Later.lands_after
    monkeypatch.setattr(txn_wire_order._Later, "lands_after", lambda self, m, e: calls.append(1) or real(self, m, e))
    txn_wire_order._after_markers(data, markers, False)
    assert len(calls) < 4 * n
    assert all(d["rank"] == (float(10 * i), i) for i, d in enumerate(data))   # each answered before its marker


def test_a_tie_goes_to_the_first_marker_as_max_gives_it():
    """Two markers of one rank sent by the write's answer, the last ranked of all sent after it:
    the walk back keeps the first of the two (max() over the markers in their order)."""
    d = {"rank": (5.0, 1000), "position": 1000, "producer_epoch": 2, "answered": 10.0}
    a = {"rank": (8.0, 1), "position": 1, "sent": 6.0, "producer_epoch": 1, "writer": None}
    b = {"rank": (8.0, 1), "position": 1, "sent": 7.0, "producer_epoch": 1, "writer": None, "other": True}
    x = {"rank": (30.0, 9), "position": 9, "sent": 20.0, "producer_epoch": 1, "writer": None}
    later = txn_wire_order._Later([a, b, x], {id(m): 1 for m in (a, b, x)}, False)   # each ends epoch 1
    assert later.last(d["rank"], d["answered"], 2) is a
    assert later.last(d["rank"], 25.0, 2) is x
    assert later.last((30.0, 9), 40.0, 2) is None
