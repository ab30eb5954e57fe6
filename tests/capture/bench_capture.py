"""Throughput of the capture layer (pcap -> link -> TCP reassembly), not a test.

    .venv/bin/python tests/capture/bench_capture.py [packets] [--pcapng]
    .venv/bin/python tests/capture/bench_capture.py --corpus FILE --repeat N

Builds a request/response capture over many connections (about half data segments, half pure
ACKs, Ethernet/IPv4) and times each stage and the whole layer.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kaudit.capture import CaptureStreams, LinkDecoder, iter_packets  # noqa: E402
from tests.capture.craft import (  # noqa: E402
    A, Flow, pcapng_epb, pcapng_idb, pcapng_shb, write_pcap,
)


def build(npackets: int, nconns: int = 200, seed: int = 1, pcapng: bool = False) -> bytes:
    rng = random.Random(seed)
    flows = [Flow(c=(f"10.1.{i // 250}.{i % 250 + 1}", 30000 + i), s=("10.2.0.1", 9092),
                  isn_c=rng.getrandbits(32), isn_s=rng.getrandbits(32)) for i in range(nconns)]
    frames = []
    for f in flows:
        frames.extend(f.handshake())
    blob = bytes(rng.getrandbits(8) for _ in range(4000))
    while len(frames) < npackets:
        f = flows[rng.randrange(nconns)]
        frames.append(f.send(0, blob[:rng.randint(60, 400)]))
        frames.append(f.ack(1))
        for _ in range(rng.choice((1, 1, 2, 3))):
            frames.append(f.send(1, blob[:rng.randint(100, 3000)]))
        frames.append(f._pkt(0, A))
    t0 = 1_700_000_000.0
    if pcapng:
        return pcapng_shb() + pcapng_idb(1, tsresol=9) + b"".join(
            pcapng_epb(0, int((t0 + i * 1e-5) * 1e9), fr) for i, fr in enumerate(frames[:npackets]))
    return write_pcap((t0 + i * 1e-5, fr) for i, fr in enumerate(frames[:npackets]))


def timed(label, fn, npackets):
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    print(f"{label:<32} {npackets / dt:>12,.0f} packets/s  ({dt:.2f} s)")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--corpus":
        buf = Path(args[1]).read_bytes()
        reps = int(args[3]) if len(args) > 3 else 1
        n = sum(1 for _ in iter_packets(buf))
        print(f"{args[1]}: {n} packets x {reps}")
        def stages():
            for _ in range(reps):
                for _ in CaptureStreams(buf).events():
                    pass
        timed("whole layer (streams)", stages, n * reps)
        return
    ng = "--pcapng" in args
    args = [a for a in args if a != "--pcapng"]
    npackets = int(args[0]) if args else 500_000
    t = time.perf_counter()
    buf = build(npackets, pcapng=ng)
    print(f"built {npackets} packets ({'pcapng' if ng else 'pcap'}), {len(buf) / 1e6:.0f} MB "
          f"in {time.perf_counter() - t:.1f} s")

    def read():
        for _ in iter_packets(buf):
            pass

    def link():
        dec = LinkDecoder().decode
        for p in iter_packets(buf):
            dec(p.linktype, p.data, p.origlen)

    def whole():
        cs = CaptureStreams(buf)
        for _ in cs.events():
            pass
        assert cs.tcp_packets == npackets, cs.dropped

    def walk():  # the compiled walk's own cost: no event objects for in-order segments
        from kaudit import native

        c = native.module("kaudit.capture._cstreams")
        if c is not None:
            c.count_events(CaptureStreams(buf))

    timed("capture file read", read, npackets)
    timed("read + link/IP/TCP (generic path)", link, npackets)
    timed("whole layer (CaptureStreams)", whole, npackets)
    timed("compiled walk, no event objects", walk, npackets)


if __name__ == "__main__":
    main()
