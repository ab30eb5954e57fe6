"""A consumer group's partition against time (HTML report and `kaudit consumers --format html`):
each member's served offset ranges (a vertical bar per Fetch response, first to last offset
delivered) and its commits (diamonds; a transaction's aborted commit open), one colour per member;
the group's rebalances (joins, assignments, generation or member epoch changes) and members'
exits (LeaveGroup, fenced, a partition lost with no LeaveGroup seen) as dotted vertical lines whose
hover says the cause; the consumer findings on the partition as shaded boxes over their damaged
offsets and time.

`panels(tl, keys)` makes the drawable rows (plain JSON: the report keeps them), `consumer_chart`
draws one. Every mark carries [partition, member, first offset, last offset, frame, kind] in
`customdata` (the browser test reads them)."""

from __future__ import annotations

from kaudit.audit.consumers.timeline import Timelines
from kaudit.report.chart_style import iso_time as _t
from kaudit.report.chart_style import layout as _layout

NO_GROUP = "(no group)"
MAX_SERVES = 1500     # per member and panel (evenly thinned)
MAX_EVENTS = 300      # per panel
PALETTE = ("#1f77b4", "#9467bd", "#2ca02c", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
SEV_COLOR = {"critical": "#8b0000", "error": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}
EXIT_WORDS = ("LeaveGroup", "left", "fenced", "revoked", "no LeaveGroup seen")


def _ms(ts) -> int | None:
    return None if ts is None else int(ts * 1000)


def tp_name(tp) -> str:
    return f"{tp[0]}-{tp[1]}"


def _thin(xs: list, most: int) -> list:
    step = max(1, -(-len(xs) // most))
    return xs[::step]


def _serve(s) -> list:
    return [_ms(s.ts), s.data_first, s.data_end - 1, s.position, s.connection]


def _group_panel(tl: Timelines, group: str, tp: tuple) -> dict:
    members = [m for m in tl.members.values() if m.group == group]
    stints = tl.stints.get((group, tp), [])
    rows = []
    for m in sorted(members, key=lambda m: (m.first_ts or 0, m.member_id)):
        mine = [st for st in stints if st.member is m]
        commits = [c for c in m.commits if c.tp == tp]
        serves = [s for st in mine for s in st.serves if s.data_end is not None]
        if not (mine or commits):
            continue
        rows.append({"member": m.member_id, "label": f"{m.member_id} ({m.client_id})", "client_id": m.client_id,
                     "serves": _thin([_serve(s) for s in serves], MAX_SERVES),
                     "commits": [[_ms(c.ts), c.offset, c.outcome if c.txn else "COMMITTED",
                                  c.txn[0] if c.txn else None, c.position] for c in commits],
                     "holds": [[_ms(st.start), _ms(st.end), st.cause] for st in mine]})
    outside = [c for c in tl.commits if c.group == group and c.tp == tp and c.member_id is None]
    if outside:
        rows.append({"member": None, "label": "no member id (an admin tool or a pre-KIP-447 transaction)",
                     "client_id": None, "serves": [], "holds": [],
                     "commits": [[_ms(c.ts), c.offset, c.outcome if c.txn else "COMMITTED",
                                  c.txn[0] if c.txn else None, c.position] for c in outside]})
    events = []
    for m in members:
        for ts, text in m.events:
            kind = "exit" if any(w in text for w in EXIT_WORDS) else "rebalance"
            events.append([_ms(ts), m.member_id, text, kind])
    for st in stints:   # a hold's end no member event tells (a revocation, the next owner's start)
        if st.end is not None and st.cause and st.cause.startswith(("no LeaveGroup seen", "revoked")):
            events.append([_ms(st.end), st.member.member_id, f"stopped holding {tp_name(tp)}: {st.cause}", "exit"])
    events.sort(key=lambda e: e[0] or 0)
    return {"group": group, "tp": tp_name(tp), "members": rows, "events": _thin(events, MAX_EVENTS)}


def _loose_panel(tl: Timelines, tp: tuple) -> dict:
    """Consumers no group member explains (assign()), one row per client."""
    by: dict = {}
    for s in tl.by_tp.get(tp, ()):
        if s.member is None and s.data_end is not None:
            by.setdefault(s.client, []).append(s)
    rows = [{"member": None, "label": f"client {c[1]} ({c[0]})", "client_id": c[1],
             "serves": _thin([_serve(s) for s in v], MAX_SERVES), "commits": [], "holds": []}
            for c, v in sorted(by.items(), key=lambda kv: str(kv[0]))]
    return {"group": NO_GROUP, "tp": tp_name(tp), "members": rows, "events": []}


def every_key(tl: Timelines) -> list[tuple]:
    """Every (group, tp) the timelines hold: the groups' held and committed partitions, and the
    partitions loose consumers read."""
    keys = set(tl.stints) | {(c.group, c.tp) for c in tl.commits}
    keys |= {(NO_GROUP, s.tp) for s in tl.serves if s.member is None and s.data_end is not None}
    return sorted(keys, key=lambda k: (k[0] == NO_GROUP, k[0], str(k[1][0]), k[1][1]))


def panels(tl: Timelines, keys: list[tuple] | None = None) -> list[dict]:
    out = []
    for group, tp in (every_key(tl) if keys is None else keys):
        p = _loose_panel(tl, tp) if group == NO_GROUP else _group_panel(tl, group, tp)
        if p["members"]:
            out.append(p)
    return out


def finding_key(tl: Timelines, f: dict) -> tuple | None:
    """The (group, tp) panel a consumer finding belongs on: its group, else its member's, else the
    group of the member its Fetch connection served, else the group whose member of that client
    held the partition, else the loose consumers'."""
    from kaudit.audit.stories.incidents import details_of

    if f.get("topic") is None or f.get("partition") is None:
        return None
    tp = (f["topic"], int(f["partition"]))
    d = details_of(f)
    if d.get("group"):
        return (d["group"], tp)
    member = d.get("member")
    for m in tl.members.values():
        if member and m.member_id == member:
            return (m.group, tp)
    # the member the finding's Fetch connection served (the read_uncommitted reader's)
    conn = f.get("connection")
    served = next((s.member for s in tl.by_tp.get(tp, ()) if conn and s.connection == conn and s.member), None)
    if served is not None:
        return (served.group, tp)
    for (group, t), stints in tl.stints.items():
        if t == tp and any(st.member.client_id == f.get("client_id") for st in stints):
            return (group, tp)
    return (NO_GROUP, tp)


# ---- the figure -----------------------------------------------------------------------------------

def consumer_chart(panel: dict, findings: list[dict] = ()):
    """One (group, partition) panel: time on x, offsets on y."""
    import plotly.graph_objects as go

    if not panel["members"]:
        return None
    fig = go.Figure()
    tp = panel["tp"]
    offsets = [v for m in panel["members"] for s in m["serves"] for v in (s[1], s[2])] + \
        [c[1] for m in panel["members"] for c in m["commits"]] + \
        [v for f in findings for v in (f.get("first_offset"), f.get("last_offset")) if v is not None]
    lo, hi = (min(offsets), max(offsets)) if offsets else (0, 1)
    times = [t for m in panel["members"] for t in [s[0] for s in m["serves"]] + [c[0] for c in m["commits"]]
             if t is not None] + [e[0] for e in panel["events"] if e[0] is not None]
    span = (max(times) - min(times)) if times else 0
    for f in findings:   # first: the members' marks are drawn over the shading
        _damage(fig, go, tp, f, max(span * 0.01, 1))
    for i, m in enumerate(panel["members"]):
        _member(fig, go, tp, m, PALETTE[i % len(PALETTE)])
    _events(fig, go, tp, panel["events"], lo - 0.5, hi + 0.5)
    fig.update_xaxes(type="date", title="time (capture)")
    fig.update_yaxes(title="offset", tickformat="d")
    _layout(fig, f"Consumer group {panel['group']}: {tp} - records served and commits by member", 420)
    return fig


def _member(fig, go, tp: str, m: dict, color: str) -> None:
    name = f"member {m['label']}"
    if m["serves"]:
        x, y, cd, hover = [], [], [], []
        for ts, first, last, pos, conn in m["serves"]:
            x += [_t(ts), _t(ts), None]
            y += [first, last, None]
            d = [tp, m["member"] or m["label"], first, last, pos, "served"]
            cd += [d, d, d]
            text = f"{name}: served offsets {first}-{last} (frame {pos}, {conn})"
            hover += [text, text, None]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=f"{name} served", legendgroup=name,
                                 line={"color": color, "width": 5}, marker={"size": 4, "color": color},
                                 hovertext=hover, hovertemplate="%{x}<br>%{hovertext}<extra></extra>",
                                 customdata=cd))
    if m["commits"]:
        aborted = [c[2] == "ABORT" for c in m["commits"]]
        fig.add_trace(go.Scatter(
            x=[_t(c[0]) for c in m["commits"]], y=[c[1] for c in m["commits"]], mode="markers",
            name=f"{name} committed", legendgroup=name,
            marker={"symbol": ["diamond-open" if a else "diamond" for a in aborted], "size": 12, "color": color,
                    "line": {"width": 1.5, "color": "black"}},
            hovertext=[f"{name}: committed offset {c[1]}" + (f" in transaction {c[3]}: {c[2] or 'outcome unknown'}"
                                                            if c[3] else "") for c in m["commits"]],
            hovertemplate="%{x}<br>%{hovertext}<extra></extra>",
            customdata=[[tp, m["member"] or m["label"], c[1], c[1], c[4], "commit"] for c in m["commits"]]))


def _events(fig, go, tp: str, events: list, lo: float, hi: float) -> None:
    for kind, name, color in (("rebalance", "rebalances (joins, assignments, epochs)", "#7f7f7f"),
                              ("exit", "members leaving (cause in the hover)", "#d62728")):
        evs = [e for e in events if e[3] == kind and e[0] is not None]
        if not evs:
            continue
        x, y, cd, hover = [], [], [], []
        for ts, member, text, _ in evs:
            x += [_t(ts), _t(ts), None]
            y += [lo, hi, None]
            d = [tp, member, None, None, None, kind]
            cd += [d, d, d]
            hover += [f"member {member}: {text}"] * 2 + [None]
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=name, line={"color": color, "width": 1, "dash": "dot"},
                                 hovertext=hover, hovertemplate="%{x}<br>%{hovertext}<extra></extra>",
                                 customdata=cd))


def _damage(fig, go, tp: str, f: dict, pad_ms: float) -> None:
    """The finding's offsets over its time, shaded (a box around one instant is widened)."""
    first, last = f.get("first_offset"), f.get("last_offset")
    t0 = f.get("first_ts_ms")
    if first is None or t0 is None:
        return
    last = first if last is None else last
    t1 = f.get("last_ts_ms") or t0
    if t1 - t0 < pad_ms:
        t0, t1 = t0 - pad_ms, t1 + pad_ms
    color = SEV_COLOR.get(f["severity"], "#7f7f7f")
    d = [tp, None, first, last, None, f["rule"]]
    fig.add_trace(go.Scatter(
        x=[_t(t0), _t(t1), _t(t1), _t(t0), _t(t0)], y=[first - 0.5, first - 0.5, last + 0.5, last + 0.5, first - 0.5],
        mode="lines", fill="toself", fillcolor=color, opacity=0.3, line={"color": color, "width": 1},
        name=f"{f['rule']}: offsets {first}-{last}", hoveron="fills+points",
        hovertext=[f"{f['rule']} ({f['severity']}): {f['message'][:300]}"] * 5,
        hovertemplate="%{hovertext}<extra>finding</extra>", customdata=[d] * 5))
