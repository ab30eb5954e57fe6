"""The `kaudit txn` table: one row per transaction (human output, rich)."""

from __future__ import annotations


def _marker(m: dict | None) -> str:
    if m is None:
        return "no marker"
    where = f"@{m['offset']}" if m["offset"] is not None else f" (frame {m['evidence']['position']})"
    by = f", by {m['client_id']}" if m.get("writer") == "admin" else ""
    return f"{m['result']}{where} epoch {m['epoch']} (coord epoch {m['coordinator_epoch']}{by})"


def write_transactions_table(transactions: list[dict], out=None) -> None:
    from rich.console import Console
    from rich.table import Table

    tab = Table("producer", "transactional id", "epoch", "start", "outcome", "ended by",
                "partitions (first offset -> marker)", "coordinator states", "seen in")
    for t in transactions:
        parts = "\n".join(f"{p['partition']} {p['first_offset'] if p['first_offset'] is not None else '?'} -> "
                          f"{_marker(p['marker'])}" for p in t["parts"])
        states = " ".join(s["state"] for s in t["coordinator_states"])
        seen = t.get("source", "disk") + (" + wire" if t.get("wire") else "")
        tab.add_row(str(t["producer_id"]), t["transactional_id"] or "", str(t["producer_epoch"]),
                    t.get("start") or "", t["outcome"], t.get("ended_by") or "", parts, states, seen)
    console = Console(file=out) if out is not None else Console()
    if not console.is_terminal:   # piped: wide enough that ids and offsets are never cut
        console = Console(file=out, width=max(console.width, 240))
    console.print(tab)
