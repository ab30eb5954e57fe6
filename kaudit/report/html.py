"""`--format html`: one self-contained file that works offline. Plotly's own plotly.js is
embedded once (no CDN, no request of any kind); then the incidents, ranked, each with its story
and its pictures (report/charts.py), the coverage section and, for captures, the latency view.

Structure (what the browser test checks): `section.incident[data-incident]` per incident shown,
`div.chart[data-chart]` per picture, `#coverage`, `#incident-list`.
"""

from __future__ import annotations

import html
import json
import os
from collections import defaultdict

from kaudit.audit import SEVERITY_RANK
from kaudit.timefmt import iso_ms

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif;margin:0;color:#222;background:#fafafa}
header,main{max-width:1200px;margin:0 auto;padding:12px 24px}
header{border-bottom:1px solid #ddd;background:#fff}
h1{font-size:20px;margin:8px 0} h2{font-size:17px;margin:18px 0 8px} h3{font-size:15px;margin:10px 0}
.sev{display:inline-block;min-width:68px;text-align:center;border-radius:3px;padding:1px 6px;font-size:12px;font-weight:bold;color:#fff}
.critical{background:#8b0000}.error{background:#d62728}.warning{background:#e6850e}.info{background:#1f77b4}
section.incident{background:#fff;border:1px solid #ddd;border-radius:6px;margin:16px 0;padding:8px 16px}
table.story td{vertical-align:top;padding:2px 8px} table.story td:first-child{font-weight:bold;width:90px}
.muted{color:#666;font-size:13px} code,.mono{font-family:"Liberation Mono",monospace;font-size:12px;word-break:break-all}
ol#incident-list li{margin:3px 0} details{margin:6px 0} .chart{margin:8px 0}
"""


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _figure_div(fig, name: str, n: int) -> str:
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{n}",
                       config={"displaylogo": False, "responsive": True})
    return f'<div class="chart" data-chart="{_e(name)}">{body}</div>'


def _story(i: dict) -> str:
    n = i["narrative"]
    rows = "".join(f"<tr><td>{k}</td><td>{_e(n[k])}</td></tr>" for k in ("who", "what", "when", "impact"))
    rows += f"<tr><td>remediation</td><td><code>{_e(n['remediation'])}</code></td></tr>"
    return f'<table class="story">{rows}</table>'


def _evidence(i: dict) -> str:
    from kaudit.report.story import shown_sources

    shown = shown_sources(i)
    items = []
    for p in i["places"]:
        ev = "; ".join(f"{shown.get(e['source']) or os.path.basename(e['source'] or '')} "
                       f"{'frame' if e['kind'] in ('request', 'response', 'produce', 'packet', 'fetch') else 'byte'} "
                       f"{e['position']} [{e['kind']}]" + (f" ({e['note']})" if e.get("note") else "")
                       for e in p["evidence"][:4])
        items.append(f"<li><b>{_e(p['place'])}</b>: {_e(', '.join(p['rules']))} <span class='mono'>{_e(ev)}</span></li>")
    return f"<h3>Evidence ({len(i['places'])} place(s))</h3><ul>{''.join(items)}</ul>"


def _findings(members: list[dict]) -> str:
    rows = "".join(f"<li><span class='sev {f['severity']}'>{f['severity']}</span> <b>{_e(f['rule'])}</b> "
                   f"{_e(f['message'])} <span class='muted'>[{_e(f['id'])}]</span></li>" for f in members[:200])
    more = f"<li>… and {len(members) - 200} more</li>" if len(members) > 200 else ""
    return f"<details><summary>{len(members)} finding(s)</summary><ul>{rows}{more}</ul></details>"


def _charts_for(i: dict, members: list[dict], data: dict, ref, counter: list[int]) -> str:
    from kaudit.report import charts

    out = []
    figs = []
    if i["kind"] in ("duplicate", "sequence", "zombie", "retry", "outcome", "errors") or \
            any(f.get("base_sequence") is not None for f in members):
        figs.append(("sequence-timeline", charts.sequence_timeline(i, members, data)))
    if i["kind"] in ("transaction", "hanging", "torn", "zombie"):
        figs.append(("transaction-gantt", charts.transaction_gantt(i, members, data, ref)))
    if i["kind"] in ("integrity", "other"):
        from kaudit.report.charts_loss import loss_map

        figs.append(("loss-map", loss_map(i, members)))
    figs += consumer_figures(members, data)
    for name, fig in figs:
        if fig is not None:
            counter[0] += 1
            out.append(_figure_div(fig, name, counter[0]))
    return "".join(out)


def consumer_figures(members: list[dict], data: dict) -> list[tuple]:
    """The consumer charts (report/charts_consumers.py) of the (group, partition)s an incident's
    consumer findings are on, each with the findings it shades."""
    ids = {f["id"]: f for f in members}
    out = []
    for p in data.get("consumers") or ():
        mine = [ids[i] for i in p.get("finding_ids") or () if i in ids]
        if mine:
            from kaudit.report.charts_consumers import consumer_chart

            out.append(("consumer-timeline", consumer_chart(p, mine)))
    return out


def write_html(report: dict, out) -> None:
    from plotly.offline import get_plotlyjs

    floor = SEVERITY_RANK["info"]
    incs = [i for i in report["incidents"] if i["kind"] != "coverage" and SEVERITY_RANK[i["severity"]] >= floor]
    members = defaultdict(list)
    for f in report["findings"]:
        members[f.get("incident")].append(f)
    data, ref, counter = report.get("charts") or {}, report["reference_time_ms"], [0]
    out.write("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
              f"<title>kaudit {_e(report['command'])}: {len(incs)} incident(s)</title><style>{CSS}</style>"
              f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>")
    out.write(f"<header><h1>kaudit {_e(report['command'])}: {len(incs)} incident(s)</h1><div class='muted'>"
              f"kaudit {_e(report['version'])}, {_e(report['engine'])} engine; reference time "
              f"{_e(iso_ms(ref) if ref is not None else 'unknown')}<br>inputs: "
              + "<br>".join(_e(p) for p in report["inputs"])
              + (f"<br>selection: {_e(report['selection']['text'])}" if report.get("selection") else "")
              + "</div></header><main>")
    out.write("<h2>Incidents</h2><ol id='incident-list'>" + "".join(
        f"<li><span class='sev {i['severity']}'>{i['severity']}</span> <a href='#incident-{i['id']}'>{_e(i['title'])}</a></li>"
        for i in incs) + "</ol>" + ("" if incs else "<p>No incident.</p>"))
    for n, i in enumerate(incs, 1):
        out.write(f"<section class='incident' id='incident-{i['id']}' data-incident='{i['id']}'>"
                  f"<h2>{n}. <span class='sev {i['severity']}'>{i['severity']}</span> {_e(i['title'])}</h2>"
                  f"<div class='muted'>incident {i['id']}</div>{_story(i)}"
                  + _charts_for(i, members[i["id"]], data, ref, counter)
                  + _evidence(i) + _findings(members[i["id"]]) + "</section>")
    out.write(_coverage(report, members))
    from kaudit.report import charts

    lat = charts.latency_view(data)
    if lat is not None:
        counter[0] += 1
        out.write("<h2>Requests</h2>" + _figure_div(lat, "latency", counter[0]))
    out.write(f"<script type='application/json' id='kaudit-summary'>{_e(json.dumps(report['summary']))}</script>"
              "</main></body></html>\n")


def _coverage(report: dict, members: dict) -> str:
    rows = []
    cov = report["coverage"]
    sides = {k: v for k, v in cov.items() if isinstance(v, dict) and k in ("wire", "disk", "join")} or {"": cov}
    for side, counters in sides.items():
        flat = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in counters.items()
                         if not isinstance(v, (dict, list)) and not k.startswith("_"))
        rows.append(f"<li>{_e(side + ': ' if side else '')}read {_e(flat)}</li>")
    from kaudit.report.console import losses, not_read

    for line in losses(report["findings"]):
        rows.append(f"<li class='lost'><b>lost or unreadable:</b> {_e(line)}</li>")
    for line in not_read(cov):
        rows.append(f"<li><b>not read (tiered):</b> {_e(line)}</li>")
    for i in report["incidents"]:
        if i["kind"] == "coverage":
            rows.append(f"<li>{_e(', '.join(f'{r} ×{n}' for r, n in i['rules'].items()))}: "
                        f"{_e(' and '.join(p['place'] for p in i['places']))}</li>")
    return f"<h2 id='coverage'>Coverage</h2><ul>{''.join(rows)}</ul>"
