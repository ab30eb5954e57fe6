"""The consumer rules under KIP-227 fetch sessions (Fetch v7+, every Java consumer): an incremental
Fetch response leaves out the partitions with nothing new, so the Fetch that says where a client
went - a reset to the log end, a read that caught up - may have no answer for the partition; its
request's fetch offset is the client's position. Found by the history simulator (tests/sim,
group:reset_range_session)."""

from __future__ import annotations

from decimal import Decimal

from scapy.utils import EDecimal, PcapWriter

from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions
from tests.audit.wire import wirecraft_group as g
from tests.audit.wire.wirecraft import T0, audit
from tests.sources.pcap.craft import Conn, _scapy, packets

A = dict(client=("10.0.0.4", 41001))
CONSUMER_RULES = ("consumer-reset-skip", "consumer-poll-skip", "consumer-nonmonotonic-poll",
                  "consumer-start-beyond-commit", "consumer-commit-beyond-served")
SID = 900


def _restart(committed: int):
    return (g.join(1, "app-a", "m-a", 1) + g.sync(2, "app-a", "m-a", 1, [(g.TOPIC, [0])])
            + g.offset_fetch(3, "app-a", committed))


def _brief(fs):
    return [(f["rule"], f["severity"], f["first_offset"], f["last_offset"]) for f in fs]


def test_a_reset_to_the_log_end_left_out_of_the_session_response_is_found(tmp_path):
    """Committed 3, the full fetch answers OFFSET_OUT_OF_RANGE (log start 3 in the answer), ListOffsets
    -1 gives 50, and the incremental Fetch at 50 is left out of its response (nothing new there):
    the only Fetch that shows the client at the log end has no answer for the partition."""
    full = g.fetch_session(4, "app-a", SID, 0, [(0, 3)], [(0, 1, 50, 3, b"")])
    at_end = g.fetch_session(6, "app-a", SID, 1, [(0, 50)], [])
    msgs = _restart(3) + full + g.list_offsets(5, "app-a", -1, 50) + at_end
    fs = audit(tmp_path, Conn(msgs, **A), select=CONSUMER_RULES)
    assert _brief(fs) == [("consumer-reset-skip", "error", 3, 49)]


def _kafka_reset(*after):
    """As Kafka answers: the out-of-range error with high watermark and log start -1."""
    full = g.fetch_session(4, "app-a", SID, 0, [(0, 3)], [(0, 1, -1, -1, b"")])
    at_end = g.fetch_session(6, "app-a", SID, 1, [(0, 50)], [])
    return _restart(3) + full + g.list_offsets(5, "app-a", -1, 50) + at_end + list(after)


def test_an_unknown_log_start_is_said_not_guessed(tmp_path):
    fs = audit(tmp_path, Conn(_kafka_reset(), **A), select=CONSUMER_RULES)
    assert _brief(fs) == [("consumer-reset-skip", "error", 3, 49)]
    assert "log start is in no answer" in fs[0]["message"] and "retention" in fs[0]["message"]


def test_a_later_answer_bounds_the_log_start(tmp_path):
    """The next answer (records past the log end) says log start 20: 20-49 were skipped for certain
    (the log start only grows), 3-19 may have been deleted by retention."""
    later = g.fetch_session(7, "app-a", SID, 2, [(0, 50)], [(0, 0, 52, 20, g.records(50, 2))])
    fs = audit(tmp_path, Conn(_kafka_reset(*later), **A), select=CONSUMER_RULES)
    assert _brief(fs) == [("consumer-reset-skip", "error", 20, 49)]


def test_a_watermark_query_while_reading_in_a_session_is_no_reset(tmp_path):
    """Reading on from 0 with empty incremental answers in between; a ListOffsets -1 look-up (a lag
    query) and the next Fetch still at the client's position: nothing skipped."""
    msgs = (_restart(0)
            + g.fetch_session(4, "app-a", SID, 0, [(0, 0)], [(0, 0, 10, 0, g.records(0, 10))])
            + g.fetch_session(5, "app-a", SID, 1, [(0, 10)], [])
            + g.list_offsets(6, "app-a", -1, 10)
            + g.fetch_session(7, "app-a", SID, 2, [(0, 10)], [])
            + g.fetch_session(8, "app-a", SID, 3, [(0, 10)], [(0, 0, 14, 0, g.records(10, 4))]))
    assert audit(tmp_path, Conn(msgs, **A), select=CONSUMER_RULES) == []


