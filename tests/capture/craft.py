"""Test helpers: hand-built TCP/IP packets and pcap/pcapng writers (fast, for volume and for the
file variants scapy does not write). Link-type variety is crafted with scapy in the tests."""

from __future__ import annotations

import random
import struct

from kaudit.capture import (
    ConnClose, ConnOpen, LinkDecoder, Reassembler, StreamConflict, StreamData, StreamGap,
    iter_packets,
)

F, S, R, P, A = 0x01, 0x02, 0x04, 0x08, 0x10


def _csum(b: bytes) -> int:  # checksums are not checked by the decoder; kept plausible anyway
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip4(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


def tcp_ipv4(src, dst, sport, dport, seq, ack, flags, payload=b"", ident=0, options=b""):
    """IPv4 + TCP bytes (no link header)."""
    hlen = 20 + len(options)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                      (hlen // 4) << 4, flags, 65535, 0, 0) + options + payload
    total = 20 + len(tcp)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, ident & 0xFFFF, 0x4000, 64, 6, 0,
                     ip4(src), ip4(dst))
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    return ip + tcp


def ether(ip_packet: bytes, ethertype=0x0800) -> bytes:
    return b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + struct.pack("!H", ethertype) + ip_packet


def write_pcap(packets, linktype=1, nanosecond=False, big_endian=False, snaplen=262144):
    """packets: iterable of (ts, frame bytes) or (ts, frame bytes, origlen)."""
    o = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    units = 1_000_000_000 if nanosecond else 1_000_000
    out = [struct.pack(o + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for p in packets:
        ts, data = p[0], p[1]
        origlen = p[2] if len(p) > 2 else len(data)
        if isinstance(ts, tuple):  # exact (seconds, fraction)
            sec, frac = ts
        else:
            sec = int(ts)
            frac = round((ts - sec) * units)
        out.append(struct.pack(o + "IIII", sec, frac, len(data), origlen) + data)
    return b"".join(out)


def _opts(o, options):
    out = b""
    for code, value in options:
        out += struct.pack(o + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)
    if options:
        out += struct.pack(o + "HH", 0, 0)
    return out


def _block(o, btype, body):
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(o + "II", btype, n) + body + struct.pack(o + "I", n)


def pcapng_shb(big_endian=False):
    o = ">" if big_endian else "<"
    return _block(o, 0x0A0D0D0A, struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def pcapng_idb(linktype, tsresol=None, snaplen=0, big_endian=False, tsoffset=None, name=None):
    o = ">" if big_endian else "<"
    options = []
    if name:
        options.append((2, name.encode()))
    if tsresol is not None:
        options.append((9, bytes([tsresol])))
    if tsoffset is not None:
        options.append((14, struct.pack(o + "q", tsoffset)))
    return _block(o, 1, struct.pack(o + "HHI", linktype, 0, snaplen) + _opts(o, options))


def pcapng_epb(iface, ts_units, data, origlen=None, big_endian=False, comment=None):
    o = ">" if big_endian else "<"
    body = struct.pack(o + "IIIII", iface, ts_units >> 32, ts_units & 0xFFFFFFFF, len(data),
                       len(data) if origlen is None else origlen) + data + b"\0" * (-len(data) % 4)
    if comment:
        body += _opts(o, [(1, comment.encode())])
    return _block(o, 6, body)


def pcapng_opb(iface, ts_units, data, big_endian=False):
    o = ">" if big_endian else "<"
    return _block(o, 2, struct.pack(o + "HHIIII", iface, 0, ts_units >> 32, ts_units & 0xFFFFFFFF,
                                    len(data), len(data)) + data)


def pcapng_spb(data, origlen=None, big_endian=False):
    o = ">" if big_endian else "<"
    return _block(o, 3, struct.pack(o + "I", len(data) if origlen is None else origlen) + data)


def pcapng_block(btype, body, big_endian=False):
    return _block(">" if big_endian else "<", btype, body)


class Flow:
    """Builds the packets of one TCP connection (client c -> server s) as raw IPv4 frames."""

    def __init__(self, c=("10.0.0.1", 40000), s=("10.0.0.2", 9092), isn_c=1000, isn_s=5000,
                 link=ether):
        self.c, self.s = c, s
        self.seq = {0: isn_c, 1: isn_s}
        self.link = link

    def _pkt(self, d, flags, payload=b"", seq=None):
        src, dst = (self.c, self.s) if d == 0 else (self.s, self.c)
        seq = self.seq[d] if seq is None else seq
        ack = self.seq[1 - d] if flags & A else 0
        return self.link(tcp_ipv4(src[0], dst[0], src[1], dst[1], seq, ack, flags, payload))

    def handshake(self):
        out = [self._pkt(0, S)]
        self.seq[0] += 1
        out.append(self._pkt(1, S | A))
        self.seq[1] += 1
        out.append(self._pkt(0, A))
        return out

    def send(self, d, payload, flags=P | A, advance=True):
        p = self._pkt(d, flags, payload)
        if advance:
            self.seq[d] += len(payload)
        return p

    def at(self, d, seq_off, payload, flags=P | A):
        """A segment at an explicit sequence number (for retransmissions/reordering)."""
        return self._pkt(d, flags, payload, seq=seq_off)

    def ack(self, d):
        return self._pkt(d, A)

    def fin(self, d):
        p = self._pkt(d, F | A)
        self.seq[d] += 1
        return p


def run(buf, max_buffer=None):
    """Feed a capture through the layer; returns (events, issues, decoder)."""
    issues = []
    dec = LinkDecoder()
    r = Reassembler() if max_buffer is None else Reassembler(max_buffer)
    events = []
    last = (None, None)
    for pkt in iter_packets(buf, issues):
        last = (pkt.frame_no, pkt.ts)
        seg = dec.decode(pkt.linktype, pkt.data, pkt.origlen)
        if seg is not None:
            events.extend(r.feed(seg, pkt.frame_no, pkt.ts))
    events.extend(r.flush(*last))  # the capture's last frame, TCP or not
    return events, issues, dec


def streams(events):
    """{(conn_id, direction): [(offset, bytes) | (offset, None, length, reason)]}, contiguous
    pieces merged."""
    out = {}
    for ev in events:
        if isinstance(ev, StreamData):
            lst = out.setdefault((ev.conn_id, ev.direction), [])
            if lst and lst[-1][1] is not None and lst[-1][0] + len(lst[-1][1]) == ev.stream_offset:
                lst[-1] = (lst[-1][0], lst[-1][1] + bytes(ev.data))
            else:
                lst.append((ev.stream_offset, bytes(ev.data)))
        elif isinstance(ev, StreamGap):
            out.setdefault((ev.conn_id, ev.direction), []).append(
                (ev.stream_offset, None, ev.length, ev.reason))
    return out


def check_invariants(events):
    """Offsets per direction are contiguous (data and gaps tile the stream); one open/close each."""
    nxt = {}
    opened, closed = set(), set()
    for ev in events:
        if isinstance(ev, ConnOpen):
            assert ev.conn_id not in opened
            opened.add(ev.conn_id)
        elif isinstance(ev, ConnClose):
            assert ev.conn_id in opened and ev.conn_id not in closed
            closed.add(ev.conn_id)
        elif isinstance(ev, (StreamData, StreamGap)):
            assert ev.conn_id in opened and ev.conn_id not in closed
            key = (ev.conn_id, ev.direction)
            start = nxt.get(key)
            if start is not None:
                assert ev.stream_offset == start, (ev, start)
            n = len(ev.data) if isinstance(ev, StreamData) else ev.length
            assert n > 0
            nxt[key] = ev.stream_offset + n
        elif isinstance(ev, StreamConflict):
            assert ev.conn_id in opened
    assert opened == closed


def split_random(data: bytes, rng: random.Random, max_len=1500):
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, max_len)
        out.append(data[i:i + n])
        i += n
    return out


def event_tuple(ev):
    out = [type(ev).__name__]
    for name in ev.__slots__:
        v = getattr(ev, name)
        if isinstance(v, memoryview):
            v = bytes(v)
        elif hasattr(v, "as_dict"):
            v = v.as_dict()
        out.append(v)
    return tuple(out)


def run_both(buf, max_buffer=None):
    """Events from the generic path (iter_packets -> LinkDecoder -> Reassembler.feed) and from
    the fused CaptureStreams loop; asserts they are the same and returns them."""
    from kaudit.capture import CaptureStreams

    events, issues, dec = run(buf, max_buffer)
    cs = CaptureStreams(buf) if max_buffer is None else CaptureStreams(buf, max_buffer)
    fused = list(cs.events())
    assert [event_tuple(e) for e in fused] == [event_tuple(e) for e in events]
    assert [(i.position, i.message) for i in cs.issues] == [(i.position, i.message) for i in issues]
    check_invariants(events)
    return events
