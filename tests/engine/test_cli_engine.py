"""The engine options on the command line: --engine, --master, --spark-conf, --spark-threshold,
--parquet; the report says which engine ran. Spark runs in this test process's one session."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from kaudit.cli_engine import parse_size
from kaudit.engine import spark as S

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "logdirs" / "demo"
PCAP = ROOT / "pcaps"
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def spark():
    return S.session(S.SparkOptions(master="local[2]"))


def _json(args) -> tuple[dict, int]:
    r = runner.invoke(app, args + ["--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout), r.exit_code


def _strip(report: dict) -> dict:
    report = dict(report)
    report.pop("engine")
    report.pop("application_id", None)
    return report


def test_segments_on_spark_reports_the_engine_and_the_local_findings():
    spark_report, code = _json(["segments", str(DEMO), "--engine", "spark"])
    local_report, local_code = _json(["segments", str(DEMO), "--engine", "local"])
    assert spark_report["engine"] == "spark" and spark_report["application_id"].startswith("local-")
    assert local_report["engine"] == "local" and "application_id" not in local_report
    assert _strip(spark_report) == _strip(local_report) and code == local_code == 1


def test_pcap_on_spark():
    files = sorted(str(p) for p in PCAP.glob("*.pcap"))[:2]
    ports = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
    a, _ = _json(["pcap", *files, *ports, "--engine", "spark"])
    b, _ = _json(["pcap", *files, *ports, "--engine", "local"])
    assert _strip(a) == _strip(b)


def test_auto_picks_spark_above_a_threshold_given_or_with_a_master():
    assert _json(["segments", str(DEMO)])[0]["engine"] == "local"
    assert _json(["segments", str(DEMO), "--spark-threshold", "1KiB"])[0]["engine"] == "spark"
    assert _json(["segments", str(DEMO), "--master", "local[2]"])[0]["engine"] == "spark"
    assert _json(["segments", str(DEMO), "--master", "local[2]", "--engine", "local"])[0]["engine"] == "local"


def test_bad_engine_options_are_usage_errors():
    assert runner.invoke(app, ["segments", str(DEMO), "--spark-conf", "novalue"]).exit_code == 2
    assert runner.invoke(app, ["segments", str(DEMO), "--spark-threshold", "lots"]).exit_code == 2
    assert runner.invoke(app, ["segments", str(DEMO), "--engine", "flink"]).exit_code == 2
    assert parse_size("1GiB") == 1 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("10") == 10


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_parquet_tables_and_findings(engine, tmp_path):
    out = tmp_path / "pq"
    report, _ = _json(["segments", str(DEMO), "--engine", engine, "--parquet", str(out)])
    batches = pq.read_table(out / "batch.parquet")
    assert batches.num_rows == report["coverage"]["batches"]
    assert pq.read_table(out / "finding.parquet").num_rows == report["summary"]["findings"]


def test_parquet_never_inside_an_input(tmp_path):
    r = runner.invoke(app, ["segments", str(DEMO), "--engine", "local", "--parquet", str(DEMO / "out")])
    assert r.exit_code == 2


def test_txn_and_decode_on_spark(corpus):
    root = str(corpus / "real-kafka-3.0.2" / "logdirs-final")
    a = runner.invoke(app, ["txn", root, "--format", "json", "--engine", "spark"])
    b = runner.invoke(app, ["txn", root, "--format", "json", "--engine", "local"])
    assert a.exit_code == b.exit_code == 0 and json.loads(a.stdout) == json.loads(b.stdout)
    pcap = str(corpus / "real-kafka-3.0.2" / "pcap" / "03-txn-java.pcap")
    a = runner.invoke(app, ["decode", "pcap", pcap, "--engine", "spark"])
    b = runner.invoke(app, ["decode", "pcap", pcap, "--engine", "local"])
    assert a.exit_code == b.exit_code == 0
    rows_a, rows_b = a.stdout.splitlines(), b.stdout.splitlines()
    assert rows_a[:-1] == rows_b[:-1] and len(rows_a) > 100   # all but the header line
    a = runner.invoke(app, ["decode", "segments", root, "--engine", "spark"])
    b = runner.invoke(app, ["decode", "segments", root, "--engine", "local"])
    assert a.stdout.splitlines()[:-1] == b.stdout.splitlines()[:-1]
