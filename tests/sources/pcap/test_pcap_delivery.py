"""`decode pcap` end to end on crafted captures: one transactional producer's conversation
(ApiVersions, Metadata, InitProducerId, AddPartitionsToTxn + a pipelined Produce of a plain and a
gzip batch, a read_committed Fetch with aborted transactions, EndTxn) delivered in every way TCP
and capture files allow gives the same rows; only frame numbers and times may differ."""

from __future__ import annotations

import pytest

from tests.sources.pcap import kmsgs
from tests.sources.pcap.craft import Conn, content, decode_rows, write_capture

CONN = "10.0.0.1:40001 -> 10.0.0.2:9092"
COMPARED = ("frame", "batch", "txn_event", "fetch_partition")
CONNECTION_FIELDS = ("connection", "client", "server", "protocol", "bytes_to_server",
                     "bytes_to_client", "gaps", "gap_bytes", "conflicts", "requests", "responses",
                     "unanswered")


@pytest.fixture(scope="module")
def messages():
    return kmsgs.conversation()[0]


@pytest.fixture(scope="module")
def baseline(messages, tmp_path_factory):
    path = tmp_path_factory.mktemp("baseline") / "whole.pcap"
    write_capture(path, Conn(messages))
    return decode_rows(path)


def _same_as_baseline(rows, baseline, *, connection=None):
    for kind in COMPARED:
        got, want = content(rows.get(kind, [])), content(baseline.get(kind, []))
        if connection is not None:  # another address family: only the endpoints differ
            for r in want:
                if "connection" in r:
                    r["connection"] = connection
            got = content(got)
            want = content(want)
        assert got == want, kind
    assert not rows.get("decode_issue"), rows.get("decode_issue")
    (c,) = rows["connection"]
    (b,) = baseline["connection"]
    assert {k: c[k] for k in CONNECTION_FIELDS[3:]} == {k: b[k] for k in CONNECTION_FIELDS[3:]}


def test_baseline_rows(baseline, messages):
    frames = sorted(baseline["frame"], key=lambda r: r["correlation_id"])
    assert [(f["api_name"], f["api_version"], f["correlation_id"]) for f in frames] == [
        ("ApiVersions", 3, 0), ("Metadata", 1, 1), ("InitProducerId", 4, 2),
        ("AddPartitionsToTxn", 3, 3), ("Produce", 3, 4), ("Fetch", 4, 5), ("EndTxn", 3, 6)]
    for f in frames:
        assert f["connection"] == CONN
        assert f["complete"] is True and f["decode_error"] is None
        assert f["error_codes"] == ""
        assert f["request_frame"] < f["response_frame"]
        assert f["latency_ms"] > 0
    produce = frames[4]
    assert (produce["transactional_id"], produce["acks"], produce["producer_id"],
            produce["partitions"]) == ("tx-orders", -1, kmsgs.PID, "orders-0,audit-1")
    assert frames[6]["committed"] is True

    batches = sorted(baseline["batch"], key=lambda r: (r["source_kind"], r["topic"], r["base_offset"]))
    assert [(b["source_kind"], b["topic"], b["partition"], b["codec"], b["record_count"],
             b["control_type"]) for b in batches] == [
        ("fetch", "orders", 0, "none", 3, None),
        ("fetch", "orders", 0, "none", 1, "ABORT"),
        ("fetch", "orders", 0, "none", 4, None),
        ("produce", "audit", 1, "gzip", 5, None),
        ("produce", "orders", 0, "none", 2, None),
    ]
    assert all(b["crc_ok"] for b in batches)
    prod = [b for b in batches if b["source_kind"] == "produce"]
    assert {(b["topic"], b["response_base_offset"], b["producer_id"], b["producer_epoch"],
             b["base_sequence"], b["transactional_id"], b["correlation_id"]) for b in prod} == {
        ("orders", 100, kmsgs.PID, kmsgs.EPOCH, 0, "tx-orders", 4),
        ("audit", 7, kmsgs.PID, kmsgs.EPOCH, 10, "tx-orders", 4)}
    (fp,) = baseline["fetch_partition"]
    assert (fp["high_watermark"], fp["last_stable_offset"], fp["aborted_transactions"],
            fp["batch_count"], fp["isolation_level"]) == (48, 40, "7@40", 3, "read_committed")
    assert [e["event"] for e in sorted(baseline["txn_event"], key=lambda e: e["position"])] == [
        "INIT_PRODUCER_ID", "ADD_PARTITIONS", "END_TXN"]

    (c,) = baseline["connection"]
    sizes = [sum(len(b) for d, b in messages if d == x) for x in (0, 1)]
    assert (c["client"], c["server"], c["protocol"], c["syn_seen"], c["close_reason"]) == (
        "10.0.0.1:40001", "10.0.0.2:9092", "kafka", True, "fin")
    assert (c["bytes_to_server"], c["bytes_to_client"]) == tuple(sizes)
    assert (c["requests"], c["responses"], c["unanswered"], c["gaps"]) == (7, 7, 0, 0)
    assert "decode_issue" not in baseline


