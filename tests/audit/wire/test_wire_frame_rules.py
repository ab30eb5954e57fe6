"""The frame rules on the wire (audit/wire/wire_frames.py) on crafted captures: unanswered-request,
producer-error, fenced-epoch of transaction requests, stream-gap and undecodable-frame."""

from __future__ import annotations

import pytest

from tests.audit.wire.wirecraft import (
    T0,
    TOPIC,
    add_partitions,
    audit,
    batch,
    by_rule,
    details,
    end_txn,
    init_producer_id,
    metadata,
    produce,
    produce_response,
    rules_of,
    send,
)
from tests.sources.pcap.craft import Conn
from tests.sources.pcap.test_pcap_damage import TLS_DATA, TLS_HELLO, TLS_SERVER

PID = 5001
CONN = "10.0.0.1:40001 -> 10.0.0.2:9092"


def one(findings, rule):
    (f,) = by_rule(findings, rule)
    return f


def _fin_delay(seconds):
    """write_timed delay: `seconds` of silence before the client's FIN."""
    return {"delay": lambda i, p: seconds if (p.kind == "fin" and p.direction == 0) else 0}


# ---- unanswered-request ------------------------------------------------------------------------


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_later_request_was_answered(pipelined, tmp_path):
    if pipelined:  # both requests in one segment: same time and frame
        m = [(0, metadata(1)[0][1]), (0, metadata(2)[0][1]), metadata(2)[1]]
    else:
        m = metadata(1, answered=False) + metadata(2)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("unanswered-request", "warning")]
    f = fs[0]
    assert "Metadata v1 corr 1" in f["message"] and "a later request on the connection was answered" in f["message"]
    assert f["connection"] == CONN and [e["kind"] for e in f["evidence"]] == ["request"]
    assert details(f)["api"] == "Metadata"
    assert f["first_ts_ms"] // 1000 == int(T0)


def test_produce_on_a_connection_closed_before_its_response(tmp_path):
    m = send(1, batch(PID, 0, 0, 5), offset=0) + send(2, batch(PID, 0, 5, 5), error=None)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("unanswered-request", "warning")]
    assert "Produce v3 corr 2" in fs[0]["message"]
    assert "the connection closed (FIN)" in fs[0]["message"]
    assert "cannot know whether it was stored" in fs[0]["message"]
    assert (fs[0]["producer_id"], fs[0]["producer_epoch"]) == (PID, 0)


def test_unanswered_produce_whose_retry_stored_it_once_is_info(tmp_path):
    """The connection closed before the Produce's answer; the producer retried the same batch on
    a new connection and the broker answered it (an idempotent retry is stored once): nothing was
    lost, a fact of the reconnect (info), told with what resolved it."""
    first = Conn(send(1, batch(PID, 0, 0, 5), offset=0) + send(2, batch(PID, 0, 5, 5), error=None))
    second = Conn(send(3, batch(PID, 0, 5, 5), offset=5), client=("10.0.0.1", 40002))
    fs = audit(tmp_path, [first, second])
    (u,) = by_rule(fs, "unanswered-request")
    assert u["severity"] == "info" and "resolved: its retry was deduplicated - nothing lost" in u["message"]
    assert details(by_rule(fs, "retried-batch")[0])["outcome"] == "deduplicated"


def test_metadata_abandoned_by_a_close_before_any_timeout_is_info(tmp_path):
    fs = audit(tmp_path, Conn(metadata(1) + metadata(2, answered=False)))
    assert rules_of(fs) == [("unanswered-request", "info")]
    assert "before any timeout" in fs[0]["message"]


def test_closed_after_the_timeout_is_a_warning(tmp_path):
    fs = audit(tmp_path, Conn(metadata(1) + metadata(2, answered=False)), timed=_fin_delay(40))
    assert rules_of(fs) == [("unanswered-request", "warning")]
    assert "after the 30 s timeout" in fs[0]["message"]


def test_connection_still_in_use_past_the_timeout(tmp_path):
    """corr 1 unanswered; the client sends corr 2 on the same connection 40 s later (unanswered
    too, the capture ends): corr 1 is overdue, corr 2 merely in flight. An empty server message
    splits the two requests into two bursts (only an ACK between them)."""
    m = [metadata(1, answered=False)[0], (1, b""), metadata(2, answered=False)[0]]
    later = {"delay": lambda i, p: 40 if (p.kind == "data" and p.seg.messages == (2,)) else 0}
    fs = audit(tmp_path, Conn(m, fin=False), timed=later)
    assert rules_of(fs) == [("unanswered-request", "warning")]
    assert "corr 1" in fs[0]["message"] and "still in use" in fs[0]["message"]
    # the same two requests 10 s apart: within the timeout, nothing
    sooner = {"delay": lambda i, p: 10 if (p.kind == "data" and p.seg.messages == (2,)) else 0}
    assert audit(tmp_path, Conn(m, fin=False), timed=sooner, name="sooner.pcap") == []


