"""The Spark engine's memory is bounded like the local engine's: rows reach the JVM in bounded
Arrow batches whatever a segment holds, and a decode reaches the driver a task at a time
(engine.spark._streamed). The read tasks are plain Python (checked here without Spark); the
whole path runs in a subprocess on a small JVM heap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from fixtures.builder import write_bench_segment
from kaudit.audit.folds import Rows
from kaudit.engine import spark_tasks as T
from kaudit.engine.plan import disk_audit
from kaudit.engine.spark_tasks import PAYLOAD, TAG, TAP, Job, from_ipc, read_tasks
from kaudit.sources.splits import split_plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def many_records(tmp_path_factory) -> Path:
    """A segment of 16 KiB batches of 148 records each: 48 MiB, ~440 k records."""
    d = tmp_path_factory.mktemp("memory") / "t-0"
    d.mkdir()
    write_bench_segment(d / "00000000000000000000.log", target_bytes=48 << 20, shape="16k")
    return d.parent


def test_read_tasks_ship_bounded_batches_whatever_a_segment_holds(many_records, monkeypatch):
    monkeypatch.setattr(T, "BATCH_BYTES", 1 << 20)
    monkeypatch.setattr(T, "PAYLOAD_ROWS", 5000)
    audit = disk_audit([str(many_records)], deep=True, folds=())
    tasks = [(t, False) for t in split_plan(audit.layout, 1 << 40)]
    assert len(tasks) == 1   # the whole segment in one task: its rows still come in pieces
    job = Job(audit, tasks, tap=Rows())
    records = 0
    batches = list(read_tasks(job, [pa.RecordBatch.from_pydict({"id": [0]})]))
    assert len(batches) > 20
    for rb in batches:
        sizes = [len(p) for p in rb.column(PAYLOAD).to_pylist()]
        assert sum(sizes) <= 1 << 20 or len(sizes) == 1
        for tag, payload in zip(rb.column(TAG).to_pylist(), rb.column(PAYLOAD).to_pylist()):
            if tag.startswith(TAP):
                t = from_ipc(payload)
                assert t.num_rows <= 5000
                records += t.num_rows if tag == TAP + "record" else 0
    assert records == 148 * sum(1 for _ in _batches(many_records))


def _batches(d: Path):
    from kaudit.engine.local import decode_segments

    _, chunks = decode_segments([str(d)])
    for kind, t in chunks:
        if kind == "batch":
            yield from range(t.num_rows)


def test_a_decode_is_cut_in_small_tasks(many_records):
    from kaudit.engine import spark as S

    assert S.DECODE_TASK_BYTES <= 16 << 20
    p = disk_audit([str(many_records)], folds=()).layout
    tasks = split_plan(p, S.DECODE_TASK_BYTES)
    assert len(tasks) >= 2


# Run in a subprocess with its own JVM (not this process's gateway): two decodes through the CLI
# in one session, the first one small (classes loaded, Python workers started), the JVM's live
# heap measured after a full GC before and after the second, and the driver's peak.
_TWO_DECODES = """
import json, resource, sys
from kaudit.cli import app
from kaudit.engine import spark as S

def decode(path, out):
    argv = ["decode", "segments", path, "--deep", "--engine", "spark", "--master", "local[1]", "--kind", "record",
            "-o", out, "--spark-conf", "spark.driver.memory=256m",
            "--spark-conf", "spark.testing.reservedMemory=0"]   # Spark refuses heaps under 450 MiB otherwise
    try:
        code = app(argv, standalone_mode=False)
    except SystemExit as e:
        code = e.code
    assert code in (0, None), code

def live_heap():
    jvm = S._SESSION._jvm
    for _ in range(3):
        jvm.java.lang.System.gc()
    rt = jvm.java.lang.Runtime.getRuntime()
    return rt.totalMemory() - rt.freeMemory()

small, big, out = sys.argv[1:4]
decode(small, out + ".warm")
before = live_heap()
decode(big, out)
after = live_heap()
print(json.dumps({"before": before, "after": after,
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}), file=sys.stderr)
"""


def test_deep_decode_on_a_small_heap_keeps_nothing_per_row(many_records, tmp_path):
    """`kaudit decode segments --deep --engine spark` with a 256 MiB driver heap (the local
    master's executor lives in it too): every record reaches the output, in order, the driver's
    Python stays small, and the JVM keeps nothing of the rows it passed on. Before: Spark 4's
    DAGScheduler kept every partition job of DataFrame.toLocalIterator with its collected rows
    (activeQueryToJobs: the jobs of a SQL execution that had already ended), ~0.45 bytes of
    heap per byte of --deep input for the session's life (here +22 MB of live heap; 1.1 GiB
    ran a 512 MiB heap out). Now: +0-1 MB."""
    small = tmp_path / "small" / "t-0"
    small.mkdir(parents=True)
    write_bench_segment(small / "00000000000000000000.log", target_bytes=1 << 20, shape="16k")
    out = tmp_path / "rows.ndjson"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    r = subprocess.run([sys.executable, "-c", _TWO_DECODES, str(small.parent), str(many_records), str(out)],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OutOfMemoryError" not in r.stderr
    n = sum(1 for _ in open(out))
    assert n == 148 * sum(1 for _ in _batches(many_records))
    with open(out) as f:
        assert json.loads(f.readline())["offset"] == 0
    m = json.loads(r.stderr.strip().splitlines()[-1])
    size = sum(f.stat().st_size for f in many_records.rglob("*") if f.is_file())
    grown = m["after"] - m["before"]
    assert grown < size // 16, (grown, m)
    # the driver's own peak: 242 MB measured alone (pyspark, pyarrow and pandas loaded), ~640 MB
    # within the full suite (not explained); 343 MB on this input when every row was collected at
    # once, growing with the input (3.7 GB on 1.1 GiB, where the streamed decode stays at 235 MB).
    # A sanity bound: the bounded batches are checked above, the streaming on 1.1 GiB by hand.
    assert m["peak_kb"] < 1 << 20, m


def test_a_capture_decode_streams_to_the_driver(tmp_path):
    """`kaudit decode pcap --engine spark`: the chunks come as they are read (nothing is read
    before they are asked for), the captures' summaries once they are, the rows those of the
    local engine."""
    from kaudit.engine import local as L
    from kaudit.engine import spark as S
    from kaudit.sources.pcap import PcapOptions
    from tests.audit.wire.test_wire_golden import CASES

    path = tmp_path / "frames.pcap"
    CASES["frames"](path)
    summaries: dict = {}
    errors, chunks = S.decode_pcaps([str(path)], PcapOptions(), summaries, S.SparkOptions(master="local[2]"))
    assert errors == [] and summaries == {} and not isinstance(chunks, list)
    got = [(k, t) for k, t in chunks if t.num_rows]
    local_summaries: dict = {}
    _, local = L.decode_pcaps([str(path)], PcapOptions(), local_summaries)
    want = [(k, t) for k, t in local if t.num_rows]
    assert {p: s.packets for p, s in summaries.items()} == {p: s.packets for p, s in local_summaries.items()}
    assert [k for k, _ in got] == [k for k, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert a.equals(b)
