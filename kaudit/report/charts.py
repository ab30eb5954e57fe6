"""The HTML report's pictures, drawn with Plotly (its plotly.js is embedded once in the file):
- a producer's sequences (report/charts.py): one panel per partition and place (each replica,
  each capture) - replicas holding the same batches would hide each other in one panel. On disk each
  stored batch sits at its own offset (its append position), so a copy stored twice shows as
  two marks however equal their timestamps; on the wire each attempt sits at its request time.
  One line per producer id and epoch joins only what was stored (or answered), in order;
  refused and unanswered attempts are marks of their own;
- a transaction's partitions (report/charts_txn.py);
- a capture's request/response latency against time, per API, errors and requests without an
  answer in a strip of their own (they have no latency).
Every mark carries its partition, place and offsets (`customdata`: the browser test reads them).
Each function returns a figure (or None when the rows hold nothing to draw)."""

from __future__ import annotations

import os

from kaudit.report.chart_rows import capture_place, incident_partitions, is_capture
from kaudit.report.chart_style import iso_time as _t
from kaudit.report.chart_style import layout as _layout

SEV_COLOR = {"critical": "#8b0000", "error": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}
PALETTE = ("#1f77b4", "#9467bd", "#2ca02c", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
MAX_PANELS = 12
ANSWER_STYLE = {   # answer -> (trace suffix, marker, line?)
    "stored": ("", {"symbol": "circle", "size": 8}, True),
    "refused": (" refused", {"symbol": "x", "size": 11, "color": "#d62728"}, False),
    "no answer": (" no answer", {"symbol": "circle-open", "size": 10, "color": "#7f7f7f"}, False),
}
WIRE_KINDS = ("request", "response", "produce", "packet", "fetch", "end_txn")


def _panels(inc: dict, findings: list[dict], data: dict) -> tuple[list, dict]:
    """(topic-partition, place) panels in order (replicas by name, the wire last) and their series."""
    pids = {p for p in inc["producer_ids"] if p is not None} | \
        {f["producer_id"] for f in findings if f.get("producer_id") is not None}
    tps = set(incident_partitions(inc, findings))
    by: dict[tuple, list] = {}
    for s in data.get("series", []):
        if s["pid"] in pids and s["tp"] in tps:
            by.setdefault((s["tp"], s["where"]), []).append(s)
    order = sorted(by, key=lambda k: (k[0], is_capture(k[1]), k[1]))
    return order[:MAX_PANELS], by


def _epoch_colors(series: list) -> dict:
    keys = sorted({(s["pid"], p["epoch"]) for s in series for p in s["points"]}, key=lambda k: (k[0], k[1] or 0))
    return {k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)}


def _hover(s: dict, p: dict, wire: bool) -> str:
    seq = f"seq {p['bseq']}-{p['lseq']}, " if p["bseq"] is not None and p["bseq"] >= 0 else ""
    offs = f"offsets {p['offset']}-{p['last']}" if p.get("last") not in (None, p["offset"]) else f"offset {p['offset']}"
    where = (f"frame {p['position']}" if wire else f"{os.path.basename(p.get('source') or '')} byte {p['position']}")
    return (f"{s['tp']} {s['where']}: producer {s['pid']} epoch {p['epoch']}, {seq}"
            f"{offs if p['offset'] is not None and p['offset'] >= 0 else 'no offset'} ({p['answer']}); {where}")


