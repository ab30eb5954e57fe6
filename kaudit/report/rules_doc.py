"""docs/rules.md, written from the rule registry: `python -m kaudit.report.rules_doc > docs/rules.md`
(or `make docs`). The registry is the one source of a rule's id, severity, scope, title, invariant
and remediation; tests/report/test_rules_doc.py fails when the file in the repository is stale."""

from __future__ import annotations

import sys

HEADER = """\
# Rule catalog

<!-- Generated from the rule registry (kaudit/audit/registry.py) by
     `python -m kaudit.report.rules_doc > docs/rules.md` (`make docs`). Do not edit by hand:
     tests/report/test_rules_doc.py fails when this file differs from what the registry says. -->

Every rule kaudit applies, as `kaudit rules` lists them and `kaudit explain RULE` prints them.
Ids are stable: they name findings in every report format, and `--select` / `--ignore` take them.
The severity is the rule's default (a finding may be raised or lowered by what its evidence shows,
as the rule says). Scope: `disk` (log dirs), `wire` (captures), `both` (either, and the joint audit
of `kaudit audit`).

Severities: `critical` (consumers see wrong data or stop now), `error` (stored data or the
protocol is wrong), `warning` (something to look at; may be benign), `info` (context: what the
evidence shows, hidden from the table unless `--min-severity info`).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(rules) -> str:
    """The catalog of `rules` (Rule objects) as Markdown: a summary table, then one section each."""
    rules = sorted(rules, key=lambda r: r.id)
    lines = [HEADER, f"{len(rules)} rules.", "", "| rule | severity | scope | flags |", "|---|---|---|---|"]
    lines += [f"| [`{r.id}`](#{r.id}) | {r.severity} | {r.scope} | {_cell(r.title)} |" for r in rules]
    for r in rules:
        module = r.fn.__module__.replace(".", "/") + ".py"
        lines += ["", f"## {r.id}", "",
                  f"Severity `{r.severity}`, scope `{r.scope}`: {_cell(r.title)}. Defined in `{module}`.", "",
                  r.doc.strip(), ""]
        if r.remediation:
            lines += [f"**Remediation.** {r.remediation.strip()}", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    from kaudit.audit import RULES

    sys.stdout.write(render(RULES.values()))


if __name__ == "__main__":
    main()
