"""`make bench`, issue 6: the Spark engine against the local engine on ≥ 2 GiB of segments.

Input (generated once, cached in benchmarks/out/bench-spark-<MB>/): a log dir of 4 partitions,
one segment each of KAUDIT_BENCH_SPARK_SEGMENT_MB (default 600 MiB: 2.3 GiB in all; 2000 gives
7.8 GiB), 16 KiB batches (KAUDIT_BENCH_SPARK_SHAPE=small: one ~100-byte record per batch, in
bench-spark-<MB>-small/), one idempotent producer per partition (every batch goes through the
sequence rules). Each partition is a core's share or less of the input, so Spark reads it whole
in one task that also runs its per-partition folds (engine.spark.whole_key_bytes); a bigger one
would be cut at index positions and shuffled. `make bench` runs both shapes: the 16 KiB one is
bound by memory bandwidth (CRCs over mapped pages), the one-record one by the Python pipeline.

In the same run, best of RUNS (5 for 16 KiB batches, 2 for one-record ones) after a warm-up:
- local engine: `kaudit segments DIR --engine local --format json` (one process), and the same
  audit in-process (`engine.local.audit_segments`, imports done: the fair match for Spark's
  "once the JVM is up");
- Spark `local[1]` and `local[2]`: a child process per master (one session per process) starts
  the session (start-up time, reported apart), warms the Python workers on a tiny log dir, then
  times `engine.spark.audit_segments` (decode + audit + findings on the driver).
Memory: the driver's Python process (ru_maxrss), the JVM (VmHWM; in local mode it is driver and
executor) and the largest Python worker (VmHWM), sampled from /proc.
The machine's own two-core ceiling, in the same run (machine_ceiling): a pure-Python loop and the
local engine's audit of one partition, each alone and two at once in two processes.
Targets: local[2] / local[1] ≥ 1.7; local[2] ≥ 1.2 × the local engine; driver ≤ 1 GiB; no
worker near a segment's size. Results: benchmarks/out/spark-results-<MB>[-small].json.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "out"
SHAPE = os.environ.get("KAUDIT_BENCH_SPARK_SHAPE", "16k")  # fixtures.builder.bench shapes: 16k | small
DATA = OUT / f"bench-spark-{os.environ.get('KAUDIT_BENCH_SPARK_SEGMENT_MB', '600')}{'' if SHAPE == '16k' else '-' + SHAPE}"
PARTITIONS = 4
SEGMENT_BYTES = int(os.environ.get("KAUDIT_BENCH_SPARK_SEGMENT_MB", "600")) << 20
MASTERS = ("local[1]", "local[2]")
# timed runs per engine (best is kept): the 16 KiB shape takes about a second a run, where this
# shared machine's noise is tens of percent
RUNS = int(os.environ.get("KAUDIT_BENCH_SPARK_RUNS", "5" if SHAPE == "16k" else "2"))


def generate() -> Path:
    from fixtures.builder.bench import write_bench_segment

    stamp = DATA / ".complete"
    if stamp.exists() and stamp.read_text() == str(SEGMENT_BYTES):
        return DATA
    for p in range(PARTITIONS):
        d = DATA / f"spark-{p}"
        d.mkdir(parents=True, exist_ok=True)
        write_bench_segment(d / "00000000000000000000.log", target_bytes=SEGMENT_BYTES, producer_id=1000 + p,
                            shape=SHAPE)
    stamp.write_text(str(SEGMENT_BYTES))
    return DATA


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _warm(path: Path) -> None:
    for f in path.rglob("*.log"):
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass


# -- memory sampling of this process's descendants ---------------------------------------------

def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _hwm_mb(pid: int) -> tuple[str, float]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return cmd, int(line.split()[1]) / 1024
    except OSError:
        pass
    return "", 0.0


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak = {"jvm": 0.0, "worker": 0.0}
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            todo, seen = [os.getpid()], set()
            while todo:
                pid = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                todo.extend(_children(pid))
                if pid == os.getpid():
                    continue
                cmd, mb = _hwm_mb(pid)
                key = "jvm" if "java" in cmd.split(" ")[0] else "worker" if "python" in cmd else None
                if key:
                    self.peak[key] = max(self.peak[key], mb)
            time.sleep(0.2)


def child_local(path: str, warm_path: str) -> None:
    """The local engine in-process, timed like the Spark children (imports done, no report)."""
    from kaudit.engine import local as L

    L.audit_segments([warm_path])
    runs = []
    for _ in range(RUNS):
        t = time.perf_counter()
        run = L.audit_segments([path])
        runs.append(time.perf_counter() - t)
    print(json.dumps({"audit_s": min(runs), "runs": runs, "findings": len(run.findings),
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def child(master: str, path: str, warm_path: str) -> None:
    from kaudit.engine import spark as S

    sampler = Sampler()
    sampler.start()
    t = time.perf_counter()
    opts = S.SparkOptions(master=master)
    S.session(opts)
    startup = time.perf_counter() - t
    S.audit_segments([warm_path], spark_options=opts)  # Python workers up, imports done
    runs = []
    for _ in range(RUNS):
        t = time.perf_counter()
        run = S.audit_segments([path], spark_options=opts)
        runs.append(time.perf_counter() - t)
    sampler.stop = True
    sampler.join()
    print(json.dumps({"master": master, "startup_s": startup, "audit_s": min(runs), "runs": runs,
                      "findings": len(run.findings), "batches": run.coverage["batches"],
                      "driver_python_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "jvm_mb": sampler.peak["jvm"], "worker_max_mb": sampler.peak["worker"]}))


def local_engine(path: Path) -> dict:
    cmd = [sys.executable, "-m", "kaudit", "segments", str(path), "--engine", "local", "--format", "json",
           "--output", str(OUT / "spark-bench-local.json")]
    runs, rss = [], 0.0
    for i in range(RUNS + 1):
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        if i:  # the first is the warm-up
            runs.append(time.perf_counter() - t)
        rss = max(rss, usage.ru_maxrss / 1024)
    findings = json.loads((OUT / "spark-bench-local.json").read_text())["summary"]["findings"]
    return {"audit_s": min(runs), "runs": runs, "rss_mb": rss, "findings": findings}


CALIBRATION_RUNS = 3
_LOOP = 25_000_000  # iterations of the pure-Python loop: about a second here


def child_calibrate(what: str, target: str) -> None:
    """One timed unit of work for the machine's own two-core ceiling: `loop` (pure Python) or
    `decode` (the local engine's audit of one partition's log dir, imports done)."""
    if what == "loop":
        t = time.perf_counter()
        s = 0
        for i in range(_LOOP):
            s += i & 7
    else:
        from kaudit.engine import local as L

        L.audit_segments([str(ROOT / "fixtures" / "logdirs" / "demo")])
        t = time.perf_counter()
        L.audit_segments([target])
    print(json.dumps({"s": time.perf_counter() - t}))


def _timed_children(what: str, targets: list[str]) -> list[float]:
    procs = [subprocess.Popen([sys.executable, __file__, "child-calibrate", what, t], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True) for t in targets]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1])["s"] for p in procs]


def machine_ceiling(path: Path) -> dict:
    """What two processes get out of this machine's two cores, measured in the same run: the
    same unit of work alone, then two at once (best of CALIBRATION_RUNS each); ceiling =
    2 x alone / the slower of the pair. No engine can scale past it: a Spark ratio below 1.7 is
    the engine's fault only where this ceiling is well above 1.7."""
    parts = [str(path / f"spark-{p}") for p in range(2)]
    out = {}
    for what, pair in (("loop", ["-", "-"]), ("decode", parts)):
        alone = min(_timed_children(what, pair[:1])[0] for _ in range(CALIBRATION_RUNS))
        both = min(max(_timed_children(what, pair)) for _ in range(CALIBRATION_RUNS))
        out[what] = {"alone_s": alone, "two_at_once_s": both, "ceiling": 2 * alone / both}
    return out


