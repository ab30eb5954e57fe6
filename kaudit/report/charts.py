"""The HTML report's pictures, drawn with Plotly (its plotly.js is embedded once in the file):
- a producer's sequence timeline: sequence and offset against time, per partition and per place
  (each replica, the wire), the incident's findings marked;
- a transaction's Gantt: each partition's data from its first batch to its marker (COMMIT,
  ABORT, or still open at the end of the evidence), the markers and the coordinator's states;
- a capture's request/response latency against time, per API, error answers marked.
Each function returns a figure (or None when the rows hold nothing to draw)."""

from __future__ import annotations

from datetime import datetime, timezone

SEV_COLOR = {"critical": "#8b0000", "error": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}
RESULT_COLOR = {"COMMIT": "#2ca02c", "ABORT": "#d62728", None: "#ff7f0e"}


def _t(ms):
    return None if ms is None or ms < 0 else datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc).isoformat()


def _layout(fig, title: str, height: int = 420) -> None:
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=height, margin={"l": 60, "r": 20, "t": 50, "b": 40},
                      legend={"orientation": "h", "y": -0.2}, template="plotly_white")


def sequence_timeline(inc: dict, findings: list[dict], data: dict):
    """Sequence (top) and offset (bottom) against time for the incident's producers."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    pids = {p for p in inc["producer_ids"] if p is not None}
    tps = set(inc["topic_partitions"])
    series = [s for s in data.get("series", []) if s["pid"] in pids and s["tp"] in tps]
    if not series:
        return None
    idem = any(p >= 0 for p in pids)   # producer id -1 has no sequences: its offsets only
    fig = make_subplots(rows=2 if idem else 1, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("sequence", "offset") if idem else ("offset",))
    off_row = 2 if idem else 1
    for s in series[:24]:
        pts = [p for p in s["points"] if p["control"] is None]
        name = f"{s['tp']} {s['where']}" + (f" (pid {s['pid']})" if len(pids) > 1 else "")
        text = [f"epoch {p['epoch']} seq {p['bseq']}-{p['lseq']} offset {p['offset']} ({p['answer']})" for p in pts]
        symbol = ["x" if p["answer"] == "refused" else "circle" for p in pts]
        if idem:
            fig.add_trace(go.Scatter(x=[_t(p["ts"]) for p in pts], y=[p["bseq"] for p in pts], mode="lines+markers",
                                     name=name, legendgroup=name, text=text, marker={"symbol": symbol},
                                     hovertemplate="%{x}<br>%{text}<extra>" + name + "</extra>"), row=1, col=1)
        off = [p for p in pts if p["offset"] is not None and p["offset"] >= 0]
        fig.add_trace(go.Scatter(x=[_t(p["ts"]) for p in off], y=[p["offset"] for p in off], mode="markers",
                                 name=name, legendgroup=name, showlegend=not idem,
                                 hovertemplate="%{x}<br>offset %{y}<extra>" + name + "</extra>"), row=off_row, col=1)
    if not idem:
        marks = [f for f in findings if f.get("first_offset") is not None and f.get("first_ts_ms") is not None]
        if marks:
            fig.add_trace(go.Scatter(
                x=[_t(f["first_ts_ms"]) for f in marks], y=[f["first_offset"] for f in marks], mode="markers",
                name="findings", marker={"symbol": "star", "size": 14, "color": [SEV_COLOR[f["severity"]] for f in marks]},
                text=[f"{f['rule']}: {f['message'][:160]}" for f in marks],
                hovertemplate="%{x}<br>%{text}<extra>finding</extra>"), row=1, col=1)
        _layout(fig, "Stored offsets of a producer without idempotence (producer id -1)", 380)
        return fig
    marks = [f for f in findings if f.get("base_sequence") is not None and f.get("first_ts_ms") is not None]
    if marks:
        fig.add_trace(go.Scatter(
            x=[_t(f["first_ts_ms"]) for f in marks], y=[f["base_sequence"] for f in marks], mode="markers",
            name="findings", marker={"symbol": "star", "size": 14, "color": [SEV_COLOR[f["severity"]] for f in marks],
                                     "line": {"width": 1, "color": "black"}},
            text=[f"{f['rule']}: {f['message'][:160]}" for f in marks],
            hovertemplate="%{x}<br>%{text}<extra>finding</extra>"), row=1, col=1)
    _layout(fig, f"Sequence timeline of producer {', '.join(map(str, sorted(pids)))}", 520)
    return fig


def transaction_gantt(inc: dict, findings: list[dict], data: dict, reference_ms):
    """Per partition: data from its first transactional batch to its end marker; markers;
    the coordinator's states for the transactional ids involved."""
    import plotly.graph_objects as go

    pids = {p for p in inc["producer_ids"] if p is not None and p >= 0}
    epochs = set(inc["producer_epochs"])
    spans, markers = [], []
    for s in data.get("series", []):
        if s["pid"] not in pids or s["tp"] not in inc["topic_partitions"]:
            continue
        start = None
        for p in s["points"]:
            if p["control"] in ("COMMIT", "ABORT"):
                if start is not None:
                    spans.append((f"{s['tp']} {s['where']}", start, p["ts"], p["control"]))
                    start = None
                markers.append((f"{s['tp']} {s['where']}", p["ts"], p["control"], p["offset"], p["epoch"]))
            elif p["txn"] and start is None and (not epochs or p["epoch"] in epochs or p["epoch"] + 1 in epochs):
                start = p["ts"]
        if start is not None:
            spans.append((f"{s['tp']} {s['where']}", start, reference_ms, None))
    states = [st for st in data.get("states", []) if st["tid"] in set(inc["transactional_ids"]) and st["ts"] is not None]
    if not spans and not markers and not states:
        return None
    fig = go.Figure()
    for row, lo, hi, result in spans:
        if lo is None:
            continue
        hi = hi if hi is not None else lo
        fig.add_trace(go.Bar(y=[row], x=[max(hi - lo, 1)], base=[_t(lo)], orientation="h", showlegend=False,
                             marker={"color": RESULT_COLOR[result], "opacity": 0.6},
                             hovertemplate=f"{row}: data from %{{base}} ({result or 'open at the end of the evidence'})<extra></extra>"))
    if markers:
        fig.add_trace(go.Scatter(y=[m[0] for m in markers], x=[_t(m[1]) for m in markers], mode="markers", name="markers",
                                 marker={"symbol": "line-ns-open", "size": 18, "color": [RESULT_COLOR[m[2]] for m in markers],
                                         "line": {"width": 3}},
                                 text=[f"{m[2]} at offset {m[3]} (epoch {m[4]})" for m in markers],
                                 hovertemplate="%{x}<br>%{text}<extra></extra>"))
    if states:
        fig.add_trace(go.Scatter(y=["coordinator"] * len(states), x=[_t(s["ts"]) for s in states], mode="markers+text",
                                 name="coordinator states", text=[s["state"] for s in states], textposition="top center",
                                 marker={"size": 9, "color": "#7f7f7f"}, hovertemplate="%{x}<br>%{text}<extra></extra>"))
    fig.update_xaxes(type="date")
    _layout(fig, "Transaction of producer " + ", ".join(map(str, sorted(pids))), 140 + 40 * (len({s[0] for s in spans} | {m[0] for m in markers}) + 1))
    return fig


