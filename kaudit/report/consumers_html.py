"""`kaudit consumers --format html`: one self-contained page (plotly.js embedded once, no request
of any kind): per group its members (client, connection, generation or member epoch, why they
left) and per partition the chart of what each member was served and committed against time,
rebalances marked (report/charts_consumers.py); the consumer rules' findings shaded on their
partition and listed under it.

Structure (what the tests read): `section.group[data-group]` per group, `div.chart[data-chart=
"consumer-timeline"][data-partition]` per partition, `ul.findings` under a chart with findings."""

from __future__ import annotations

from kaudit.report.html import CSS, _e, _figure_div

MAX_CHARTS = 120   # partitions drawn per page; the rest are named


def _members(group: dict) -> str:
    rows = "".join(
        f"<tr><td class='mono'>{_e(m['member_id'] or '(no member id)')}</td><td>{_e(m['client_id'])}</td>"
        f"<td class='mono'>{_e(m['connection'])}</td><td>{_e(m['generation'])}</td>"
        f"<td>{_e(', '.join(p['partition'] for p in m['partitions']))}</td>"
        f"<td>{_e(m['left_because'] or '')}</td></tr>" for m in group["members"])
    return ("<table class='story'><tr><td>member</td><td>client</td><td>connection</td><td>generation / epoch</td>"
            f"<td>partitions</td><td>left because</td></tr>{rows}</table>")


def _findings(fs: list[dict]) -> str:
    if not fs:
        return ""
    items = "".join(f"<li><span class='sev {f['severity']}'>{f['severity']}</span> <b>{_e(f['rule'])}</b> "
                    f"{_e(f['message'])}</li>" for f in fs)
    return f"<ul class='findings'>{items}</ul>"


def write_consumers_html(rows: list[dict], panels: list[dict], findings: list[dict], keys: dict, inputs,
                         out) -> None:
    """`rows`: report.consumers.describe rows; `panels`: charts_consumers.panels; `keys`:
    finding id -> (group, "topic-partition") of its panel."""
    from plotly.offline import get_plotlyjs

    from kaudit.report.charts_consumers import consumer_chart

    by_id = {f["id"]: f for f in findings}
    on_panel: dict[tuple, list] = {}
    for fid, key in keys.items():
        on_panel.setdefault(key, []).append(by_id[fid])
    out.write("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
              f"<title>kaudit consumers: {len(rows)} group(s)</title><style>{CSS}</style>"
              f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>")
    out.write(f"<header><h1>kaudit consumers: {len(rows)} group(s), {len(findings)} finding(s)</h1>"
              "<div class='muted'>inputs: " + "<br>".join(_e(p) for p in inputs) + "</div></header><main>")
    if not rows:
        out.write("<p>No consumer group and no consumer Fetch in the input.</p>")
    drawn = 0
    for g in rows:
        mine = [p for p in panels if p["group"] == g["group"]]
        out.write(f"<section class='incident group' data-group='{_e(g['group'])}'><h2>group {_e(g['group'])}: "
                  f"{len(g['members'])} member(s), {len(g['commits'])} commit(s)</h2>{_members(g)}")
        for p in mine:
            fs = on_panel.get((p["group"], p["tp"]), [])
            if drawn >= MAX_CHARTS:
                out.write(f"<p class='muted'>{_e(p['tp'])}: not drawn (more than {MAX_CHARTS} partitions)</p>")
                continue
            fig = consumer_chart(p, fs)
            if fig is None:
                continue
            drawn += 1
            div = _figure_div(fig, "consumer-timeline", drawn)
            out.write(div.replace("<div class=\"chart\"", f"<div class=\"chart\" data-partition=\"{_e(p['tp'])}\"", 1)
                      + _findings(fs))
        out.write("</section>")
    out.write("</main></body></html>\n")
