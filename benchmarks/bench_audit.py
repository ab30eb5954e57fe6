"""`make bench`: end-to-end audit throughput against decode-only, on the decode benchmarks' inputs.

For each input (the 16 KiB-batch and one-record-batch segments of bench_segments.py, the capture
of bench_pcap.py, all in benchmarks/out/ — run those first), in the same run: `kaudit decode ...
--format parquet` (decode only) and `kaudit segments|pcap ... --format json` (decode + audit +
JSON report), best of two after a warm-up; wall time, and CPU time (user + system, the process
and its children: on a shared machine the steadier figure). Target (issue 19): the audit keeps ≥ 80% of the
decode-only throughput, with the same memory bounds (peak RSS ≤ 300 MB for segments, ≤ 400 MB for
the capture). Results: benchmarks/out/audit-results.json.

The transaction-heavy shape (issue 5) is generated here and cached in benchmarks/out/bench-txn/
(fixtures/builder/txn_bench.py, ~5 s): 100,000 transactions (KAUDIT_BENCH_TXNS) of 1,000
transactional producers over 50 partitions plus `__transaction_state` (Empty, Ongoing,
PrepareX, CompleteX records; every 10th transaction aborted), ~800k batches; reported in
batches/s and transactions/s, decode-only and audit interleaved (KAUDIT_BENCH_ROUNDS pairs after a
warm-up pair, 2 by default). `bench_audit.py txn` measures only that shape
(benchmarks/out/audit-txn-results.json).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "out"
TARGET_RATIO = 0.80
RSS_LIMIT_MB = {"segments": 300, "pcap": 400}
PORTS = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
LOCAL: list[str] = []   # the default command: auto stays on the local engine on one machine


def timed(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MB, CPU seconds: user + system of the process and its children)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: the audit has findings
        raise SystemExit(f"{' '.join(cmd)} failed: exit {code}")
    return elapsed, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def best(cmd: list[str]) -> tuple[float, float, float]:
    timed(cmd)  # warm-up: imports, page cache
    runs = [timed(cmd) for _ in range(2)]
    return min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)


def measure(name: str, kind: str, path: Path, units: int, unit: str, extra: list[str]) -> dict:
    py = [sys.executable, "-m", "kaudit"]
    extra = list(extra) + LOCAL
    pq = OUT / f"audit-bench-parquet-{name}"
    shutil.rmtree(pq, ignore_errors=True)
    decode_s, decode_rss, decode_cpu = best(py + ["decode", kind, str(path), "--format", "parquet", "--output", str(pq)] + extra)
    report = OUT / f"audit-{name}.json"
    audit_s, audit_rss, audit_cpu = best(py + [kind, str(path), "--format", "json", "--output", str(report)] + extra)
    findings = json.loads(report.read_text())["summary"]["findings"]
    ratio = decode_s / audit_s
    r = {
        "input": name, "units": units, "unit": unit,
        "decode_seconds": round(decode_s, 3), "audit_seconds": round(audit_s, 3),
        f"decode_{unit}/s": round(units / decode_s), f"audit_{unit}/s": round(units / audit_s),
        "audit_vs_decode": round(ratio, 3), "decode_cpu_seconds": round(decode_cpu, 3),
        "audit_cpu_seconds": round(audit_cpu, 3), "audit_vs_decode_cpu": round(decode_cpu / audit_cpu, 3),
        "decode_peak_rss_mb": round(decode_rss, 1),
        "audit_peak_rss_mb": round(audit_rss, 1), "findings": findings,
        "meets_target": ratio >= TARGET_RATIO and audit_rss <= RSS_LIMIT_MB[kind if kind == "pcap" else "segments"],
    }
    print(json.dumps(r))
    return r


TXNS = int(os.environ.get("KAUDIT_BENCH_TXNS", "100000"))


def generate_txn() -> tuple[Path, dict]:
    from fixtures.builder.txn_bench import write_txn_bench_logdir

    d = OUT / "bench-txn"
    stamp = OUT / "bench-txn.json"
    if stamp.exists() and d.is_dir():
        stats = json.loads(stamp.read_text())
        if stats.get("transactions") == TXNS and stats.get("format") == 2:   # 2: with .txnindex files
            return d, stats
    shutil.rmtree(d, ignore_errors=True)
    stats = write_txn_bench_logdir(d, transactions=TXNS)
    stamp.write_text(json.dumps(stats))
    print(f"generated bench-txn: {stats['transactions']} transactions, {stats['batches']} batches, "
          f"{stats['bytes'] / 1e6:.0f} MB in {stats['seconds']} s", file=sys.stderr)
    return d, stats


ROUNDS = int(os.environ.get("KAUDIT_BENCH_ROUNDS", "2"))


def measure_txn() -> dict:
    """The transaction shape, decode-only and audit interleaved (a warm-up pair, then ROUNDS
    pairs: a machine whose load drifts skews both alike); best time and peak RSS of each, as
    `measure` reports them, plus each round's ratio."""
    d, stats = generate_txn()
    py = [sys.executable, "-m", "kaudit"]
    pq = OUT / "audit-bench-parquet-segments-txn"
    report = OUT / "audit-segments-txn.json"
    decode = py + ["decode", "segments", str(d), "--format", "parquet", "--output", str(pq)] + LOCAL
    audit = py + ["segments", str(d), "--format", "json", "--output", str(report)] + LOCAL
    shutil.rmtree(pq, ignore_errors=True)
    timed(decode), timed(audit)  # warm-up: imports, page cache
    rounds = [(timed(decode), timed(audit)) for _ in range(max(ROUNDS, 1))]
    decode_s, decode_rss = min(x[0][0] for x in rounds), max(x[0][1] for x in rounds)
    audit_s, audit_rss = min(x[1][0] for x in rounds), max(x[1][1] for x in rounds)
    decode_cpu, audit_cpu = min(x[0][2] for x in rounds), min(x[1][2] for x in rounds)
    ratio = decode_s / audit_s
    units, txns = stats["batches"], stats["transactions"]
    r = {
        "input": "segments-txn", "units": units, "unit": "batches",
        "decode_seconds": round(decode_s, 3), "audit_seconds": round(audit_s, 3),
        "decode_batches/s": round(units / decode_s), "audit_batches/s": round(units / audit_s),
        "audit_vs_decode": round(ratio, 3), "round_ratios": [round(a[0] / b[0], 3) for a, b in rounds],
        "decode_cpu_seconds": round(decode_cpu, 3), "audit_cpu_seconds": round(audit_cpu, 3),
        "audit_vs_decode_cpu": round(decode_cpu / audit_cpu, 3),
        "round_cpu_ratios": [round(a[2] / b[2], 3) for a, b in rounds],
        "decode_peak_rss_mb": round(decode_rss, 1), "audit_peak_rss_mb": round(audit_rss, 1),
        "findings": json.loads(report.read_text())["summary"]["findings"],
        "meets_target": ratio >= TARGET_RATIO and audit_rss <= RSS_LIMIT_MB["segments"],
        "transactions": txns, "decode_transactions/s": round(txns / decode_s),
        "audit_transactions/s": round(txns / audit_s),
    }
    print(json.dumps(r))
    return r


