"""Every capture of ../shared/corpus parses fully and agrees with two independent readers: scapy's
raw pcap/pcapng readers (frame count, lengths, times, link type) and tshark's export (frame
number -> time, TCP ports, and tcp.stream <-> our connection ids, which checks port reuse)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from kaudit.capture.tcp import ACKED_UNSEEN
from scapy.utils import RawPcapNgReader, RawPcapReader

from kaudit.capture import (
    CaptureStreams, ConnClose, ConnOpen, LinkDecoder, Reassembler, StreamGap, open_capture,
)

GLOBS = ["real-kafka-3.0.2/pcap/*.pcap", "real-kafka-3.0.2/pcap/*.pcapng",
         "real-kafka-3.0.2-extra/*/*.pcap", "librdkafka-mock/pcap/*.pcap", "public/**/*.pcap",
         "public/**/*.pcapng"]


def captures(corpus: Path):
    found = sorted({p for g in GLOBS for p in corpus.glob(g)})
    assert len(found) >= 38
    return found


def read_tshark(path: Path):
    lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def _scapy_view(path: Path):
    reader = RawPcapNgReader if path.suffix == ".pcapng" else RawPcapReader
    out = []
    with reader(str(path)) as r:
        for data, meta in r:
            if path.suffix == ".pcapng":
                ts = ((meta.tshigh << 32) | meta.tslow) / meta.tsresol
                out.append((len(data), meta.wirelen, ts, meta.linktype))
            else:
                frac = 1e9 if r.nano else 1e6
                out.append((len(data), meta.wirelen, meta.sec + meta.usec / frac, r.linktype))
    return out


# Bytes a capture lost that only the peer's acknowledgement shows (tshark's TCP analysis: "ACKed
# segment that wasn't captured"): nDPI's sample keeps 5 of the first connection's packets, and the
# broker's answer in frame 5 acknowledges 44 client bytes (a second request) past the last kept.
LOST = {"public/nDPI/kafka.pcapng": [(0, 0, 69, 44, ACKED_UNSEEN)]}


def test_every_capture_parses_fully_and_agrees_with_scapy(corpus):
    total = 0
    for path in captures(corpus):
        buf = path.read_bytes()
        cap = open_capture(buf)
        ours = [(p.caplen, p.origlen, p.ts, p.linktype) for p in cap]
        assert cap.issues == [], path
        assert cap.skipped_bytes == 0
        theirs = _scapy_view(path)
        assert len(ours) == len(theirs), path
        for a, b in zip(ours, theirs):
            assert a[0] == b[0] and a[1] == b[1] and a[3] == b[3], path
            assert a[2] == pytest.approx(b[2], abs=1e-6), path
        cs = CaptureStreams(buf)
        events = list(cs.events())
        # only TCP in these captures, nothing lost on loopback
        assert cs.packets == len(ours) and cs.tcp_packets == len(ours), (path, cs.dropped)
        gaps = [(e.conn_id, e.direction, e.stream_offset, e.length, e.reason)
                for e in events if isinstance(e, StreamGap)]
        assert gaps == LOST.get(path.relative_to(corpus).as_posix(), []), path
        total += len(ours)
    assert total > 20000


def test_frames_ports_times_and_streams_agree_with_tshark(corpus):
    checked = 0
    for path in captures(corpus):
        tsv = path.with_name(path.name + ".tshark.tsv")
        if not tsv.exists():
            continue
        rows = read_tshark(tsv)  # tshark lists the frames that carry Kafka PDUs, not every frame
        buf = path.read_bytes()
        dec, r = LinkDecoder(), Reassembler()
        frames = {}
        first_ts = None
        for p in open_capture(buf):
            first_ts = p.ts if first_ts is None else first_ts
            seg = dec.decode(p.linktype, p.data, p.origlen)
            r.feed(seg, p.frame_no, p.ts)
            frames[p.frame_no] = (seg, p.ts, r.lookup(seg.src, seg.sport, seg.dst, seg.dport))
        streams = {}
        for row in rows:
            n = int(row["frame.number"])
            seg, ts, (conn_id, _d) = frames[n]
            assert (seg.sport, seg.dport) == (int(row["tcp.srcport"]), int(row["tcp.dstport"])), (path, n)
            if "frame.time_epoch" in row:
                assert ts == pytest.approx(float(row["frame.time_epoch"]), abs=2e-6)
            else:
                assert ts - first_ts == pytest.approx(float(row["frame.time_relative"]), abs=2e-6)
            assert len(seg.payload) > 0  # a Kafka PDU starts in a frame with payload
            streams.setdefault(int(row["tcp.stream"]), set()).add(conn_id)
            checked += 1
        # tshark's stream index and our connection id name the same connections
        assert all(len(v) == 1 for v in streams.values()), (path, streams)
        ours = [next(iter(v)) for v in streams.values()]
        assert len(set(ours)) == len(ours), path
    assert checked > 2000


def test_known_facts_of_the_public_captures(corpus):
    go = open_capture((corpus / "public/go-sniffer/kafka.pcap").read_bytes())
    assert go.linktype == 113 and len(list(go)) == 20
    cs = CaptureStreams((corpus / "public/go-sniffer/kafka.pcap").read_bytes())
    list(cs.events())
    assert cs.tcp_packets == 20

    df = open_capture((corpus / "public/deepflow/01-fetch-v12-unknown.pcap").read_bytes())
    assert df.nanosecond and df.snaplen == 2048
    pkts = list(df)
    assert all(p.caplen <= 2048 and p.caplen == p.origlen for p in pkts)  # the snaplen cut nothing

    nd = open_capture((corpus / "public/nDPI/kafka.pcapng").read_bytes())
    assert nd.format == "pcapng" and len(list(nd)) == 41


def test_packets_per_connection_agree_with_ndpi(corpus):
    """nDPI's result file lists each flow as `a <-> b [n pkts/.. bytes <-> m pkts/.. bytes]` (or
    `->` for one-way flows), `a` being the first sender, as our `a` is without a handshake."""
    path = corpus / "public/nDPI/kafka.pcapng"
    flow = re.compile(r"TCP (\S+):(\d+) <?-> (\S+):(\d+) .*?\[(\d+) pkts/\d+ bytes <?-> (\d+) pkts/")
    theirs = {}
    for line in path.with_name(path.name + ".nDPI-result.out").read_text().splitlines():
        m = flow.search(line)
        if m:
            a, b = (m[1], int(m[2])), (m[3], int(m[4]))
            theirs[(a, b)] = (int(m[5]), int(m[6]))
    assert sum(sum(v) for v in theirs.values()) == 41
    got = {}
    opens = {}
    for e in CaptureStreams(path.read_bytes()).events():
        if isinstance(e, ConnOpen):
            opens[e.conn_id] = (e.a, e.b)
        elif isinstance(e, ConnClose):
            a, b = opens[e.conn_id]
            got[(a, b)] = e.stats
    # read after the end: the last ACK after both FINs counts as a (late) packet of the connection
    assert {k: tuple(v.packets) for k, v in got.items()} == theirs
    assert got[(("127.0.0.1", 46136), ("127.0.0.1", 9092))].late_packets == [1, 0]
