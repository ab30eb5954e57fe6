"""audit.capture_holes: where a capture lost bytes, and the windows rules ask about."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from kaudit.audit.capture_holes import CaptureHoles, carrier_rows, hole_rows, server_of
from kaudit.model import DECODE_ISSUE

A, B = "10.0.0.1:5000 -> 10.0.0.9:9092", "10.0.0.2:5001 -> 10.0.0.9:9093"


def holes(*rows, carriers=(), sources=("cap",)):
    return CaptureHoles(rows, carriers, sources)


def test_a_hole_lies_between_the_requests_around_it_on_its_connection():
    # bytes lost after frame 100 (the last delivered before them), known lost at frame 130
    h = holes(("cap", A, 100, 130, False))
    assert h.lost_on([A], ("cap", 90), ("cap", 120)).after == 100   # a request after it in the stream
    assert h.lost_on([A], ("cap", 100), ("cap", 101)) is not None
    assert h.lost_on([A], ("cap", 90), ("cap", 100)) is None         # the request before it
    assert h.lost_on([A], ("cap", 131), ("cap", 200)) is None        # known lost before the window
    assert h.lost_on([B], ("cap", 90), ("cap", 120)) is None         # another connection's
    assert h.lost_on([A], ("cap", 125)) is not None                  # open-ended: sent until 130


def test_an_unreadable_tls_connection_is_one_hole_to_the_end():
    h = holes(("cap", A, 9, 10, True))
    assert h.lost_on([A], ("cap", 500), ("cap", 900)) is not None
    assert h.lost_on([A], ("cap", 1), ("cap", 9)) is None


def test_files_compare_in_their_order():
    h = holes(("b.pcap", A, 5, 6, False), sources=("a.pcap", "b.pcap"))
    lost = h.lost_on([A], ("a.pcap", 900), ("b.pcap", 10))
    assert lost is not None and lost.words() == f"{A} after frame 5 of b.pcap"
    assert h.lost_on([A], ("a.pcap", 1), ("a.pcap", 900)) is None


def test_rows_and_carriers_from_decoded_chunks():
    issues = pa.Table.from_pylist([
        {"source": "cap", "position": 130, "issue": "stream-gap", "connection": A, "after_position": 100},
        {"source": "cap", "position": 40, "issue": "undecodable-request", "connection": B},
        {"source": "cap", "position": 41, "issue": "sasl-token", "connection": B},
        {"source": "seg.log", "position": 0, "issue": "corrupt"}], schema=DECODE_ISSUE)
    assert hole_rows(issues) == [("cap", A, 100, 130, False), ("cap", B, 39, 40, False)]
    events = pa.table({"event": ["WRITE_MARKERS", "END_TXN", "ADD_PARTITIONS"], "connection": [A, B, B]})
    assert carrier_rows(events) == [("ADD_PARTITIONS", B), ("WRITE_MARKERS", A)]
    h = CaptureHoles(hole_rows(issues), carrier_rows(events), ["cap"])
    assert h.carrying("WRITE_MARKERS") == {A} and server_of(A) == "10.0.0.9:9092"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), max_size=6),
       st.integers(0, 80), st.integers(0, 80))
def test_lost_on_is_the_interval_overlap(spans, lo, hi):
    """A hole whose bytes were sent after frame `after` and known lost by frame `by` is in the
    window [lo, hi) exactly when after < hi and by >= lo (after >= lo for the request before)."""
    rows = [("cap", A, a, a + d, False) for a, d in spans]
    got = holes(*rows).lost_on([A], ("cap", lo), ("cap", hi))
    want = [a for a, d in spans if a < hi and a + d >= lo]
    assert (got is None) == (not want)
    if got is not None:
        assert got.after == min(want)


def test_the_connections_of_hosts_that_lost_bytes():
    holes = CaptureHoles([("c.pcap", "10.0.0.5:4000 -> 10.0.0.1:9092", 3, 9, False),
                          ("c.pcap", "10.0.0.6:4100 -> 10.0.0.1:9092", 3, 9, False),
                          ("c.pcap", "[::1]:4200 -> 10.0.0.1:9092", 3, 9, False)], sources=["c.pcap"])
    assert holes.from_hosts(["10.0.0.5", None]) == {"10.0.0.5:4000 -> 10.0.0.1:9092"}
    assert holes.from_hosts(["[::1]"]) == {"[::1]:4200 -> 10.0.0.1:9092"}
    assert holes.from_hosts(["10.0.0.1"]) == set()   # a server's address is no client's
    assert holes.from_hosts([]) == set()


def test_until_where_the_bytes_lost_between_two_places_reach():
    c = "10.0.0.5:4000 -> 10.0.0.1:9092"
    holes = CaptureHoles([("a.pcap", c, 10, 14, False), ("a.pcap", c, 30, 33, False),
                          ("b.pcap", c, 2, 5, False)], sources=["a.pcap", "b.pcap"])
    assert holes.lost_until([c], ("a.pcap", 0), ("a.pcap", 20)) == holes.place("a.pcap", 14)
    assert holes.lost_until([c], ("a.pcap", 0), ("a.pcap", 40)) == holes.place("a.pcap", 33)
    assert holes.lost_until([c], ("a.pcap", 15), ("a.pcap", 29)) is None      # between the two holes
    assert holes.lost_until([c], ("a.pcap", 40), ("b.pcap", 9)) == holes.place("b.pcap", 5)
    assert holes.lost_until(["other"], ("a.pcap", 0), ("b.pcap", 9)) is None
    assert holes.place("a.pcap", 99) < holes.place("b.pcap", 1)               # files in their order