def main() -> None:
    path = generate()
    size = _size(path)
    _warm(path)
    warm_dir = ROOT / "fixtures" / "logdirs" / "demo"
    results = {"input_bytes": size, "segments": PARTITIONS, "segment_bytes": SEGMENT_BYTES, "shape": SHAPE}
    results["machine_two_core_ceiling"] = machine_ceiling(path)
    results["local_engine"] = local_engine(path)
    out = subprocess.run([sys.executable, __file__, "child-local", str(path), str(warm_dir)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    results["local_in_process"] = json.loads(out.stdout.strip().splitlines()[-1])
    for master in MASTERS:
        out = subprocess.run([sys.executable, __file__, "child", master, str(path), str(warm_dir)], cwd=ROOT,
                             capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"spark child {master} failed:\n{out.stderr[-3000:]}")
        results[master] = json.loads(out.stdout.strip().splitlines()[-1])
    gib = size / (1 << 30)
    one, two, loc = results["local[1]"]["audit_s"], results["local[2]"]["audit_s"], results["local_engine"]["audit_s"]
    results["scaling_2_over_1"] = one / two
    results["spark2_over_local"] = loc / two
    inproc = results["local_in_process"]["audit_s"]
    results["spark2_over_local_in_process"] = inproc / two
    results["same_findings"] = len({results["local_engine"]["findings"], results["local[1]"]["findings"],
                                     results["local[2]"]["findings"]}) == 1
    (OUT / f"spark-results-{SEGMENT_BYTES >> 20}{'' if SHAPE == '16k' else '-' + SHAPE}.json").write_text(json.dumps(results, indent=1))
    print(f"{gib:.2f} GiB of segments ({PARTITIONS} x {SEGMENT_BYTES >> 20} MiB), findings equal: "
          f"{results['same_findings']}")
    print(f"  local engine      {loc:6.2f} s  {gib / loc:5.2f} GiB/s  RSS {results['local_engine']['rss_mb']:.0f} MB"
          "  (`kaudit segments` process: start-up and JSON report included)")
    print(f"  local in-process  {inproc:6.2f} s  {gib / inproc:5.2f} GiB/s  (audit_segments call, imports done)")
    for m in MASTERS:
        r = results[m]
        print(f"  spark {m:10s}  {r['audit_s']:6.2f} s  {gib / r['audit_s']:5.2f} GiB/s  start-up "
              f"{r['startup_s']:.1f} s  driver py {r['driver_python_mb']:.0f} MB  JVM {r['jvm_mb']:.0f} MB  "
              f"largest worker {r['worker_max_mb']:.0f} MB")
    print(f"  local[2] / local[1] = {results['scaling_2_over_1']:.2f} (target >= 1.7); "
          f"local[2] vs local engine = {results['spark2_over_local']:.2f}x (target >= 1.2), "
          f"vs local in-process = {results['spark2_over_local_in_process']:.2f}x")
    for what, c in results["machine_two_core_ceiling"].items():
        print(f"  this machine, two processes at once ({what}): {c['alone_s']:.2f} s alone, "
              f"{c['two_at_once_s']:.2f} s two at once: two-core ceiling {c['ceiling']:.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(*sys.argv[2:5])
    elif len(sys.argv) > 1 and sys.argv[1] == "child-calibrate":
        child_calibrate(*sys.argv[2:4])
    elif len(sys.argv) > 1 and sys.argv[1] == "child-local":
        child_local(*sys.argv[2:4])
    else:
        main()
