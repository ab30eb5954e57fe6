"""The audit report for people on a terminal (rich): the incidents first, one line each, ranked;
then each incident's story (who, what, when, impact, evidence per place, remediation); then one
coverage section for what the inputs could not show; then the counts.

Piped output is never cut: lines are printed whole (soft wrap), as tshark and kafka-dump-log do.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict

from kaudit.audit import SEVERITY_RANK
from kaudit.audit.stories.incidents import is_wire_evidence
from kaudit.timefmt import iso_ms

SEVERITY_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "cyan"}
# Findings that say data is gone or cannot be read: the coverage section names their ranges.
LOSS_RULES = ("missing-offsets", "corrupt-batch", "crc-mismatch", "truncated-tail", "checkpoint-mismatch")
UNREAD_COUNTERS = ("decode_issues", "undecodable_bytes", "undecodable", "gaps", "crc_failures")
LOSS_LINES = 8
MEMBERS_SHOWN = 8      # findings listed under an incident; the rest are counted
TIMELINE_LINES = 6


def console_for(out):
    from rich.console import Console

    tty = out.isatty()
    return Console(file=out, width=None if tty else 200, soft_wrap=not tty, highlight=False)


def _sev(s: str) -> str:
    return f"[{SEVERITY_STYLE[s]}]{s.upper():<8}[/]"


def write_console(report: dict, out, min_severity: str | None = None) -> None:
    from rich.markup import escape

    c = console_for(out)
    floor = SEVERITY_RANK[min_severity or "warning"]
    incs = [i for i in report["incidents"] if i["kind"] != "coverage"]
    shown = [i for i in incs if SEVERITY_RANK[i["severity"]] >= floor]
    hidden = Counter(i["severity"] for i in incs if SEVERITY_RANK[i["severity"]] < floor)
    c.print(f"[bold]kaudit {report['command']}[/bold]: " + (
        f"{len(shown)} incident(s)" + (f" ({_counts(Counter(i['severity'] for i in shown))})" if shown else "")
        if shown or not incs else "no incident at or above " + (min_severity or "warning"))
        + f" — {_inputs(report)}")
    for n, i in enumerate(shown, 1):
        c.print(f" {n:>2}. {_sev(i['severity'])} {escape(i['title'])}")
    if hidden:
        c.print(f"     [dim]{sum(hidden.values())} {'/'.join(sorted(hidden, key=SEVERITY_RANK.get, reverse=True))} "
                f"incident(s) hidden: --min-severity {min(hidden, key=SEVERITY_RANK.get)} shows them[/dim]")
    _header(c, report)
    members = defaultdict(list)
    for f in report["findings"]:
        members[f.get("incident")].append(f)
    for n, i in enumerate(shown, 1):
        _incident(c, n, i, members[i["id"]])
    _coverage(c, report, members)
    s = report["summary"]
    total = s["findings"]
    c.print("\n" + (f"[bold]{len(incs)} incident(s), {total} finding(s):[/bold] " + ", ".join(
        f"[{SEVERITY_STYLE[k]}]{v} {k}[/]" for k, v in s["by_severity"].items() if v) if total else
        "[bold green]no findings[/bold green]"))


def _counts(c: Counter) -> str:
    return ", ".join(f"{c[s]} {s}" for s in ("critical", "error", "warning", "info") if c.get(s))


def _inputs(report: dict) -> str:
    names = [os.path.basename(p.rstrip("/")) or p for p in report["inputs"]]
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _header(c, report: dict) -> None:
    from rich.markup import escape

    c.print(f"\n[dim]kaudit {report['version']}, {report['engine']} engine"
            + (f", application {report['application_id']}" if report.get("application_id") else "")
            + (f"; reference time {iso_ms(report['reference_time_ms'])} ({report.get('reference_time_source', 'the end of the evidence')})"
               if report["reference_time_ms"] is not None else "") + "[/dim]")
    for p in report["inputs"]:
        c.print(f"[dim]input: {escape(p)}[/dim]")
    sel = report.get("selection")
    if sel:
        c.print(f"[dim]selection: {escape(sel['text'])} — {report['summary']['findings']} of "
                f"{sel['findings_total']} finding(s)[/dim]")
    for e in report["summary"]["unreadable_inputs"]:
        c.print(f"[red]unreadable:[/red] {escape(e)}")


def _where(e: dict, shown: dict | None = None) -> str:
    # a marker is a WriteTxnMarkers frame in a capture, a control batch in a log
    where = "" if e["position"] is None else (f"frame {e['position']}" if is_wire_evidence(e) else f"byte {e['position']}")
    note = f" ({e['note']})" if e.get("note") else ""
    name = (shown or {}).get(e["source"]) or os.path.basename(e["source"] or "")
    return f"{name} {where} [{e['kind']}]{note}".strip()


def _incident(c, n: int, i: dict, members: list[dict]) -> None:
    from rich.markup import escape

    c.print(f"\n[bold]── {n}. [/bold]{_sev(i['severity'])} [bold]{escape(i['title'])}[/bold]  [dim]incident {i['id']}[/dim]")
    story = i["narrative"]
    for label in ("who", "what", "when", "impact"):
        c.print(f"  [bold]{label:<7}[/bold] {escape(story[label])}")
    c.print(f"  [bold]evidence[/bold] ({len(i['places'])} place(s))")
    from kaudit.report.story import shown_sources

    shown = shown_sources(i)
    for p in i["places"]:
        ev = "; ".join(_where(e, shown) for e in p["evidence"][:3])
        c.print(f"    {escape(p['place'])}: {', '.join(p['rules'])}" + (f" — [dim]{escape(ev)}[/dim]" if ev else ""))
    c.print(f"  [bold]findings[/bold] ({len(members)})")
    for f in members[:MEMBERS_SHOWN]:
        c.print(f"    • [{SEVERITY_STYLE[f['severity']]}]{f['severity']}[/] {f['rule']}: {escape(f['message'])}")
    if len(members) > MEMBERS_SHOWN:
        c.print(f"    … and {len(members) - MEMBERS_SHOWN} more (--format json lists them all)")
    lead = next((f for f in members if f.get("timeline")), None)
    if lead is not None:
        c.print("  [bold]timeline[/bold] [dim](" + escape(lead["rule"]) + ")[/dim]")
        for line in timeline_steps(lead["timeline"]):
            c.print(f"    [dim]{escape(line)}[/dim]")
    c.print(f"  [green bold]remediation[/green bold] {escape(story['remediation'] or '')}")


# steps that tell what went wrong: refusals, an admin's or another writer's markers, fencing
KEY_STEP = re.compile(r"-> error|not the coordinator|admin|fenced|zombie|refused|unanswered", re.I)
KEY_STEPS = 4


def timeline_steps(lines: list[str], most: int = TIMELINE_LINES) -> list[str]:
    """The last `most` steps, and before them the first KEY_STEPS steps that tell what went wrong
    (an admin's abort early in the transaction is its story), with the steps left out counted."""
    if len(lines) <= most:
        return list(lines)
    key = [i for i, x in enumerate(lines[:-most]) if KEY_STEP.search(x)][:KEY_STEPS]
    keep = key + list(range(len(lines) - most, len(lines)))
    out, nxt = [], 0
    for i in keep:
        if i > nxt:
            out.append(f"… {i - nxt} step(s)")
        out.append(lines[i])
        nxt = i + 1
    return out


def _coverage(c, report: dict, members: dict) -> None:
    """One section: the counters of what was read, and the quality findings summed up per rule
    and place (every one stays in the machine formats)."""
    from rich.markup import escape

    c.print("\n[bold]── coverage[/bold] [dim](what the inputs could not show)[/dim]")
    cov = report["coverage"]
    sides = {k: v for k, v in cov.items() if isinstance(v, dict) and k in ("wire", "disk", "join")} or {"": cov}
    for side, counters in sides.items():
        flat = {k: v for k, v in counters.items() if not isinstance(v, (dict, list)) and not k.startswith("_")}
        c.print(f"  {side + ': ' if side else ''}read " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in flat.items()))
    quality = [i for i in report["incidents"] if i["kind"] == "coverage"]
    by_rule: dict[str, Counter] = defaultdict(Counter)
    for f in (f for i in quality for f in members[i["id"]]):
        if True:
            place = next((os.path.basename(e["source"]) for e in f["evidence"] or [] if e.get("source")), "?")
            by_rule[f["rule"]][place] += 1
    lost = losses(report["findings"])
    for line in lost[:LOSS_LINES]:
        c.print(f"  [bold red]lost or unreadable:[/bold red] {escape(line)}")
    if len(lost) > LOSS_LINES:
        c.print(f"  … and {len(lost) - LOSS_LINES} more range(s) lost or unreadable (--format json lists them)")
    unread = sum(int(v.get(k) or 0) for v in sides.values() for k in UNREAD_COUNTERS)
    tiered = not_read(cov)
    for line in tiered[:LOSS_LINES]:
        c.print(f"  [yellow]not read (tiered):[/yellow] {escape(line)}")
    if len(tiered) > LOSS_LINES:
        c.print(f"  … and {len(tiered) - LOSS_LINES} more remote segment(s) not read (--format json lists them)")
    if not by_rule and not lost and not unread and not tiered:
        c.print("  [green]nothing missing: every byte read was decoded[/green]")
    elif unread and not by_rule and not lost:
        c.print("  [yellow]not everything read was decoded[/yellow] (the counters above; --format json "
                "lists each decode issue's position)")
    for rule, places in sorted(by_rule.items()):
        c.print(f"  {rule} ×{sum(places.values())}: " + escape(", ".join(f"{p} ×{n}" for p, n in places.most_common(6))))