DELIVERIES = {
    "byte-by-byte": dict(segment=1),
    "segments-of-7": dict(segment=7),
    "random-split-1": dict(split_seed=1),
    "random-split-2": dict(split_seed=2),
    "random-split-3": dict(split_seed=3),
    "out-of-order": dict(segment=40, reorder_seed=5),
    "random-split-out-of-order": dict(split_seed=6, reorder_seed=6),
    "retransmissions": dict(segment=40, retransmit_seed=7),
    "out-of-order-and-retransmissions": dict(split_seed=8, reorder_seed=8, retransmit_seed=8),
}


@pytest.mark.parametrize("how", DELIVERIES)
def test_every_delivery_gives_the_same_rows(how, messages, baseline, tmp_path):
    path = tmp_path / f"{how}.pcap"
    pkts = write_capture(path, Conn(messages), **DELIVERIES[how])
    rows = decode_rows(path)
    _same_as_baseline(rows, baseline)
    (c,) = rows["connection"]
    # the row is written at the close (the second FIN): the last ACK comes after it
    assert c["packets"] == len(pkts) and c["close_reason"] == "fin"  # the ACK after the FIN counts
    if "retransmit_seed" in DELIVERIES[how]:
        assert c["retransmissions"] > 0 and c["conflicts"] == 0
    if how == "byte-by-byte":
        assert c["packets"] > sum(len(b) for _, b in messages)


def test_request_and_response_frames_point_at_their_last_packet(messages, tmp_path):
    """A frame's number is the packet that carried its last byte (here: byte by byte)."""
    path = tmp_path / "bytes.pcap"
    pkts = write_capture(path, Conn(messages), segment=1)
    rows = decode_rows(path)
    last_packet = {}
    for n, (p, _) in enumerate(pkts, 1):
        if p.seg is not None:
            for i in p.seg.messages:
                last_packet[i] = n
    _, names = kmsgs.conversation()
    by_api = {f["api_name"]: f for f in rows["frame"]}
    assert by_api["Produce"]["request_frame"] == last_packet[names["request produce"]]
    assert by_api["Produce"]["response_frame"] == last_packet[names["response produce"]]
    assert by_api["Fetch"]["response_frame"] == last_packet[names["response fetch"]]
    assert by_api["Produce"]["request_ts"] == pytest.approx(1700000000 + 0.001 * (last_packet[names["request produce"]] - 1))


# ---- link layers, address families, capture formats ------------------------------------------


def test_ipv6(messages, baseline, tmp_path):
    path = tmp_path / "v6.pcap"
    write_capture(path, Conn(messages, client=("::1", 40001), server=("::1", 9092)), ipv6=True,
                  split_seed=11)
    rows = decode_rows(path)
    _same_as_baseline(rows, baseline, connection="[::1]:40001 -> [::1]:9092")
    (c,) = rows["connection"]
    assert (c["connection"], c["client"], c["server"]) == (
        "[::1]:40001 -> [::1]:9092", "[::1]:40001", "[::1]:9092")
    assert {f["connection"] for f in rows["frame"]} == {"[::1]:40001 -> [::1]:9092"}


def test_ipv6_global_addresses_over_vlan(messages, baseline, tmp_path):
    path = tmp_path / "v6vlan.pcap"
    conn = "[fd00::1]:40001 -> [fd00:0:0:1::2]:9092"
    write_capture(path, Conn(messages, client=("fd00::1", 40001), server=("fd00:0:0:1::2", 9092)),
                  ipv6=True, vlan=7, segment=50)
    _same_as_baseline(decode_rows(path), baseline, connection=conn)


