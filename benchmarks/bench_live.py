"""`make bench`: a live capture's memory. A generated stream of >= 2,000,000 packets (override with
KAUDIT_BENCH_LIVE_PACKETS) of many short-lived connections - each client makes 2 to 6 exchanges
(after its handshake, ApiVersions, Metadata and, for producers, InitProducerId: a new producer id)
and closes, and a new client on a new port takes its place - spread over about two hours of
capture time, is piped into `kaudit pcap - --format ndjson` (the traffic model of bench_pcap.py).
Reported: peak RSS of the kaudit process (target < 300 MB), packets/s, findings written before
the end of the stream. Results: benchmarks/out/live-results.json.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_pcap as bp  # noqa: E402

PACKETS = int(os.environ.get("KAUDIT_BENCH_LIVE_PACKETS", "2000000"))
STEP_S = 0.0036        # capture time between packets on average: 2M packets ~ 2 hours
RSS_LIMIT_MB = 300
GENERATOR_VERSION = 2  # 2: bench_pcap.py's brokers serve the stored batches


def generate(path: Path, npackets: int) -> dict:
    rng = random.Random(bp.SEED + 21)
    clock = [bp.BASE_TS]
    kafka = bp.Kafka(rng)
    made = [0]

    def new_conn():
        c = bp.Conn(made[0] % 60000, rng, clock)
        c.exchanges_left = rng.randint(2, 6)
        made[0] += 1
        return c

    idle = deque(new_conn() for _ in range(bp.CLIENTS))
    active = []
    with open(path.with_suffix(".tmp"), "wb") as f:
        w = bp.PcapWriter(f, clock, lambda t: t + STEP_S * (0.5 + rng.random()))
        while w.written < npackets or active:
            while w.written < npackets and len(active) < bp.CONCURRENT and idle:
                c = idle.popleft()
                active.append([c, c.next_exchange(kafka)])
            if not active:
                break
            k = rng.randrange(len(active))
            c, g = active[k]
            data = next(g, None)
            if data is None:
                active[k] = active[-1]
                active.pop()
                c.exchanges_left -= 1
                if c.exchanges_left > 0:
                    idle.append(c)
                else:
                    if c.transactional:
                        kafka.abandon(c.pid)
                    for d in c.close():
                        w.emit(d)
                    idle.append(new_conn())
                continue
            w.emit(data)
        w.flush()
    path.with_suffix(".tmp").rename(path)
    return {"packets": w.written, "connections": made[0]}


def main() -> None:
    bp.OUT.mkdir(parents=True, exist_ok=True)
    path = bp.OUT / f"bench-live-v{GENERATOR_VERSION}-{PACKETS}.pcap"
    if not path.exists():
        t = time.perf_counter()
        info = generate(path, PACKETS)
        print(f"generated {path.name}: {info['packets']:,} packets, {info['connections']:,} connections, "
              f"{path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    packets = bp.count_packets(path)
    cmd = [sys.executable, "-m", "kaudit", "pcap", "-", "--format", "ndjson", "--kafka-port", "9092",
           "--kafka-port", "9093", "--kafka-port", "9094"]
    t = time.perf_counter()
    with open(path, "rb") as src:
        # a pipe, as from tcpdump: kaudit cannot map or seek it
        cat = subprocess.Popen(["cat"], stdin=src, stdout=subprocess.PIPE)
        proc = subprocess.Popen(cmd, stdin=cat.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        cat.stdout.close()
        lines = proc.stdout.read().decode().splitlines()
        err = proc.stderr.read().decode()
        rc = proc.wait()
        cat.wait()
    wall = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {"packets": packets, "seconds": round(wall, 1), "packets_per_s": round(packets / wall),
              "peak_rss_mb": round(peak_mb, 1), "rss_limit_mb": RSS_LIMIT_MB, "exit_code": rc,
              "findings_lines": len(lines)}
    (bp.OUT / "live-results.json").write_text(json.dumps(result, indent=1))
    print(f"live capture on a pipe: {packets:,} packets in {wall:.1f} s ({packets / wall:,.0f} packets/s), "
          f"peak RSS {peak_mb:.0f} MB (target < {RSS_LIMIT_MB} MB): "
          f"{'ok' if peak_mb < RSS_LIMIT_MB else 'OVER'}; exit {rc}, {len(lines)} ndjson lines")
    if rc not in (0, 1):
        print(err[-2000:], file=sys.stderr)


if __name__ == "__main__":
    main()
