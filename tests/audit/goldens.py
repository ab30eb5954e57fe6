"""Golden JSON reports: compare a (normalised) report with its file, or rewrite the file when
KAUDIT_REGEN_GOLDEN=1 (then review the diff).

Incident ids hash keys that may name the test's temporary folders (a replica tagged by its log
dir's path): they are replaced by their rank in the report ("<incident 1>", ...), which keeps
which findings tell one story, and an incident's finding ids by the findings' indexes."""

from __future__ import annotations

import json
import os
from pathlib import Path

REGEN = os.environ.get("KAUDIT_REGEN_GOLDEN") == "1"


def stable_incidents(report: dict) -> dict:
    report = json.loads(json.dumps(report))
    names = {i["id"]: f"<incident {n}>" for n, i in enumerate(report.get("incidents", []), 1)}
    index = {}
    for n, f in enumerate(report.get("findings", [])):
        index.setdefault(f["id"], n)
        if f.get("incident") is not None:
            f["incident"] = names.get(f["incident"], "<not listed>")
    for i in report.get("incidents", []):
        i["id"] = names[i["id"]]
        for p in i["places"]:
            for e in p["evidence"]:   # partition dir and file (or capture): no temporary folder
                e["source"] = "/".join(str(e["source"] or "").split("/")[-2:])
        i["findings"] = sorted(index.get(x, -1) for x in i["findings"])
    return report


def check_golden(golden: Path, report: dict, name: str) -> None:
    report = stable_incidents(report)
    if REGEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    assert golden.exists(), f"no golden for {name}: run with KAUDIT_REGEN_GOLDEN=1"
    assert report == json.loads(golden.read_text()), f"{name}: report differs from {golden} (regenerate if intended)"
