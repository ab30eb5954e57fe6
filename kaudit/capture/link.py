"""Link layer -> IPv4/IPv6 -> TCP, hand-written `struct` parsing (this is the hot path).

`LinkDecoder.decode(linktype, data, origlen)` returns a `TcpSegment`, or None for anything that is
not a decodable TCP segment; `decoder.reason` then says why and `decoder.dropped` counts reasons.
Payloads are trimmed to the IP length (so Ethernet padding and FCS never leak into a stream) and
`truncated` counts the payload bytes that were on the wire but not captured (snaplen).
"""

from __future__ import annotations

import socket
import struct

FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_12 = 12
LINKTYPE_RAW_14 = 14
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
SUPPORTED_LINKTYPES = frozenset({0, 1, 12, 14, 101, 108, 113, 228, 229, 276})

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
VLAN_TYPES = frozenset({0x8100, 0x88A8, 0x9100, 0x9200})
CONTROL_FLAGS = SYN | FIN | RST
# The capture loops' fused header read (tcp_records, below), for Ethernet and
# Linux SLL with IPv4 without options: one unpack_from per packet reads ethertype + IPv4 + the
# TCP header's first 14 bytes as (ethertype|version|ihl|tos, total length,
# flags|fragment|ttl|protocol, src|dst, sport|dport, seq, ack, data offset, flags).
FAST_LINKS = {
    1: (14, struct.Struct("!12xIH2xI2xQIIIBB").unpack_from),
    113: (16, struct.Struct("!14xIH2xI2xQIIIBB").unpack_from),
}


def tcp_records(capture):
    """Every record of `capture` as (frame, ts, lt, start, end, origlen, tcp): `tcp` is
    (addresses, ports, seq, ack, flags, payload start, payload end) from the fused read above when
    the packet is that common case - Ethernet (VLAN tags skipped) or SLL, IPv4 without options,
    TCP, not a fragment, captured whole, which also proves the read stayed inside the record -
    else None (LinkDecoder.decode then says what it is). The capture loops share this walk."""
    mv = capture.buf
    cur_lt = None
    unpack = None
    link_len = 0
    vlan_types = VLAN_TYPES
    for frame, ts, lt, start, end, origlen, _iface in capture.records():
        if lt != cur_lt:
            cur_lt = lt
            link_len, unpack = FAST_LINKS.get(lt, (0, None))
        if unpack is not None:
            ip = start
            try:
                w1, total, w2, addrs, ports, seq, ack, doff, flags = unpack(mv, ip)
                while w1 > 0x80FFFFFF and w1 >> 16 in vlan_types:
                    # an 802.1Q/802.1ad tag: the real ethertype follows 4 bytes later
                    ip += 4
                    w1, total, w2, addrs, ports, seq, ack, doff, flags = unpack(mv, ip)
            except struct.error:  # the buffer ends within the headers
                w1 = total = doff = 0
            ip += link_len
            wire_end = ip + total
            pstart = ip + 20 + (doff >> 4) * 4
            if (w1 & 0xFFFFFF00 == 0x08004500 and w2 & 0x3FFF00FF == 6
                    and doff >= 0x50 and end >= wire_end >= pstart):
                yield frame, ts, lt, start, end, origlen, (addrs, ports, seq, ack, flags, pstart, wire_end)
                continue
        yield frame, ts, lt, start, end, origlen, None


# BSD loopback address families meaning IPv6 (NetBSD/OpenBSD, FreeBSD, Darwin, Linux, Windows)
_AF_INET6 = frozenset({24, 28, 30, 10, 23})
# IPv6 extension headers skipped on the way to TCP
_V6_EXT = frozenset({0, 43, 44, 51, 60, 135, 139, 140})
_ADDR_CACHE_MAX = 1 << 16

_U16 = struct.Struct("!H").unpack_from
_U32LE = struct.Struct("<I").unpack_from
_U32BE = struct.Struct("!I").unpack_from
# IPv4 header: ver/ihl, total length, flags+fragment offset, protocol, src, dst
_IP4 = struct.Struct("!BxHxxHxBxxII").unpack_from
# IPv4 without options followed by the TCP header's first 14 bytes, in one call (the common case)
_IP4TCP = struct.Struct("!BxHxxHxBxxIIHHIIBB").unpack_from
_IP6 = struct.Struct("!4xHBx16s16s").unpack_from
_TCP = struct.Struct("!HHIIBB").unpack_from