def test_a_caught_up_partition_left_out_keeps_its_position(tmp_path):
    """The response at the end of the served records leaves the partition out; the next answered
    Fetch starts where the client stood: no skip, no going back."""
    msgs = (_restart(0)
            + g.fetch_session(4, "app-a", SID, 0, [(0, 0)], [(0, 0, 5, 0, g.records(0, 5))])
            + g.fetch_session(5, "app-a", SID, 1, [(0, 5)], [])
            + g.fetch_session(6, "app-a", SID, 2, [(0, 5)], [(0, 0, 9, 0, g.records(5, 4))]))
    assert audit(tmp_path, Conn(msgs, **A), select=CONSUMER_RULES) == []


def test_a_jump_seen_only_in_a_left_out_partition_is_a_poll_skip(tmp_path):
    """Served 0-4, then the request asks from 20 with no look-up or rebalance: the response leaves
    the partition out, yet the request is where the client went - 5-19 were skipped."""
    msgs = (_restart(0)
            + g.fetch_session(4, "app-a", SID, 0, [(0, 0)], [(0, 0, 30, 0, g.records(0, 5))])
            + g.fetch_session(5, "app-a", SID, 1, [(0, 20)], []))
    fs = audit(tmp_path, Conn(msgs, **A), select=CONSUMER_RULES)
    assert _brief(fs) == [("consumer-poll-skip", "error", 5, 19)]


def test_a_lost_session_names_no_position(tmp_path):
    """FETCH_SESSION_ID_NOT_FOUND answers no partition: the request's offset is not taken as a
    place the client fetched from (it re-sends a full fetch)."""
    full = g.fetch_session(4, "app-a", SID, 0, [(0, 3)], [(0, 1, -1, -1, b"")])
    lost = g.fetch_session(6, "app-a", SID, 1, [(0, 50)], [], error=70)
    msgs = _restart(3) + full + g.list_offsets(5, "app-a", -1, 50) + lost
    assert audit(tmp_path, Conn(msgs, **A), select=CONSUMER_RULES) == []


def _fenced_and_back(first_stint, committed_back: int, answer):
    """A KIP-848 member reads in a session, is fenced (FENCED_MEMBER_EPOCH) and given the partition
    back; OffsetFetch answers `committed_back`. Its next incremental Fetch does not name the partition
    (the session holds its position: FetchSessionHandler sends only what changed) and is answered
    `answer`. Found by the history simulator (tests/sim, group:fenced with rejoin)."""
    return (g.metadata_ids(1, "app-a") + g.cg_heartbeat(2, "app-a", "m-a", 0, answer_epoch=1, partitions=[0])
            + g.offset_fetch(3, "app-a", 0) + first_stint + g.cg_heartbeat(7, "app-a", "m-a", 1, error=110)
            + g.cg_heartbeat(8, "app-a", "m-a", 0, answer_epoch=3, partitions=[0])
            + g.offset_fetch(9, "app-a", committed_back)
            + g.fetch_session(10, "app-a", SID, 2, [], [answer]))


def test_a_rejoined_member_answered_from_its_sessions_position_at_the_commit_is_clean(tmp_path):
    """The session held offset 0 (nothing there yet); back with committed 0, the unnamed answer
    serves 0-1 (a read_committed consumer's aborted batch and marker, say) and the next Fetch names 2:
    it read on from the committed offset."""
    stint = g.fetch_session(4, "app-a", SID, 0, [(0, 0)], [(0, 0, 0, 0, b"")])
    msgs = (_fenced_and_back(stint, 0, (0, 0, 2, 0, g.records(0, 2)))
            + g.fetch_session(11, "app-a", SID, 3, [(0, 2)], []))
    assert audit(tmp_path, Conn(msgs, **A), select=CONSUMER_RULES) == []