def test_port_reuse_keeps_connections_apart(tmp_path):
    """Two TCP connections of the same 4-tuple in one capture: the second one's answered
    request is no evidence against the first one's last request (abandoned at its close)."""
    first = Conn(metadata(1) + metadata(2, answered=False))
    second = Conn(metadata(1) + metadata(2), isn=(90_000_000, 7_000_000))
    fs = audit(tmp_path, [first, second])
    assert rules_of(fs) == [("unanswered-request", "info")]
    assert "corr 2" in fs[0]["message"] and "before any timeout" in fs[0]["message"]
    # and the other way round: the first connection's exchanges do not make the second's
    # in-flight request overdue
    third = Conn(metadata(3), isn=(50_000_000, 3_000_000))
    fourth = Conn(metadata(4, answered=False), isn=(60_000_000, 4_000_000), fin=False)
    assert audit(tmp_path, [third, fourth], name="reuse2.pcap") == []


def test_produce_on_a_connection_whose_ports_were_reused(tmp_path):
    """The first connection's close is not in the capture; a new SYN on the same ports ends it:
    its Produce will never be answered (warning), its Metadata was abandoned (info)."""
    first = Conn(send(1, batch(PID, 0, 0, 5), offset=0) + send(2, batch(PID, 0, 5, 5), error=None)
                 + metadata(3, answered=False), fin=False)
    second = Conn(metadata(1) + metadata(2), isn=(90_000_000, 7_000_000))
    fs = audit(tmp_path, [first, second])
    assert [(f["severity"], details(f)["api"]) for f in by_rule(fs, "unanswered-request")] == [
        ("warning", "Produce"), ("info", "Metadata")]
    assert all("reused its ports" in f["message"] for f in fs)


def test_in_flight_at_the_end_of_the_capture_gives_nothing(tmp_path):
    m = send(1, batch(PID, 0, 0, 5), offset=0) + metadata(2, answered=False)
    assert audit(tmp_path, Conn(m, fin=False)) == []
    # --now far after the capture is the reference time for ages, not more capture
    assert audit(tmp_path, Conn(m, fin=False), now_ms=int(T0 * 1000) + 3_600_000, name="now.pcap") == []


def test_a_capture_that_holds_one_packet_of_a_connection(tmp_path):
    """nDPI's sample: a lone request of a connection (no handshake, nothing after it) while the
    capture goes on for minutes on another connection: no evidence the broker failed to answer."""
    lone = Conn(metadata(7, answered=False), client=("10.0.0.9", 53052), handshake=False, fin=False)
    busy = Conn(metadata(1) + metadata(2), client=("10.0.0.1", 40001))
    late = {"delay": lambda i, p: 300 if (p.conn == 1 and p.kind == "data" and p.seg.messages == (2,)) else 0}
    assert audit(tmp_path, [lone, busy], timed=late) == []


def test_acks0_is_never_unanswered(tmp_path):
    m = (send(1, batch(-1, -1, -1, 5), acks=0, error=None) + send(2, batch(-1, -1, -1, 5, tag="b"),
                                                                 acks=0, error=None)
         + metadata(3))
    assert audit(tmp_path, Conn(m)) == []
    assert audit(tmp_path, Conn(m[:2], fin=True), timed=_fin_delay(40), name="late.pcap") == []


def test_a_response_lost_in_a_capture_gap_is_info(tmp_path):
    m = send(1, batch(PID, 0, 0, 5), offset=0) + send(2, batch(PID, 0, 5, 5), offset=5) \
        + send(3, batch(PID, 0, 10, 5), offset=10)
    fs = audit(tmp_path, Conn(m), drop=lambda s: s.direction == 1 and s.messages == (3,))
    assert rules_of(fs) == [("stream-gap", "info"), ("unanswered-request", "info")]
    assert "the response may be in the gap" in one(fs, "unanswered-request")["message"]


