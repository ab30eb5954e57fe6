"""The audit report: one JSON object, NDJSON (one finding per line), SARIF 2.1.0, or a console view
for people (rich). All of them read the same report dict built by `build_report`."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

from kaudit import __version__
from kaudit.audit import RULES, SEVERITIES

SARIF_LEVEL = {"critical": "error", "error": "error", "warning": "warning", "info": "note"}
SEVERITY_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "cyan"}
FINDINGS_PER_RULE = 50  # console: the rest of a rule's findings are counted, not printed


def _finding_out(f: dict) -> dict:
    out = dict(f)
    out["details"] = json.loads(f["details"]) if f.get("details") else None
    return out


def build_report(run, command: str, inputs: list[str]) -> dict:
    by_sev = Counter(f["severity"] for f in run.findings)
    by_rule = Counter(f["rule"] for f in run.findings)
    return {
        "tool": "kaudit",
        "version": __version__,
        "command": command,
        "engine": run.engine,
        **({"application_id": run.application_id} if getattr(run, "application_id", None) else {}),
        "inputs": [os.path.abspath(p) for p in inputs],
        "reference_time_ms": run.reference_time_ms,
        "coverage": run.coverage,
        "summary": {"findings": len(run.findings),
                    "by_severity": {s: by_sev.get(s, 0) for s in reversed(SEVERITIES)},
                    "by_rule": dict(sorted(by_rule.items())),
                    "unreadable_inputs": run.errors},
        "findings": [_finding_out(f) for f in run.findings],
    }


def write_json(report: dict, out) -> None:
    json.dump(report, out, indent=1, default=str)
    out.write("\n")


def write_ndjson(report: dict, out) -> None:
    for f in report["findings"]:
        out.write(json.dumps(f, separators=(",", ":"), default=str))
        out.write("\n")


def sarif(report: dict) -> dict:
    used = sorted({f["rule"] for f in report["findings"]} | set(RULES))
    rules = []
    for rid in used:
        r = RULES[rid]
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
            loc = {"physicalLocation": {"artifactLocation": {"uri": _uri(e["source"])}}}
            if e["position"] is not None:
                if e["kind"] in ("request", "response", "produce", "packet"):
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
            "partialFingerprints": {"kauditFindingId": f["id"]},
            "properties": {k: f[k] for k in ("severity", "topic", "partition", "replica", "connection",
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


def write_console(report: dict, out) -> None:
    """Header (inputs, coverage), findings grouped by severity and rule with their evidence,
    producer timeline and remediation, and a summary line."""
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel

    c = Console(file=out, width=None if out.isatty() else 140, highlight=False)
    cov = report["coverage"]
    head = [f"[bold]kaudit {report['version']}[/bold] — {report['command']} ({report['engine']} engine"
            + (f", application {report['application_id']}" if report.get("application_id") else "") + ")"]
    for p in report["inputs"]:
        head.append(f"input: {escape(p)}")
    shown = {k: v for k, v in cov.items() if not isinstance(v, dict)}
    head.append("coverage: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in shown.items()))
    if report["reference_time_ms"] is not None:
        head.append(f"reference time: {report['reference_time_ms']} ms")
    for e in report["summary"]["unreadable_inputs"]:
        head.append(f"[red]unreadable:[/red] {escape(e)}")
    c.print(Panel("\n".join(head), expand=False))

    groups: dict[tuple, list] = defaultdict(list)
    for f in report["findings"]:
        groups[(SEVERITIES.index(f["severity"]), f["rule"], f["severity"])].append(f)
    for (_, rid, sev), fs in sorted(groups.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
        r = RULES[rid]
        c.print(f"\n[{SEVERITY_STYLE[sev]}]{sev.upper()}[/] [bold]{rid}[/bold] — {escape(r.title)} "
                f"({len(fs)})")
        for f in fs[:FINDINGS_PER_RULE]:
            c.print(f"  • {escape(f['message'])}")
            for e in (f["evidence"] or [])[:4]:
                where = f"frame {e['position']}" if e["kind"] in ("request", "response", "produce", "packet") \
                    else f"byte {e['position']}"
                note = f" ({escape(e['note'])})" if e.get("note") else ""
                c.print(f"    [dim]evidence: {escape(os.path.basename(e['source'] or ''))} {where} "
                        f"{escape('[' + e['kind'] + ']')}{note}[/dim]")
            if f.get("timeline"):
                c.print("    [dim]timeline:[/dim]")
                for line in f["timeline"][-5:]:
                    c.print(f"      [dim]{escape(line)}[/dim]")
        if len(fs) > FINDINGS_PER_RULE:
            c.print(f"  … and {len(fs) - FINDINGS_PER_RULE} more (use --format json for all)")
        rem = fs[0].get("remediation") or r.remediation
        if rem:
            c.print(f"  [green]remediation:[/green] {escape(rem)}")
    s = report["summary"]["by_severity"]
    total = report["summary"]["findings"]
    c.print("\n" + (f"[bold]{total} finding(s):[/bold] " + ", ".join(
        f"[{SEVERITY_STYLE[k]}]{v} {k}[/]" for k, v in s.items() if v) if total else
        "[bold green]no findings[/bold green]"))


WRITERS = {"json": write_json, "ndjson": write_ndjson, "sarif": write_sarif, "table": write_console}
