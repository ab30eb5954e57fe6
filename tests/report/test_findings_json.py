"""report.findings.write_json: the report encoded at once or streamed (a very large one) is the
same text."""

from __future__ import annotations

import io
import json

from kaudit.report import findings


def _report(n: int) -> dict:
    return {"tool": "kaudit", "findings": [{"id": f"{i:x}", "rule": "r", "severity": "info",
                                            "details": {"at": {1, 2} if i == 0 else None}} for i in range(n)]}


def test_whole_and_streamed_json_are_the_same_text(monkeypatch):
    report = _report(5)
    whole = io.StringIO()
    findings.write_json(report, whole)
    monkeypatch.setattr(findings, "WHOLE_JSON_FINDINGS", 2)
    streamed = io.StringIO()
    findings.write_json(report, streamed)
    assert whole.getvalue() == streamed.getvalue()
    assert whole.getvalue().endswith("}\n") and json.loads(whole.getvalue())["findings"][4]["id"] == "4"
