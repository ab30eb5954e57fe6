"""docs/rules.md is what the rule registry says: regenerate it with `make docs`
(`python -m kaudit.report.rules_doc > docs/rules.md`) after adding or changing a rule."""

from __future__ import annotations

from kaudit.audit import RULES
from kaudit.report.rules_doc import render
from tests.conftest import ROOT


def test_rules_doc_is_current():
    doc = ROOT / "docs" / "rules.md"
    assert doc.read_text(encoding="utf-8") == render(RULES.values()), (
        "docs/rules.md is stale: run `make docs` (python -m kaudit.report.rules_doc > docs/rules.md)")


def test_rules_doc_lists_every_rule_with_its_remediation():
    text = render(RULES.values())
    for r in RULES.values():
        assert f"\n## {r.id}\n" in text and f"| [`{r.id}`](#{r.id}) | {r.severity} | {r.scope} |" in text
        assert r.doc.splitlines()[0] in text
        if r.remediation:
            assert r.remediation.strip() in text
