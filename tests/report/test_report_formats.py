"""Goldens of the audit report's formats on the demo inputs (the bundled log dir and captures):
the table (text), JSON, SARIF (also valid against the SARIF 2.1.0 schema, vendored from OASIS:
tests/report/sarif-schema-2.1.0.json) and the HTML report's structure. Regenerate with
`KAUDIT_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/report/test_report_formats.py` and review."""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from tests.audit.goldens import REGEN, check_golden

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GOLDEN = HERE / "golden"
PORTS = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
DEMOS = {"segments": ["segments", "fixtures/logdirs/demo"], "pcap": ["pcap", "pcaps", *PORTS]}
runner = CliRunner()


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)   # inputs named relatively: evidence and ids do not depend on the clone


def _run(demo: str, *extra) -> str:
    r = runner.invoke(app, [*DEMOS[demo], *extra])
    assert r.exit_code == 1, r.output
    return r.stdout


def _normal(text: str) -> str:
    return text.replace(str(REPO), "<repo>").replace("0.1.0", "<version>")


def _text_golden(path: Path, text: str) -> None:
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden {path}: run with KAUDIT_REGEN_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs (regenerate if intended)"


@pytest.mark.parametrize("demo", sorted(DEMOS))
def test_table_golden(demo):
    out = _normal(_run(demo))
    _text_golden(GOLDEN / f"demo-{demo}.table.txt", out)
    # human times only: ISO-8601 with the zone, no epoch numbers
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", out)
    assert not re.search(r"\b1[67]\d{11}\b|\b1[67]\d{8}\.\d+", out), "a raw epoch time in the table"


@pytest.mark.parametrize("demo", sorted(DEMOS))
def test_json_golden(demo):
    report = json.loads(_normal(_run(demo, "-f", "json")))
    assert report["reference_time"].endswith("Z")
    check_golden(GOLDEN / f"demo-{demo}.json", report, f"demo {demo}")


@pytest.fixture(scope="module")
def sarif_schema():
    return json.loads((HERE / "sarif-schema-2.1.0.json").read_text())


@pytest.mark.parametrize("demo", sorted(DEMOS))
def test_sarif_valid_and_golden(demo, sarif_schema):
    import jsonschema

    doc = json.loads(_normal(_run(demo, "-f", "sarif")))
    jsonschema.Draft7Validator(sarif_schema).validate(doc)
    for res in doc["runs"][0]["results"]:
        assert res["partialFingerprints"]["kauditIncidentId"]
        for loc in res["locations"] + res["relatedLocations"]:
            uri = loc.get("physicalLocation", {}).get("artifactLocation", {}).get("uri")
            assert uri is None or uri.startswith("file://")   # never an empty location
    doc["runs"][0]["tool"]["driver"]["rules"] = [r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]]
    for res in doc["runs"][0]["results"]:
        res["partialFingerprints"]["kauditIncidentId"] = "<incident>"
        res["properties"].pop("incident", None)
    check_golden(GOLDEN / f"demo-{demo}.sarif.json", doc, f"demo {demo} sarif")


class _Structure(HTMLParser):
    """The parts of the HTML report a person navigates: the incident list, each incident's
    section with its pictures, the coverage and requests sections; and what it loads."""

    def __init__(self):
        super().__init__()
        self.out = {"incident_list": 0, "sections": [], "coverage": False, "latency": False,
                    "external": [], "scripts": 0}
        self.in_h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href"):
            v = a.get(k)
            if v and not v.startswith("#") and (tag != "a" or "://" in v):
                self.out["external"].append(v)
        if tag == "script":
            self.out["scripts"] += 1
        if tag == "section" and "incident" in (a.get("class") or ""):
            self.out["sections"].append({"charts": []})
        if tag == "div" and a.get("class") == "chart":
            if a.get("data-chart") == "latency":
                self.out["latency"] = True
            elif self.out["sections"]:
                self.out["sections"][-1]["charts"].append(a["data-chart"])
        if tag == "h2" and a.get("id") == "coverage":
            self.out["coverage"] = True
        if tag == "li" and self.out["sections"] == [] and not self.out["coverage"]:
            self.out["incident_list"] += 1


@pytest.mark.parametrize("demo", sorted(DEMOS))
def test_html_structure_golden(demo, tmp_path):
    out = tmp_path / "report.html"
    r = runner.invoke(app, [*DEMOS[demo], "-f", "html", "-o", str(out)])
    assert r.exit_code == 1, r.output
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "</html>" in text
    p = _Structure()
    p.feed(text)
    s = p.out
    assert s["external"] == []                       # offline: nothing loaded from anywhere
    assert s["sections"] and any(i["charts"] for i in s["sections"])
    check_golden(GOLDEN / f"demo-{demo}.html-structure.json", s, f"demo {demo} html")
    assert len(text) < 8 << 20 and os.path.getsize(out) > 3 << 20   # plotly.js embedded once
