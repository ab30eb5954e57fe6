"""pcap/pcapng readers: formats, byte orders, resolutions, interfaces, sections, damage."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.utils import PcapWriter, RawPcapNgReader

from kaudit.capture import CaptureStreams, iter_packets, open_capture
from kaudit.protocol.errors import DecodeError, Truncated
from tests.capture.craft import (
    A, Flow, ether, pcapng_block, pcapng_epb, pcapng_idb, pcapng_opb, pcapng_shb, pcapng_spb,
    tcp_ipv4, write_pcap,
)


def _scapy_frames(n=5):
    return [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
            / TCP(sport=40000, dport=9092, flags="PA", seq=100 + i) / (b"x" * (i + 1)) for i in range(n)]


@pytest.mark.parametrize("nano", [False, True])
def test_scapy_written_pcap_microsecond_and_nanosecond(tmp_path, nano):
    pkts = _scapy_frames()
    for i, p in enumerate(pkts):
        p.time = 1_700_000_000 + i + (0.123456789 if nano else 0.123456)
    path = tmp_path / "x.pcap"
    with PcapWriter(str(path), nano=nano, linktype=1) as w:
        for p in pkts:
            w.write(p)
    buf = path.read_bytes()
    cap = open_capture(buf)
    assert cap.format == "pcap" and cap.nanosecond == nano and cap.linktype == 1
    got = list(cap)
    assert [p.frame_no for p in got] == [1, 2, 3, 4, 5]
    for i, (g, p) in enumerate(zip(got, pkts)):
        assert bytes(g.data) == bytes(p)
        assert g.caplen == g.origlen == len(bytes(p))
        assert g.ts == pytest.approx(1_700_000_000 + i + (0.123456789 if nano else 0.123456), abs=1e-7)
    assert cap.issues == []


@pytest.mark.parametrize("nano", [False, True])
def test_big_endian_pcap_written_by_hand(nano):
    frames = [ether(tcp_ipv4("10.0.0.1", "10.0.0.2", 1, 2, 10, 0, A, b"abc" * i)) for i in range(4)]
    units = 10 ** 9 if nano else 10 ** 6
    le = write_pcap([((1000 + i, 7 * i), f) for i, f in enumerate(frames)], nanosecond=nano)
    be = write_pcap([((1000 + i, 7 * i), f) for i, f in enumerate(frames)], nanosecond=nano,
                    big_endian=True)
    assert le[:4] != be[:4]
    for buf in (le, be):
        got = list(iter_packets(buf))
        assert [bytes(p.data) for p in got] == frames
        assert [p.ts for p in got] == [1000 + i + 7 * i / units for i in range(4)]


def test_nanosecond_timestamps_as_float_seconds():
    # A float holds ~0.24 µs at 2026 epochs: nanoseconds are rounded, microseconds kept.
    f = ether(tcp_ipv4("10.0.0.1", "10.0.0.2", 1, 2, 10, 0, A))
    buf = write_pcap([((1_795_234_000, 999_999_123), f), ((1_795_234_001, 1_000_456), f)],
                     nanosecond=True)
    a, b = iter_packets(buf)
    assert a.ts == pytest.approx(1_795_234_000.999999123, abs=2.5e-7)
    assert b.ts - a.ts == pytest.approx(0.001001333, abs=5e-7)


def _two_interface_pcapng(big_endian=False):
    """Section 1: Ethernet at ns resolution + raw IPv4 at 2^-10 s; EPB, OPB, SPB, unknown blocks.
    Section 2 (other byte order): one SLL interface with if_tsoffset."""
    be = big_endian
    eth = ether(tcp_ipv4("10.0.0.1", "10.0.0.2", 40000, 9092, 1, 0, A, b"eth"))
    raw = tcp_ipv4("10.0.0.3", "10.0.0.4", 40001, 9092, 1, 0, A, b"raw")
    sll = b"\0\0\x03\x04\0\x06" + b"\0" * 8 + b"\x08\x00" + raw
    s1 = (pcapng_shb(be) + pcapng_idb(1, tsresol=9, snaplen=262144, big_endian=be, name="eth0")
          + pcapng_idb(228, tsresol=0x80 | 10, big_endian=be)
          + pcapng_block(4, b"\0" * 8, be)  # name resolution block
          + pcapng_epb(0, 1_700_000_000_123_456_789, eth, big_endian=be, comment="hello")
          + pcapng_epb(1, (1_700_000_001 << 10) + 512, raw, big_endian=be)
          + pcapng_block(5, b"\0" * 12, be)  # interface statistics block
          + pcapng_opb(0, 1_700_000_002_000_000_000, eth, big_endian=be)
          + pcapng_block(0x0BAD, b"custom!!", be)
          + pcapng_spb(eth, big_endian=be))
    s2 = (pcapng_shb(not be) + pcapng_idb(113, big_endian=not be, tsoffset=100)
          + pcapng_epb(0, 1_700_000_003_000_001, sll, big_endian=not be))
    return s1 + s2, eth, raw, sll


@pytest.mark.parametrize("big_endian", [False, True])
def test_pcapng_interfaces_resolutions_blocks_and_sections(big_endian):
    buf, eth, raw, sll = _two_interface_pcapng(big_endian)
    cap = open_capture(buf)
    assert cap.format == "pcapng"
    got = list(cap)
    assert cap.issues == []
    assert [p.linktype for p in got] == [1, 228, 1, 1, 113]
    assert [p.iface for p in got] == [0, 1, 0, 0, 2]  # interface ids are global across sections
    assert [bytes(p.data) for p in got] == [eth, raw, eth, eth, sll]
    assert got[0].ts == pytest.approx(1_700_000_000.123456789, abs=1e-6)
    assert got[1].ts == 1_700_000_001.5
    assert got[2].ts == 1_700_000_002.0
    assert got[3].ts == got[2].ts  # a simple packet block has no time: the previous one is kept
    assert got[4].ts == pytest.approx(1_700_000_003.000001 + 100)
    assert [i.name for i in cap.interfaces] == ["eth0", None, None]
    assert cap.sections == 2
    # every packet decodes to TCP through its own interface's link type
    cs = CaptureStreams(buf)
    events = list(cs.events())
    assert cs.packets == 5 and cs.tcp_packets == 5 and not cs.dropped
    assert len([e for e in events if type(e).__name__ == "ConnOpen"]) == 2


def test_pcapng_agrees_with_scapy_reader(tmp_path):
    buf, *_ = _two_interface_pcapng()
    first_section = buf[:buf.index(pcapng_shb(True))]
    path = tmp_path / "x.pcapng"
    path.write_bytes(first_section)
    theirs = []
    with RawPcapNgReader(str(path)) as r:
        for data, meta in r:
            theirs.append((bytes(data), meta.linktype))
    ours = [(bytes(p.data), p.linktype) for p in iter_packets(first_section)]
    assert ours == theirs


def test_not_a_capture():
    for junk in (b"", b"abc", b"GIF89a" + b"\0" * 40, b"\0" * 100):
        with pytest.raises(DecodeError, match="not a pcap or pcapng file"):
            open_capture(junk)
    with pytest.raises(Truncated):
        open_capture(b"\xd4\xc3\xb2\xa1\x02\x00")
    with pytest.raises(DecodeError):
        open_capture(b"\x0a\x0d\x0d\x0a" + b"\0" * 30)  # bad byte-order magic


def _small_flow_frames():
    f = Flow()
    frames = f.handshake() + [f.send(0, b"hello" * 20), f.ack(1), f.send(1, b"world" * 30),
                              f.fin(0), f.fin(1), f.ack(0)]
    return frames


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_truncated_at_every_position(kind):
    frames = _small_flow_frames()
    if kind == "pcap":
        buf = write_pcap([(1000.0 + i, fr) for i, fr in enumerate(frames)])
    else:
        buf = pcapng_shb() + pcapng_idb(1) + b"".join(
            pcapng_epb(0, (1000 + i) * 10 ** 6, fr) for i, fr in enumerate(frames))
    full = [bytes(p.data) for p in iter_packets(buf)]
    assert full == frames
    for cut in range(len(buf)):
        try:
            cap = open_capture(buf[:cut])
        except DecodeError:
            continue
        got = [bytes(p.data) for p in cap]
        # a prefix of the packets, the last one possibly cut short
        assert len(got) <= len(full)
        for i, g in enumerate(got):
            assert full[i][:len(g)] == g
            if i < len(got) - 1:
                assert g == full[i]
        # a cut inside a record is always reported, with its file position
        if cap.issues:
            assert all(0 <= i.position <= cut for i in cap.issues)
            assert {i.kind for i in cap.issues} <= {"truncated", "corrupt"}
        else:
            assert not got or got[-1] == full[len(got) - 1]
        # and the whole layer never raises on it
        for _ in CaptureStreams(buf[:cut]).events():
            pass


def test_cut_packet_is_yielded_with_what_is_there():
    frames = _small_flow_frames()
    buf = write_pcap([(1000.0 + i, fr) for i, fr in enumerate(frames)])
    cut = len(buf) - 10
    cap = open_capture(buf[:cut])
    got = list(cap)
    assert len(got) == len(frames)
    assert got[-1].caplen == len(frames[-1]) - 10 and got[-1].origlen == len(frames[-1])
    assert [i.kind for i in cap.issues] == ["truncated"]


def test_corrupt_record_header_resynchronises():
    frames = [ether(tcp_ipv4("10.0.0.1", "10.0.0.2", 1, 2, 10 + 100 * i, 0, A, bytes([65 + i]) * 100))
              for i in range(6)]
    buf = bytearray(write_pcap([(1000.0 + i, fr) for i, fr in enumerate(frames)]))
    rec2 = 24 + (16 + len(frames[0])) * 2  # third record header
    struct.pack_into("<I", buf, rec2 + 8, 0x7FFFFFF0)  # absurd caplen
    cap = open_capture(bytes(buf))
    got = [bytes(p.data) for p in cap]
    assert got == frames[:2] + frames[3:]
    (issue,) = cap.issues
    assert issue.kind == "corrupt" and issue.position == rec2 and issue.frame_no == 2
    assert issue.skipped == 16 + len(frames[2])


def test_corrupt_pcapng_block_resynchronises():
    frames = [ether(tcp_ipv4("10.0.0.1", "10.0.0.2", 1, 2, 10, 0, A, bytes([65 + i]) * 50))
              for i in range(4)]
    blocks = [pcapng_epb(0, i, fr) for i, fr in enumerate(frames)]
    head = pcapng_shb() + pcapng_idb(1)
    buf = bytearray(head + b"".join(blocks))
    pos = len(head) + len(blocks[0])
    struct.pack_into("<I", buf, pos + 4, 0xFFFFFF00)  # absurd block length
    cap = open_capture(bytes(buf))
    got = [bytes(p.data) for p in cap]
    assert got == [frames[0]] + frames[2:]
    assert [(i.kind, i.position) for i in cap.issues] == [("corrupt", pos)]


def test_unknown_interface_and_short_blocks_are_issues_not_exceptions():
    fr = ether(tcp_ipv4("10.0.0.1", "10.0.0.2", 1, 2, 10, 0, A, b"x"))
    buf = pcapng_shb() + pcapng_idb(1) + pcapng_epb(5, 0, fr) + pcapng_epb(0, 0, fr)
    cap = open_capture(buf)
    assert len(list(cap)) == 1
    assert "unknown interface 5" in cap.issues[0].message