def test_a_first_answer_lost_with_its_syn_ack_is_info(tmp_path):
    """The capture saw the client's SYN but lost the broker's SYN-ACK and its first answer: the
    client's handshake ACK tells where the broker's stream starts, so the answer's bytes are a
    gap at its start (not a stream that began later) and the request unanswered in the capture
    is info, its answer lost - not a warning that the broker never answered."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap, wrpcap

    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap_session import PcapOptions
    from tests.sources.pcap.craft import write_capture

    m = metadata(1) + metadata(2)
    path = tmp_path / "c.pcap"
    write_capture(path, [Conn(m)], drop=lambda s: s.direction == 1 and s.messages == (1,))
    packets = rdpcap(str(path))
    first = next(i for i, p in enumerate(packets) if p[TCP].sport == 9092 and len(p[TCP].payload))
    # every broker packet before its first data lost (its SYN-ACK, its ACK of the first request)
    wrpcap(str(path), [p for i, p in enumerate(packets) if i >= first or p[TCP].sport != 9092])
    run = audit_pcaps([str(path)], PcapOptions(kafka_ports=frozenset({9092}), jobs=1))
    assert rules_of(run.findings) == [("stream-gap", "info"), ("unanswered-request", "info")], run.findings
    assert "the response may be in the gap" in one(run.findings, "unanswered-request")["message"]


def test_a_first_answer_lost_on_a_connection_joined_mid_stream_is_info(tmp_path):
    """A capture that joined the connection after it opened (no handshake) knows the broker's
    stream only from the first of its bytes it holds: an answer lost before them leaves no gap
    to see, so a request before every answer the capture holds, a later one answered, is info
    (its answer may be unseen) - not a warning that the broker never answered it."""
    from scapy.layers.inet import TCP
    from scapy.utils import rdpcap, wrpcap

    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap_session import PcapOptions
    from tests.sources.pcap.craft import write_capture

    m = metadata(1) + metadata(2) + metadata(3)
    path = tmp_path / "c.pcap"
    write_capture(path, [Conn(m, handshake=False)], drop=lambda s: s.direction == 1 and s.messages == (1,))
    packets = rdpcap(str(path))
    first = next(i for i, p in enumerate(packets) if p[TCP].sport == 9092 and len(p[TCP].payload))
    # nothing of the broker's before its first data the capture holds (its ACK of the request lost too)
    wrpcap(str(path), [p for i, p in enumerate(packets) if i >= first or p[TCP].sport != 9092])
    fs = audit_pcaps([str(path)], PcapOptions(kafka_ports=frozenset({9092}), jobs=1)).findings
    assert rules_of(fs) == [("unanswered-request", "info")], fs
    msg = one(fs, "unanswered-request")["message"]
    assert "Metadata v1 corr 1" in msg and "joined this connection after it opened" in msg
    # the broker's ACK of the request kept: its stream known from before the answer, whose
    # bytes are a gap - the existing reason
    write_capture(path, [Conn(m, handshake=False)], drop=lambda s: s.direction == 1 and s.messages == (1,))
    fs = audit_pcaps([str(path)], PcapOptions(kafka_ports=frozenset({9092}), jobs=1)).findings
    assert rules_of(fs) == [("stream-gap", "info"), ("unanswered-request", "info")], fs
    assert "the response may be in the gap" in one(fs, "unanswered-request")["message"]


def test_a_joined_connection_still_tells_a_request_skipped_between_answers(tmp_path):
    """Between two answers the capture holds the broker's stream: an answer missing there with
    no gap in it was never sent - a warning, joined or not."""
    m = metadata(1) + metadata(2, answered=False) + metadata(3)
    for handshake in (False, True):
        fs = audit(tmp_path, Conn(m, handshake=handshake), name=f"h{handshake}.pcap")
        assert rules_of(fs) == [("unanswered-request", "warning")], handshake
        assert "Metadata v1 corr 2" in fs[0]["message"]


def test_a_first_answer_missing_on_a_connection_seen_from_its_handshake_is_a_warning(tmp_path):
    """With the handshake seen the broker's stream is known from its start: no gap and no
    answer is an answer never sent."""
    m = metadata(1, answered=False) + metadata(2)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("unanswered-request", "warning")]


# ---- producer-error ----------------------------------------------------------------------------


def test_one_producer_error_per_error_response(tmp_path):
    two = [(TOPIC, 0, batch(PID, 0, 0, 2)), ("audit", 1, batch(PID, 0, 0, 2))]
    m = [(0, produce(1, two)), (1, produce_response(1, [(TOPIC, 0, 6, -1), ("audit", 1, 19, -1)]))]
    m += init_producer_id(2, -1, -1, error=51) + add_partitions(3, PID, 0, error=51)
    m += send(4, batch(PID + 1, 0, 0, 2), offset=0)  # success: nothing
    fs = audit(tmp_path, Conn(m))
    errs = by_rule(fs, "producer-error")
    assert [(f["severity"], details(f)["api"]) for f in errs] == [
        ("info", "Produce"), ("info", "InitProducerId"), ("info", "AddPartitionsToTxn")]
    assert details(errs[0])["errors"] == "NOT_LEADER_OR_FOLLOWER,NOT_ENOUGH_REPLICAS"
    # which partitions failed, and with what (one finding for the response)
    assert details(errs[0])["partitions"] == [{"topic": TOPIC, "partition": 0, "error_code": 6},
                                              {"topic": "audit", "partition": 1, "error_code": 19}]
    assert "(orders-0: 6, audit-1: 19)" in errs[0]["message"] and errs[0]["topic"] is None
    assert (errs[2]["topic"], errs[2]["partition"]) == (TOPIC, 0)  # the one partition refused
    assert details(errs[1])["partitions"] is None
    assert details(errs[1])["errors"] == "CONCURRENT_TRANSACTIONS"
    assert errs[2]["transactional_id"] == "tx-wire"
    assert all([e["kind"] for e in f["evidence"]] == ["request", "response"] for f in errs)
    assert {f["rule"] for f in fs} == {"producer-error"}


@pytest.mark.parametrize("txn_id", [None, "tx-wire"])
def test_failed_init_producer_id_belongs_to_the_producer_obtained_next(tmp_path, txn_id):
    """An InitProducerId answered with an error names no producer id (-1): it is the producer's
    the client obtains next on the connection - idempotent or transactional, never a producer
    without idempotence."""
    m = init_producer_id(1, -1, -1, error=15, txn_id=txn_id) + init_producer_id(2, PID, 0, txn_id=txn_id)
    m += send(3, batch(PID, 0, 0, 2), offset=0)
    (f,) = by_rule(audit(tmp_path, Conn(m)), "producer-error")
    assert f["producer_id"] == PID and f["transactional_id"] == txn_id
    assert f"the client then obtained producer id {PID} (epoch 0)" in f["message"]


def test_failed_init_producer_id_without_a_later_answer_stays_unnamed(tmp_path):
    (f,) = by_rule(audit(tmp_path, Conn(init_producer_id(1, -1, -1, error=15, txn_id=None))), "producer-error")
    assert f["producer_id"] == -1 and "obtained" not in f["message"]


def test_no_producer_error_for_other_apis(tmp_path):
    m = metadata(1, error=3) + metadata(2, error=5)
    assert audit(tmp_path, Conn(m)) == []


def test_fenced_transaction_requests(tmp_path):
    m = add_partitions(1, PID, 0, error=47) + end_txn(2, PID, 0, error=90) + end_txn(3, PID, 1)
    fs = audit(tmp_path, Conn(m))
    fenced = by_rule(fs, "fenced-epoch")
    assert [(f["severity"], details(f)["api"]) for f in fenced] == [
        ("warning", "AddPartitionsToTxn"), ("warning", "EndTxn")]
    assert "INVALID_PRODUCER_EPOCH" in fenced[0]["message"] and "PRODUCER_FENCED" in fenced[1]["message"]
    assert len(by_rule(fs, "producer-error")) == 2


# ---- stream-gap and undecodable-frame ----------------------------------------------------------


def test_stream_gap(tmp_path):
    m = metadata(1) + metadata(2) + metadata(3)
    fs = audit(tmp_path, Conn(m), segment=20, drop=lambda s: s.direction == 0 and s.messages == (2,) and s.index == 1)
    gap = one(fs, "stream-gap")
    assert gap["severity"] == "info" and gap["connection"] == CONN
    lost = min(20, len(metadata(2)[0][1]) - 20)  # the second 20-byte segment of request 2
    assert f"{lost} bytes missing" in gap["message"]
    (ev,) = gap["evidence"]
    assert ev["kind"] == "packet" and ev["position"] is not None
    assert not [f for f in fs if f["severity"] != "info"]


def test_tls_connection_is_undecodable(tmp_path):
    m = [(0, TLS_HELLO), (1, TLS_SERVER), (0, TLS_DATA), (1, TLS_DATA)]
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("undecodable-frame", "info")]
    assert fs[0]["connection"] == CONN and "tls" in fs[0]["message"]


def test_response_whose_request_is_not_in_the_capture(tmp_path):
    m = metadata(1) + metadata(2)
    def start(p):  # the capture starts with the first response: corr 1's request is missing
        return p.kind == "data" and p.direction == 1

    fs = audit(tmp_path, Conn(m, handshake=False), start=start)
    f = one(fs, "undecodable-frame")
    assert f["severity"] == "info" and "response whose request is not in the capture" in f["message"]
    assert [e["kind"] for e in f["evidence"]] == ["response"]
    assert not by_rule(fs, "unanswered-request")


def test_clean_conversation_gives_nothing(tmp_path):
    m = metadata(1) + init_producer_id(2, PID, 0) + add_partitions(3, PID, 0) \
        + send(4, batch(PID, 0, 0, 3, transactional=True), offset=0, txn_id="tx-wire") + end_txn(5, PID, 0)
    assert audit(tmp_path, Conn(m)) == []
