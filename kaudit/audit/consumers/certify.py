"""Whole-column checks that certify clean what the consumer rules' per-response checks would find
clean, so that those run only over the rest (rules_poll.py).

A certifier never decides a finding: it only sets aside rows on which its rule cannot find
anything, by a condition that every finding of the rule needs (the per-response check's own
condition, computed over columns without the conditions that only ever drop a finding). Every
row it does not set aside goes through the rule's full check, as before; a table whose columns
are not exact (ServeTable.certifiable) certifies nothing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.consumers.serve_table import ServeTable
from kaudit.audit.folds import np_indices, unique_ints


def _previous(flag: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """For each position (rows in group order): the last earlier position of its group where
    `flag` holds, else -1."""
    pos = np.arange(len(flag))
    last = np.maximum.accumulate(np.where(flag, pos, -1))
    before = np.concatenate(([-1], last[:-1]))
    return np.where(before >= group_start, before, -1)


def poll_suspects(t: ServeTable) -> np.ndarray:
    """The rows (in time order) of the (connection, partition) sequences where consumer-nonmonotonic-
    poll or consumer-poll-skip may find something: those holding a response pair (`prev`, `s`)
    that would be judged a step back or a jump when every such pair were quiet (no look-up,
    rebalance nor Fetch elsewhere in between: the full check only drops pairs for that). The
    pairs, as rules_poll._pairs walks them: `prev` the last response before `s` with records, an
    error or a fetch offset; `last` the last with records, forgotten at an error."""
    if not t.certifiable:
        return np.arange(t.n)
    if not t.n:
        return np.zeros(0, np.int64)
    key = t.conn * max(len(t.tps), 1) + t.tp
    order = np.argsort(key, kind="stable")          # each sequence's rows, in time order
    k = key[order]
    first_of_group = np.concatenate(([True], k[1:] != k[:-1]))
    group_start = np.maximum.accumulate(np.where(first_of_group, np.arange(len(k)), 0))
    ok, has_end, fo, has_fo = t.ok[order], t.has_end[order], t.fetch_offset[order], t.has_fetch_offset[order]
    prev = _previous(has_end | ~ok | has_fo, group_start)
    last = _previous(has_end | ~ok, group_start)   # a response with records, or an error without
    p, q = np.maximum(prev, 0), np.maximum(last, 0)
    last_ok = (last >= 0) & has_end[q]
    iso = t.iso[order]
    pair = (prev >= 0) & has_fo & ok & ok[p] & (iso == iso[p])
    de, has_de = t.data_end[order], t.has_data_end[order]
    # consumer-nonmonotonic-poll: the fetch offset under what was delivered before it
    prev_end = has_end[p]
    has_limit = np.where(prev_end, has_de[p], last_ok & has_de[q])
    limit = np.where(prev_end, de[p], np.minimum(de[q], fo[p]))
    back = pair & has_limit & (fo >= 0) & (fo < limit)
    # consumer-poll-skip: the fetch offset past where the client stood (a pair's `prev` without
    # records has a fetch offset: it is free of errors)
    expected = np.where(prev_end, t.end[order][p], fo[p])
    jump = pair & (prev_end | has_fo[p]) & (fo > expected)
    suspect = unique_ints(k[back | jump])
    return np.flatnonzero(np.isin(key, suspect))


def several_connections(t: ServeTable) -> set:
    """The (client, partition) pairs fetched on more than one connection."""
    if not t.n:
        return set()
    n_tps, n_conns = max(len(t.tps), 1), max(len(t.conns), 1)
    ct = t.client * n_tps + t.tp
    keys, counts = np.unique(unique_ints(ct * n_conns + t.conn) // n_conns, return_counts=True)
    return {(t.clients[c // n_tps], t.tps[c % n_tps]) for c in keys[counts > 1].tolist()}


def _group_ids(cols: list[np.ndarray]) -> np.ndarray:
    """One id per distinct combination of the columns' values (the last column the first key)."""
    order = np.lexsort(cols)
    change = np.zeros(len(order), bool)
    for c in cols:
        change[1:] |= c[order][1:] != c[order][:-1]
    gid = np.empty(len(order), np.int64)
    gid[order] = np.cumsum(change)
    return gid


def _flag(t: pa.Table, name: str) -> np.ndarray:
    return pc.fill_null(t.column(name), False).to_numpy(zero_copy_only=False)


def aborted_read_suspects(batches: pa.Table, t: ServeTable) -> np.ndarray:
    """The fetched batches (rows, in order) where uncommitted-aborted-read may find something: a
    transactional data batch of a response served at a position where some read_uncommitted
    response with records was served, whose producer's next marker in the partition (the lowest
    ABORT or COMMIT past its last offset; ABORT first at one offset) is an ABORT."""
    control = _flag(batches, "is_control")
    ended = control & pc.fill_null(pc.is_in(batches.column("control_type"), pa.array(["ABORT", "COMMIT"])),
                                   False).to_numpy(zero_copy_only=False)
    ru = t.has_end & (t.iso == (t.isos.index("read_uncommitted") if "read_uncommitted" in t.isos else -1))
    position = batches.column("position").fill_null(-1).to_numpy(zero_copy_only=False)
    data = _flag(batches, "is_transactional") & ~control & np.isin(position, t.position[ru])
    need = ("topic", "partition", "producer_id", "base_offset", "last_offset")
    if not data.any() or not ended.any():
        return np.flatnonzero(data) if ended.any() else np.zeros(0, np.int64)
    if any(batches.column(c).null_count for c in need):
        return np.flatnonzero(data)   # nulls: the full check says what they are
    rows = np.concatenate([np.flatnonzero(ended), np.flatnonzero(data)])
    sub = batches.select(list(need) + ["control_type"]).take(np_indices(rows))   # the columns read
    topic = sub.column("topic").combine_chunks().dictionary_encode().indices.to_numpy(zero_copy_only=False)
    cols = [sub.column(c).to_numpy().astype(np.int64) for c in ("producer_id", "partition")] + [topic]
    gid = _group_ids(cols)
    n_markers = int(ended.sum())
    is_marker = np.arange(len(rows)) < n_markers
    offset = np.where(is_marker, sub.column("base_offset").to_numpy(), sub.column("last_offset").to_numpy())
    kind = (pc.fill_null(pc.equal(sub.column("control_type"), "COMMIT"), False)).to_numpy(zero_copy_only=False)
    # by partition and producer, offset, markers before batches at one offset (a marker must be
    # past the batch's last offset), ABORT before COMMIT
    order = np.lexsort((kind, ~is_marker, offset, gid))
    marker_at = np.where(is_marker[order], np.arange(len(order)), len(order))
    nearest = np.minimum.accumulate(marker_at[::-1])[::-1]    # the first marker at or after each
    nxt = np.concatenate((nearest[1:], [len(order)]))          # strictly after
    has = nxt < len(order)
    j = np.minimum(nxt, len(order) - 1)
    aborted = has & (gid[order][j] == gid[order]) & ~kind[order][j]
    hit = np.zeros(len(rows), bool)
    hit[order] = aborted & ~is_marker[order]
    return np.sort(rows[hit])
