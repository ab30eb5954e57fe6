"""Test helper: the Kafka TCP payload streams of a corpus capture, extracted with scapy.

The corpus is loopback traffic with no loss: per connection and direction, segments are ordered by
sequence number and retransmitted bytes are dropped. A direction is the client's (requests) when
its connection's SYN came from it, else when its port is not a known broker port of the capture.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field

from scapy.all import IP, TCP, IPv6, rdpcap

from kaudit.protocol.wire.headers import plausible_request


@dataclass
class Direction:
    src: tuple
    dst: tuple
    data: bytes = b""
    # (stream offset, packet time) of every segment, for timing requests
    times: list = field(default_factory=list)
    is_client: bool = False
    saw_syn: bool = False

    def time_at(self, offset: int) -> float:
        t = self.times[0][1]
        for off, ts in self.times:
            if off > offset:
                break
            t = ts
        return t


@functools.lru_cache(maxsize=None)
def streams(path: str) -> tuple:
    """Directions with data, client's first, as a tuple of `Direction`."""
    segs = defaultdict(dict)
    syn_from = {}
    for p in rdpcap(path):
        if TCP not in p:
            continue
        ip = p[IP] if IP in p else p[IPv6]
        tcp = p[TCP]
        key = ((ip.src, tcp.sport), (ip.dst, tcp.dport))
        flags = int(tcp.flags)
        if flags & 0x02 and not flags & 0x10:  # SYN without ACK: the client
            syn_from[frozenset(key)] = key[0]
            segs[key]  # noqa: B018 - make the direction exist
        payload = bytes(tcp.payload)
        if IP in p:  # drop link-layer padding
            payload = payload[: max(ip.len - ip.ihl * 4 - tcp.dataofs * 4, 0)]
        else:
            payload = payload[: max(ip.plen - tcp.dataofs * 4, 0)]
        if payload:
            seq = tcp.seq
            seen = segs[key]
            if seq not in seen or len(seen[seq][0]) < len(payload):
                seen[seq] = (payload, float(p.time))
    server_ports = set()
    for conn, client in syn_from.items():
        (a, b) = tuple(conn)
        server_ports.add((b if a == client else a)[1])
    out = []
    for key, seen in segs.items():
        if not seen:
            continue
        d = Direction(key[0], key[1])
        chunks = []
        nxt = None
        first = None
        for seq, (payload, ts) in sorted(seen.items()):
            if first is None:
                first = seq
            if nxt is not None and seq < nxt:  # retransmitted overlap: keep the new tail
                payload = payload[nxt - seq:]
                seq = nxt
                if not payload:
                    continue
            d.times.append((seq - first, ts))
            chunks.append(payload)
            nxt = seq + len(payload)
        d.data = b"".join(chunks)
        client = syn_from.get(frozenset(key))
        d.saw_syn = client is not None
        if client is not None:
            d.is_client = client == key[0]
        out.append(d)
    by_conn = defaultdict(list)
    for d in out:
        by_conn[frozenset((d.src, d.dst))].append(d)
    for ds in by_conn.values():
        if ds[0].saw_syn:
            continue
        # joined mid-connection: the side whose bytes start like a request, else the port
        looks = [plausible_request(d.data, 0) is True for d in ds]
        for d, look in zip(ds, looks):
            if sum(looks) == 1:
                d.is_client = look
            else:
                d.is_client = d.dst[1] in server_ports or (
                    d.src[1] not in server_ports and d.src[1] > d.dst[1])
    out.sort(key=lambda d: (not d.is_client, d.src, d.dst))
    return tuple(out)
