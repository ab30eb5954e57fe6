"""Link -> IP -> TCP decoding for every supported link type, crafted with scapy."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP, IPOption_RR
from scapy.layers.inet6 import (
    IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting,
)
from scapy.layers.l2 import (
    ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether, Loopback, LoopbackOpenBSD,
)
from scapy.utils import PcapWriter

from kaudit.capture import ACK, FIN, PSH, RST, SYN, CaptureStreams, LinkDecoder, iter_packets
from kaudit.capture.tcp import StreamData

PAYLOAD = b"kafka-bytes-" * 7
ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
TCP4 = IP(src="192.168.1.10", dst="10.20.30.40") / TCP(sport=51000, dport=9092, seq=7, ack=9,
                                                         flags="PA") / PAYLOAD
TCP6 = IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP(sport=51000, dport=9092, seq=7, ack=9,
                                                         flags="PA") / PAYLOAD


def decode(linktype, frame, origlen=None):
    dec = LinkDecoder()
    return dec.decode(linktype, memoryview(bytes(frame)), origlen), dec


def check(seg, v6=False):
    assert seg is not None
    assert (seg.src, seg.dst) == (("2001:db8::1", "2001:db8::2") if v6 else
                                  ("192.168.1.10", "10.20.30.40"))
    assert (seg.sport, seg.dport, seg.seq, seg.ack) == (51000, 9092, 7, 9)
    assert seg.flags & (PSH | ACK) == PSH | ACK and not seg.flags & (SYN | FIN | RST)
    assert bytes(seg.payload) == PAYLOAD and seg.truncated == 0


CASES = [
    ("ethernet", 1, ETH / TCP4, False),
    ("ethernet-ipv6", 1, ETH / TCP6, False),
    ("802.1Q", 1, ETH / Dot1Q(vlan=42) / TCP4, False),
    ("QinQ 802.1ad", 1, Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=0x88A8)
     / Dot1AD(vlan=100) / Dot1Q(vlan=42) / TCP4, False),
    ("QinQ 0x9100", 1, Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=0x9100)
     / Dot1Q(vlan=100) / Dot1Q(vlan=42) / TCP6, True),
    ("sll", 113, CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6) / TCP4, False),
    ("sll-ipv6", 113, CookedLinux(proto=0x86DD) / TCP6, True),
    ("sll2", 276, CookedLinuxV2(proto=0x0800) / TCP4, False),
    ("sll2-ipv6", 276, CookedLinuxV2(proto=0x86DD) / TCP6, True),
    ("null-le", 0, Loopback(type=2) / TCP4, False),
    ("null-ipv6-freebsd", 0, Loopback(type=28) / TCP6, True),
    ("null-ipv6-darwin", 0, Loopback(type=30) / TCP6, True),
    ("loop-be", 108, LoopbackOpenBSD(type=2) / TCP4, False),
    ("loop-ipv6", 108, LoopbackOpenBSD(type=24) / TCP6, True),
    ("raw-101", 101, TCP4, False),
    ("raw-101-ipv6", 101, TCP6, True),
    ("raw-12", 12, TCP4, False),
    ("raw-14", 14, TCP6, True),
    ("ipv4-228", 228, TCP4, False),
    ("ipv6-229", 229, TCP6, True),
]


@pytest.mark.parametrize("name,linktype,pkt,v6", CASES, ids=[c[0] for c in CASES])
def test_link_types(name, linktype, pkt, v6):
    v6 = v6 or "ipv6" in name
    seg, dec = decode(linktype, pkt)
    check(seg, v6)


def test_null_header_in_big_endian_host_order():
    seg, _ = decode(0, b"\0\0\0\x02" + bytes(TCP4))
    check(seg)


@pytest.mark.parametrize("name,linktype,pkt,v6", CASES, ids=[c[0] for c in CASES])
def test_every_link_type_through_a_capture_file_and_the_fused_loop(tmp_path, name, linktype, pkt, v6):
    path = tmp_path / "x.pcap"
    with PcapWriter(str(path), linktype=linktype) as w:
        for _ in range(2):
            w.write(pkt)
    buf = path.read_bytes()
    cs = CaptureStreams(buf)
    data = [e for e in cs.events() if isinstance(e, StreamData)]
    assert cs.tcp_packets == 2
    # the second copy is an identical retransmission: dropped
    assert [bytes(e.data) for e in data] == [PAYLOAD]


def test_ipv6_extension_headers_are_skipped():
    pkt = (IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrHopByHop()
           / IPv6ExtHdrRouting(addresses=["2001:db8::99"]) / IPv6ExtHdrDestOpt()
           / IPv6ExtHdrFragment(offset=0, m=0, id=5)
           / TCP(sport=51000, dport=9092, seq=7, ack=9, flags="PA") / PAYLOAD)
    seg, dec = decode(229, pkt)
    check(seg, v6=True)
    assert dec.first_fragments == 1


def test_ipv6_non_first_fragment_is_skipped():
    pkt = (IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrFragment(offset=100, m=0, nh=6)
           / (b"\0" * 40))
    seg, dec = decode(229, pkt)
    assert seg is None and dec.reason == "IP fragment (not the first)"


def test_ipv4_options_and_tcp_options():
    pkt = (IP(src="192.168.1.10", dst="10.20.30.40", options=[IPOption_RR(routers=["1.2.3.4"])])
           / TCP(sport=51000, dport=9092, seq=7, ack=9, flags="PA",
                 options=[("MSS", 1460), ("NOP", None), ("WScale", 7), ("Timestamp", (1, 2)),
                          ("SAckOK", b"")]) / PAYLOAD)
    raw = bytes(pkt)
    assert raw[0] & 15 > 5 and raw[(raw[0] & 15) * 4 + 12] >> 4 > 5
    seg, _ = decode(228, pkt)
    check(seg)


def test_ipv4_fragments():
    whole = IP(src="192.168.1.10", dst="10.20.30.40", id=77) / TCP(
        sport=51000, dport=9092, seq=7, ack=9, flags="PA") / (b"z" * 200)
    first, second = whole.fragment(fragsize=64)[:2]
    seg, dec = decode(228, first)
    assert seg is not None and bytes(seg.payload) == b"z" * (64 - 20)
    assert dec.first_fragments == 1
    seg, dec = decode(228, second)
    assert seg is None and dec.dropped == {"IP fragment (not the first)": 1}


def test_ethernet_padding_and_fcs_are_not_payload():
    pkt = ETH / IP(src="192.168.1.10", dst="10.20.30.40") / TCP(sport=1, dport=2, flags="A")
    frame = bytes(pkt) + b"\0" * 6 + b"FCS!"  # padded to 60 bytes + a frame check sequence
    seg, _ = decode(1, frame)
    assert seg is not None and bytes(seg.payload) == b"" and seg.truncated == 0


@pytest.mark.parametrize("cut", [0, 10, len(PAYLOAD) - 1])
def test_snaplen_truncation_is_counted_not_invented(cut):
    frame = bytes(ETH / TCP4)
    keep = len(frame) - len(PAYLOAD) + cut
    seg, _ = decode(1, frame[:keep], origlen=len(frame))
    assert bytes(seg.payload) == PAYLOAD[:cut]
    assert seg.truncated == len(PAYLOAD) - cut


def test_snaplen_cutting_tcp_options():
    pkt = ETH / IP(src="192.168.1.10", dst="10.20.30.40") / TCP(
        sport=51000, dport=9092, seq=7, ack=9, flags="PA", options=[("Timestamp", (1, 2))] * 3) / PAYLOAD
    frame = bytes(pkt)
    seg, _ = decode(1, frame[:14 + 20 + 24], origlen=len(frame))
    assert seg.seq == 7 and bytes(seg.payload) == b"" and seg.truncated == len(PAYLOAD)


def test_tso_total_length_zero_uses_the_frame_length():
    frame = bytearray(bytes(ETH / TCP4))
    struct.pack_into("!H", frame, 16, 0)
    seg, _ = decode(1, frame)
    check(seg)


def test_flags():
    for flags, bits in (("S", SYN), ("SA", SYN | ACK), ("F", FIN), ("R", RST), ("FPA", FIN | PSH | ACK)):
        seg, _ = decode(228, IP() / TCP(flags=flags))
        assert seg.flags == bits


@pytest.mark.parametrize("pkt,linktype,reason", [
    (ETH / ARP(), 1, "not IP"),
    (ETH / IP() / UDP() / b"x", 1, "not TCP"),
    (IPv6() / UDP(), 229, "not TCP"),
    (b"\x02" * 10, 1, "malformed: short ethernet header"),
    (ETH / Dot1Q(), 1, "not IP"),
    (b"\x45" + b"\0" * 10, 228, "malformed: short IPv4 header"),
    (b"\x46" + b"\0" * 30, 101, "not TCP"),
    (b"\x70" * 30, 101, "not IP"),
    (IP() / TCP(dataofs=3), 228, "malformed: TCP data offset < 5"),
    (b"\0" * 40, 147, "unsupported link type 147"),
])
def test_not_tcp_returns_none_with_a_reason(pkt, linktype, reason):
    seg, dec = decode(linktype, pkt)
    assert seg is None and dec.reason == reason and dec.dropped == {reason: 1}


def test_tcp_header_cut_by_the_snaplen_is_dropped():
    frame = bytes(ETH / TCP4)
    seg, dec = decode(1, frame[:14 + 20 + 10], origlen=len(frame))
    assert seg is None and dec.reason == "truncated TCP header"


def test_address_strings_are_cached():
    dec = LinkDecoder()
    a = dec.decode(228, memoryview(bytes(TCP4)))
    b = dec.decode(228, memoryview(bytes(TCP4)))
    assert a.src is b.src and a.dst is b.dst


def test_scapy_and_capture_file_agree_on_many_packets(tmp_path):
    pkts = [ETH / IP(src=f"10.0.{i}.1", dst="10.9.9.9") / TCP(sport=1000 + i, dport=9092, seq=i)
            / (b"p" * i) for i in range(50)]
    path = tmp_path / "x.pcap"
    with PcapWriter(str(path), linktype=1) as w:
        for p in pkts:
            w.write(p)
    dec = LinkDecoder()
    for raw, p in zip(iter_packets(path.read_bytes()), pkts):
        seg = dec.decode(raw.linktype, raw.data, raw.origlen)
        assert (seg.src, seg.sport, seg.seq, bytes(seg.payload)) == (
            p[IP].src, p[TCP].sport, p[TCP].seq, bytes(p[TCP].payload))