def sequence_timeline(inc: dict, findings: list[dict], data: dict):
    """Per (partition, place): sequence (idempotent producers) or timestamp (producer id -1)
    against the stored offset (disk) or the request time (wire)."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    panels, by = _panels(inc, findings, data)
    if not panels:
        return None
    idem = any(s["pid"] >= 0 for k in panels for s in by[k])
    colors = _epoch_colors([s for k in panels for s in by[k]])
    height = 150 + 210 * len(panels)
    # room between panels for an axis title and the next panel's title (pixels, as a fraction)
    fig = make_subplots(rows=len(panels), cols=1, vertical_spacing=min(0.3, 95 / height),
                        subplot_titles=[f"{tp} · {where}" for tp, where in panels])
    shown: set = set()
    for row, (tp, where) in enumerate(panels, 1):
        wire = is_capture(where)
        for s in by[(tp, where)]:
            _series_traces(fig, go, s, row, wire, idem, colors, shown)
        _finding_marks(fig, go, findings, tp, where, row, idem)
        fig.update_xaxes(title_text="request time" if wire else "offset (append position in the log)",
                         type="date" if wire else "linear", row=row, col=1)
        ytitle, ytype = ("sequence", "linear") if idem else ("offset answered", "linear") if wire else ("timestamp", "date")
        fig.update_yaxes(title_text=ytitle, type=ytype, row=row, col=1)
    pids = sorted({s["pid"] for k in panels for s in by[k]})
    what = "Sequences" if idem else "Stored offsets"
    _layout(fig, f"{what} of producer {', '.join(map(str, pids))} (one panel per partition and place)",
            height)
    return fig


def _series_traces(fig, go, s: dict, row: int, wire: bool, idem: bool, colors: dict, shown: set) -> None:
    """One trace per (producer epoch, answer): a line joins only the stored (answered) attempts."""
    groups: dict[tuple, list] = {}
    for p in s["points"]:
        if p["control"] is not None:
            continue
        groups.setdefault((p["epoch"], p["answer"]), []).append(p)
    for (epoch, answer), pts in sorted(groups.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])):
        if not wire:
            pts = sorted(pts, key=lambda p: (p["offset"] if p["offset"] is not None else -1))
        x = [_t(p["ts"]) for p in pts] if wire else [p["offset"] for p in pts]
        y = [p["bseq"] for p in pts] if idem else (
            [p["offset"] for p in pts] if wire else [_t(p["ts"]) for p in pts])
        suffix, marker, line = ANSWER_STYLE.get(answer, ANSWER_STYLE["stored"])
        color = colors.get((s["pid"], epoch), PALETTE[0])
        name = f"producer {s['pid']} epoch {epoch}{suffix}"
        marker = dict(marker)
        marker.setdefault("color", color)
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="lines+markers" if line else "markers", name=name, legendgroup=name,
            showlegend=name not in shown, marker=marker, line={"color": color, "width": 1.5},
            hovertext=[_hover(s, p, wire) for p in pts], hovertemplate="%{hovertext}<extra></extra>",
            customdata=[[s["tp"], s["where"], p["offset"], p.get("last"), p["position"], answer] for p in pts]),
            row=row, col=1)
        shown.add(name)


def _finding_place(f: dict) -> str:
    wire = [e for e in f.get("evidence") or [] if e.get("kind") in WIRE_KINDS]
    if wire or f.get("replica") is None:
        return capture_place(wire[0]["source"] if wire else None)
    return f"replica {f['replica']}"


def _finding_marks(fig, go, findings, tp, where, row, idem) -> None:
    marks = [f for f in findings if f"{f.get('topic')}-{f.get('partition')}" == tp and _finding_place(f) == where]
    if is_capture(where):
        marks = [f for f in marks if f.get("first_ts_ms") is not None]
        x = [_t(f["first_ts_ms"]) for f in marks]
    else:
        marks = [f for f in marks if f.get("first_offset") is not None]
        x = [f["first_offset"] for f in marks]
    y = [f.get("base_sequence") for f in marks] if idem else (
        [f.get("first_offset") for f in marks] if is_capture(where) else [_t(f.get("first_ts_ms")) for f in marks])
    keep = [i for i, v in enumerate(y) if v is not None]
    if not keep:
        return
    fig.add_trace(go.Scatter(
        x=[x[i] for i in keep], y=[y[i] for i in keep], mode="markers", name="findings", legendgroup="findings",
        showlegend=row == 1, marker={"symbol": "star-open", "size": 18, "line": {"width": 2},
                                     "color": [SEV_COLOR[marks[i]["severity"]] for i in keep]},
        hovertext=[f"{marks[i]['rule']}: {marks[i]['message'][:200]}" for i in keep],
        hovertemplate="%{hovertext}<extra>finding</extra>",
        customdata=[[tp, where, marks[i].get("first_offset"), marks[i].get("last_offset"), None, marks[i]["rule"]]
                    for i in keep]), row=row, col=1)


def transaction_gantt(inc: dict, findings: list[dict], data: dict, reference_ms):
    from kaudit.report.charts_txn import transaction_chart

    return transaction_chart(inc, findings, data, reference_ms)


def latency_view(data: dict):
    """Each answered request's latency against its time, per API (errors marked); requests
    without an answer have no latency: they are marks in a strip of their own below."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    frames = data.get("frames") or []
    if not frames:
        return None
    unanswered = [f for f in frames if f["latency_ms"] is None]
    rows = 2 if unanswered else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, row_heights=[0.8, 0.2] if rows == 2 else None,
                        vertical_spacing=0.06)
    answered = [f for f in frames if f["latency_ms"] is not None]
    for api in sorted({f["api"] for f in answered}):
        pts = [f for f in answered if f["api"] == api and not f["error"]]
        if pts:
            fig.add_trace(go.Scatter(x=[_t(f["ts"]) for f in pts], y=[max(f["latency_ms"], 0.001) for f in pts],
                                     mode="markers", name=api, marker={"size": 5},
                                     hovertemplate="%{x}<br>%{y:.3f} ms<extra>" + api + "</extra>"), row=1, col=1)
    bad = [f for f in answered if f["error"]]
    if bad:
        fig.add_trace(go.Scatter(x=[_t(f["ts"]) for f in bad], y=[max(f["latency_ms"], 0.001) for f in bad],
                                 mode="markers", name="error answers",
                                 marker={"symbol": "x", "size": 9, "color": "#d62728"},
                                 hovertext=[f"{f['api']}: {f['error']} (client {f['client']}), {f['latency_ms']:.3f} ms"
                                            for f in bad], hovertemplate="%{x}<br>%{hovertext}<extra></extra>"), row=1, col=1)
    if unanswered:
        fig.add_trace(go.Scatter(x=[_t(f["ts"]) for f in unanswered], y=["no answer"] * len(unanswered),
                                 mode="markers", name="no answer (no latency)",
                                 marker={"symbol": "line-ns-open", "size": 12, "color": "#7f7f7f"},
                                 hovertext=[f"{f['api']}: no answer in the capture (client {f['client']})"
                                            for f in unanswered],
                                 hovertemplate="%{x}<br>%{hovertext}<extra></extra>"), row=2, col=1)
        fig.update_yaxes(type="category", row=2, col=1)
    fig.update_yaxes(type="log", title="latency (ms)", row=1, col=1)
    shown = f" ({len(frames)} of {data.get('frames_total')} requests)" if data.get("frames_total", 0) > len(frames) else ""
    _layout(fig, "Requests: latency and errors" + shown, 460 if rows == 2 else 420)
    return fig
