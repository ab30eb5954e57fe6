"""The audit commands' CLI contract (`kaudit pcap`, `kaudit rules`, `kaudit explain`) with typer's
runner: every --format, exit codes (0 clean, 1 findings at or above --fail-on, 2 usage,
3 unreadable input), --select/--ignore, --now, --output, and no SASL secret in any report."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from kaudit.audit import RULES
from kaudit.cli import app
from tests.audit.wire.wirecraft import T0, batch, metadata, send
from tests.sources.pcap import kmsgs
from tests.sources.pcap import test_pcap_sasl as sasl
from tests.sources.pcap.craft import Conn, write_capture

runner = CliRunner()
P = 7001
REPORT_KEYS = {"tool", "version", "engine", "inputs", "reference_time_ms", "coverage", "summary", "findings"}


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    # anomalies: an error (sequence gap accepted), a warning (refused gap), infos
    m = (send(1, batch(P, 0, 0, 5), offset=0) + send(2, batch(P, 0, 5, 5), offset=5)
         + send(3, batch(P, 0, 5, 5), offset=5)                   # retried-batch (info)
         + send(4, batch(P, 0, 30, 2), error=45)                  # out-of-order, refused (warning)
         + send(5, batch(P, 0, 12, 2), offset=10))                # out-of-order, accepted (error)
    write_capture(d / "anomalies.pcap", Conn(m))
    # warnings and infos only
    w = send(1, batch(P, 0, 0, 5), offset=0) + send(2, batch(P, 0, 30, 2), error=45)
    write_capture(d / "warning.pcap", Conn(w))
    # infos only: a deduplicated retry
    i = send(1, batch(P, 0, 0, 5), offset=0) + send(2, batch(P, 0, 0, 5), offset=0)
    write_capture(d / "info.pcap", Conn(i))
    write_capture(d / "clean.pcap", Conn(metadata(1) + send(2, batch(P, 0, 0, 5), offset=0)))
    (d / "garbage.pcap").write_bytes(b"this is not a capture at all" * 10)
    (d / "empty.pcap").write_bytes(b"")
    return d


def _json(r) -> dict:
    return json.loads(r.stdout)


# ---- formats -----------------------------------------------------------------------------------


def test_json_report(captures):
    r = run("pcap", captures / "anomalies.pcap", "--format", "json")
    assert r.exit_code == 1, r.output
    rep = _json(r)
    assert REPORT_KEYS <= set(rep)
    assert (rep["tool"], rep["engine"], rep["command"]) == ("kaudit", "local", "pcap")
    assert rep["inputs"] == [str((captures / "anomalies.pcap").resolve())]
    assert rep["reference_time_ms"] // 1000 == int(T0)
    assert {"frames", "batches", "connections", "gaps", "packets"} <= set(rep["coverage"])
    assert rep["coverage"]["batches"] == 5
    s = rep["summary"]
    assert s["findings"] == len(rep["findings"]) == 4
    assert s["by_severity"] == {"critical": 0, "error": 1, "warning": 1, "info": 2}
    assert s["by_rule"] == {"out-of-order-sequence": 2, "producer-error": 1, "retried-batch": 1}
    assert s["unreadable_inputs"] == []
    f = rep["findings"][0]
    assert f["severity"] == "error"  # most severe first
    assert isinstance(f["details"], dict) and isinstance(f["evidence"], list)


def test_ndjson_one_finding_per_line(captures):
    js = _json(run("pcap", captures / "anomalies.pcap", "--format", "json"))
    r = run("pcap", captures / "anomalies.pcap", "--format", "ndjson")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == len(js["findings"]) and all(line.startswith("{") for line in lines)
    assert [x["id"] for x in rows] == [x["id"] for x in js["findings"]]
    assert rows == js["findings"]


def test_sarif(captures):
    js = _json(run("pcap", captures / "anomalies.pcap", "--format", "json"))
    r = run("pcap", captures / "anomalies.pcap", "--format", "sarif")
    assert r.exit_code == 1
    doc = _json(r)
    assert doc["version"] == "2.1.0" and "sarif" in doc["$schema"]
    (sarif_run,) = doc["runs"]
    driver = sarif_run["tool"]["driver"]
    assert driver["name"] == "kaudit"
    rule_ids = [x["id"] for x in driver["rules"]]
    assert set(rule_ids) == set(RULES)
    for x in driver["rules"]:
        assert x["shortDescription"]["text"] and x["fullDescription"]["text"]
        assert x["defaultConfiguration"]["level"] in ("error", "warning", "note")
    results = sarif_run["results"]
    assert len(results) == len(js["findings"])
    level = {"critical": "error", "error": "error", "warning": "warning", "info": "note"}
    for res, f in zip(results, js["findings"]):
        assert res["ruleId"] == f["rule"] and rule_ids[res["ruleIndex"]] == f["rule"]
        assert res["level"] == level[f["severity"]]
        assert res["message"]["text"] == f["message"]
        (loc,) = res["locations"]
        assert loc["physicalLocation"]["artifactLocation"]["uri"].endswith("anomalies.pcap")
        assert loc["logicalLocations"][0]["name"].startswith("frame ")
        assert res["partialFingerprints"]["kauditFindingId"] == f["id"]


def test_table(captures):
    r = run("pcap", captures / "anomalies.pcap")  # table is the default
    assert r.exit_code == 1
    out = r.stdout
    assert "kaudit" in out and "anomalies.pcap" in out and "coverage" in out
    for rule in ("out-of-order-sequence", "retried-batch", "producer-error"):
        assert rule in out
    assert "ERROR" in out and "WARNING" in out and "info" in out
    assert "remediation" in out and "evidence" in out and "timeline" in out
    assert "4 finding(s)" in out and "2 incident(s)" in out.splitlines()[0]
    clean = run("pcap", captures / "clean.pcap", "--format", "table")
    assert clean.exit_code == 0 and "no findings" in clean.stdout


def test_output_file(captures, tmp_path):
    out = tmp_path / "report.json"
    r = run("pcap", captures / "anomalies.pcap", "--format", "json", "--output", out)
    assert r.exit_code == 1
    assert "findings" not in r.stdout
    assert len(json.loads(out.read_text())["findings"]) == 4


# ---- exit codes --------------------------------------------------------------------------------


@pytest.mark.parametrize("name,fail_on,code", [
    ("clean", "info", 0),
    ("anomalies", None, 1), ("anomalies", "error", 1), ("anomalies", "critical", 0),
    ("warning", None, 0), ("warning", "warning", 1), ("warning", "error", 0),
    ("info", None, 0), ("info", "warning", 0), ("info", "info", 1),
])
def test_exit_code_follows_fail_on(name, fail_on, code, captures):
    args = ["pcap", captures / f"{name}.pcap", "--format", "json"]
    if fail_on:
        args += ["--fail-on", fail_on]
    r = run(*args)
    assert r.exit_code == code, r.output


@pytest.mark.parametrize("args", [
    ["--select", "no-such-rule"],
    ["--ignore", "retried-batch,bogus"],
    ["--format", "xml"],
    ["--fail-on", "fatal"],
    ["--now", "yesterday"],
])
def test_usage_errors_exit_2(args, captures):
    r = run("pcap", captures / "anomalies.pcap", *args)
    assert r.exit_code == 2, r.output


def test_no_input_is_a_usage_error():
    assert run("pcap").exit_code == 2


@pytest.mark.parametrize("name", ["missing", "garbage", "empty"])
def test_unreadable_input_exits_3(name, captures):
    r = run("pcap", captures / f"{name}.pcap", "--format", "json")
    assert r.exit_code == 3, r.output
    assert "unreadable input" in r.output


def test_one_unreadable_input_among_good_ones_still_reports_and_exits_3(captures):
    r = run("pcap", captures / "info.pcap", captures / "missing.pcap", "--format", "json")
    assert r.exit_code == 3
    rep = json.loads(r.stdout[:r.stdout.rindex("}") + 1])
    assert rep["summary"]["unreadable_inputs"] and "missing.pcap" in rep["summary"]["unreadable_inputs"][0]
    assert [f["rule"] for f in rep["findings"]] == ["retried-batch"]


# ---- --select / --ignore -----------------------------------------------------------------------


def _rules(r) -> list[str]:
    return [f["rule"] for f in _json(r)["findings"]]


def test_select_and_ignore(captures):
    p = captures / "anomalies.pcap"
    assert _rules(run("pcap", p, "-f", "json", "--select", "retried-batch")) == ["retried-batch"]
    both = _rules(run("pcap", p, "-f", "json", "--select", "retried-batch,producer-error"))
    assert sorted(both) == ["producer-error", "retried-batch"]
    repeat = _rules(run("pcap", p, "-f", "json", "--select", "retried-batch", "--select", "producer-error"))
    assert sorted(repeat) == sorted(both)
    rest = _rules(run("pcap", p, "-f", "json", "--ignore", "out-of-order-sequence"))
    assert "out-of-order-sequence" not in rest and "retried-batch" in rest
    assert _rules(run("pcap", p, "-f", "json", "--select", "retried-batch", "--ignore", "retried-batch")) == []
    # the exit code follows what is reported
    assert run("pcap", p, "-f", "json", "--ignore", "out-of-order-sequence").exit_code == 0
    assert run("pcap", p, "-f", "json", "--select", "out-of-order-sequence").exit_code == 1


# ---- --now -------------------------------------------------------------------------------------


def test_now(captures):
    p = captures / "info.pcap"
    default = _json(run("pcap", p, "-f", "json"))["reference_time_ms"]
    assert int(T0 * 1000) <= default < int(T0 * 1000) + 1000  # the last packet
    assert _json(run("pcap", p, "-f", "json", "--now", "1795235000123"))["reference_time_ms"] == 1795235000123
    iso = datetime(2026, 11, 21, 10, 0, 0, tzinfo=timezone.utc)
    ms = int(iso.timestamp() * 1000)
    assert _json(run("pcap", p, "-f", "json", "--now", "2026-11-21T10:00:00Z"))["reference_time_ms"] == ms
    assert _json(run("pcap", p, "-f", "json", "--now", "2026-11-21T10:00:00"))["reference_time_ms"] == ms
    assert _json(run("pcap", p, "-f", "json", "--now", "2026-11-21T12:00:00+02:00"))["reference_time_ms"] == ms


# ---- rules and explain -------------------------------------------------------------------------


def test_rules_listing():
    r = runner.invoke(app, ["rules"], env={"COLUMNS": "200"})  # wide: rich folds long cells
    assert r.exit_code == 0
    missing = [rid for rid in RULES if rid not in r.stdout]
    assert not missing, r.stdout
    rows = json.loads(run("rules", "--format", "json").stdout)
    got = {x["id"]: (x["severity"], x["scope"]) for x in rows}
    assert set(got) == set(RULES)
    assert {k: got[k][0] for k in ("retried-batch", "unanswered-request", "producer-error",
                                   "out-of-order-sequence", "fenced-epoch", "duplicate-batch",
                                   "duplicate-records", "stream-gap", "undecodable-frame")} == {
        "retried-batch": "info", "unanswered-request": "warning", "producer-error": "info",
        "out-of-order-sequence": "error", "fenced-epoch": "error", "duplicate-batch": "error",
        "duplicate-records": "error", "stream-gap": "info", "undecodable-frame": "info"}
    assert all(x["title"] for x in rows)


@pytest.mark.parametrize("rid", ["retried-batch", "unanswered-request", "fenced-epoch"])
def test_explain(rid):
    r = run("explain", rid)
    assert r.exit_code == 0
    assert r.stdout.startswith(f"{rid} ({RULES[rid].severity}, {RULES[rid].scope})")
    assert "Invariant" in r.stdout and "Benign" in r.stdout
    assert f"Remediation: {RULES[rid].remediation}" in r.stdout


def test_explain_unknown_rule_exits_2():
    r = run("explain", "no-such-rule")
    assert r.exit_code == 2 and "unknown rule" in r.output


# ---- --output never inside an input ------------------------------------------------------------


def test_output_onto_the_input_is_refused(captures, tmp_path):
    src = tmp_path / "input.pcap"
    src.write_bytes((captures / "anomalies.pcap").read_bytes())
    before = src.read_bytes()
    r = run("pcap", src, "--format", "json", "--output", src)
    assert r.exit_code == 2 and "inside an input" in r.output
    assert src.read_bytes() == before


def test_output_inside_an_audited_log_dir_is_refused(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"")
    r = run("segments", d, "--format", "json", "--output", d / "report.json")
    assert r.exit_code == 2
    assert not (d / "report.json").exists()


# ---- secrets -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_capture(tmp_path_factory):
    """test_pcap_sasl's conversations (PLAIN and SCRAM, v0 tokens and SaslAuthenticate, one with
    a lost segment inside the password), plus a PLAIN login whose answer never comes and a
    Produce refused after a PLAIN login: findings that sit right next to the secrets."""
    path = tmp_path_factory.mktemp("sasl") / "sasl-audit.pcap"
    convs = sasl._conversations()
    hs = kmsgs.sasl_handshake(0, 1)
    au = kmsgs.sasl_authenticate(1, b"\0alice\0" + sasl.PASSWORD)
    convs.append([(0, hs[0]), (1, hs[1]), (0, au[0])])  # closed before the broker answered
    convs.append([(0, hs[0]), (1, hs[1]), (0, au[0]), (1, au[1])]
                 + send(2, batch(P, 0, 0, 3), error=45))
    conns = [Conn(m, client=("10.0.0.1", 40010 + i)) for i, m in enumerate(convs)]

    def drop(s):  # as in test_pcap_sasl: a segment inside conversation 5's SaslAuthenticate
        return s.conn == 4 and s.messages == (2,) and s.index == 5

    write_capture(path, conns, segment=7, drop=drop)
    return path


@pytest.mark.parametrize("fmt", ["table", "json", "ndjson", "sarif"])
def test_no_report_format_shows_the_password(fmt, sasl_capture, tmp_path):
    r = run("pcap", sasl_capture, "--format", fmt, "--fail-on", "critical")
    assert r.exit_code == 0, r.output
    out = tmp_path / f"report.{fmt}"
    r2 = run("pcap", sasl_capture, "--format", fmt, "--output", out, "--fail-on", "critical")
    assert r2.exit_code == 0
    for blob, where in ((r.output.encode(), "stdout"), (out.read_bytes(), "--output")):
        assert b"SaslAuthenticate" in blob or b"sasl" in blob.lower() or fmt == "table"
        for f in sasl.FORBIDDEN:
            assert f not in blob, (fmt, where, f)
    if fmt == "json":
        rules = {f["rule"] for f in json.loads(out.read_text())["findings"]}
        assert {"unanswered-request", "out-of-order-sequence", "stream-gap", "undecodable-frame"} <= rules
