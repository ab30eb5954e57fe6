"""Fetched copies of writes whose answer the capture lacks (wire).

A Fetch response that serves a data batch shows the leader's log held it at that offset. A
producer session's batch is stored once by its producer id, partition, epoch and first sequence
(ProducerStateManager: a retry is the same batch, deduplicated), so a served batch with the same
identity as a Produce the capture holds no answer to is that write, stored. wire-txn places such a
write by the copy's offset (txn_fetched.stored_copy); wire-acked tells the Produce's outcome
(produce-outcome), which settles its unanswered-request.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.fold_tables import np_indices

IDENTITY = ("producer_id", "topic", "partition", "producer_epoch", "base_sequence")


def fetched_data(t: pa.Table):
    """The rows of a batch table that are data batches a Fetch served."""
    return pc.fill_null(pc.and_(pc.equal(t.column("source_kind"), "fetch"),
                                pc.invert(pc.fill_null(t.column("is_control"), False))), False)


def idempotent_copies(t: pa.Table):
    """fetched_data's rows of an idempotent producer (producer id and first sequence 0 or more):
    those that can copy a write by its identity."""
    known = pc.and_(pc.greater_equal(t.column("producer_id"), 0), pc.greater_equal(t.column("base_sequence"), 0))
    return pc.and_(fetched_data(t), pc.fill_null(known, False))


def unanswered_writes(t: pa.Table):
    """The rows of a batch table that are Produce batches the capture holds no answer to."""
    return pc.fill_null(pc.and_(pc.equal(t.column("source_kind"), "produce"),
                                pc.is_null(t.column("response_ts"))), False)


def copy_pairs(batches: pa.Table, data=None, unanswered=None) -> tuple[np.ndarray, np.ndarray]:
    """(write rows, copy rows): each fetched data batch of `batches` paired with the unanswered
    Produce of its identity (IDENTITY; producer id and sequence 0 or more), in row order of the
    copies. `data`: fetched_data(batches), `unanswered`: the writes (default unanswered_writes),
    when known. Most captures have none: two masks."""
    none = np.zeros(0, np.int64)
    data = np.asarray(fetched_data(batches) if data is None else data)
    unanswered = np.asarray(unanswered_writes(batches) if unanswered is None else unanswered)
    if not data.any() or not unanswered.any():
        return none, none
    u = np.flatnonzero(unanswered)
    ut = batches.take(np_indices(u))
    wanted: dict = {}
    for i, k in zip(u.tolist(), zip(*(ut.column(c).to_pylist() for c in IDENTITY))):
        if k[0] is not None and k[0] >= 0 and k[4] is not None and k[4] >= 0:
            wanted.setdefault(k, i)
    if not wanted:
        return none, none
    # only the copies of those producers' writes to those sequences are read one by one
    near = pc.and_(pc.is_in(batches.column("producer_id"), value_set=ut.column("producer_id").combine_chunks()),
                   pc.is_in(batches.column("base_sequence"), value_set=ut.column("base_sequence").combine_chunks()))
    rows = np.flatnonzero(data & np.asarray(pc.fill_null(near, False)))
    writes, copies = [], []
    if rows.size:
        got = zip(*(batches.column(c).take(np_indices(rows)).to_pylist() for c in IDENTITY))
        for r, k in zip(rows.tolist(), got):
            w = wanted.get(k)
            if w is not None:
                writes.append(w)
                copies.append(r)
    return np.array(writes, np.int64), np.array(copies, np.int64)


def useful_copies(batches: pa.Table, data=None) -> np.ndarray:
    """Which rows are fetched copies of a Produce `batches` holds no answer to (copy_pairs)."""
    out = np.zeros(batches.num_rows, bool)
    out[copy_pairs(batches, data)[1]] = True
    return out
