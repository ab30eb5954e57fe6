"""Generated consumers (Hypothesis) over the timelines directly: a consumer that reads on where it
was served gives no finding; a jump forward or back is found exactly where it was cut."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.consumers import rules
from kaudit.audit.consumers.timeline import Serve, Timelines

CLIENT = ("10.0.0.9", "gen")


def _serves(sizes, cut_at=None, shift=0):
    out, pos = [], 0
    for i, n in enumerate(sizes):
        if i == cut_at:
            pos = max(pos + shift, 0)
        s = Serve(1.0 + i, i, "gen.pcap", "10.0.0.9:1 -> 10.0.0.2:9092", CLIENT, "gen", ("t", 0),
                  "read_uncommitted", pos, 0, 10**6, 10**6, 0)
        if n:
            s.first, s.end = pos, pos + n
            s.data_first, s.data_end = pos, pos + n
        out.append(s)
        pos += n
    return out


def _rules(serves):
    return sorted(f["rule"] for f in rules.judge(Timelines([], serves, []), []))


SIZES = st.lists(st.integers(0, 20) | st.just(0), min_size=2, max_size=30)


@settings(max_examples=60, deadline=None)
@given(SIZES)
def test_reading_on_is_clean(sizes):
    assert _rules(_serves(sizes)) == []


@settings(max_examples=60, deadline=None)
@given(SIZES, st.data())
def test_a_cut_is_found_where_it_was_made(sizes, data):
    i = data.draw(st.integers(1, len(sizes) - 1))
    shift = data.draw(st.integers(-30, 30).filter(lambda v: v != 0))
    serves = _serves(sizes, i, shift)
    # where the client stood before the cut: past the previous response's records, or where that
    # (empty) response was asked; a step back counts once some records were delivered
    prev = serves[i - 1]
    expected = prev.end if prev.end is not None else prev.fetch_offset
    start = serves[i].fetch_offset
    delivered = any(s.end is not None for s in serves[:i])
    want = ["consumer-poll-skip"] if start > expected else (
        ["consumer-nonmonotonic-poll"] if start < expected and delivered else [])
    assert _rules(serves) == want