@pytest.mark.parametrize("variant", ["vlan", "sll", "sll-ipv4-random"])
def test_link_layers(variant, messages, baseline, tmp_path):
    path = tmp_path / f"{variant}.pcap"
    if variant == "vlan":
        write_capture(path, Conn(messages), vlan=100, segment=33)
    else:
        write_capture(path, Conn(messages), link="sll",
                      **(dict(split_seed=12) if variant.endswith("random") else {}))
    _same_as_baseline(decode_rows(path), baseline)


def test_pcapng_with_two_interfaces(messages, baseline, tmp_path):
    """Two connections, one per interface (Ethernet and Linux SLL), packets interleaved."""
    path = tmp_path / "two.pcapng"
    other = Conn(messages, client=("10.0.0.3", 40002), iface=1)
    write_capture(path, [Conn(messages), other], fmt="pcapng", interleave=True, segment=64)
    data = path.read_bytes()
    assert data.count(b"\x01\x00\x00\x00") >= 2  # (sanity) more than one IDB written
    rows = decode_rows(path)
    assert len(rows["connection"]) == 2
    by_conn = {}
    for kind in COMPARED:
        for r in rows.get(kind, []):
            by_conn.setdefault(r["connection"], {}).setdefault(kind, []).append(r)
    assert set(by_conn) == {CONN, "10.0.0.3:40002 -> 10.0.0.2:9092"}
    for name, got in by_conn.items():
        for kind in COMPARED:
            want = content(baseline.get(kind, []))
            for r in want:
                r["connection"] = name
            assert content(got.get(kind, [])) == content(want), (name, kind)
    assert not rows.get("decode_issue")


def test_pcapng_interfaces_really_differ(messages, tmp_path):
    from kaudit.capture import open_capture

    path = tmp_path / "two.pcapng"
    write_capture(path, [Conn(messages), Conn(messages, client=("10.0.0.3", 40002), iface=1)],
                  fmt="pcapng", interleave=True)
    cap = open_capture(path.read_bytes())
    linktypes = {lt for _, _, lt, *_ in cap.records()}
    assert linktypes == {1, 113}


def test_nanosecond_pcap(messages, baseline, tmp_path):
    """Nanosecond timestamps keep their nanoseconds (times near the epoch, where a float can)."""
    path = tmp_path / "ns.pcap"
    pkts = write_capture(path, Conn(messages), fmt="pcap-ns", t0="1000.000000001",
                         step="0.000000250", segment=100)
    rows = decode_rows(path)
    _same_as_baseline(rows, baseline)
    assert path.read_bytes()[:4] == bytes.fromhex("4d3cb2a1")
    first = {f["api_name"]: f for f in rows["frame"]}["ApiVersions"]
    n = first["request_frame"]
    assert first["request_ts"] == pytest.approx(1000.000000001 + (n - 1) * 250e-9, abs=1e-10)
    assert first["request_ts"] != pytest.approx(round(first["request_ts"], 6), abs=1e-10)
    (c,) = rows["connection"]
    assert c["first_ts"] == pytest.approx(1000.000000001, abs=1e-10)
    assert c["packets"] == len(pkts)  # the last ACK after the FIN counts too


def test_microsecond_and_pcapng_times_agree(messages, tmp_path):
    """The same packets in pcap and pcapng: the same rows, frame numbers and times included
    (scapy's pcapng writer truncates float seconds to microseconds: 1 µs of slack)."""
    a, b = tmp_path / "us.pcap", tmp_path / "us.pcapng"
    write_capture(a, Conn(messages), t0="1700000000.5")
    write_capture(b, Conn(messages), t0="1700000000.5", fmt="pcapng")
    ra, rb = decode_rows(a), decode_rows(b)
    times = {"request_ts", "response_ts", "latency_ms", "ts", "first_ts", "last_ts"}
    for kind in COMPARED + ("connection",):
        assert content(ra[kind], drop=times | {"source"}) == content(rb[kind], drop=times | {"source"})
        for x, y in zip(ra[kind], rb[kind]):
            for k in times & set(x):
                if x[k] is not None:
                    assert y[k] == pytest.approx(x[k], abs=2e-6 if k != "latency_ms" else 2e-3), k
