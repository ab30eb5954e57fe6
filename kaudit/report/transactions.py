"""The `kaudit txn` table: one row per transaction (human output, rich)."""

from __future__ import annotations


def write_transactions_table(transactions: list[dict], out=None) -> None:
    from rich.console import Console
    from rich.table import Table

    tab = Table("producer", "transactional id", "epoch", "start", "outcome", "partitions (first offset -> marker)",
                "coordinator states")
    for t in transactions:
        parts = "\n".join(
            f"{p['partition']} {p['first_offset']} -> "
            + (f"{p['marker']['result']}@{p['marker']['offset']} (coord epoch {p['marker']['coordinator_epoch']})"
               if p["marker"] else "no marker") for p in t["parts"])
        states = " ".join(s["state"] for s in t["coordinator_states"])
        tab.add_row(str(t["producer_id"]), t["transactional_id"] or "", str(t["producer_epoch"]),
                    str(t["start_ms"]), t["outcome"], parts, states)
    Console(file=out).print(tab)
