"""A transaction's picture: one row per partition and place (each replica, each capture) that the
incident or any of its findings names - a partition with no row in the inputs is drawn too,
saying so - and the coordinator's row.

Each data batch is a circle (written by the client: the producer), coloured by the outcome of
the transaction it belongs to (the partition's next marker: COMMIT green, ABORT red, none yet
orange); each marker a larger mark coloured by its outcome and shaped by who wrote it: the
coordinator (diamond), an admin (square: kafka-transactions.sh abort, known on the wire by its
client id), or not known (triangle; on disk a marker does not name its writer - one that
disagrees with the coordinator's decision is not the coordinator's). The coordinator's states
are marks on its row and its decision one placed annotation; every other label is a hover text,
so none can overlap."""

from __future__ import annotations

from kaudit.report.chart_rows import incident_partitions, is_capture
from kaudit.report.chart_style import iso_time as _t
from kaudit.report.chart_style import layout as _layout

RESULT_COLOR = {"COMMIT": "#2ca02c", "ABORT": "#d62728", None: "#ff7f0e"}
WRITER_SYMBOL = {"client": "circle", "coordinator": "diamond", "admin": "square", "unknown": "triangle-up"}
COORDINATOR = "coordinator"


def _details(f: dict) -> dict:
    from kaudit.audit.stories.incidents import details_of

    return details_of(f)


class _Decision:
    """What the findings say of the transaction: the coordinator's decision, the marker writers
    they know, the producer epoch of the transaction."""

    def __init__(self, findings: list[dict]):
        self.result, self.writers, self.epoch = None, {}, None
        for f in findings:
            d = _details(f)
            if d.get("coordinator_result") in ("COMMIT", "ABORT") and self.result is None:
                self.result, self.epoch = d["coordinator_result"], f.get("producer_epoch")
            if isinstance(d.get("writers"), dict):
                self.writers.update(d["writers"])

    def writer(self, tp: str, control: str, epoch) -> str:
        w = self.writers.get(tp)
        if w in ("coordinator", "admin"):
            return w
        if self.result is not None and (self.epoch is None or epoch in (self.epoch, self.epoch + 1)):
            return "coordinator" if control == self.result else "unknown"
        return "unknown"


def _rows(inc, findings, data):
    pids = {p for p in inc["producer_ids"] if p is not None and p >= 0} | \
        {f["producer_id"] for f in findings if f.get("producer_id") is not None and f["producer_id"] >= 0}
    tps = [tp for tp in incident_partitions(inc, findings) if not tp.startswith("__transaction_state-")]
    series = [s for s in data.get("series", []) if s["pid"] in pids and s["tp"] in tps]
    return pids, tps, series


def _transactions(s: dict, epochs: set) -> list[tuple[list, dict | None]]:
    """(data points, end marker or None) runs of one series, in its order."""
    out, data = [], []
    for p in s["points"]:
        if p["control"] in ("COMMIT", "ABORT"):
            out.append((data, p))
            data = []
        elif p["txn"] and p["answer"] != "refused" and \
                (not epochs or p["epoch"] in epochs or (p["epoch"] or 0) + 1 in epochs):   # refused: never stored
            data.append(p)
    if data:
        out.append((data, None))
    return out


def _offs(p: dict) -> str:
    last = p.get("last")
    return f"offsets {p['offset']}-{last}" if last not in (None, p["offset"]) else f"offset {p['offset']}"


def transaction_chart(inc: dict, findings: list[dict], data: dict, reference_ms):
    import plotly.graph_objects as go

    pids, tps, series = _rows(inc, findings, data)
    states = [st for st in data.get("states", []) if st["tid"] in set(inc["transactional_ids"]) and st["ts"] is not None]
    if not tps and not states:
        return None
    decision = _Decision(findings)
    epochs = set(inc["producer_epochs"])
    runs = {s["tp"] + s["where"]: _transactions(s, epochs) for s in series}
    if not states and not any(runs.values()):
        return None   # nothing transactional to draw (an idempotent producer's zombie)
    fig = go.Figure()
    rows: list[str] = []
    seen_legend: set = set()
    times = [p["ts"] for s in series for p in s["points"] if p["ts"] is not None] + [st["ts"] for st in states]
    t0 = min(times) if times else reference_ms
    for tp in tps:
        mine = sorted((s for s in series if s["tp"] == tp), key=lambda s: (is_capture(s["where"]), s["where"]))
        if not mine:
            row = f"{tp} (no rows in the inputs)"
            rows.append(row)
            fig.add_trace(go.Scatter(x=[_t(t0)], y=[row], mode="markers", name="partition without rows",
                                     marker={"symbol": "x-thin-open", "size": 12, "color": "#7f7f7f"},
                                     hovertext=[f"{tp}: the inputs hold no batch of this partition "
                                                "(no data, no marker)"], hovertemplate="%{hovertext}<extra></extra>",
                                     customdata=[[tp, None, None, None, None, "missing"]]))
            continue
        for s in mine:
            row = f"{tp} {s['where']}"
            rows.append(row)
            for pts, end in runs[s["tp"] + s["where"]]:
                _draw_run(fig, go, s, row, pts, end, decision, reference_ms, seen_legend)
    if states:
        _coordinator(fig, go, states, decision, seen_legend)
        rows.append(COORDINATOR)
    fig.update_xaxes(type="date", title="time")
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=list(reversed(rows)),
                     range=[-0.7, len(rows) - 0.3])   # room for the marks of the first and last rows
    _layout(fig, "Transaction of producer " + ", ".join(map(str, sorted(pids))) + " by partition", 170 + 46 * len(rows))
    return fig


