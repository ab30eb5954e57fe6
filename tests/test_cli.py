"""The CLI contract: formats, --output, --kind, exit codes (0 ok, 2 usage, 3 unreadable)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from typer.testing import CliRunner

from kaudit.cli import app

runner = CliRunner()
FENCE = "real-kafka-3.0.2/logdirs-final/node1/data/j-fence-0"


def run(*args):
    return runner.invoke(app, list(map(str, args)))


def test_missing_input_exits_3(tmp_path):
    r = run("decode", "segments", tmp_path / "nope")
    assert r.exit_code == 3
    assert "unreadable input" in r.output


def test_usage_errors_exit_2(tmp_path, corpus):
    assert run("decode", "segments", corpus / FENCE, "--kind", "bogus").exit_code == 2
    assert run("decode", "segments", corpus / FENCE, "--format", "parquet").exit_code == 2
    assert run("decode", "segments", corpus / FENCE, "--format", "xml").exit_code == 2
    assert run("decode", "segments").exit_code == 2


def test_output_inside_an_input_is_refused(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"")
    r = run("decode", "segments", d, "--output", d / "out.ndjson")
    assert r.exit_code == 2
    assert not (d / "out.ndjson").exists()


def test_ndjson_rows_carry_their_kind(corpus):
    r = run("decode", "segments", corpus / FENCE)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    kinds = {row["kind"] for row in rows}
    assert {"batch", "snapshot_entry", "txnindex_entry", "index_entry", "leader_epoch_entry",
            "partition_metadata"} <= kinds
    batches = [row for row in rows if row["kind"] == "batch"]
    assert [b["control_type"] for b in batches] == [None, None, None, "ABORT", None, None, "COMMIT"]
    assert all(b["replica"] == "1" and b["topic"] == "j-fence" and b["partition"] == 0 for b in batches)


def test_kind_filter_and_deep(corpus):
    r = run("decode", "segments", corpus / FENCE, "--deep", "--kind", "record")
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert {row["kind"] for row in rows} == {"record"}
    assert len(rows) == 7


def test_json_document(corpus, tmp_path):
    out = tmp_path / "rows.json"
    r = run("decode", "segments", corpus / FENCE, "--format", "json", "--output", out)
    assert r.exit_code == 0
    doc = json.loads(out.read_text())
    assert doc["tool"] == "kaudit" and doc["command"] == "decode segments"
    assert doc["counts"]["batch"] == 7
    assert len([x for x in doc["rows"] if x["kind"] == "batch"]) == 7


def test_parquet_one_file_per_kind(corpus, tmp_path):
    out = tmp_path / "pq"
    r = run("decode", "segments", corpus / FENCE, "--format", "parquet", "--output", out)
    assert r.exit_code == 0
    assert pq.read_table(out / "batch.parquet").num_rows == 7
    assert (out / "snapshot_entry.parquet").exists()


def test_table_view(corpus):
    r = run("decode", "segments", corpus / FENCE, "--format", "table")
    assert r.exit_code == 0
    assert "Dumping" in r.stdout and "j-fence-0" in r.stdout
    # batch by batch, as DumpLogSegments lists them, times in ISO-8601 with the zone
    assert "baseOffset: 3 lastOffset: 3 count: 1" in r.stdout and "endTxnMarker: ABORT coordinatorEpoch: 0" in r.stdout
    assert "CreateTime: 2026-11-21T04:21:57.601Z" in r.stdout


def test_table_view_deep_records_as_text(corpus):
    r = run("decode", "segments", corpus / FENCE, "--format", "table", "--deep")
    assert r.exit_code == 0
    assert "| offset: 0 CreateTime: 2026-11-21T04:21:57.601Z keySize: 2 valueSize: 10 sequence: 0 headers: [] " \
           "key: A0 payload: zombie-A-0" in r.stdout


def test_jobs_gives_the_same_rows(corpus):
    one = run("decode", "segments", corpus / "real-kafka-3.0.2/logdirs-final/node1/data").stdout
    two = run("decode", "segments", corpus / "real-kafka-3.0.2/logdirs-final/node1/data", "--jobs", "2").stdout
    assert one == two


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.stdout.startswith("kaudit ")
