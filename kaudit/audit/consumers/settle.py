"""How a live capture keeps the consumers fold's selection (fold.FOLD's Settler). The consumers'
timelines span the whole stream (one key per capture): nothing settles before its end. What
grows is made smaller without changing the findings, every COMPACT_ROWS new rows:

- of a Fetch response's partition, the fold reads the plain batches (neither transactional nor
  control) only as the lowest base offset and highest last offset they reach (fold.serves_of:
  the served ranges) - unless the response is a read_committed one listing aborted
  transactions, which is replayed batch by batch (fold._replays). So the plain batches of every
  other response and partition become one row spanning them; the transactional and control
  batches stay as they are (the rules read them);
- the rows are gathered into one table per kind (thousands of small chunks held for the whole
  stream fragment the heap).
A response's rows are decoded together (a chunk never holds part of an exchange), so its
partition rows are in the same round as its batches.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Settler, concat_by_kind, gather_tail, np_mask

_RESPONSE = ("source", "connection", "position", "topic", "topic_id", "partition")


class ConsumersSettle(Settler):
    """Nothing settles before the end; every COMPACT_ROWS new rows are gathered and their plain
    batches merged (module docstring). Same findings."""

    COMPACT_ROWS = 16384

    def __init__(self, fold=None):
        self.fold = fold
        self.done = 0     # the chunks compacted so far
        self.gathered = 0   # the chunks before this one were gathered
        self.merged = 0   # batch rows merged away

    def settle(self, items: list, now: float) -> list:
        new = items[self.done:]
        if sum(t.num_rows for _, t in new) >= self.COMPACT_ROWS:
            gathered = concat_by_kind(new)
            fetch = dict(gathered).get("fetch_partition")
            out = []
            for kind, t in gathered:
                if kind == "batch" and fetch is not None:
                    m = merged_plain(t, fetch)
                    self.merged += t.num_rows - m.num_rows
                    t = m
                out.append((kind, t))
            items[self.done:] = out
            self.gathered = gather_tail(items, self.gathered)
            self.done = len(items)
        return []

    def counters(self) -> dict:
        return {"consumer_batch_rows_merged": self.merged}


def merged_plain(batches: pa.Table, fetch: pa.Table) -> pa.Table:
    """`batches` with the plain batches of each response partition (one whose response row is in
    `fetch` and is not replayed) made one row from the lowest base offset to the highest last
    offset; every other row as it is."""
    flag = lambda c: pc.fill_null(batches.column(c), False)
    plain = pc.invert(pc.or_(flag("is_transactional"), flag("is_control")))
    listing = pc.fill_null(pc.and_(pc.greater(pc.utf8_length(fetch.column("aborted_transactions")), 0),
                                   pc.equal(fetch.column("isolation_level"), "read_committed")), False)
    answered = set(zip(fetch.column("connection").to_pylist(), fetch.column("position").to_pylist()))
    replayed = set(zip(fetch.column("connection").filter(listing).to_pylist(),
                       fetch.column("position").filter(listing).to_pylist()))
    keys = zip(batches.column("connection").to_pylist(), batches.column("position").to_pylist())
    mergeable = pa.array([k in answered and k not in replayed for k in keys], pa.bool_())
    mask = pc.and_(plain, mergeable).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(mask)
    if rows.size < 2:
        return batches
    # each group's first row stands for it, in its place (the rows stay in decode order: the
    # final fold then need not sort them again), spanning the group's lowest and highest offsets
    cols = {c: batches.column(c).take(pa.array(rows)).to_pylist() for c in _RESPONSE}
    first: dict = {}
    # (a row's own offsets are still its own when it is read: only each group's first row widens)
    lo, hi = batches.column("base_offset").to_pylist(), batches.column("last_offset").to_pylist()
    keep = ~mask
    for j, i in enumerate(rows.tolist()):
        k = tuple(cols[c][j] for c in _RESPONSE)
        at = first.get(k)
        if at is None:
            first[k] = i
            keep[i] = True
            continue
        b, e = lo[i], hi[i]
        if b is not None and (lo[at] is None or b < lo[at]):
            lo[at] = b
        if e is not None and (hi[at] is None or e > hi[at]):
            hi[at] = e
    if keep.all():
        return batches
    t = batches.set_column(batches.schema.get_field_index("base_offset"), batches.schema.field("base_offset"),
                           pa.array(lo, batches.schema.field("base_offset").type))
    t = t.set_column(t.schema.get_field_index("last_offset"), t.schema.field("last_offset"),
                     pa.array(hi, t.schema.field("last_offset").type))
    return t.filter(np_mask(keep))