def _draw_run(fig, go, s, row, pts, end, decision, reference_ms, seen) -> None:
    result = end["control"] if end is not None else None
    color = RESULT_COLOR[result]
    if pts:
        lo = pts[0]["ts"]
        hi = end["ts"] if end is not None else reference_ms
        if lo is not None and hi is not None:
            fig.add_trace(go.Scatter(x=[_t(lo), _t(max(hi, lo))], y=[row, row], mode="lines", showlegend=False,
                                     line={"color": color, "width": 8}, opacity=0.25, hoverinfo="skip"))
        name = f"data ({result or 'no marker yet'})"
        fig.add_trace(go.Scatter(
            x=[_t(p["ts"]) for p in pts], y=[row] * len(pts), mode="markers", name=name, legendgroup=name,
            showlegend=name not in seen, marker={"symbol": "circle", "size": 9, "color": color},
            hovertext=[f"{row}: data {_offs(p)}, producer {s['pid']} epoch {p['epoch']} (written by the client); "
                       f"transaction {'ended ' + result if result else 'without a marker here'}" for p in pts],
            hovertemplate="%{x}<br>%{hovertext}<extra></extra>",
            customdata=[[s["tp"], s["where"], p["offset"], p.get("last"), p.get("position"), "data"] for p in pts]))
        seen.add(name)
    if end is not None:
        writer = decision.writer(s["tp"], result, end["epoch"])
        name = f"{result} marker by {'an admin' if writer == 'admin' else writer if writer != 'unknown' else 'an unknown writer'}"
        note = "" if writer != "unknown" or decision.result is None or result == decision.result else \
            f" - not the coordinator's decision ({decision.result})"
        fig.add_trace(go.Scatter(
            x=[_t(end["ts"])], y=[row], mode="markers", name=name, legendgroup=name, showlegend=name not in seen,
            marker={"symbol": WRITER_SYMBOL[writer], "size": 15, "color": color, "line": {"width": 1.5, "color": "black"}},
            hovertext=[f"{row}: {result} marker " + (f"at offset {end['offset']}" if end["offset"] is not None else
                                                     f"(WriteTxnMarkers, frame {end.get('position')})")
                       + f" (epoch {end['epoch']}), written by {writer}{note}"], hovertemplate="%{x}<br>%{hovertext}<extra></extra>",
            customdata=[[s["tp"], s["where"], end["offset"], end["offset"], end.get("position"), "marker"]]))
        seen.add(name)


def _coordinator(fig, go, states, decision, seen) -> None:
    def color(state):
        st = str(state or "")
        return RESULT_COLOR["COMMIT"] if "Commit" in st else RESULT_COLOR["ABORT"] if "Abort" in st else "#7f7f7f"

    fig.add_trace(go.Scatter(
        x=[_t(st["ts"]) for st in states], y=[COORDINATOR] * len(states), mode="markers", name="coordinator states",
        marker={"symbol": "diamond-open", "size": 11, "color": [color(st["state"]) for st in states], "line": {"width": 2}},
        hovertext=[f"{st['state']} (producer {st['pid']} epoch {st['epoch']}"
                   + (f", partitions {st['partitions']}" if st.get("partitions") else "") + ")" for st in states],
        hovertemplate="%{x}<br>%{hovertext}<extra></extra>",
        customdata=[[None, COORDINATOR, None, None, None, str(st["state"])] for st in states]))
    prepared = [st for st in states if str(st["state"] or "").startswith("Prepare")] or states
    at = prepared[-1]
    text = f"decision: {decision.result}" if decision.result else f"last state: {at['state']}"
    fig.add_annotation(x=_t(at["ts"]), y=COORDINATOR, text=text, showarrow=True, arrowhead=2, ax=0, ay=-28,
                       font={"size": 12, "color": color(decision.result.title() if decision.result else at["state"])},
                       bgcolor="rgba(255,255,255,0.85)")
