"""Capture faults: what a real capture point does to the simulator's pcap after the cluster wrote
it. The cluster itself is untouched (the log dirs are complete); only the evidence on the wire is
short.

- `lossy`: tcpdump under load drops packets (the kernel's ring buffer overflows: "packets dropped
  by kernel"). A drawn 1-5 % of the TCP segments that carry payload are removed, on any
  connection and in either direction (client to leader, the coordinator's marker sender, a leader's
  AddPartitionsToTxn to the coordinator, consumers, admin). Their bytes are gone from the capture:
  the reassembler sees a hole in the stream, never the message that crossed it.
- `one_broker`: the capture was taken on one broker only. `side: host` (`tcpdump -i any host B` on
  its host): the packets to or from that broker's address, on every connection where it is the
  server or the client. `side: listener` (`tcpdump port 9092` where brokers share a host and
  are told apart by port, as in the real corpus): only the connections to its listeners - its
  own outgoing connections (a TV2 leader's AddPartitionsToTxn to the coordinator, a coordinator's
  marker sender, its replica fetches) leave from an ephemeral port and are not kept. The others'
  conversations are absent as wholes.

The invariant both test: a capture that lost bytes proves no absence on the connections that lost
them, and a capture of one broker proves no absence of what the others were sent.

The pcap is the classic format `tests/capture/craft.write_pcap` writes (little-endian, Ethernet,
IPv4, TCP): records are parsed here, kept or dropped whole, and written back in order.
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass
from pathlib import Path

from tests.sim import wire

GLOBAL_HEADER = 24
RECORD_HEADER = 16
ETHER = 14


@dataclass(frozen=True)
class Segment:
    """One pcap record's TCP facts (None where the frame is no IPv4/TCP)."""

    src: str
    dst: str
    sport: int
    dport: int
    payload: int        # TCP payload length


def records(data: bytes) -> tuple[bytes, list[bytes]]:
    """(global header, [record bytes with its header]) of a classic little-endian pcap."""
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        raise ValueError(f"not a little-endian classic pcap (magic {magic:#x})")
    out, off = [], GLOBAL_HEADER
    while off + RECORD_HEADER <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        end = off + RECORD_HEADER + incl
        out.append(data[off:end])
        off = end
    return data[:GLOBAL_HEADER], out


def segment(record: bytes) -> Segment | None:
    frame = record[RECORD_HEADER:]
    if len(frame) < ETHER + 20 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[ETHER:]
    ihl, total, proto = (ip[0] & 0x0F) * 4, struct.unpack_from("!H", ip, 2)[0], ip[9]
    if proto != 6 or len(ip) < ihl + 20:
        return None
    tcp = ip[ihl:]
    sport, dport = struct.unpack_from("!HH", tcp, 0)
    thl = (tcp[12] >> 4) * 4
    src, dst = ".".join(str(b) for b in ip[12:16]), ".".join(str(b) for b in ip[16:20])
    return Segment(src, dst, sport, dport, max(0, total - ihl - thl))


def payload_indices(recs: list[bytes]) -> list[int]:
    """The records that are TCP segments carrying payload, in capture order."""
    out = []
    for i, r in enumerate(recs):
        s = segment(r)
        if s is not None and s.payload > 0:
            out.append(i)
    return out


def tcp_indices(recs: list[bytes]) -> list[int]:
    """The records that are TCP segments, SYN, ACK and FIN included, in capture order."""
    return [i for i, r in enumerate(recs) if segment(r) is not None]


def _candidates(recs: list[bytes], fault: dict) -> list[int]:
    """The segments the capture may lose: those carrying payload, or (`any`) every TCP segment."""
    return tcp_indices(recs) if fault.get("any") else payload_indices(recs)


def lossy_drops(recs: list[bytes], fault: dict) -> list[int]:
    """Which segments (their rank among `_candidates`) the capture lost: `drops` given (a shrunk
    regression names them), else ceil(`rate` x their number), at least one, chosen by
    Random(`seed`)."""
    n = len(_candidates(recs, fault))
    if "drops" in fault:
        return sorted({d for d in fault["drops"] if 0 <= d < n})
    if n == 0:
        return []
    k = min(n, max(1, math.ceil(fault["rate"] * n)))
    return sorted(random.Random(fault["seed"]).sample(range(n), k))


def lossy(recs: list[bytes], fault: dict) -> list[bytes]:
    payload = _candidates(recs, fault)
    gone = {payload[d] for d in lossy_drops(recs, fault)}
    return [r for i, r in enumerate(recs) if i not in gone]


LISTENERS = (9092, 9093)     # the simulated brokers' client and inter-broker listeners (wire.py)


def one_broker(recs: list[bytes], fault: dict) -> list[bytes]:
    """Only the packets to or from node `node`'s address (`side` host), or only those of the
    connections to its listeners (`side` listener)."""
    host, listener = wire.node_ip(fault["node"]), fault.get("side") == "listener"
    keep = []
    for r in recs:
        s = segment(r)
        if s is None:
            continue
        if listener:
            if (s.dst == host and s.dport in LISTENERS) or (s.src == host and s.sport in LISTENERS):
                keep.append(r)
        elif host in (s.src, s.dst):
            keep.append(r)
    return keep


TRANSFORMS = {"lossy": lossy, "one_broker": one_broker}


def apply(pcap: Path, fault: dict | None) -> None:
    """Rewrite `pcap` in place as the faulty capture point would have written it."""
    if not fault:
        return
    head, recs = records(Path(pcap).read_bytes())
    kept = TRANSFORMS[fault["kind"]](recs, fault)
    Path(pcap).write_bytes(head + b"".join(kept))
