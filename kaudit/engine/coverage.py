"""Coverage counters of an audit, per decoded chunk: what was read and what could not be.

Both engines count with these functions (the Spark engine per task, then `merge`), so the report's
coverage header is the same whichever engine ran. `LATEST` (the latest broker-side timestamp, the
reference time when `--now` is not given) is tracked beside the counters and popped by the engine.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

LATEST = "_latest_ts_ms"
_MAX_KEYS = (LATEST, "_last_ts")
# What the inputs hold, for telling a selection (--topic, --producer-id, ...) that matches nothing
# in them from one that matches data without findings: topics, partitions, producer ids,
# transactional ids and the time span (ms). Reports leave it out (a key starting with "_").
SEEN = "_seen"
MAX_SEEN = 10_000   # values kept per list; past it the list is marked incomplete (None)


def new_seen() -> dict:
    return {"topics": [], "partitions": [], "producer_ids": [], "transactional_ids": [],
            "min_ts_ms": None, "max_ts_ms": None}


def _add_values(seen: dict, key: str, values) -> None:
    have = seen.get(key)
    if have is None:
        return
    known = set(have)
    new = list(dict.fromkeys(v for v in values if v is not None and v not in known))
    if len(have) + len(new) > MAX_SEEN:
        seen[key] = None
    elif new:
        have.extend(new)


def _unique(table: pa.Table, name: str, names: list[str]) -> list:
    """The distinct values of column `name` (`names`: the table's column names)."""
    if name not in names:
        return []
    from kaudit.audit.folds import constant

    col = table.column(name)
    if len(col) and col.null_count == len(col):
        return [None]   # what pc.unique gives, without hashing a column of nulls
    one, v = constant(col)
    return [v] if one else pc.unique(col).to_pylist()


def _pairs(table: pa.Table) -> list[str]:
    """The distinct "topic-partition" of the rows (None where either is null), found with numpy
    over the topic's dictionary codes: a capture's chunk holds many topics (~135k rows per
    chunk of the bench capture; a set of the rows' Python pairs cost ~20 ms)."""
    topic, part = table.column("topic"), table.column("partition")
    enc = pc.dictionary_encode(topic.combine_chunks() if isinstance(topic, pa.ChunkedArray) else topic)
    code = np.asarray(enc.indices.fill_null(-1), dtype=np.int64) + 1          # 0: no topic
    missing = np.asarray(part.is_null(), dtype=np.int64)
    number = np.asarray(part.fill_null(0), dtype=np.int64) + (1 << 31)        # 32 bits
    keys = np.unique((code << 33) | (missing << 32) | (number & 0xFFFFFFFF))
    names = [None] + enc.dictionary.to_pylist()
    return [f"{names[k >> 33]}-{None if (k >> 32) & 1 else (k & 0xFFFFFFFF) - (1 << 31)}" for k in keys.tolist()]


def note_seen(seen: dict, kind: str, table: pa.Table, wire: bool = False) -> None:
    """Adds what a decoded chunk holds to the inventory (cheap: one value per column when the
    chunk is one file's, as segments' chunks are)."""
    if not table.num_rows:
        return
    names = table.schema.names   # not Table.column_names: ~10x its cost, asked several times a chunk
    if wire and "topic_id" in names and table.column("topic_id").null_count < table.num_rows:
        # wire rows named by a topic id (Produce v13, Fetch v13+): whether a chunk's name is
        # known yet depends on the engine's order, so their topics come from the names learned
        # (note_names) and their partitions are not judged
        seen["partitions"] = None
        table = table.filter(pc.is_null(table.column("topic_id")))
        if not table.num_rows:
            return
    topics = _unique(table, "topic", names)
    _add_values(seen, "topics", topics)
    if "partition" in names and topics:
        parts = _unique(table, "partition", names)
        pairs = [f"{t}-{p}" for t in topics for p in parts] if len(topics) == 1 else _pairs(table)
        _add_values(seen, "partitions", pairs)
    _add_values(seen, "producer_ids", _unique(table, "producer_id", names))
    _add_values(seen, "transactional_ids", _unique(table, "transactional_id", names))
    span = {"batch": ("base_timestamp_ms", "max_timestamp_ms", 1), "frame": ("request_ts", "request_ts", 1000),
            "txn_log": ("timestamp_ms", "timestamp_ms", 1)}.get(kind)
    if span is not None and span[0] in names:
        lo, hi = pc.min(table.column(span[0])).as_py(), pc.max(table.column(span[1])).as_py()
        if lo is not None and lo >= 0:
            lo = int(lo * span[2])
            seen["min_ts_ms"] = lo if seen["min_ts_ms"] is None else min(seen["min_ts_ms"], lo)
        if hi is not None and hi >= 0:
            hi = int(hi * span[2])
            seen["max_ts_ms"] = hi if seen["max_ts_ms"] is None else max(seen["max_ts_ms"], hi)


def note_names(cov: dict, names: dict) -> None:
    """The topics the rows named by id only hold (engine TopicNames: id -> name)."""
    if isinstance(cov.get(SEEN), dict):
        _add_values(cov[SEEN], "topics", names.values())


def settle(cov: dict) -> dict:
    """The inventory in a stable order (engines merge it in the order their tasks end)."""
    seen = cov.get(SEEN)
    if isinstance(seen, dict):
        for k, v in seen.items():
            if isinstance(v, list):
                v.sort(key=lambda x: (str(type(x)), x))
    return cov


def merge_seen(into: dict, other: dict) -> dict:
    for k in ("topics", "partitions", "producer_ids", "transactional_ids"):
        if other.get(k) is None:
            into[k] = None
        else:
            _add_values(into, k, other[k])
    for k, f in (("min_ts_ms", min), ("max_ts_ms", max)):
        if other.get(k) is not None:
            into[k] = other[k] if into.get(k) is None else f(into[k], other[k])
    return into


def _sum(table: pa.Table, name: str) -> int:
    return int(pc.sum(table.column(name)).as_py() or 0)


def new_disk() -> dict:
    return {"files": 0, "bytes": 0, "batches": 0, "batch_bytes": 0, "records": 0, "crc_failures": 0,
            "decode_issues": 0, "undecodable_bytes": 0, "skipped": 0, LATEST: None, SEEN: new_seen()}


def add_disk(cov: dict, kind: str, table: pa.Table) -> None:
    if kind in ("batch", "txn_log"):
        note_seen(cov[SEEN], kind, table)
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
            "undecodable": 0, "unanswered": 0, SEEN: new_seen()}


def add_wire(cov: dict, kind: str, table: pa.Table) -> None:
    if kind in ("batch", "frame", "txn_event", "fetch_partition"):
        note_seen(cov[SEEN], kind, table, wire=True)
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
        if k == SEEN:
            merge_seen(into.setdefault(SEEN, new_seen()), v)
        elif k in _MAX_KEYS:
            if v is not None and (into.get(k) is None or v > into[k]):
                into[k] = v
        elif isinstance(v, (int, float)):
            into[k] = into.get(k, 0) + v
        elif isinstance(v, dict):
            into.setdefault(k, {}).update(v)
    return into


def inventory(cov: dict) -> dict | None:
    """The inventory of a run's coverage (both sides of `kaudit audit` together)."""
    sides = [cov] + [v for v in cov.values() if isinstance(v, dict)]
    found = [s[SEEN] for s in sides if isinstance(s.get(SEEN), dict)]
    if not found:
        return None
    out = new_seen()
    for s in found:
        merge_seen(out, s)
    return out