def main() -> None:
    if sys.argv[1:] == ["txn"]:  # only the transaction-heavy shape
        r = measure_txn()
        (OUT / "audit-txn-results.json").write_text(json.dumps([r], indent=1))
        if not r["meets_target"]:
            print("the audit target was not met", file=sys.stderr)
        return
    results = []
    for shape in ("16k", "small"):
        d = OUT / f"bench-{shape}-0"
        if not d.is_dir():
            print(f"skipped {d}: run benchmarks/bench_segments.py first", file=sys.stderr)
            continue
        size = sum(f.stat().st_size for f in d.iterdir())
        results.append(measure(f"segments-{shape}", "segments", d, size, "bytes", []))
    caps = sorted(OUT.glob("bench-kafka-*.pcap"))
    if caps:
        packets = int(caps[-1].stem.rsplit("-", 1)[-1])
        results.append(measure("pcap", "pcap", caps[-1], packets, "packets", PORTS))
    else:
        print("skipped the capture: run benchmarks/bench_pcap.py first", file=sys.stderr)
    results.append(measure_txn())
    (OUT / "audit-results.json").write_text(json.dumps(results, indent=1))
    if not all(r["meets_target"] for r in results):
        print("some audit targets were not met", file=sys.stderr)


if __name__ == "__main__":
    main()