class TcpSegment:
    __slots__ = ("src", "dst", "sport", "dport", "seq", "ack", "flags", "payload", "truncated")

    def __init__(self, src, dst, sport, dport, seq, ack, flags, payload, truncated=0):
        self.src = src  # IP address as a string ("10.0.0.1", "::1")
        self.dst = dst
        self.sport = sport
        self.dport = dport
        self.seq = seq
        self.ack = ack
        self.flags = flags  # TCP flag bits: FIN SYN RST PSH ACK URG (ECE/CWR kept too)
        self.payload = payload  # memoryview of the captured payload bytes
        self.truncated = truncated  # payload bytes on the wire after `payload`, not captured

    def __repr__(self):
        names = "".join(c for bit, c in ((SYN, "S"), (FIN, "F"), (RST, "R"), (PSH, "P"), (ACK, "A"))
                        if self.flags & bit)
        return (f"TcpSegment({self.src}:{self.sport} -> {self.dst}:{self.dport} [{names}] "
                f"seq={self.seq} ack={self.ack} len={len(self.payload)} truncated={self.truncated})")


class LinkDecoder:
    """Stateless apart from its address-string caches and drop counters."""

    def __init__(self):
        self._v4: dict[int, str] = {}
        self._v6: dict[bytes, str] = {}
        self.dropped: dict[str, int] = {}
        self.reason: str | None = None  # why the last decode returned None
        self.first_fragments = 0  # IPv4/IPv6 first fragments decoded (their tail is a stream gap)

    def _drop(self, reason):
        self.reason = reason
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        return None

    def decode(self, linktype, data, origlen=None) -> TcpSegment | None:
        n = len(data)
        if origlen is None or origlen < n:
            origlen = n
        if linktype == 1:
            if n < 14:
                return self._drop("malformed: short ethernet header")
            etype = _U16(data, 12)[0]
            off = 14
        elif linktype == 113:
            if n < 16:
                return self._drop("malformed: short SLL header")
            etype = _U16(data, 14)[0]
            off = 16
        elif linktype == 276:
            if n < 20:
                return self._drop("malformed: short SLL2 header")
            etype = _U16(data, 0)[0]
            off = 20
        elif linktype in (101, 12, 14):
            if n < 1:
                return self._drop("malformed: empty packet")
            v = data[0] >> 4
            etype = ETH_IPV4 if v == 4 else ETH_IPV6 if v == 6 else -1
            off = 0
        elif linktype == 228:
            etype, off = ETH_IPV4, 0
        elif linktype == 229:
            etype, off = ETH_IPV6, 0
        elif linktype == 0 or linktype == 108:
            if n < 4:
                return self._drop("malformed: short loopback header")
            # NULL is in the capturing host's byte order, LOOP in network order; real files get
            # this wrong often enough that both are guessed from which half is zero.
            fam = _U32LE(data, 0)[0]
            if fam > 0xFFFF:
                fam = _U32BE(data, 0)[0]
            etype = ETH_IPV4 if fam == 2 else ETH_IPV6 if fam in _AF_INET6 else -1
            off = 4
        else:
            return self._drop(f"unsupported link type {linktype}")
        if etype in VLAN_TYPES:  # 802.1Q / 802.1ad / QinQ: tags stack
            while etype in VLAN_TYPES:
                if off + 4 > n:
                    return self._drop("malformed: short VLAN tag")
                etype = _U16(data, off + 2)[0]
                off += 4
        if etype == ETH_IPV4:
            return self._ipv4(data, off, n, origlen)
        if etype == ETH_IPV6:
            return self._ipv6(data, off, n, origlen)
        return self._drop("not IP")

    def _ipv4(self, data, off, n, origlen):
        if off + 34 <= n and data[off] == 0x45:
            # fast path: no IP options, whole TCP fixed header present
            (_v, total, frag, proto, src, dst, sport, dport, seq, ack, doff, flags
             ) = _IP4TCP(data, off)
            ihl = 20
        else:
            if off + 20 > n:
                return self._drop("malformed: short IPv4 header")
            _v, total, frag, proto, src, dst = _IP4(data, off)
            if _v >> 4 != 4:
                return self._drop("malformed: IP version is not 4")
            ihl = (_v & 15) * 4
            if ihl < 20:
                return self._drop("malformed: IPv4 header length < 20")
            sport = None
        if proto != 6:
            return self._drop("not TCP")
        if frag & 0x3FFF:
            if frag & 0x1FFF:
                return self._drop("IP fragment (not the first)")
            self.first_fragments += 1
        if total == 0:  # TCP segmentation offload on the capturing host: the length is not set
            wire_end = origlen
        elif total < ihl:
            return self._drop("malformed: IPv4 total length < header length")
        else:
            wire_end = min(off + total, origlen)
        s = self._v4.get(src)
        if s is None:
            s = self._v4_name(src)
        d = self._v4.get(dst)
        if d is None:
            d = self._v4_name(dst)
        off += ihl
        if sport is None:
            if off + 14 > min(n, wire_end):
                return self._drop("truncated TCP header")
            sport, dport, seq, ack, doff, flags = _TCP(data, off)
        return self._tcp(data, off, n, wire_end, s, d, sport, dport, seq, ack, doff, flags)

    def _tcp(self, data, off, n, wire_end, src, dst, sport, dport, seq, ack, doff, flags):
        hlen = (doff >> 4) * 4
        if hlen < 20:
            return self._drop("malformed: TCP data offset < 5")
        start = off + hlen
        if start > wire_end:
            return self._drop("malformed: TCP header longer than the IP packet")
        cap_end = wire_end if wire_end <= n else n
        if start <= cap_end:
            return TcpSegment(src, dst, sport, dport, seq, ack, flags,
                              data[start:cap_end], wire_end - cap_end)
        # options cut by the snaplen: payload position known, none of it captured
        return TcpSegment(src, dst, sport, dport, seq, ack, flags, data[0:0], wire_end - start)

    def _ipv6(self, data, off, n, origlen):
        if off + 40 > n:
            return self._drop("malformed: short IPv6 header")
        if data[off] >> 4 != 6:
            return self._drop("malformed: IP version is not 6")
        plen, nh, src, dst = _IP6(data, off)
        # payload length 0 = jumbogram (or offload): the capture's own length is all there is
        wire_end = min(off + 40 + plen, origlen) if plen else origlen
        off += 40
        while nh in _V6_EXT:
            if off + 8 > n:
                return self._drop("malformed: short IPv6 extension header")
            if nh == 44:
                if _U16(data, off + 2)[0] & 0xFFF8:
                    return self._drop("IP fragment (not the first)")
                self.first_fragments += 1
                size = 8
            elif nh == 51:  # AH counts 4-byte words
                size = (data[off + 1] + 2) * 4
            else:
                size = (data[off + 1] + 1) * 8
            nh = data[off]
            off += size
        if nh != 6:
            return self._drop("not TCP")
        if off + 14 > min(n, wire_end):
            return self._drop("truncated TCP header")
        s = self._v6.get(src)
        if s is None:
            s = self._v6_name(src)
        d = self._v6.get(dst)
        if d is None:
            d = self._v6_name(dst)
        sport, dport, seq, ack, doff, flags = _TCP(data, off)
        return self._tcp(data, off, n, wire_end, s, d, sport, dport, seq, ack, doff, flags)

    def _v4_name(self, a: int) -> str:
        if len(self._v4) >= _ADDR_CACHE_MAX:
            self._v4.clear()  # many distinct addresses: keep memory bounded
        s = self._v4[a] = f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.{a & 255}"
        return s

    def _v6_name(self, a: bytes) -> str:
        if len(self._v6) >= _ADDR_CACHE_MAX:
            self._v6.clear()
        s = self._v6[a] = socket.inet_ntop(socket.AF_INET6, a)
        return s


def decode_tcp(linktype, data, origlen=None) -> TcpSegment | None:
    """One-off convenience; loops should keep one LinkDecoder (it caches address strings)."""
    return _DEFAULT.decode(linktype, data, origlen)


_DEFAULT = LinkDecoder()
