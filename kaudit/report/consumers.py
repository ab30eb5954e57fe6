"""The `kaudit consumers` view: per group, member and partition, the ranges served, the commits,
the ownership with its times and causes (audit/consumers/timeline.py), as rows and as a table."""

from __future__ import annotations

from kaudit.audit.consumers.timeline import Timelines
from kaudit.timefmt import iso_ms

NO_GROUP = "(no group)"


def _ms(ts) -> int | None:
    return None if ts is None else int(ts * 1000)


def _ranges(serves) -> list[dict]:
    """Contiguous served ranges (records delivered), in time order; a response that starts back at
    or below where the previous one started (a re-read) begins a range of its own."""
    out: list[dict] = []
    prev_first = None
    for s in serves:
        if s.data_end is None:
            continue
        last = out[-1] if out else None
        forward, prev_first = prev_first is not None and s.data_first > prev_first, s.data_first
        if last is not None and forward and last["first_offset"] <= s.data_first <= last["last_offset"] + 1:
            last["last_offset"] = max(last["last_offset"], s.data_end - 1)
            last["last_ms"], last["responses"] = _ms(s.ts), last["responses"] + 1
        else:
            out.append({"first_offset": s.data_first, "last_offset": s.data_end - 1, "first_ms": _ms(s.ts),
                        "last_ms": _ms(s.ts), "responses": 1, "connection": s.connection,
                        "isolation_level": s.isolation})
    return out


def _commit(c) -> dict:
    return {"ts_ms": _ms(c.ts), "offset": c.offset, "generation": c.generation,
            "transactional_id": c.txn[0] if c.txn else None, "producer_id": c.txn[1] if c.txn else None,
            "producer_epoch": c.txn[2] if c.txn else None, "outcome": c.outcome if c.txn else "COMMITTED"}


def describe(tl: Timelines) -> list[dict]:
    """One row per group: its members (with their partitions) and its commits."""
    rows = []
    for group, members in sorted(tl.groups().items()):
        mrows = []
        for m in sorted(members, key=lambda m: m.first_ts or 0):
            parts: dict = {}
            for (g, tp), stints in tl.stints.items():
                for st in stints:
                    if g == group and st.member is m:
                        p = parts.setdefault(tp, {"partition": f"{tp[0]}-{tp[1]}", "owned": [], "served": [],
                                                  "commits": []})
                        p["owned"].append({"from_ms": _ms(st.start), "to_ms": _ms(st.end), "cause": st.cause})
                        p["served"] += _ranges(st.serves)
            for c in m.commits:
                parts.setdefault(c.tp, {"partition": f"{c.tp[0]}-{c.tp[1]}", "owned": [], "served": [],
                                        "commits": []})["commits"].append(_commit(c))
            mrows.append({"member_id": m.member_id, "client_id": m.client_id, "connection": m.connection,
                          "generation": m.generation, "first_ms": _ms(m.first_ts), "left_ms": _ms(m.left_ts),
                          "left_because": m.cause, "events": [[_ms(t), e] for t, e in m.events],
                          "partitions": [parts[k] for k in sorted(parts, key=str)]})
        commits = [dict(_commit(c), member_id=c.member_id, partition=f"{c.tp[0]}-{c.tp[1]}")
                   for c in tl.commits if c.group == group]
        rows.append({"group": group, "members": mrows, "commits": commits})
    loose = _loose(tl)
    if loose:
        rows.append({"group": NO_GROUP, "members": loose, "commits": []})
    return rows


def _loose(tl: Timelines) -> list[dict]:
    """Consumers whose Fetches no group member explains (assign(), or a member not in the capture)."""
    by_client: dict = {}
    for s in tl.serves:
        if s.member is None and s.data_end is not None:
            by_client.setdefault(s.client, {}).setdefault(s.tp, []).append(s)
    out = []
    for client, tps in sorted(by_client.items(), key=lambda kv: str(kv[0])):
        out.append({"member_id": None, "client_id": client[1], "connection": f"client {client[0]}",
                    "generation": None, "first_ms": None, "left_ms": None, "left_because": None, "events": [],
                    "partitions": [{"partition": f"{tp[0]}-{tp[1]}", "owned": [], "served": _ranges(v),
                                    "commits": []} for tp, v in sorted(tps.items(), key=str)]})
    return out


def select_groups(rows: list[dict], groups: list[str] | None) -> list[dict]:
    return rows if not groups else [r for r in rows if r["group"] in groups]


def _t(ms) -> str:
    return iso_ms(ms) if ms is not None else "?"


def write_consumers_table(rows: list[dict], out=None) -> None:
    import sys

    out = out or sys.stdout
    w = out.write
    for n, g in enumerate(rows):
        if n:
            w("\n")
        w(f"group {g['group']}: {len(g['members'])} member(s), {len(g['commits'])} commit(s)\n")
        for m in g["members"]:
            who = m["member_id"] or "(a client with no member id)"
            gen = "" if m["generation"] is None else f"  generation/epoch {m['generation']}"
            w(f"  member {who}  client {m['client_id']}  {m['connection'] or ''}{gen}\n")
            for t, e in m["events"]:
                w(f"    {_t(t)}  {e}\n")
            for p in m["partitions"]:
                w(f"    {p['partition']}\n")
                for o in p["owned"]:
                    w(f"      owned {_t(o['from_ms'])} .. {_t(o['to_ms'])}"
                      f"{'' if not o['cause'] else ' (' + o['cause'] + ')'}\n")
                for r in p["served"]:
                    w(f"      served {r['first_offset']}-{r['last_offset']} in {r['responses']} response(s) "
                      f"{_t(r['first_ms'])} .. {_t(r['last_ms'])} ({r['isolation_level']})\n")
                for c in p["commits"]:
                    txn = "" if not c["transactional_id"] else \
                        f" in transaction {c['transactional_id']} (producer {c['producer_id']}, epoch " \
                        f"{c['producer_epoch']}): {c['outcome'] or 'outcome unknown'}"
                    w(f"      committed {c['offset']} at {_t(c['ts_ms'])}{txn}\n")
