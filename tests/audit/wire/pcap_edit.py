"""Classic pcap files edited as an SRE's captures come: cut short or started late, with packets
lost, or holding one broker's traffic only (the corpus captures are Ethernet/IPv4/TCP)."""

from __future__ import annotations

import random
import struct
from pathlib import Path


def records(data: bytes) -> list[bytes]:
    """The records (header and packet) of a classic pcap."""
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out, pos = [], 24
    while pos + 16 <= len(data):
        n = struct.unpack(endian + "I", data[pos + 8:pos + 12])[0]
        out.append(data[pos:pos + 16 + n])
        pos += 16 + n
    return out


def tcp(record: bytes) -> tuple[int, int, int] | None:
    """(source port, destination port, payload bytes) of an Ethernet/IPv4/TCP record."""
    pkt = record[16:]
    if len(pkt) < 34 or pkt[12:14] != b"\x08\x00" or pkt[23] != 6:
        return None
    ihl = (pkt[14] & 0x0F) * 4
    total = struct.unpack(">H", pkt[16:18])[0]
    t = 14 + ihl
    sport, dport = struct.unpack(">HH", pkt[t:t + 4])
    return sport, dport, total - ihl - (pkt[t + 12] >> 4) * 4


def write(src: Path, dst: Path, keep) -> int:
    """`src`'s records that `keep(record)` accepts, written to `dst`: the records left out."""
    data = src.read_bytes()
    recs = records(data)
    kept = [r for r in recs if keep(r)]
    dst.write_bytes(data[:24] + b"".join(kept))
    return len(recs) - len(kept)


def cut(src: Path, dst: Path, frac: float) -> int:
    """A capture's first `frac` of its packets (its last -`frac` when negative), as tcpdump would
    have written them had it stopped (or started) there; the packets kept."""
    n = len(records(src.read_bytes()))
    k = int(n * abs(frac))
    seen = iter(range(n))
    return n - write(src, dst, lambda _: (next(seen) < k) == (frac > 0))


def drop(src: Path, dst: Path, rate: float, seed: int) -> int:
    """The capture with a seeded `rate` of its TCP segments that carry data left out: the packets
    dropped."""
    r = random.Random(seed)

    def keep(rec):
        t = tcp(rec)
        return not (t is not None and t[2] > 0 and r.random() < rate)
    return write(src, dst, keep)


def only(src: Path, dst: Path, port: int) -> int:
    """The capture of one broker's host: the packets to or from `port` only."""
    return write(src, dst, lambda rec: (t := tcp(rec)) is not None and port in t[:2])
