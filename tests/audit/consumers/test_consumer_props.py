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


# ---- generated rebalances: one member, generation 1 -> 2, the partition assigned again ----------

CONN = "10.0.0.9:1 -> 10.0.0.2:9092"


def _row(ts, event, **kw):
    base = {"ts": ts, "response_ts": ts, "position": int(ts * 10), "source": "gen.pcap", "connection": CONN,
            "client_id": "gen", "event": event, "group_id": "g", "member_id": "m", "error_code": 0,
            "generation": None, "partitions": None, "topic": None, "partition": None, "offset": None}
    base.update(kw)
    return base


def _rebalanced(sizes, commit_at, reread: bool):
    """Served `sizes` in generation 1, committed `commit_at`, then assigned t-0 again in generation
    2; it re-reads from the commit (eager) or reads on (cooperative)."""
    rows = [_row(0.1, "JOIN", generation=1), _row(0.2, "SYNC", generation=1, partitions="t-0")]
    serves, pos, ts = [], 0, 1.0
    for n in sizes:
        serves.append(_serve(ts, pos, n))
        pos, ts = pos + n, ts + 1
    rows.append(_row(ts, "OFFSET_COMMIT", generation=1, topic="t", partition=0, offset=commit_at))
    rows += [_row(ts + 1, "JOIN", generation=2), _row(ts + 2, "SYNC", generation=2, partitions="t-0")]
    start = commit_at if reread else pos
    serves.append(_serve(ts + 3, start, pos + 3 - start))
    return Timelines(rows, serves, [])


def _serve(ts, pos, n):
    s = Serve(ts, int(ts * 10), "gen.pcap", CONN, CLIENT, "gen", ("t", 0), "read_uncommitted", pos, 0,
              10**6, 10**6, 0)
    s.first, s.end, s.data_first, s.data_end = pos, pos + n, pos, pos + n
    return s


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=8), st.data())
def test_a_rebalance_rereads_exactly_past_the_commit(sizes, data):
    served = sum(sizes)
    commit_at = data.draw(st.integers(0, served))
    reread = data.draw(st.booleans())
    fs = rules.judge(_rebalanced(sizes, commit_at, reread), [])
    if reread and commit_at < served:
        [f] = fs
        assert (f["rule"], f["first_offset"], f["last_offset"]) == ("consumer-redelivery", commit_at, served - 1)
    else:
        assert fs == []
