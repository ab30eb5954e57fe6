"""Test helper: crafted packet captures of Kafka conversations, written with scapy.

A `Conn` is one TCP connection: a list of `(direction, bytes)` messages in the order they were
sent (direction 0: client -> server, 1: server -> client). Consecutive messages of one direction
form a burst (pipelined frames); every burst is cut into TCP data segments and followed by a
pure ACK of the peer. `write_capture` turns connections into a pcap/pcapng file; the options
cover the ways real captures differ:

    segment=N            at most N payload bytes per segment (1: byte by byte)
    split_seed=S         cut every burst at random points instead (seeded)
    reorder_seed=S       shuffle the segments of every burst (the ACK still follows the burst)
    retransmit_seed=S    send some segments twice (an identical copy later in the burst)
    drop=pred            leave out the data segments for which pred(Seg) is true (a lost packet)
    start=pred           the capture starts at the first packet for which pred(Pkt) is true
                         (no handshake; with a segment cut, the first bytes are missing)
    link="ether"|"sll"   Ethernet II or Linux cooked (SLL) link layer; vlan=ID adds an 802.1Q tag
    ipv6=True            IPv6 instead of IPv4
    fmt="pcap"|"pcap-ns"|"pcapng"   microsecond pcap, nanosecond pcap, pcapng
    Conn.iface=1         (pcapng) the connection is captured on a second interface, Linux SLL

Times: packets are 1 ms apart from `t0` (a float, or a string for exact nanosecond times).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal

from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import EDecimal, PcapNgWriter, PcapWriter

C2S, S2C = 0, 1


@dataclass
class Conn:
    messages: list  # [(direction, bytes)]
    client: tuple = ("10.0.0.1", 40001)
    server: tuple = ("10.0.0.2", 9092)
    handshake: bool = True
    fin: bool = True
    isn: tuple = (1000, 500000)
    iface: int = 0  # pcapng only: 1 = a second interface (Linux SLL)


@dataclass
class Seg:
    """One data segment: burst `burst` (index), segment `index` within it (before reordering),
    burst bytes [start, end), and the indices of the messages it carries bytes of."""

    conn: int
    burst: int
    index: int
    start: int
    end: int
    messages: tuple
    direction: int


@dataclass
class Pkt:
    conn: int
    kind: str  # syn | synack | ack | data | fin
    direction: int
    seg: Seg | None
    payload: bytes = b""
    flags: str = "A"
    seq: int = 0
    ack: int = 0
    iface: int = 0


def bursts(messages):
    """[(direction, bytes, (message indices))]: consecutive messages of a direction merged."""
    out = []
    for i, (d, data) in enumerate(messages):
        if out and out[-1][0] == d:
            out[-1] = (d, out[-1][1] + data, out[-1][2] + (i,))
        else:
            out.append((d, data, (i,)))
    return out


def _cuts(n, segment, rng):
    """Segment boundaries [(start, end)] of an n-byte burst."""
    if rng is not None:
        out, i = [], 0
        while i < n:
            k = rng.choice((1, 2, 3, 7, rng.randint(1, 64), rng.randint(1, 600), rng.randint(1, 1460)))
            out.append((i, min(n, i + k)))
            i += k
        return out
    size = segment or 1460
    return [(i, min(n, i + size)) for i in range(0, n, size)]


def conn_packets(ci, conn, *, segment=None, split_seed=None, reorder_seed=None,
                 retransmit_seed=None, drop=None):
    """The packets of one connection, in capture order (before `start` is applied)."""
    seq = list(conn.isn)  # next sequence number per direction
    out = []

    def pkt(kind, d, flags, payload=b"", seg=None, at=None):
        s = seq[d] if at is None else at
        ack = seq[1 - d] if "A" in flags else 0
        out.append(Pkt(ci, kind, d, seg, payload, flags, s, ack, conn.iface))

    if conn.handshake:
        pkt("syn", 0, "S")
        seq[0] += 1
        pkt("synack", 1, "SA")
        seq[1] += 1
        pkt("ack", 0, "A")
    split_rng = random.Random(split_seed) if split_seed is not None else None
    reorder_rng = random.Random(reorder_seed) if reorder_seed is not None else None
    rtx_rng = random.Random(retransmit_seed) if retransmit_seed is not None else None
    for bi, (d, data, idx) in enumerate(bursts(conn.messages)):
        # which message each byte of the burst belongs to
        bounds, pos = [], 0
        for i in idx:
            bounds.append((pos, pos + len(conn.messages[i][1]), i))
            pos += len(conn.messages[i][1])
        base = seq[d]
        segs = []
        for k, (a, b) in enumerate(_cuts(len(data), segment, split_rng)):
            msgs = tuple(i for (s, e, i) in bounds if s < b and e > a)
            segs.append(Seg(ci, bi, k, a, b, msgs, d))
        order = list(segs)
        if reorder_rng is not None:
            reorder_rng.shuffle(order)
        if rtx_rng is not None:
            again = [s for s in segs if rtx_rng.random() < 0.3]
            for s in again:  # an identical copy, somewhere after the original
                order.insert(rtx_rng.randint(order.index(s) + 1, len(order)), s)
        for s in order:
            if drop is not None and drop(s):
                continue
            pkt("data", d, "PA", data[s.start:s.end], s, at=base + s.start)
        seq[d] = base + len(data)
        pkt("ack", 1 - d, "A")
    if conn.fin:
        pkt("fin", 0, "FA")
        seq[0] += 1
        pkt("fin", 1, "FA")
        seq[1] += 1
        pkt("ack", 0, "A")
    return out


def _scapy(p: Pkt, conn: Conn, *, link, vlan, ipv6):
    src, dst = (conn.client, conn.server) if p.direction == 0 else (conn.server, conn.client)
    tcp = TCP(sport=src[1], dport=dst[1], seq=p.seq & 0xFFFFFFFF, ack=p.ack & 0xFFFFFFFF,
              flags=p.flags, window=65535)
    if p.payload:
        tcp = tcp / Raw(load=p.payload)
    ip = (IPv6(src=src[0], dst=dst[0]) if ipv6 else IP(src=src[0], dst=dst[0])) / tcp
    if link == "sll" or p.iface == 1:
        return CookedLinux(pkttype=0 if p.direction else 4, lladdrtype=1, lladdrlen=6,
                           src=b"\x02\x00\x00\x00\x00\x01\x00\x00") / ip
    if vlan is not None:
        return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=vlan) / ip
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip


def packets(conns, *, start=None, interleave=False, **opts):
    """[(Pkt, Conn)] of every connection: one after the other, or round robin (interleave)."""
    per = [conn_packets(i, c, **opts) for i, c in enumerate(conns)]
    if start is not None:
        cut = []
        for lst in per:
            k = next((j for j, p in enumerate(lst) if start(p)), len(lst))
            cut.append(lst[k:])
        per = cut
    if not interleave:
        return [(p, conns[p.conn]) for lst in per for p in lst]
    out = []
    for j in range(max(map(len, per), default=0)):
        out.extend((lst[j], conns[lst[j].conn]) for lst in per if j < len(lst))
    return out


def write_capture(path, conns, *, fmt="pcap", link="ether", vlan=None, ipv6=False,
                  t0="1700000000.000000", step="0.001", start=None, interleave=False, **opts):
    """Write `conns` (a Conn or a list) to `path`; returns the [(Pkt, Conn)] written in order."""
    if isinstance(conns, Conn):
        conns = [conns]
    pkts = packets(conns, start=start, interleave=interleave, **opts)
    t = Decimal(str(t0))
    dt = Decimal(str(step))
    if fmt == "pcapng":
        # scapy names the first interface after the first packet's link type
        assert not pkts or pkts[0][0].iface == 0, "the first packet must be on interface 0"
        w = PcapNgWriter(str(path))
    else:
        w = PcapWriter(str(path), nano=fmt == "pcap-ns", sync=False)
    with w:
        for i, (p, conn) in enumerate(pkts):
            sp = _scapy(p, conn, link=link, vlan=vlan, ipv6=ipv6)
            sp.time = EDecimal(t + i * dt)
            if fmt == "pcapng" and p.iface == 1:
                sp.sniffed_on = "lo"
            w.write(sp)
    return pkts


# ---- reading the rows back ---------------------------------------------------------------------

# What depends on the packets rather than on the Kafka bytes: frame numbers, times, the file.
PACKET_FIELDS = frozenset({"source", "position", "request_frame", "response_frame", "request_ts",
                           "response_ts", "latency_ms", "ts", "first_frame", "last_frame",
                           "first_ts", "last_ts"})


def decode_rows(path, **options) -> dict[str, list[dict]]:
    """{kind: [row]} of `kaudit.sources.pcap.decode_capture` on `path`."""
    from kaudit.sources.pcap import PcapOptions, decode_capture

    rows: dict[str, list[dict]] = {}
    for kind, table in decode_capture(str(path), PcapOptions(**options)):
        rows.setdefault(kind, []).extend(table.to_pylist())
    return rows


def content(rows: list[dict], drop=PACKET_FIELDS) -> list[dict]:
    """Rows without their packet-dependent fields, in a stable order."""
    out = [{k: v for k, v in r.items() if k not in drop} for r in rows]
    return sorted(out, key=repr)
