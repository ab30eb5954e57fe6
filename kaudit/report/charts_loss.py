"""Where a log lost or cannot read data: one row per partition and replica the incident's findings
name, a bar over each offset range lost or unreadable (missing-offsets, corrupt or CRC-failed
batches, offsets missing from a replica), coloured by rule; hover gives the finding's message.
Findings without offsets (a corrupt region between batches) are not drawn: the evidence list
names their byte positions."""

from __future__ import annotations

from kaudit.report.chart_style import layout as _layout

RULE_COLOR = {"missing-offsets": "#d62728", "corrupt-batch": "#8c564b", "crc-mismatch": "#ff7f0e",
              "truncated-tail": "#9467bd", "replica-divergence": "#1f77b4", "checkpoint-mismatch": "#17becf",
              "index-mismatch": "#bcbd22", "offset-overlap": "#e377c2",
              # acknowledged writes lost, and the election that cost them (where the lost records still are)
              "acknowledged-write-lost": "#b00020", "offset-acknowledged-twice": "#e7298a",
              "acknowledged-records-replaced": "#7570b3", "unclean-leader-election": "#666666"}


WIRE_ONLY = frozenset({"offset-acknowledged-twice", "acknowledged-records-replaced"})


def loss_map(inc: dict, findings: list[dict]):
    import plotly.graph_objects as go

    marks = [f for f in findings if f.get("first_offset") is not None and f["rule"] in RULE_COLOR
             and f.get("topic") is not None]
    if not marks:
        return None
    fig = go.Figure()
    rows, seen = [], set()
    for f in sorted(marks, key=lambda f: (f["topic"], f["partition"], str(f.get("replica")), f["first_offset"])):
        row = f"{f['topic']}-{f['partition']} " + (f"replica {f['replica']}" if f.get("replica") else
                                                   "capture" if f["rule"] in WIRE_ONLY else "every replica given")
        if row not in rows:
            rows.append(row)
        lo, hi = f["first_offset"], f["last_offset"] if f.get("last_offset") is not None else f["first_offset"]
        fig.add_trace(go.Bar(
            y=[row], x=[hi - lo + 1], base=[lo], orientation="h", name=f["rule"], legendgroup=f["rule"],
            showlegend=f["rule"] not in seen, marker={"color": RULE_COLOR[f["rule"]]}, width=0.5,
            hovertext=[f"{f['rule']} ({f['severity']}): offsets {lo}-{hi}: {f['message'][:240]}"],
            hovertemplate="%{hovertext}<extra></extra>",
            customdata=[[f"{f['topic']}-{f['partition']}", f"replica {f.get('replica')}", lo, hi, None, f["rule"]]]))
        seen.add(f["rule"])
    fig.update_xaxes(title="offset (each bar covers its offsets, first to last + 1)", rangemode="tozero", tickformat="d")
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=list(reversed(rows)))
    fig.update_layout(barmode="overlay")
    _layout(fig, "Offsets lost or unreadable, by partition and replica", 170 + 46 * len(rows))
    return fig
