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


SAME_BYTES = ("topic", "partition", "crc", "record_count", "batch_size")   # a batch without a producer id


def anonymous_pairs(batches: pa.Table, unanswered) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(write rows, copy rows, acknowledged offsets): each fetched data batch without a producer
    id paired with the unanswered Produce (in `unanswered`) of the same bytes (SAME_BYTES: the
    CRC covers the attributes, timestamps and records; a stored batch keeps them), where no
    acknowledged write of those bytes was answered at the copy's offset (there it may be that
    write's own copy: a retry), and the offset an acknowledged write of those bytes was given
    (-1: none). Without idempotence the broker stores every attempt anew."""
    none = np.zeros(0, np.int64)
    pid = pc.fill_null(batches.column("producer_id"), -1)
    anon = np.asarray(pc.less(pid, 0))
    writes = np.flatnonzero(np.asarray(unanswered) & anon)
    if not writes.size:
        return none, none, none
    data = np.asarray(fetched_data(batches)) & anon
    answered = np.asarray(pc.fill_null(pc.and_(pc.equal(batches.column("source_kind"), "produce"),
                                                 pc.equal(batches.column("response_error"), 0)), False)) & anon
    key = lambda rows: zip(*(batches.column(c).take(np_indices(rows)).to_pylist() for c in SAME_BYTES))  # noqa: E731
    wanted: dict = {}
    for i, k in zip(writes.tolist(), key(writes)):
        if k[2] is not None:
            wanted.setdefault(k, i)
    # only the rows of those CRCs are read one by one
    near = np.asarray(pc.fill_null(pc.is_in(batches.column("crc"), value_set=pa.array(sorted({k[2] for k in wanted}),
                                                                                     batches.column("crc").type)), False))
    acked = np.flatnonzero(answered & near)
    taken: dict = {}
    for k, off in zip(key(acked), batches.column("response_base_offset").take(np_indices(acked)).to_pylist()):
        if off is not None and off >= 0:
            taken.setdefault(k, set()).add(off)
    rows = np.flatnonzero(data & near)
    out = []
    for r, k, off in zip(rows.tolist(), key(rows), batches.column("base_offset").take(np_indices(rows)).to_pylist()):
        w = wanted.get(k)
        if w is not None and off not in taken.get(k, ()):
            out.append((w, r, min(taken.get(k, ()), default=-1)))
    if not out:
        return none, none, none
    return tuple(np.array(x, np.int64) for x in zip(*out))


def useful_copies(batches: pa.Table, data=None) -> np.ndarray:
    """Which rows are fetched copies of a Produce `batches` holds no answer to (copy_pairs)."""
    out = np.zeros(batches.num_rows, bool)
    out[copy_pairs(batches, data)[1]] = True
    return out
