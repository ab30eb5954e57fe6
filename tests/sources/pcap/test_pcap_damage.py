"""`decode pcap` end to end on crafted captures that are damaged or unusual: lost segments, a
capture joined mid-connection, Kafka on another port, other protocols next to Kafka, TLS, acks=0
and unanswered requests."""

from __future__ import annotations

import pytest

from tests.sources.pcap import kmsgs
from tests.sources.pcap.craft import Conn, content, decode_rows, write_capture

CONN = "10.0.0.1:40001 -> 10.0.0.2:9092"


@pytest.fixture(scope="module")
def convo():
    return kmsgs.conversation()


def _frames(rows):
    return {f["correlation_id"]: f for f in rows.get("frame", [])}


def _issues(rows, kind=None):
    return [i for i in rows.get("decode_issue", []) if kind is None or i["issue"] == kind]


def _client_offset(messages, index):
    """Stream offset (client -> server) of message `index`."""
    return sum(len(b) for d, b in messages[:index] if d == 0)


# ---- lost segments -----------------------------------------------------------------------------


@pytest.mark.parametrize("lost", [3, 5, 7])
def test_segment_lost_inside_a_produce_request(lost, convo, tmp_path):
    messages, names = convo
    pi = names["request produce"]
    path = tmp_path / "lost.pcap"
    pkts = write_capture(path, Conn(messages), segment=40,
                         drop=lambda s: s.messages == (pi,) and s.index == lost)
    rows = decode_rows(path)
    frames = _frames(rows)
    produce = frames[4]
    assert produce["api_name"] == "Produce" and produce["complete"] is False
    assert produce["response_frame"] is not None  # still paired: the splitter stayed in step
    (gap,) = _issues(rows, "stream-gap")
    # the burst is AddPartitionsToTxn + Produce; segment `lost` of it is gone
    burst_start = _client_offset(messages, names["request add_partitions"])
    assert gap["stream_offset"] == burst_start + 40 * lost
    assert gap["length"] == 40 and gap["connection"] == CONN
    assert "lost" in gap["message"]
    # every other exchange is whole and paired, before and after the gap
    assert sorted(frames) == [0, 1, 2, 3, 4, 5, 6]
    for corr, f in frames.items():
        if corr != 4:
            assert f["complete"] is True and f["decode_error"] is None, f
            assert f["request_frame"] is not None and f["response_frame"] is not None
    assert {b["source_kind"] for b in rows["batch"]} >= {"fetch"}
    (c,) = rows["connection"]
    assert (c["gaps"], c["gap_bytes"], c["unanswered"]) == (1, 40, 0)
    assert c["bytes_to_server"] == sum(len(b) for d, b in messages if d == 0) - 40
    assert c["packets"] == len(pkts)  # the last ACK after the FIN counts too


def test_segment_lost_across_a_frame_start_resynchronises(convo, tmp_path):
    """The first segment of the Fetch request is lost (its size field with it): the splitter
    searches the following bytes for a plausible request header and finds EndTxn."""
    messages, names = convo
    fi = names["request fetch"]
    path = tmp_path / "lost-start.pcap"
    write_capture(path, Conn(messages), segment=40, drop=lambda s: s.messages == (fi,) and s.index == 0)
    rows = decode_rows(path)
    frames = _frames(rows)
    (gap,) = _issues(rows, "stream-gap")
    assert gap["stream_offset"] == _client_offset(messages, fi) and gap["length"] == 40
    (skipped,) = _issues(rows, "skipped-bytes")
    assert skipped["stream_offset"] == gap["stream_offset"] + 40
    assert skipped["length"] == len(messages[fi][1]) - 40  # the rest of the Fetch request
    # the Fetch response has no request any more; EndTxn is found again and paired
    assert frames[5]["api_name"] is None and frames[5]["request_frame"] is None
    assert frames[5]["decode_error"] == "response whose request is not in the capture"
    assert frames[6]["api_name"] == "EndTxn" and frames[6]["response_frame"] is not None
    assert frames[6]["complete"] is True and frames[6]["committed"] is True
    assert not _issues(rows, "incomplete-frame")
    assert {f["api_name"] for f in frames.values()} >= {"ApiVersions", "Metadata", "Produce", "EndTxn"}
    (c,) = rows["connection"]
    assert c["unanswered"] == 0


def test_lost_response_segment(convo, tmp_path):
    """A segment lost inside the Fetch response: the frame is incomplete, EndTxn still pairs."""
    messages, names = convo
    fr = names["response fetch"]
    path = tmp_path / "lost-response.pcap"
    write_capture(path, Conn(messages), segment=64, drop=lambda s: s.messages == (fr,) and s.index == 2)
    rows = decode_rows(path)
    frames = _frames(rows)
    assert frames[5]["complete"] is False and frames[5]["api_name"] == "Fetch"
    assert frames[6]["complete"] is True and frames[6]["api_name"] == "EndTxn"
    (gap,) = _issues(rows, "stream-gap")
    assert gap["stream_offset"] == sum(len(b) for d, b in messages[:fr] if d == 1) + 128


