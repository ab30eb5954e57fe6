"""Damaged input gives structured issues, never other exceptions: mutated real captures through
the whole layer, and random bytes as link/IP/TCP headers."""

from __future__ import annotations

import random

import pytest

from kaudit.capture import CaptureStreams, LinkDecoder, StreamData, iter_packets
from kaudit.capture.link import SUPPORTED_LINKTYPES
from kaudit.protocol.errors import DecodeError
from tests.capture.craft import check_invariants, event_tuple, run

SAMPLES = {  # capture: mutations
    "real-kafka-3.0.2/pcap/07-acks0-confluent.pcap": 150,
    "real-kafka-3.0.2/pcap/01-idem-aiokafka.pcapng": 150,
    "public/nDPI/kafka.pcapng": 300,
    "public/go-sniffer/kafka.pcap": 300,
    "public/deepflow/01-fetch-v12-unknown.pcap": 200,
}


def mutate(buf: bytes, rng: random.Random) -> bytes:
    b = bytearray(buf)
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        pos = rng.randrange(len(b)) if b else 0
        if op < 0.4:  # flip bytes
            for _ in range(rng.randint(1, 4)):
                if b:
                    b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op < 0.6:  # overwrite a run with random bytes
            n = rng.randint(1, 64)
            b[pos:pos + n] = bytes(rng.getrandbits(8) for _ in range(n))
        elif op < 0.7:  # an absurd length somewhere
            b[pos:pos + 4] = rng.choice([b"\xff\xff\xff\xff", b"\0\0\0\0", b"\x00\x00\x01\x00"])
        elif op < 0.8:  # delete a chunk
            del b[pos:pos + rng.randint(1, 200)]
        elif op < 0.9:  # duplicate a chunk
            n = rng.randint(1, 300)
            b[pos:pos] = b[pos:pos + n]
        else:  # cut the file
            del b[pos:]
    return bytes(b)


def run_damaged(buf):
    try:
        cs = CaptureStreams(buf)
    except DecodeError:
        return None
    events = list(cs.events())
    check_invariants(events)
    assert [event_tuple(e) for e in events] == [event_tuple(e) for e in run(buf)[0]]
    for i in cs.issues:
        assert i.kind in ("truncated", "corrupt", "unsupported") and 0 <= i.position <= len(buf)
    return cs


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_mutated_corpus_captures(corpus, name):
    original = (corpus / name).read_bytes()
    rng = random.Random(name)
    issues = 0
    for _ in range(SAMPLES[name]):
        cs = run_damaged(mutate(original, rng))
        if cs is not None:
            issues += bool(cs.issues)
    assert issues > 0  # the mutations do hit the file structure


def test_damaged_capture_keeps_the_packets_around_the_damage(corpus):
    original = (corpus / "real-kafka-3.0.2/pcap/07-acks0-confluent.pcap").read_bytes()
    full = [bytes(p.data) for p in iter_packets(original)]
    b = bytearray(original)
    mid = len(b) // 2
    b[mid:mid + 7] = b"\xee" * 7  # a record header or packet bytes in the middle
    issues = []
    got = [bytes(p.data) for p in iter_packets(bytes(b), issues)]
    # everything but at most the damaged record (and its neighbour) comes through
    assert len(got) >= len(full) - 2
    assert len([g for g in got if g not in full]) <= 1


def test_random_bytes_as_packets():
    rng = random.Random(7)
    dec = LinkDecoder()
    for _ in range(3000):
        lt = rng.choice(sorted(SUPPORTED_LINKTYPES))
        n = rng.randint(0, 120)
        data = bytearray(rng.getrandbits(8) for _ in range(n))
        if n > 20 and rng.random() < 0.7:  # make the IP header more often valid-looking
            ip = {1: 14, 113: 16, 276: 20, 0: 4, 108: 4}.get(lt, 0)
            if ip < n:
                data[ip] = rng.choice([0x45, 0x46, 0x4F, 0x60])
        seg = dec.decode(lt, memoryview(bytes(data)), rng.choice([None, n, n + 100, 0]))
        if seg is not None:
            assert len(seg.payload) <= n and seg.truncated >= 0


def test_random_headers_through_the_whole_layer():
    """Valid record framing with random link/IP/TCP bytes inside: the fused loop and the generic
    path must cope (and never raise)."""
    from tests.capture.craft import write_pcap

    rng = random.Random(11)
    frames = []
    for _ in range(3000):
        tags = rng.choice([b"", b"", b"\x81\x00\x00\x01", b"\x88\xa8\x00\x01\x81\x00\x00\x02"])
        f = bytearray(b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01" + tags + b"\x08\x00")
        ip = len(f)
        f += bytes([0x45]) + bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80)))
        if len(f) > ip + 9 and rng.random() < 0.8:
            f[ip + 9] = 6  # protocol TCP
            f[ip + 6] &= 0x40  # mostly not a fragment
            if len(f) > ip + 13:  # the same few endpoints again and again
                f[ip + 12:ip + 20] = rng.choice([b"\x0a\0\0\x01\x0a\0\0\x02", b"\x0a\0\0\x02\x0a\0\0\x01"])
            if len(f) > ip + 24:
                f[ip + 20:ip + 24] = rng.choice([b"\x9c\x40\x23\x84", b"\x23\x84\x9c\x40"])
        frames.append(bytes(f))
    for lt in (1, 113):
        buf = write_pcap([(1000.0 + i, fr) for i, fr in enumerate(frames)], linktype=lt)
        cs = CaptureStreams(buf)
        events = list(cs.events())
        check_invariants(events)
        assert all(isinstance(e.data, memoryview) for e in events if isinstance(e, StreamData))
        assert [event_tuple(e) for e in events] == [event_tuple(e) for e in run(buf)[0]]


def test_random_tcp_segments_with_any_flags():
    """SYN/FIN/RST in any order and any sequence numbers on a few 4-tuples: only events."""
    from kaudit.capture import Reassembler, TcpSegment

    for seed in range(40):
        rng = random.Random(seed)
        r = Reassembler(max_buffer=rng.choice([300, 1 << 20]))
        ends = [("10.0.0.1", 1000), ("10.0.0.2", 9092), ("10.0.0.1", 1001)]
        events = []
        base = rng.getrandbits(32)
        for i in range(400):
            a, b = rng.sample(ends, 2)
            n = rng.choice([0, 0, 1, 10, 100])
            seg = TcpSegment(a[0], b[0], a[1], b[1],
                             (base + rng.randint(-3000, 3000)) & 0xFFFFFFFF,
                             (base + rng.randint(-3000, 3000)) & 0xFFFFFFFF,
                             rng.getrandbits(6), memoryview(bytes(n)), rng.choice([0, 0, 0, 50]))
            events += r.feed(seg, i + 1, float(i))
        events += r.flush()
        check_invariants(events)
