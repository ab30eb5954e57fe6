"""The audit report: one JSON object, NDJSON (one finding per line), SARIF 2.1.0, a console view
for people (rich, report/console.py) or one HTML file (report/html.py). All of them read the same
report dict built by `build_report`: the selected findings, each with its incident id, and the
incidents they tell (report/story.py), ranked."""

from __future__ import annotations

import json
import os
from collections import Counter

from kaudit import __version__
from kaudit.audit import SEVERITIES
from kaudit.audit.registry import get
from kaudit.report import story
from kaudit.timefmt import iso_ms

SARIF_LEVEL = {"critical": "error", "error": "error", "warning": "warning", "info": "note"}


def _finding_out(f: dict) -> dict:
    out = dict(f)
    out["details"] = json.loads(f["details"]) if f.get("details") else None
    return out


def build_report(run, command: str, inputs: list[str], selection=None) -> dict:
    """`selection` (report.selection.Selection): only the findings it selects, and the
    incidents they belong to (incident ids stay those of the whole run)."""
    findings = run.findings if not selection and not getattr(selection, "min_severity", None) \
        else [f for f in run.findings if selection.finding(f)]
    by_sev = Counter(f["severity"] for f in findings)
    by_rule = Counter(f["rule"] for f in findings)
    incidents = story.incidents(findings, run.reference_time_ms)
    report = {
        "tool": "kaudit",
        "version": __version__,
        "command": command,
        "engine": run.engine,
        **({"application_id": run.application_id} if getattr(run, "application_id", None) else {}),
        "inputs": [os.path.abspath(p) for p in inputs],
        "reference_time_ms": run.reference_time_ms,
        "reference_time": iso_ms(run.reference_time_ms) if run.reference_time_ms is not None else None,
        "coverage": {k: v for k, v in run.coverage.items() if not k.startswith("_")},
        "summary": {"findings": len(findings),
                    "incidents": sum(1 for i in incidents if i["kind"] != "coverage"),
                    "by_severity": {s: by_sev.get(s, 0) for s in reversed(SEVERITIES)},
                    "by_rule": dict(sorted(by_rule.items())),
                    "unreadable_inputs": run.errors},
        "incidents": incidents,
        "findings": [_finding_out(f) for f in findings],
    }
    if selection is not None and (selection or selection.min_severity):
        report["selection"] = {"text": selection.text(), "findings_total": len(run.findings)}
    return report


WHOLE_JSON_FINDINGS = 20_000   # up to this many findings the report is encoded at once


def write_json(report: dict, out) -> None:
    # json.dump writes each of the encoder's many small pieces (~10 ms for 110 findings), one
    # string is written at once (~6 ms); a very large report is streamed: memory stays bounded
    if len(report.get("findings") or ()) <= WHOLE_JSON_FINDINGS:
        out.write(json.dumps(report, indent=1, default=str))
    else:
        json.dump(report, out, indent=1, default=str)
    out.write("\n")


def write_ndjson(report: dict, out) -> None:
    for f in report["findings"]:
        out.write(json.dumps(f, separators=(",", ":"), default=str))
        out.write("\n")


def sarif(report: dict) -> dict:
    from kaudit.audit import load_all

    used = sorted({f["rule"] for f in report["findings"]} | set(load_all()))
    rules = []
    for rid in used:
        r = get(rid)
        rules.append({
            "id": rid,
            "name": rid,
            "shortDescription": {"text": r.title},
            "fullDescription": {"text": r.doc},
            "help": {"text": r.remediation or r.title},
            "defaultConfiguration": {"level": SARIF_LEVEL[r.severity]},
            "properties": {"severity": r.severity, "scope": r.scope},
        })
    index = {rid: i for i, rid in enumerate(used)}
    results = []
    for f in report["findings"]:
        locations = []
        for e in f["evidence"] or []:
            if not e["source"]:
                # no file to point at (a step of a timeline): a logical location only
                locations.append({"logicalLocations": [{"name": e.get("note") or e["kind"], "kind": e["kind"]}]})
                continue
            loc = {"physicalLocation": {"artifactLocation": {"uri": _uri(e["source"])}}}
            if e["position"] is not None:
                if e["kind"] in ("request", "response", "produce", "packet", "fetch", "end_txn"):
                    loc["logicalLocations"] = [{"name": f"frame {e['position']}", "kind": "frame"}]
                else:
                    loc["physicalLocation"]["region"] = {"byteOffset": e["position"]}
            if e.get("note"):
                loc["message"] = {"text": e["note"]}
            locations.append(loc)
        results.append({
            "ruleId": f["rule"],
            "ruleIndex": index[f["rule"]],
            "level": SARIF_LEVEL[f["severity"]],
            "message": {"text": f["message"]},
            "locations": locations[:1],
            "relatedLocations": [dict(loc, id=i) for i, loc in enumerate(locations[1:], 1)],
            "partialFingerprints": {"kauditFindingId": f["id"], "kauditIncidentId": f.get("incident") or f["id"]},
            "properties": {k: f[k] for k in ("severity", "incident", "client_id", "topic", "partition", "replica", "connection",
                                             "producer_id", "producer_epoch", "transactional_id",
                                             "first_offset", "last_offset", "base_sequence",
                                             "last_sequence", "remediation") if f.get(k) is not None},
        })
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "kaudit", "version": report["version"],
                                "informationUri": "https://github.com/kaudit/kaudit", "rules": rules}},
            "invocations": [{"executionSuccessful": True, "commandLine": f"kaudit {report['command']}"}],
            "results": results,
        }],
    }


def _uri(path: str | None) -> str:
    if not path:
        return ""
    return "file://" + os.path.abspath(path) if not path.startswith("file:") else path


def write_sarif(report: dict, out) -> None:
    json.dump(sarif(report), out, indent=1)
    out.write("\n")


def write_console(report: dict, out, min_severity: str | None = None) -> None:
    from kaudit.report.console import write_console as write

    write(report, out, min_severity)


def write_html(report: dict, out, min_severity: str | None = None) -> None:
    from kaudit.report.html import write_html as write

    write(report, out)


WRITERS = {"json": write_json, "ndjson": write_ndjson, "sarif": write_sarif, "table": write_console,
           "html": write_html}
