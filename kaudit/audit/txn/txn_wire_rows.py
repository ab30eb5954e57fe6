"""One producer id's rows for the wire transaction feed (txn_wire.ProducerWire), in replay
order, taken from the fold's Arrow slices with numpy rather than row by row.

The order is txn_wire.producer_facts's: by (row_ts or 0, position or 0), ties in the order the
rows came. A COMMIT/ABORT control batch a Fetch response served counts once per (partition,
offset): txn_fetched.fetched ignores any later copy and any row it cannot read, so only the first
readable copy in replay order becomes a dict (consumers fetch the same marker many times)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import np_col


class _Fallback(Exception):
    """Timestamps numpy cannot order as Python does (NaN, not floats): sort in Python."""


def replay_rows(tables: list[tuple[str, pa.Table]]) -> list[tuple] | None:
    """(ts, position, kind, row dict) in replay order, fetched markers' repeats left out; None
    when the timestamps are not plain floats (the caller sorts the rows in Python then)."""
    chunks = [(kind, t) for kind, t in tables if t.num_rows]
    if not chunks:
        return []
    try:
        ts = np.concatenate([_row_ts(kind, t) for kind, t in chunks])
    except _Fallback:
        return None
    pos = np.concatenate([np_col(t, "position", 0, np.int64) for _, t in chunks])
    order = np.lexsort((np.arange(ts.size), pos, ts))   # stable: ties keep the feed order
    keys: dict[int, tuple | None] = {}   # row -> its fetched marker's (tp, offset); None: unreadable
    base = 0
    for kind, t in chunks:
        if kind == "batch":
            keys.update(_marker_keys(t, base))
        base += t.num_rows
    keep = np.ones(ts.size, dtype=bool)
    if keys:
        seen: set = set()
        rows = np.fromiter(keys, dtype=np.int64, count=len(keys))
        mark = np.zeros(ts.size, dtype=bool)
        mark[rows] = True
        for i in order[mark[order]].tolist():
            k = keys[i]
            if k is None or k in seen:
                keep[i] = False
            else:
                seen.add(k)
    order = order[keep[order]]
    dicts = _dicts(chunks, keep)
    kinds = np.repeat(np.array([kind for kind, _ in chunks], dtype=object), [t.num_rows for _, t in chunks])
    return list(zip(ts[order].tolist(), pos[order].tolist(), kinds[order].tolist(),
                    [dicts[i] for i in order.tolist()]))


def _row_ts(kind: str, t: pa.Table) -> np.ndarray:
    """txn_wire.row_ts(kind, r) or 0.0, per row."""
    if kind == "txn_event":
        ts, null = _floats(t, "ts")
        return _zero(ts, null)
    req, req_null = _floats(t, "request_ts")
    out = _zero(req, req_null)
    fetch = np.asarray(pc.fill_null(pc.equal(t.column("source_kind"), "fetch"), False))
    if fetch.any():
        resp, resp_null = _floats(t, "response_ts")
        use = fetch & ~resp_null
        out = np.where(use, _zero(resp, resp_null), out)
    return out


def _floats(t: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    col = t.column(name)
    if not pa.types.is_floating(col.type):
        raise _Fallback(name)
    null = np.asarray(col.is_null())
    values = np.asarray(col.fill_null(0.0), dtype=np.float64)
    if np.isnan(values).any():
        raise _Fallback(name)
    return values, null


def _zero(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    # `or 0.0`: a null, 0.0 and -0.0 all become 0.0
    return np.where(null | (values == 0.0), 0.0, values)


def _marker_keys(t: pa.Table, base: int) -> dict:
    """Row (numbered from `base`) -> (tp, offset) of each fetched row, None where fetched()
    cannot read it (not COMMIT/ABORT, no offset, topic or partition)."""
    fetch = np.asarray(pc.fill_null(pc.equal(t.column("source_kind"), "fetch"), False))
    rows = np.flatnonzero(fetch)
    if not rows.size:
        return {}
    sub = t.take(pa.array(rows, pa.int64()))
    cols = [sub.column(c).to_pylist() for c in ("control_type", "base_offset", "topic", "partition")]
    out = {}
    for row, ctype, offset, topic, part in zip(rows.tolist(), *cols):
        ok = ctype in ("COMMIT", "ABORT") and offset is not None and topic is not None and part is not None
        out[base + row] = (f"{topic}-{part}", offset) if ok else None
    return out


def _dicts(chunks: list[tuple[str, pa.Table]], keep: np.ndarray) -> dict[int, dict]:
    """Row -> its dict (as Table.to_pylist gives it), for the rows kept."""
    out: dict[int, dict] = {}
    base = 0
    for _, t in chunks:
        n = t.num_rows
        rows = np.flatnonzero(keep[base:base + n])
        sub = t if rows.size == n else t.take(pa.array(rows, pa.int64()))
        names = sub.column_names
        cols = [sub.column(c).to_pylist() for c in names]
        out.update(zip((rows + base).tolist(), (dict(zip(names, vals)) for vals in zip(*cols))))
        base += n
    return out