# ---- captures that start mid-connection --------------------------------------------------------


def test_capture_starts_inside_a_request(convo, tmp_path):
    """No handshake, and the first packet is the second segment of the Metadata request."""
    messages, names = convo
    mi = names["request metadata"]
    path = tmp_path / "mid.pcap"
    write_capture(path, Conn(messages), segment=20,
                  start=lambda p: p.seg is not None and p.seg.messages == (mi,) and p.seg.index == 1)
    rows = decode_rows(path)
    frames = _frames(rows)
    (skipped,) = _issues(rows, "skipped-bytes")
    assert skipped["stream_offset"] == 0 and skipped["length"] == len(messages[mi][1]) - 20
    assert "start" in skipped["message"]
    # the Metadata response is reported with its correlation id, and why it is undecoded
    md = frames[1]
    assert md["request_frame"] is None and md["response_frame"] is not None
    assert md["decode_error"] == "response whose request is not in the capture"
    for corr in (2, 3, 4, 5, 6):
        f = frames[corr]
        assert f["request_frame"] is not None and f["response_frame"] is not None, f
        assert f["complete"] is True and f["decode_error"] is None
    assert 0 not in frames  # ApiVersions: entirely before the capture
    assert len(rows["batch"]) == 5
    (c,) = rows["connection"]
    assert (c["client"], c["server"], c["syn_seen"], c["protocol"]) == (
        "10.0.0.1:40001", "10.0.0.2:9092", False, "kafka")
    assert c["unanswered"] == 0


@pytest.mark.parametrize("port", [9092, 19092])
def test_capture_starts_with_a_response(port, convo, tmp_path):
    """The first packet is the broker's ApiVersions response (on the Kafka port, or on a port
    kaudit was not told about: then the roles come from the bytes alone)."""
    messages, names = convo
    ai = names["response api_versions"]
    path = tmp_path / "mid-response.pcap"
    write_capture(path, Conn(messages, server=("10.0.0.2", port)), segment=20,
                  start=lambda p: p.seg is not None and p.seg.messages == (ai,))
    rows = decode_rows(path)
    conn = f"10.0.0.1:40001 -> 10.0.0.2:{port}"
    (c,) = rows["connection"]
    assert (c["connection"], c["protocol"], c["syn_seen"]) == (conn, "kafka", False)
    frames = _frames(rows)
    assert frames[0]["decode_error"] == "response whose request is not in the capture"
    assert [frames[i]["api_name"] for i in range(1, 7)] == [
        "Metadata", "InitProducerId", "AddPartitionsToTxn", "Produce", "Fetch", "EndTxn"]
    assert all(frames[i]["response_frame"] is not None for i in range(1, 7))
    assert not _issues(rows)


# ---- ports and protocols -----------------------------------------------------------------------


