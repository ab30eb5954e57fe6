"""The `kaudit txn` view: the selection of transactions and their table (human output, rich)."""

from __future__ import annotations

from kaudit.timefmt import duration, iso_ms


def select_transactions(transactions: list[dict], sel) -> list[dict]:
    """The transactions a Selection names: by transactional id (a part no coordinator record
    claims goes with its producer's transactional id), producer id, topic and partition of a
    part, start time."""
    if not sel:
        return transactions
    tid_of: dict = {}
    for t in transactions:
        if t["transactional_id"]:
            tid_of.setdefault(t["producer_id"], t["transactional_id"])
    out = []
    for t in transactions:
        tid = t["transactional_id"] or tid_of.get(t["producer_id"])
        if sel.transactional_id and tid not in sel.transactional_id:
            continue
        if sel.producer_id and t["producer_id"] not in sel.producer_id:
            continue
        parts = [p["partition"].rsplit("-", 1) for p in t["parts"]]
        if sel.topic and not any(tp[0] in sel.topic for tp in parts):
            continue
        if sel.partition and not any(int(tp[1]) in sel.partition for tp in parts):
            continue
        start = t["start_ms"]
        if sel.since_ms is not None and (start is None or start < sel.since_ms):
            continue
        if sel.until_ms is not None and (start is None or start > sel.until_ms):
            continue
        out.append(t)
    return out


def _marker(m: dict | None) -> str:
    if m is None:
        return "no marker"
    where = f"@{m['offset']}" if m["offset"] is not None else f" (frame {m['evidence']['position']})"
    by = f", by {m['client_id']}" if m.get("writer") == "admin" else ""
    return f"{m['result']}{where} epoch {m['epoch']} (coord epoch {m['coordinator_epoch']}{by})"


def write_transactions_table(transactions: list[dict], out=None) -> None:
    from rich.console import Console
    from rich.table import Table

    tab = Table("producer", "transactional id", "epoch", "start", "timeout", "outcome", "ended by",
                "partitions (first offset -> marker)", "coordinator states", "seen in")
    for c in tab.columns[:2]:
        c.no_wrap = True   # ids are what users type: never cut
    for t in transactions:
        parts = "\n".join(f"{p['partition']} {p['first_offset'] if p['first_offset'] is not None else '?'} -> "
                          f"{_marker(p['marker'])}" for p in t["parts"])
        states = "\n".join(f"{s['state']} {iso_ms(s['ts_ms'])}" for s in t["coordinator_states"])
        seen = t.get("source", "disk") + (" + wire" if t.get("wire") else "")
        tab.add_row(str(t["producer_id"]), t["transactional_id"] or "", str(t["producer_epoch"]),
                    iso_ms(t["start_ms"]) if t["start_ms"] is not None else "",
                    duration(t["timeout_ms"]) if t["timeout_ms"] is not None else "", t["outcome"] or "",
                    t.get("ended_by") or "", parts, states, seen)
    con = Console(file=out)
    if not con.is_terminal:   # piped: wide enough that ids and offsets are never cut
        con = Console(file=out, width=240)
    con.print(tab)