def test_a_rejoined_member_answered_past_the_commit_by_its_session_is_found(tmp_path):
    """The session held offset 5 (0-4 read, never committed); back with committed 0 the consumer
    would name 0 (a changed position), but the unnamed answer serves 5-8: 0-4 were skipped."""
    stint = (g.fetch_session(4, "app-a", SID, 0, [(0, 0)], [(0, 0, 5, 0, g.records(0, 5))])
             + g.fetch_session(5, "app-a", SID, 1, [(0, 5)], []))
    msgs = _fenced_and_back(stint, 0, (0, 0, 9, 0, g.records(5, 4)))
    fs = audit(tmp_path, Conn(msgs, **A), select=CONSUMER_RULES)
    assert _brief(fs) == [("consumer-start-beyond-commit", "error", 0, 4)]
    assert "fetch session" in fs[0]["message"]


def _write_at(path, conns, times):
    """conns written with each message at its time (times[conn][message]), packets in time order: a
    Fetch on the leader's connection in flight while the coordinator's connection answers."""
    out, last = [], {}
    for p, conn in packets(conns):
        t = times[p.conn][p.seg.messages[0]] if p.seg is not None else last.get(p.conn, times[p.conn][0] - 0.01)
        last[p.conn] = t = t + (1e-6 if p.seg is None else 0)
        out.append((t, len(out), p, conn))
    with PcapWriter(str(path), sync=False) as w:
        for t, _, p, conn in sorted(out, key=lambda e: e[:2]):
            sp = _scapy(p, conn, link="ether", vlan=None, ipv6=False)
            sp.time = EDecimal(Decimal(str(T0 + t)))
            w.write(sp)


def _in_flight(tmp_path, sent_at: float, then: int):
    """Fenced at position 5 (0-4 read, never committed), given the partition back at 2.1 and told
    committed 0 at 2.2; an incremental Fetch naming nothing, sent at `sent_at`, is answered 5-8 at
    2.25 from the session's old position; then the Fetch naming `then`."""
    coord = (g.metadata_ids(1, "app-a") + g.cg_heartbeat(2, "app-a", "m-a", 0, answer_epoch=1, partitions=[0])
             + g.offset_fetch(3, "app-a", 0) + g.cg_heartbeat(7, "app-a", "m-a", 1, error=110)
             + g.cg_heartbeat(8, "app-a", "m-a", 0, answer_epoch=3, partitions=[0]) + g.offset_fetch(9, "app-a", 0))
    leader = (g.fetch_session(4, "app-a", SID, 0, [(0, 0)], [(0, 0, 5, 0, g.records(0, 5))])
              + g.fetch_session(5, "app-a", SID, 1, [(0, 5)], [])
              + g.fetch_session(6, "app-a", SID, 2, [], [(0, 0, 9, 0, g.records(5, 4))])
              + g.fetch_session(10, "app-a", SID, 3, [(0, then)],
                                [(0, 0, 9, 0, g.records(then, 9 - then) if then < 9 else b"")]))
    times = [[1.0, 1.001, 1.01, 1.011, 1.02, 1.021, 2.0, 2.001, 2.1, 2.101, 2.2, 2.201],
             [1.1, 1.101, 1.2, 1.201, sent_at, 2.25, 2.3, 2.301]]
    path = tmp_path / f"in-flight-{sent_at}.pcap"
    _write_at(path, [Conn(coord, client=("10.0.0.4", 41001)),
                     Conn(leader, client=("10.0.0.4", 41002), server=("10.0.0.3", 9092))], times)
    run = audit_pcaps([str(path)], PcapOptions(), select=CONSUMER_RULES)
    assert not run.errors, run.errors
    return run.findings


def test_a_session_answer_in_flight_across_the_rejoin_is_not_the_start(tmp_path):
    """Sent at 2.05, before the partition came back and OffsetFetch answered: the consumer drops the
    answer (its offset is not the position any more) and names 0 next: nothing skipped."""
    assert _brief(_in_flight(tmp_path, 2.05, 0)) == []


def test_a_session_answer_sent_after_the_offset_fetch_is_the_start(tmp_path):
    """Sent at 2.21, after OffsetFetch answered 0: the session still read from 5, so the member's
    position was 5 (an application seek): 0-4 skipped; it reads on from 9."""
    assert _brief(_in_flight(tmp_path, 2.21, 9)) == [("consumer-start-beyond-commit", "error", 0, 4)]
