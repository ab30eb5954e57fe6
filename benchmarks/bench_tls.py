"""`make bench` (TLS): `kaudit decode pcap` of a TLS capture with its key log against its
plaintext twin in the same run, and tshark on the TLS capture with the same key log.

The captures (generated once, cached in benchmarks/out/): the connections of the Kafka 4.1.0
corpus captures (../shared/corpus/real-kafka-4.1.0, or KAUDIT_CORPUS) replayed by
tests/capture/tls_craft.py - through OpenSSL (TLS 1.3, TLS_AES_256_GCM_SHA384, OpenSSL's choice,
or KAUDIT_BENCH_TLS=1.2 for ECDHE-RSA-AES128-GCM-SHA256) and as plaintext, in TCP segments of
KAUDIT_BENCH_MSS bytes (1448: a 1500-byte link), KAUDIT_BENCH_COPIES times over (1; copies
follow one another in time, reusing the corpus's ports). Each decode runs in this process, interleaved over
KAUDIT_BENCH_ROUNDS rounds (3); the best of each is reported. Results: benchmarks/out/tls-results.json.
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

from kaudit.capture.tls.keylog import KeyLog  # noqa: E402
from kaudit.sources.pcap import PcapOptions, PcapSummary, decode_capture  # noqa: E402
from tests.capture import tls_craft  # noqa: E402
from tests.conftest import CORPUS  # noqa: E402

OUT = ROOT / "benchmarks" / "out"
PORTS = frozenset({9092, 9093, 9094})


def sources() -> list[Path]:
    base = CORPUS if CORPUS.is_dir() else Path(os.environ.get("KAUDIT_CORPUS", str(CORPUS)))
    found = sorted((base / "real-kafka-4.1.0").glob("*/*.pcap*"))
    found = [p for p in found if p.suffix in (".pcap", ".pcapng")]
    if not found:
        sys.exit(f"no corpus captures under {base} (set KAUDIT_CORPUS)")
    return found * int(os.environ.get("KAUDIT_BENCH_COPIES", "1"))


def build(version: str, mss: int):
    OUT.mkdir(parents=True, exist_ok=True)
    tls, keys, plain = OUT / f"tls-{version}.pcap", OUT / f"tls-{version}.keys", OUT / f"tls-plain-{mss}.pcap"
    src = sources()
    cipher = "ECDHE-RSA-AES128-GCM-SHA256" if version == "1.2" else None
    if not tls.exists():
        tls_craft.make(src, tls, keys, version=version, cipher=cipher, mss=mss, all_handshakes=True)
    if not plain.exists():
        tls_craft.make(src, plain, OUT / "plain.keys", version="plain", mss=mss, all_handshakes=True)
    return tls, keys, plain


def decode(path: Path, keys) -> tuple[float, PcapSummary, int]:
    summary, rows = PcapSummary(), 0
    t0 = time.perf_counter()
    for kind, table in decode_capture(str(path), PcapOptions(kafka_ports=PORTS, tls_keys=keys, jobs=1), summary):
        rows += table.num_rows if kind == "frame" else 0
    return time.perf_counter() - t0, summary, rows


def tshark(path: Path, keys: Path | None) -> float | None:
    if shutil.which("tshark") is None:
        return None
    args = ["tshark", "-r", str(path), "-Y", "kafka", "-T", "fields", "-e", "kafka.correlation_id"]
    for p in sorted(PORTS):
        args += ["-d", f"tcp.port=={p},tls", "-d", f"tls.port=={p},kafka"] if keys else ["-d", f"tcp.port=={p},kafka"]
    if keys:
        args += ["-o", f"tls.keylog_file:{keys}"]
    t0 = time.perf_counter()
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def main() -> int:
    version = os.environ.get("KAUDIT_BENCH_TLS", "1.3")
    mss = int(os.environ.get("KAUDIT_BENCH_MSS", "1448"))
    rounds = int(os.environ.get("KAUDIT_BENCH_ROUNDS", "3"))
    tls, keys_path, plain = build(version, mss)
    keys = KeyLog.from_files([keys_path])
    best = {"tls": None, "plain": None}
    facts = {}
    for _ in range(rounds):
        for name, path, k in (("plain", plain, None), ("tls", tls, keys)):
            dt, summary, frames = decode(path, k)
            best[name] = dt if best[name] is None else min(best[name], dt)
            facts[name] = {"packets": summary.packets, "frames": frames, "bytes": path.stat().st_size,
                           "tls": summary.tls}
    assert facts["tls"]["frames"] == facts["plain"]["frames"], facts
    ts_tls, ts_plain = tshark(tls, keys_path), tshark(plain, None)
    res = {
        "tls_version": version, "mss": mss, "rounds": rounds,
        "plain": {**facts["plain"], "best_s": round(best["plain"], 4),
                  "packets_per_s": round(facts["plain"]["packets"] / best["plain"])},
        "tls": {**facts["tls"], "best_s": round(best["tls"], 4),
                "packets_per_s": round(facts["tls"]["packets"] / best["tls"])},
        "tls_vs_plain_speed": round(best["plain"] / best["tls"], 3),
        "tshark_tls_s": None if ts_tls is None else round(ts_tls, 3),
        "tshark_plain_s": None if ts_plain is None else round(ts_plain, 3),
        "tls_vs_tshark_tls": None if ts_tls is None else round(ts_tls / best["tls"], 2),
    }
    (OUT / "tls-results.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
