"""The `kaudit txn` view: the selection of transactions and their table (human output)."""

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


def _wire_writers(t: dict) -> dict:
    """(partition, result, epoch) -> the writer the capture shows of that marker (an admin's
    WriteTxnMarkers, kafka-transactions.sh abort), for a transaction seen on both feeds."""
    out = {}
    for p in (t.get("wire") or {}).get("parts") or ():
        m = p.get("marker")
        if m is not None and m.get("writer"):
            out[(p["partition"], m["result"], m["epoch"])] = {"writer": m["writer"], "client_id": m.get("client_id")}
    return out


def write_transactions_table(transactions: list[dict], out=None, columns: int | None = None) -> None:
    """One block per transaction, within the terminal's width (COLUMNS, else 80): who and how it
    ended on the first line, then its start, its partitions (first offset -> marker) and the
    coordinator's states, long lines wrapped under themselves. Ids are never cut."""
    import sys
    import textwrap

    from kaudit.report.columns import width

    out = out or sys.stdout
    columns = columns or width()

    def put(text: str, indent: str) -> None:
        out.write("\n".join(textwrap.wrap(text, max(columns, 40), initial_indent=indent,
                                           subsequent_indent=indent + "    ", break_on_hyphens=False,
                                           break_long_words=False)) + "\n")

    for n, t in enumerate(transactions):
        if n:
            out.write("\n")
        change = t.get("producer_id_change")
        if change:
            at = iso_ms(change["ts_ms"]) if change.get("ts_ms") is not None else "an unknown time"
            put(f"{t['transactional_id'] or ''} moved from producer id {change['from']} to {change['to']} at {at}: "
                f"{change['how']}".lstrip(), "")
        tid = t["transactional_id"] or "no transactional id"
        enders = list(dict.fromkeys(x for x in (t.get("ended_by"), (t.get("wire") or {}).get("ended_by")) if x))
        ended = f", ended by {' and by '.join(enders)}" if enders else ""   # a torn one: each side's
        put(f"{tid}  producer {t['producer_id']} epoch {t['producer_epoch']}: {t['outcome'] or 'unknown outcome'}"
            f"{ended}", "")
        start = iso_ms(t["start_ms"]) if t["start_ms"] is not None else "an unknown time"
        timeout = f", timeout {duration(t['timeout_ms'])}" if t["timeout_ms"] is not None else ""
        seen = t.get("source", "disk") + (" + wire" if t.get("wire") else "")
        put(f"started {start}{timeout}; seen in {seen}", "  ")
        if t["parts"]:
            put("partitions (first offset -> marker):", "  ")
            seen = _wire_writers(t)
            for p in t["parts"]:
                first = "(no data)" if p.get("data_batches") == 0 else \
                    p["first_offset"] if p["first_offset"] is not None else "?"
                m = p["marker"]
                if m is not None and not m.get("writer"):   # the log cannot tell who wrote it; the wire can
                    m = {**m, **seen.get((p["partition"], m["result"], m["epoch"]), {})}
                put(f"{p['partition']} {first} -> {_marker(m)}", "    ")
        if t["coordinator_states"]:
            put("coordinator states:", "  ")
            for st in t["coordinator_states"]:
                put(f"{iso_ms(st['ts_ms'])}  {st['state']}", "    ")
    out.flush()