def not_read(cov: dict) -> list[str]:
    """One line per range __remote_log_metadata lists as copied that no input holds
    (sources.remote.not_read): not read, not lost."""
    sides = [v for k, v in cov.items() if isinstance(v, dict) and k in ("wire", "disk", "join")] or [cov]
    return [f"{r['topic']}-{r['partition']}: offsets {r['first_offset']}-{r['last_offset']} - remote segment "
            f"{r['segment_id']} ({r['state']} in __remote_log_metadata) is in no input"
            for v in sides for r in v.get("remote_not_read") or ()]


def losses(findings: list[dict]) -> list[str]:
    """One line per finding that says offsets or bytes are lost or unreadable (not an active
    segment's tail being written, which is info)."""
    out = []
    for f in findings:
        if f["rule"] not in LOSS_RULES or f["severity"] == "info":
            continue
        where = f"{f.get('topic')}-{f.get('partition')}" + (f" (replica {f['replica']})" if f.get("replica") else "")
        if f.get("first_offset") is not None:
            one = f.get("last_offset") in (None, f["first_offset"])
            what = f"offset {f['first_offset']}" if one else f"offsets {f['first_offset']}-{f['last_offset']}"
        else:
            ev = next((e for e in f.get("evidence") or [] if e.get("source")), None)
            what = f"{os.path.basename(ev['source'])} from byte {ev['position']}" if ev else "bytes"
        out.append(f"{where}: {what} ({f['rule']})")
    return list(dict.fromkeys(out))