def latency_view(data: dict):
    """Each request's latency against its time, per API; error answers and unanswered requests marked."""
    import plotly.graph_objects as go

    frames = data.get("frames") or []
    if not frames:
        return None
    fig = go.Figure()
    for api in sorted({f["api"] for f in frames}):
        pts = [f for f in frames if f["api"] == api and f["latency_ms"] is not None and not f["error"]]
        if pts:
            fig.add_trace(go.Scatter(x=[_t(f["ts"]) for f in pts], y=[max(f["latency_ms"], 0.01) for f in pts],
                                     mode="markers", name=api, marker={"size": 5},
                                     hovertemplate="%{x}<br>%{y:.2f} ms<extra>" + api + "</extra>"))
    bad = [f for f in frames if f["error"]]
    if bad:
        fig.add_trace(go.Scatter(x=[_t(f["ts"]) for f in bad], y=[max(f["latency_ms"] or 0.01, 0.01) for f in bad],
                                 mode="markers", name="errors / no answer",
                                 marker={"symbol": "x", "size": 9, "color": "#d62728"},
                                 text=[f"{f['api']}: {f['error']} (client {f['client']})" for f in bad],
                                 hovertemplate="%{x}<br>%{text}<extra></extra>"))
    fig.update_yaxes(type="log", title="latency (ms)")
    shown = f" ({len(frames)} of {data.get('frames_total')} requests)" if data.get("frames_total", 0) > len(frames) else ""
    _layout(fig, "Requests: latency and errors" + shown, 420)
    return fig