def test_kafka_on_another_port_and_http_beside_it(convo, tmp_path):
    messages, _ = convo
    http = [(0, b"GET /metrics HTTP/1.1\r\nHost: broker\r\n\r\n"),
            (1, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")]
    path = tmp_path / "ports.pcap"
    write_capture(path, [Conn(messages, server=("10.0.0.2", 29093)),
                         Conn(http, client=("10.0.0.1", 40100), server=("10.0.0.2", 8080))],
                  interleave=True, split_seed=3)
    rows = decode_rows(path)  # the default --kafka-port 9092 only
    conns = {c["server"]: c for c in rows["connection"]}
    assert conns["10.0.0.2:29093"]["protocol"] == "kafka"
    other = conns["10.0.0.2:8080"]
    assert (other["protocol"], other["requests"], other["responses"]) == ("other", 0, 0)
    assert other["bytes_to_server"] == len(http[0][1]) and other["bytes_to_client"] == len(http[1][1])
    assert {f["connection"] for f in rows["frame"]} == {"10.0.0.1:40001 -> 10.0.0.2:29093"}
    assert len(rows["frame"]) == 7 and len(rows["batch"]) == 5
    assert not _issues(rows)


def test_explicit_kafka_port_agrees_with_discovery(convo, tmp_path):
    messages, _ = convo
    path = tmp_path / "port.pcap"
    write_capture(path, Conn(messages, server=("10.0.0.2", 29093)), segment=30)
    found, told = decode_rows(path), decode_rows(path, kafka_ports=frozenset({29093}))
    for kind in ("frame", "batch", "txn_event", "connection"):
        assert content(found[kind], drop={"source"}) == content(told[kind], drop={"source"})


def test_a_server_that_speaks_first_is_not_kafka(tmp_path):
    banner = [(1, b"220 mail.example.com ESMTP ready\r\n"), (0, b"EHLO client\r\n"),
              (1, b"250 OK\r\n")]
    path = tmp_path / "smtp.pcap"
    write_capture(path, Conn(banner, server=("10.0.0.2", 2525)))
    rows = decode_rows(path)
    (c,) = rows["connection"]
    assert c["protocol"] == "other" and "frame" not in rows and not _issues(rows)


TLS_HELLO = (bytes.fromhex("160301") + (196 + 4).to_bytes(2, "big") + b"\x01" + (196).to_bytes(3, "big")
             + b"\x03\x03" + bytes(range(32)) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
             + bytes(196 - 2 - 32 - 1 - 4 - 2))
TLS_SERVER = bytes.fromhex("160303") + (90).to_bytes(2, "big") + b"\x02" + bytes(89)
TLS_DATA = bytes.fromhex("170303") + (32).to_bytes(2, "big") + bytes(range(32))


@pytest.mark.parametrize("port", [9092, 9093])
@pytest.mark.parametrize("segment", [None, 1])
def test_tls_connection(port, segment, tmp_path):
    msgs = [(0, TLS_HELLO), (1, TLS_SERVER), (0, TLS_DATA), (1, TLS_DATA)]
    path = tmp_path / "tls.pcap"
    write_capture(path, Conn(msgs, server=("10.0.0.2", port)), segment=segment)
    rows = decode_rows(path)
    (c,) = rows["connection"]
    assert (c["protocol"], c["client"], c["server"]) == ("tls", "10.0.0.1:40001", f"10.0.0.2:{port}")
    assert c["bytes_to_server"] == len(TLS_HELLO) + len(TLS_DATA)
    assert c["bytes_to_client"] == len(TLS_SERVER) + len(TLS_DATA)
    assert (c["requests"], c["responses"]) == (0, 0)
    assert "frame" not in rows and "batch" not in rows
    assert [i["issue"] for i in rows["decode_issue"]] == ["tls"]  # reported as undecodable


def test_tls_joined_mid_connection(tmp_path):
    """Only application data records (no handshake): still TLS, not Kafka with absurd sizes."""
    msgs = [(0, TLS_DATA), (1, TLS_DATA), (0, TLS_DATA)]
    path = tmp_path / "tls-mid.pcap"
    write_capture(path, Conn(msgs, handshake=False), segment=16)
    rows = decode_rows(path)
    (c,) = rows["connection"]
    assert c["protocol"] == "tls" and "frame" not in rows
    assert [i["issue"] for i in rows["decode_issue"]] == ["tls"]


def test_empty_kafka_port_connection(tmp_path):
    """A handshake and a close on 9092 without a byte: a Kafka connection with nothing in it."""
    path = tmp_path / "empty.pcap"
    write_capture(path, Conn([]))
    rows = decode_rows(path)
    (c,) = rows["connection"]
    assert (c["protocol"], c["requests"], c["bytes_to_server"]) == ("kafka", 0, 0)


# ---- acks=0 and unanswered requests ------------------------------------------------------------


def test_acks0_produce_and_an_unanswered_request(tmp_path):
    p0 = kmsgs.produce(10, acks=0, txn_id=None)
    md = kmsgs.metadata(11)
    last = kmsgs.metadata(12)
    msgs = [(0, p0[0]), (0, md[0]), (1, md[1]), (0, last[0])]  # no response to the last request
    path = tmp_path / "acks0.pcap"
    write_capture(path, Conn(msgs, fin=False), segment=100)
    rows = decode_rows(path)
    frames = _frames(rows)
    produce = frames[10]
    assert (produce["api_name"], produce["acks"], produce["response_frame"]) == ("Produce", 0, None)
    assert produce["error_codes"] is None and produce["decode_error"] is None
    assert produce["complete"] is True
    assert frames[11]["response_frame"] is not None
    unanswered = frames[12]
    assert unanswered["api_name"] == "Metadata" and unanswered["response_frame"] is None
    (c,) = rows["connection"]
    assert (c["requests"], c["responses"], c["unanswered"], c["close_reason"]) == (3, 1, 1, "end")
    batches = [b for b in rows["batch"] if b["correlation_id"] == 10]
    assert len(batches) == 2 and all(b["acks"] == 0 and b["response_error"] is None for b in batches)


# ---- the command line --------------------------------------------------------------------------


def test_cli_ndjson_is_decode_capture(convo, tmp_path):
    """`kaudit decode pcap --kafka-port --kind` prints the rows decode_capture builds."""
    import json

    from typer.testing import CliRunner

    from kaudit.cli import app

    messages, _ = convo
    path = tmp_path / "cli.pcap"
    write_capture(path, Conn(messages, server=("10.0.0.2", 29093)), split_seed=4)
    r = CliRunner().invoke(app, ["decode", "pcap", str(path), "--kafka-port", "29093",
                                 "--kind", "frame", "--kind", "batch"])
    assert r.exit_code == 0, r.output
    printed = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert {p["kind"] for p in printed} == {"frame", "batch"}
    want = decode_rows(path, kafka_ports=frozenset({29093}))
    for kind in ("frame", "batch"):
        got = [{k: v for k, v in p.items() if k != "kind"} for p in printed if p["kind"] == kind]
        assert content(got, drop=()) == content(want[kind], drop=())
