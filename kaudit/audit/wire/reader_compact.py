"""The readers fold's selection (wire_readers.FOLD) made smaller without changing its findings,
for an audit that keeps it over hours (engine/live.py: a live capture's readers are judged at the
end, since a transaction's marker may come long after the fetch).

What ReaderPartition reads of a Fetch response (one fetch_partition row and the batches it
returned, per partition): read-past-lso judges the response by its batches ending at or past its
last stable offset, aborted-read by its transactional batches; besides, every fetched batch's
offsets count in the ranges the readers covered (reader_replay.Outcomes), and the control
batches are the markers. So:
- a response that returned neither a transactional or control batch nor one at or past its LSO
  (or was not selected: read_uncommitted) can give no finding: its fetch_partition row goes, and
  its plain batches count only for the covered ranges;
- the plain batches of the other responses that end below the LSO are merged per response and
  partition into one row per run of contiguous offsets (each response keeps its highest offset,
  and read-past-lso counts only the batches at or past the LSO);
- the plain batches that only count for the covered ranges are merged per partition, across
  responses, into one row per range (`merge_cover`: the same ranges).
Transactional and control batches, produced batches and markers pass as they are.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_RESPONSE = ("source", "connection", "position", "topic", "topic_id", "partition")
_PARTITION = ("topic", "topic_id", "partition")


def compact(items: list[tuple[str, pa.Table]]) -> tuple[list[tuple[str, pa.Table]], pa.Table | None]:
    """(the items kept, the coverage-only batch rows) of complete responses' rows (every row of an
    exchange is written at once: a decoded chunk never holds part of a response)."""
    fetch = [t for k, t in items if k == "fetch_partition" and t.num_rows]
    batches = [t for k, t in items if k == "batch" and t.num_rows]
    out = [(k, t) for k, t in items if k not in ("fetch_partition", "batch")]
    if not batches:
        return out, None   # fetch rows without batches give no finding
    b = pa.concat_tables(batches)
    is_fetch = pc.fill_null(pc.equal(b.column("source_kind"), "fetch"), False)
    fetched, produced = b.filter(is_fetch), b.filter(pc.invert(is_fetch))
    if produced.num_rows:
        out.append(("batch", produced))
    lso = {}
    if fetch:
        f = pa.concat_tables(fetch)
        lso = dict(zip(_keys(f, _RESPONSE), f.column("last_stable_offset").to_pylist()))
    plain = pc.invert(pc.or_(pc.fill_null(fetched.column("is_transactional"), False),
                             pc.fill_null(fetched.column("is_control"), False))).to_pylist()
    rows = fetched.to_pylist()
    keys = list(_keys(fetched, _RESPONSE))
    judged = set()   # responses that may give a finding
    for r, p, k in zip(rows, plain, keys):
        bound = lso.get(k)
        if k in lso and (not p or (bound is not None and bound >= 0 and r["last_offset"] is not None
                                   and r["last_offset"] >= bound)):
            judged.add(k)
    kept, runs, cover = [], {}, []
    for r, p, k in zip(rows, plain, keys):
        if not p or r["base_offset"] is None or r["last_offset"] is None:
            kept.append(r)
        elif k not in judged:
            cover.append(r)
        elif lso[k] is None or lso[k] < 0 or r["last_offset"] < lso[k]:
            runs.setdefault(k, []).append(r)
        else:
            kept.append(r)
    for group in runs.values():
        kept.extend(_runs(group))
    if kept:
        out.append(("batch", pa.Table.from_pylist(kept, schema=fetched.schema)))
    if fetch:
        f = f.filter(pa.array([k in judged for k in _keys(f, _RESPONSE)], pa.bool_()))
        if f.num_rows:
            out.append(("fetch_partition", f))
    return out, pa.Table.from_pylist(cover, schema=fetched.schema) if cover else None


def merge_cover(tables: list[pa.Table]) -> pa.Table | None:
    """Coverage-only batch rows merged per partition into one row per range of offsets."""
    tables = [t for t in tables if t is not None and t.num_rows]
    if not tables:
        return None
    t = pa.concat_tables(tables)
    by_part: dict = {}
    for r, k in zip(t.to_pylist(), _keys(t, _PARTITION)):
        by_part.setdefault(k, []).append(r)
    merged = [m for group in by_part.values() for m in _runs(group)]
    return t if len(merged) == t.num_rows else pa.Table.from_pylist(merged, schema=t.schema)


def _keys(t: pa.Table, cols):
    return zip(*(t.column(c).to_pylist() for c in cols))


def _runs(group: list[dict]) -> list[dict]:
    """Rows merged into one per run of contiguous or overlapping offsets (the first row's other
    fields), as Outcomes merges the covered ranges."""
    group.sort(key=lambda r: (r["base_offset"], r["last_offset"]))
    out, cur = [], None
    for r in group:
        if cur is not None and r["base_offset"] <= cur["last_offset"] + 1:
            cur["last_offset"] = max(cur["last_offset"], r["last_offset"])
            continue
        cur = dict(r)
        out.append(cur)
    return out
