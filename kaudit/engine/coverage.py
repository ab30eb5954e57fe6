"""Coverage counters of an audit, per decoded chunk: what was read and what could not be.

Both engines count with these functions (the Spark engine per task, then `merge`), so the report's
coverage header is the same whichever engine ran. `LATEST` (the latest broker-side timestamp, the
reference time when `--now` is not given) is tracked beside the counters and popped by the engine.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

LATEST = "_latest_ts_ms"
_MAX_KEYS = (LATEST, "_last_ts")


def _sum(table: pa.Table, name: str) -> int:
    return int(pc.sum(table.column(name)).as_py() or 0)


def new_disk() -> dict:
    return {"files": 0, "bytes": 0, "batches": 0, "batch_bytes": 0, "records": 0, "crc_failures": 0,
            "decode_issues": 0, "undecodable_bytes": 0, "skipped": 0, LATEST: None}


def add_disk(cov: dict, kind: str, table: pa.Table) -> None:
    if kind == "batch" and table.num_rows:
        cov["batches"] += table.num_rows
        cov["batch_bytes"] += _sum(table, "batch_size")
        cov["records"] += _sum(table, "record_count")
        cov["crc_failures"] += table.num_rows - _sum(table, "crc_ok")
        m = pc.max(table.column("max_timestamp_ms")).as_py()
        if m is not None and (cov[LATEST] is None or m > cov[LATEST]):
            cov[LATEST] = m
    elif kind == "decode_issue":
        cov["decode_issues"] += table.num_rows
        cov["undecodable_bytes"] += _sum(table, "length")
    elif kind == "skipped":
        cov["skipped"] += table.num_rows


def new_wire() -> dict:
    return {"frames": 0, "batches": 0, "connections": 0, "gaps": 0, "gap_bytes": 0,
            "undecodable": 0, "unanswered": 0}


def add_wire(cov: dict, kind: str, table: pa.Table) -> None:
    if kind == "frame":
        cov["frames"] += table.num_rows
    elif kind == "batch":
        cov["batches"] += table.num_rows
    elif kind == "connection" and table.num_rows:
        cov["connections"] += table.num_rows
        cov["gaps"] += _sum(table, "gaps")
        cov["gap_bytes"] += _sum(table, "gap_bytes")
        cov["unanswered"] += _sum(table, "unanswered")
    elif kind == "decode_issue":
        cov["undecodable"] += table.num_rows


def merge(into: dict, other: dict) -> dict:
    """Adds `other`'s counters to `into` (maxima for the reference times)."""
    for k, v in other.items():
        if k in _MAX_KEYS:
            if v is not None and (into.get(k) is None or v > into[k]):
                into[k] = v
        elif isinstance(v, (int, float)):
            into[k] = into.get(k, 0) + v
        elif isinstance(v, dict):
            into.setdefault(k, {}).update(v)
    return into
