"""`--engine auto` and `--jobs`: one machine stays on the local engine (no Spark start) unless a
master, spark-submit or a threshold the user gave says otherwise; the local engine uses the
machine's cores for inputs big enough, with the rows of one process."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from fixtures.builder.bench import write_bench_segment
from kaudit.cli import app
from kaudit.engine import decoding, local
from kaudit.engine.choice import choose_engine
from kaudit.sources import cores

runner = CliRunner()


@pytest.fixture
def no_submit(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)


def test_auto_stays_local_on_one_machine_whatever_the_size(no_submit, monkeypatch, tmp_path):
    def huge(paths, enough=None):
        raise AssertionError("no threshold was given: the inputs need not even be measured")

    monkeypatch.setattr("kaudit.engine.choice.inputs_bytes", huge)
    assert choose_engine("auto", [str(tmp_path)], None, None) == "local"


def test_auto_goes_to_spark_for_a_master_spark_submit_or_a_threshold_given(no_submit, monkeypatch, tmp_path):
    assert choose_engine("auto", [str(tmp_path)], None, "yarn") == "spark"
    (tmp_path / "x.log").write_bytes(b"\0" * 2048)
    assert choose_engine("auto", [str(tmp_path)], 1024, None) == "spark"
    assert choose_engine("auto", [str(tmp_path)], 1 << 30, None) == "local"
    assert choose_engine("local", [str(tmp_path)], 1024, "yarn") == "local"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")   # what spark-submit sets for its driver
    assert choose_engine("auto", [str(tmp_path)], None, None) == "spark"


def test_the_command_line_default_is_local(no_submit, monkeypatch, tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    write_bench_segment(d / "00000000000000000000.log", target_bytes=1 << 16, shape="small")
    chosen = []
    real = choose_engine
    monkeypatch.setattr("kaudit.engine.choice.choose_engine",
                        lambda *a: chosen.append(real(*a)) or chosen[-1])
    r = runner.invoke(app, ["segments", str(tmp_path), "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    assert json.loads(r.stdout)["engine"] == "local" and chosen == ["local"]


def test_auto_jobs_uses_the_cores_for_big_inputs(monkeypatch):
    monkeypatch.delenv("KAUDIT_JOBS", raising=False)
    monkeypatch.setattr(cores, "usable_cpus", lambda: 8)
    assert cores.auto_jobs(cores.MIN_PARALLEL_BYTES - 1) == 1
    assert cores.auto_jobs(cores.MIN_PARALLEL_BYTES) == cores.MAX_JOBS
    monkeypatch.setattr(cores, "usable_cpus", lambda: 2)
    assert cores.auto_jobs(10 << 30) == 2
    monkeypatch.setenv("KAUDIT_JOBS", "3")
    assert cores.auto_jobs(0) == 3


def _concat(chunks) -> dict:
    by_kind: dict = {}
    for kind, t in chunks:
        by_kind.setdefault(kind, []).append(t)
    return {k: pa.concat_tables(v) for k, v in by_kind.items()}


def test_parallel_decode_gives_the_rows_of_one_process(tmp_path, monkeypatch):
    for part, shape in ((0, "small"), (1, "16k")):
        d = tmp_path / f"t-{part}"
        d.mkdir()
        write_bench_segment(d / "00000000000000000000.log", target_bytes=3 << 20, shape=shape,
                            producer_id=11 + part)
    monkeypatch.setattr(decoding, "PARALLEL_SPLIT_BYTES", 256 << 10)   # many ranges per segment
    _, one = local.decode_segments([str(tmp_path)], jobs=1)
    _, two = local.decode_segments([str(tmp_path)], jobs=2)
    a, b = _concat(one), _concat(two)
    assert a.keys() == b.keys() and a["batch"].num_rows > 1000
    for kind in a:
        assert a[kind].equals(b[kind]), kind


def test_parallel_audit_gives_the_findings_of_one_process(tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    d.mkdir()
    write_bench_segment(d / "00000000000000000000.log", target_bytes=2 << 20, shape="small")
    monkeypatch.setattr(decoding, "PARALLEL_SPLIT_BYTES", 256 << 10)
    one = local.audit_segments([str(tmp_path)], jobs=1)
    two = local.audit_segments([str(tmp_path)], jobs=2)
    assert one.findings == two.findings and one.coverage == two.coverage
