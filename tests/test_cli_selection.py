"""What a person asks to see, and what kaudit refuses: the selection options on audit and
decode commands, --min-severity, exit 3 for inputs holding nothing kaudit can read (saying what
was expected) and for a selection that matches nothing, a folder given to `pcap`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from tests.sources.pcap.craft import Conn, write_capture

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "fixtures" / "logdirs" / "demo"
PCAPS = REPO / "pcaps"
PORTS = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def findings(*args):
    r = run(*args, "-f", "json")
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


# ---- selection on audits -------------------------------------------------------------------------

def test_topic_and_producer_select_findings_and_incidents():
    rep = findings("segments", DEMO, "--topic", "demo-payments")
    assert {f["topic"] for f in rep["findings"]} == {"demo-payments"}
    assert rep["selection"]["text"] == "topic demo-payments" and rep["selection"]["findings_total"] > len(rep["findings"])
    assert {i["kind"] for i in rep["incidents"]} == {"duplicate", "sequence"}
    rep = findings("segments", DEMO, "--producer-id", "3100")
    assert [f["rule"] for f in rep["findings"]] == ["fenced-epoch"]
    rep = findings("pcap", PCAPS, *PORTS, "--transactional-id", "java-fence")
    assert {f["transactional_id"] for f in rep["findings"]} == {"java-fence"}
    rep = findings("pcap", PCAPS, *PORTS, "--topic", "crafted-seq2", "--partition", "0")
    assert rep["findings"] and {(f["topic"], f["partition"]) for f in rep["findings"]} == {("crafted-seq2", 0)}


def test_time_window_selects_by_when_it_happened():
    rep = findings("pcap", PCAPS, *PORTS)
    zombie = [f for f in rep["findings"] if f["rule"] == "fenced-epoch"]
    t0 = min(f["first_ts_ms"] for f in zombie)
    win = findings("pcap", PCAPS, *PORTS, "--since", t0 - 1000, "--until", "2026-11-21T04:21:59Z")
    assert win["findings"] and all(t0 - 1000 <= (f["last_ts_ms"] or f["first_ts_ms"]) for f in win["findings"])
    assert {f["rule"] for f in win["findings"]} >= {"fenced-epoch"}
    assert not [f for f in win["findings"] if f["topic"] == "crafted-seq2"]   # minutes later


@pytest.mark.parametrize("args, says", [
    (("--topic", "nosuch"), "no topic nosuch (the input holds topics: __consumer_offsets, __transaction_state, demo-corrupt"),
    (("--producer-id", "42"), "no producer id 42"),
    (("--partition", "7"), "no partition 7"),
    (("--since", "2030-01-01T00:00:00Z"), "the evidence spans 2026-01-01T00:00:00.000Z to "),
])
def test_a_selection_matching_nothing_exits_3(args, says):
    r = run("segments", DEMO, *args)
    assert r.exit_code == 3
    assert "the selection matches nothing in the input" in r.output and says in r.output


def test_min_severity():
    table = run("pcap", PCAPS, *PORTS).stdout
    # info incidents: 11-crafted's write under the id its client among them
    # had asked to replace (KIP-360, wire_produce._after_move)
    assert "2 info incident(s) hidden: --min-severity info shows them" in table
    full = run("pcap", PCAPS, *PORTS, "--min-severity", "info").stdout
    assert full.splitlines()[0].startswith("kaudit pcap: 6 incident(s) (1 error, 3 warning, 2 info)")
    assert "hidden" not in full.splitlines()[6]
    only = findings("pcap", PCAPS, *PORTS, "--min-severity", "warning")
    assert only["findings"] and {f["severity"] for f in only["findings"]} == {"error", "warning"}
    assert len(findings("pcap", PCAPS, *PORTS)["findings"]) == 76    # machine formats: everything


# ---- wrong and empty inputs ----------------------------------------------------------------------

def test_a_folder_without_kafka_data_exits_3(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    for cmd in (("segments",), ("decode", "segments"), ("txn",)):
        r = run(*cmd, tmp_path)
        assert r.exit_code == 3, (cmd, r.output)
        assert "expected: a broker's log dir" in r.output


def test_a_capture_given_to_segments_says_so():
    r = run("segments", PCAPS / "05-fence-java.pcap")
    assert r.exit_code == 3
    assert "is a pcap capture: audit it with `kaudit pcap`" in r.output


def test_a_folder_given_to_pcap_reads_its_captures(tmp_path):
    rep = findings("pcap", PCAPS, *PORTS)
    assert [Path(p).name for p in rep["inputs"]] == sorted(p.name for p in PCAPS.glob("*.pcap"))
    r = run("pcap", tmp_path)
    assert r.exit_code == 3 and "a folder with no pcap or pcapng capture in it" in r.output
    r = run("decode", "pcap", PCAPS, "--kind", "connection", "-f", "ndjson", *PORTS)
    assert r.exit_code == 0 and r.stdout


def test_a_capture_without_kafka_traffic_exits_3(tmp_path):
    cap = tmp_path / "http.pcap"
    write_capture(cap, Conn([(0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), (1, b"HTTP/1.1 200 OK\r\n\r\n")],
                            server=("10.0.0.2", 80)))
    for cmd in (("pcap",), ("decode", "pcap")):
        r = run(*cmd, cap)
        assert r.exit_code == 3, (cmd, r.output)
        assert "no Kafka traffic in" in r.output and "--kafka-port" in r.output
    r = run("segments", cap)
    assert r.exit_code == 3


# ---- selection on decode -------------------------------------------------------------------------

def test_decode_selection_keeps_rows_of_the_selection():
    r = run("decode", "segments", DEMO, "--producer-id", "3000", "-f", "ndjson")
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert {x["producer_id"] for x in rows if "producer_id" in x} == {3000}
    assert {x["kind"] for x in rows} <= {"batch", "log_dir", "skipped", "decode_issue", "partition_metadata",
                                         "snapshot_entry", "txnindex_entry"}
    r = run("decode", "segments", DEMO, "--topic", "demo-zombie", "--deep", "-f", "table")
    assert r.exit_code == 0 and "demo-zombie-0" in r.stdout and "demo-payments" not in r.stdout
    assert "selection: topic demo-zombie" in r.stdout
    r = run("decode", "segments", DEMO, "--topic", "nosuch")
    assert r.exit_code == 3 and "matches no row" in r.output
    r = run("decode", "pcap", PCAPS / "11-crafted-sequence-anomalies.pcap", "--producer-id", "3002", "-f", "ndjson", *PORTS)
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert rows and {x["producer_id"] for x in rows if x["kind"] in ("batch", "frame")} == {3002}


def test_decode_pcap_table_times_have_date_and_zone():
    r = run("decode", "pcap", PCAPS / "11-crafted-sequence-anomalies.pcap", "-f", "table", *PORTS)
    assert r.exit_code == 0
    assert re.search(r"2026-11-21T04:26:5\d\.\d{6}Z", r.stdout)
    # ids are never cut when piped: the longest topic names are whole
    assert "crafted-seq2-0" in r.stdout and "…" not in r.stdout


def test_txn_table_times_are_human_and_ids_whole():
    r = run("txn", DEMO)
    assert r.exit_code == 0
    assert "demo-txn-21" in r.stdout and "2026-01-01T00:00:00.070Z" in r.stdout and "1 min" in r.stdout
    assert "2026-01-01T00:00:00.170Z  CompleteCommit" in r.stdout and "…" not in r.stdout
    r = run("txn", DEMO, "--transactional-id", "nosuch")
    assert r.exit_code == 3 and "of transactional ids demo-txn-21" in r.output
