"""The vectorised facts the transactions fold's certifiers read (txn_clean.py): over many
producers' buffered rows at once, with numpy - their parts (a marker and the data before it, per
replica and partition), the coordinator's transactions from `__transaction_state`, and each
marker's nearest coordinator transaction - and `Facts.shape`, the producer ids these facts cannot
describe. Every condition found on the way is kept per name in `Facts.flags` (the producer ids it
holds for); the rules' predicates (txn_clean.py) read them. What the shape is and what each
condition means: txn_clean.py's docstring.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.thresholds import LATE_SLACK_MS, MARKER_CLUSTER_MS, MATCH_WINDOW_MS
from kaudit.audit.txn.txn_states import MAX_EPOCH, STATES, VALID_PREVIOUS

_S = {s: i for i, s in enumerate(STATES)}
_VALID = np.array([[p in VALID_PREVIOUS[n] for n in STATES] for p in STATES])   # [prev, new]
_EMPTY_DEAD = np.array([s in ("Empty", "Dead") for s in STATES])
_PREPARE = np.array([s in ("PrepareCommit", "PrepareAbort") for s in STATES])
_COMPLETE = np.array([s in ("CompleteCommit", "CompleteAbort") for s in STATES])
_RESULT = np.array([1 if s.endswith("Commit") else 2 if s.endswith("Abort") else 0 for s in STATES])
COMMIT, ABORT = 1, 2
_NONE = np.zeros(0, np.int64)


class Facts:
    """The vectorised facts of many producers' transactions: their parts, the coordinator's
    transactions and each marker's nearest one; `shape`, the producer ids they cannot describe;
    `flags`, per condition the producer ids it holds for (read by the rules' predicates)."""

    def __init__(self, batches: pa.Table | None, txn_log: pa.Table | None):
        flags: dict[str, list[np.ndarray]] = {}
        parts, tps, shape_b = _batch_side(batches, flags)
        txns, shape_c = _coordinator_side(txn_log, tps, parts["ntp"], flags)
        self.all_pids = np.unique(np.concatenate([parts["all_pids"], txns["all_pids"]]))
        if len(parts["pid"]):
            with_txns = np.isin(parts["pid"], txns["pid"])
            _against_coordinator(parts, txns, with_txns, LATE_SLACK_MS, MATCH_WINDOW_MS, flags)
            _loose(parts, ~with_txns, MARKER_CLUSTER_MS, flags)
        self.shape = np.union1d(shape_b, shape_c)
        self.flags = {k: np.unique(np.concatenate(v)) for k, v in flags.items()}

    def of(self, *names: str) -> np.ndarray:
        """The producer ids any of the named conditions holds for."""
        got = [self.flags[n] for n in names if n in self.flags]
        return np.unique(np.concatenate(got)) if got else _NONE


def _flag(flags: dict, name: str, pids: np.ndarray) -> None:
    flags.setdefault(name, []).append(np.asarray(pids, np.int64))


# -- columns ---------------------------------------------------------------------------------

def int_column(t: pa.Table, name: str, fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with nulls as `fill`, validity) of a column."""
    col = t.column(name)
    valid = (~pc.is_null(col).to_numpy(zero_copy_only=False)) if col.null_count else np.ones(len(col), bool)
    if col.null_count:
        col = pc.fill_null(col, fill)
    return col.to_numpy().astype(np.int64, copy=False), valid


def bool_column(t: pa.Table, name: str) -> np.ndarray:
    """A boolean column as a numpy array, nulls False."""
    return pc.fill_null(t.column(name), False).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _codes(col) -> tuple[np.ndarray, list]:
    """(int64 codes, null -1; the dictionary's values) of a string or dictionary column."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    col = col.unify_dictionaries()
    if col.num_chunks == 0:
        return _NONE, []
    codes = np.concatenate([pc.fill_null(c.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
                            for c in col.chunks])
    return codes, col.chunk(0).dictionary.to_pylist()


def _changes(*keys: np.ndarray) -> np.ndarray:
    """True where any key differs from the row before (and on the first row)."""
    n = len(keys[0])
    out = np.zeros(n, bool)
    if n:
        out[0] = True
        for k in keys:
            out[1:] |= k[1:] != k[:-1]
    return out


def _same_as_first(group_start: np.ndarray, stream_start: np.ndarray, cols: list[np.ndarray]) -> np.ndarray:
    """Rows (in sorted order) whose stream (a replica's rows of a group) differs from the group's
    first stream: other length, or another value at the same position in any of `cols`."""
    n = len(group_start)
    if n == 0:
        return np.zeros(0, bool)
    sid = np.cumsum(stream_start) - 1
    starts = np.flatnonzero(stream_start)
    lens = np.diff(np.append(starts, n))
    gid = np.cumsum(group_start) - 1
    first_stream = sid[np.flatnonzero(group_start)]          # per group
    ref = first_stream[gid[starts]]                          # per stream
    bad_stream = lens != lens[ref]
    pos = np.arange(n) - starts[sid]
    ref_row = np.minimum(starts[ref[sid]] + pos, n - 1)
    bad = bad_stream[sid].copy()
    for c in cols:
        bad |= c != c[ref_row]
    return bad


# -- batches ---------------------------------------------------------------------------------

def _batch_side(t: pa.Table | None, flags: dict) -> tuple[dict, dict[str, int], np.ndarray]:
    """Per part (a marker and the data before it, on every replica; rows in offset order - the
    log's, as txn_parts.log_order orders a log's rows, so a part's previous is the one before it
    here too): producer id, partition id, marker time and result, whether it may be a late
    write and its first data time; the partition ids by "topic-partition"; the producer ids
    outside the shape. Conditions on the way go to `flags`."""
    empty = {"all_pids": _NONE, "pid": _NONE, "ntp": 1}
    if t is None or t.num_rows == 0:
        return empty, {}, _NONE
    pid, pid_ok = int_column(t, "producer_id")
    rows = np.flatnonzero(pid_ok)
    if len(rows) == 0:
        return empty, {}, _NONE
    b, topics, shape = _batch_rows(t, pid, rows, flags)
    parts, names = _parts(b, topics, flags)
    return parts, names, np.unique(b["pid"][shape])


def _batch_rows(t: pa.Table, pid: np.ndarray, rows: np.ndarray, flags: dict) -> tuple[dict, list, np.ndarray]:
    """The batches `rows` (those with a producer id, `pid`) in log order per replica stream, as
    columns (pid, tc: topic codes into the topics returned, part, kind: 0 data, 1 COMMIT, 2
    ABORT, 3 other, 4 plain; epoch, bts, bts_ok, stream and marker starts), and which rows are
    outside the shape."""
    tc, topics = _codes(t.column("topic"))
    rc, _ = _codes(t.column("replica"))
    ctype, ctypes = _codes(t.column("control_type"))
    part, part_ok = int_column(t, "partition")
    bo, bo_ok = int_column(t, "base_offset")
    ctrl, txn = bool_column(t, "is_control"), bool_column(t, "is_transactional")
    kind = np.full(len(pid), 3, np.int8)
    kind[~ctrl & txn] = 0
    kind[~ctrl & ~txn] = 4
    for code, name in ((COMMIT, "COMMIT"), (ABORT, "ABORT")):
        if name in ctypes:
            kind[ctrl & (ctype == ctypes.index(name))] = code
    order = rows[np.lexsort((bo[rows], rc[rows], part[rows], tc[rows], pid[rows]))]
    pid, tc, rc, part, bo, kind = pid[order], tc[order], rc[order], part[order], bo[order], kind[order]
    _flag(flags, "plain", pid[kind == 4])                    # non-transactional-write-in-transaction
    shape = ~part_ok[order] | ~bo_ok[order] | (tc < 0) | (rc < 0) | (part < 0) | (kind >= 3)
    stream = _changes(pid, tc, part, rc)
    group = _changes(pid, tc, part)
    last = np.append(stream[1:], True)
    marker = (kind == COMMIT) | (kind == ABORT)
    _flag(flags, "unended", pid[last & ~marker])             # dangling / hanging
    shape |= last & ~marker                                  # the parts need (D* M)+
    shape |= ~stream & (bo <= np.append(bo[:1], bo[:-1]))   # strictly increasing offsets
    epoch, epoch_ok = (a[order] for a in int_column(t, "producer_epoch"))
    ce, ce_ok = (a[order] for a in int_column(t, "coordinator_epoch"))
    bts, bts_ok = (a[order] for a in int_column(t, "base_timestamp_ms"))
    # a batch the log cleaner rewrote holds the delete horizon (or -1) there, not its create time
    # (txn_parts.create_ms): the full check reads it
    bts_ok &= bts >= 0
    if "has_delete_horizon" in t.column_names:
        bts_ok &= ~bool_column(t, "has_delete_horizon")[order]
    mts, mts_ok = (a[order] for a in int_column(t, "max_timestamp_ms"))
    lo, lo_ok = (a[order] for a in int_column(t, "last_offset"))
    shape |= _same_as_first(group, stream, [bo, lo, lo_ok, kind, epoch, epoch_ok, ce, ce_ok,
                                            bts, bts_ok, mts, mts_ok])
    shape |= ~epoch_ok
    shape |= marker & (~ce_ok | ~bts_ok)
    m = np.flatnonzero(marker)
    if len(m) > 1:                                           # coordinator epochs never decrease
        sid = np.cumsum(stream)
        same = sid[m[1:]] == sid[m[:-1]]
        _flag(flags, "ce_regress", pid[m[1:][same & (ce[m[1:]] < ce[m[:-1]])]])
    cols = {"pid": pid, "tc": tc, "part": part, "kind": kind, "epoch": epoch, "bts": bts, "bts_ok": bts_ok,
            "stream": stream, "marker": marker}
    return cols, topics, shape


def _parts(b: dict, topics: list, flags: dict) -> tuple[dict, dict[str, int]]:
    """The parts of `_batch_rows`' columns `b`, and the partition ids by "topic-partition"."""
    pid, kind, epoch, bts, bts_ok, stream, marker = (b[k] for k in ("pid", "kind", "epoch", "bts", "bts_ok",
                                                                    "stream", "marker"))
    # a row starts a part when it starts its stream or follows a marker; in the shape a part's
    # last row is its marker, and a part starting with one is empty
    starts = np.flatnonzero(stream | np.append(False, marker[:-1]))
    ends = np.append(starts[1:], len(pid)) - 1
    empty = marker[starts]
    last_data = np.maximum(ends - 1, 0)
    abort = ~empty & (kind[ends] == ABORT) & (epoch[ends] == epoch[last_data] + 1)
    _flag(flags, "abort_bumped", pid[ends[abort]])           # a coordinator abort, or a version-2 end
    has_prev = ~stream[starts]
    before = np.maximum(starts - 1, 0)
    # a marker right after another one of its producer on the partition: a re-sent marker, one
    # whose data compaction removed, or an admin's abort of an ended transaction (stray-marker)
    _flag(flags, "marker_again", pid[starts[empty & has_prev]])
    late = ~empty & has_prev & bts_ok[starts] & bts_ok[before] & (bts[starts] > bts[before])
    # data of an epoch below the marker before it: an ended transaction's (late-transactional-write)
    _flag(flags, "late", pid[starts[~empty & has_prev & (epoch[starts] < epoch[before])]])
    # each part's data epochs (mixed-epoch-transaction, write-after-epoch-end)
    data = kind == 0
    emin = np.minimum.reduceat(np.where(data, epoch, 1 << 40), starts)
    emax = np.maximum.reduceat(np.where(data, epoch, -1), starts)
    _flag(flags, "mixed_epoch", pid[ends[~empty & (emin != emax)]])
    _flag(flags, "marker_epoch", pid[ends[~empty & (epoch[ends] != emax) & (epoch[ends] != emax + 1)]])
    # partition ids: one per (topic, partition) pair
    pairs, tp_of_row = np.unique(b["tc"] * (1 << 32) + np.maximum(b["part"], 0), return_inverse=True)
    names = {f"{topics[int(k) >> 32]}-{int(k) & 0xFFFFFFFF}": i for i, k in enumerate(pairs) if k >= 0}
    parts = {"all_pids": np.unique(pid), "pid": pid[ends], "tp": tp_of_row.reshape(-1)[ends],
             "ts": bts[ends], "result": kind[ends].astype(np.int64), "late": late,
             "first_ts": bts[starts], "ntp": max(len(pairs), 1), "empty": empty,
             "epoch": epoch[ends], "has_prev": has_prev}
    return parts, names


# -- the coordinator's records ---------------------------------------------------------------

def _coordinator_side(t: pa.Table | None, tps: dict[str, int], ntp: int, flags: dict) -> tuple[dict, np.ndarray]:
    """The coordinator transactions of every producer id (pid, window, result, creation order)
    and the registration time of each (transaction, partition id: `tps`, below `ntp`); the
    producer ids outside the shape. Conditions on the way go to `flags`."""
    empty = {"all_pids": _NONE, "pid": _NONE}
    if t is None or t.num_rows == 0:
        return empty, _NONE
    pid, pid_ok = int_column(t, "producer_id")
    rows = np.flatnonzero(pid_ok)
    if len(rows) == 0:
        return empty, _NONE
    rec, plists, bad_pids = _state_records(t, pid, rows)
    txns, of, bad_t = _transactions(rec, flags)
    keys, reg = _registrations(of, rec["pc"], rec["ts"], plists, tps, ntp)
    txns.update(all_pids=np.unique(pid[rows]), ntp=ntp, reg_keys=keys, reg=reg)
    return txns, np.union1d(bad_pids, bad_t)


def _state_records(t: pa.Table, pid: np.ndarray, rows: np.ndarray) -> tuple[dict, list, np.ndarray]:
    """The `__transaction_state` records (`rows`: those with a producer id, `pid`) of each group's first
    replica, in coordinator_state.build's order per (producer id, transactional id) - as columns
    (pid, tid, state, pc: the partitions' codes into `plists`, ts, start, start_ok, rank: the
    build's order, epoch) -, the partitions' lists, and the producer ids outside the shape."""
    tc, _ = _codes(t.column("topic"))
    rc, _ = _codes(t.column("replica"))
    tid, _ = _codes(t.column("transactional_id"))
    sc, state_names = _codes(t.column("state"))
    state_map = np.array([_S.get(s, -1) for s in state_names] + [-1], np.int64)
    state = state_map[np.where(sc < 0, len(state_names), sc)]
    pc_, plists = _codes(t.column("partitions"))
    part, part_ok = int_column(t, "partition")
    off, off_ok = int_column(t, "offset")
    ts, ts_ok = int_column(t, "timestamp_ms")
    start, start_ok = int_column(t, "start_ms")
    epoch, epoch_ok = int_column(t, "producer_epoch")
    tomb = bool_column(t, "tombstone")
    order = rows[np.lexsort((rc[rows], part[rows], tc[rows], pid[rows]))]   # stable: log order
    pid, tc, rc, tid, state, pc_, part, off, ts, start, epoch = (
        a[order] for a in (pid, tc, rc, tid, state, pc_, part, off, ts, start, epoch))
    start_ok = start_ok[order]
    bad = (~part_ok[order] | ~off_ok[order] | ~ts_ok[order] | ~epoch_ok[order] | tomb[order]
           | (tid < 0) | (state < 0) | (tc < 0) | (rc < 0))
    stream = _changes(pid, tc, part, rc)
    group = _changes(pid, tc, part)
    bad |= ~stream & (off <= np.append(off[:1], off[:-1]))
    bad |= _same_as_first(group, stream, [off, ts, tid, state, pc_, start, start_ok, epoch])
    gid = np.cumsum(group) - 1
    sid = np.cumsum(stream) - 1
    ref = sid == sid[np.flatnonzero(group)][gid]             # the rows of each group's first replica
    first_of_pid = _changes(pid)
    pidx = np.cumsum(first_of_pid) - 1
    topic_min = np.minimum.reduceat(tc, np.flatnonzero(first_of_pid))[pidx]
    bad |= tc != topic_min                                   # one topic per producer
    bad_pids = np.unique(pid[bad])
    # on the reference rows: coordinator_state.build's order, then per transactional id
    r = np.flatnonzero(ref)
    pid, tid, state, pc_, part, off, ts, start, start_ok, epoch = (
        a[r] for a in (pid, tid, state, pc_, part, off, ts, start, start_ok, epoch))
    o = np.lexsort((off, part, ts, pid))
    rank = np.empty(len(o), np.int64)
    rank[o] = np.arange(len(o))
    o = np.lexsort((rank, tid, pid))
    rec = {"pid": pid, "tid": tid, "state": state, "pc": pc_, "ts": ts, "start": start, "start_ok": start_ok,
           "rank": rank, "epoch": epoch}
    return {k: v[o] for k, v in rec.items()}, plists, bad_pids


def _transactions(rec: dict, flags: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """The coordinator's transactions from its ordered records (`_state_records`): runs of an
    id's non-Empty/Dead records, a new one after a Complete record. Returns their columns, each
    kept record's transaction (with its `pc` and `ts`, for `_registrations`, in `rec`) and the
    producer ids whose transactions are outside the shape."""
    pid, tid, ts, epoch = rec["pid"], rec["tid"], rec["ts"], rec["epoch"]
    first = _changes(pid, tid)
    st = np.maximum(rec["state"], 0)
    prev_st = np.append(0, st[:-1])
    _flag(flags, "transitions", pid[~first & ~_VALID[prev_st, st]])   # illegal-state-transition
    _flag(flags, "epoch_limit", pid[epoch >= MAX_EPOCH - 1])            # epoch-exhausted-transaction
    x = np.flatnonzero(~_EMPTY_DEAD[st])
    for k in rec:
        rec[k] = rec[k][x]
    pid, tid, ts, epoch, st = rec["pid"], rec["tid"], rec["ts"], rec["epoch"], st[x]
    new = _changes(pid, tid)
    new[1:] |= _COMPLETE[st[:-1]]
    of = np.cumsum(new) - 1
    first_row = np.flatnonzero(new)
    n = len(first_row)
    is_prep, is_comp = _PREPARE[st], _COMPLETE[st]
    prep_ts = np.zeros(n, np.int64)
    comp_ts = np.zeros(n, np.int64)
    prep_ts[of[is_prep]] = ts[is_prep]
    comp_ts[of[is_comp]] = ts[is_comp]
    n_prep = np.bincount(of[is_prep], minlength=n)
    n_comp = np.bincount(of[is_comp], minlength=n)
    res_prep = np.zeros(n, np.int64)
    res_comp = np.zeros(n, np.int64)
    res_prep[of[is_prep]] = _RESULT[st[is_prep]]
    res_comp[of[is_comp]] = _RESULT[st[is_comp]]
    prep_epoch = np.full(n, -1, np.int64)
    prep_epoch[of[is_prep]] = epoch[is_prep]
    tpid = pid[first_row]
    bad_t = (n_prep > 1) | (n_comp > 1) | ((n_prep > 0) & (n_comp > 0) & (res_prep != res_comp))
    s0 = rec["start"][first_row]
    begin = np.where(rec["start_ok"][first_row] & (s0 > 0), s0, ts[first_row])
    lo = np.where(n_prep > 0, prep_ts, np.where(n_comp > 0, comp_ts, begin))
    complete = n_comp > 0
    result = np.where(complete, res_comp, res_prep)
    bad_t |= complete & (lo > comp_ts)
    bad_t |= _COMPLETE[st[first_row]]                        # completes the previous producer id's
    bad_t |= ~complete & (prep_epoch == MAX_EPOCH)           # completed under the next producer id
    _flag(flags, "prepared_open", tpid[~complete & (n_prep > 0)])   # txn-markers-refused (disk)
    # an abort whose PrepareAbort bumped the epoch: the coordinator's own, or a version-2 end
    _flag(flags, "abort_bumped", tpid[(result == ABORT) & (n_prep > 0) & (prep_epoch > epoch[first_row])])
    view = np.lexsort((rec["rank"][first_row], tpid))        # view.txns order per producer
    position = np.empty(n, np.int64)
    position[view] = np.arange(n)
    follow = tpid[view][1:] == tpid[view][:-1]
    gap_bad = follow & (~complete[view][:-1] | (comp_ts[view][:-1] >= lo[view][1:]))
    txns = {"pid": tpid, "lo": lo, "hi": comp_ts, "complete": complete, "result": result,
            "epoch": epoch[first_row], "position": position, "prep_epoch": np.where(n_prep > 0, prep_epoch, -1)}
    return txns, of, np.union1d(tpid[bad_t], tpid[view][1:][gap_bad])


def _registrations(of: np.ndarray, pc_: np.ndarray, ts: np.ndarray, plists: list, tps: dict[str, int],
                   ntp: int) -> tuple[np.ndarray, np.ndarray]:
    """(transaction x ntp + partition id) -> the first time a record of the transaction (`of`)
    listed the partition (`pc_`: its records' codes into `plists`), sorted by key."""
    lens = np.zeros(len(plists) + 1, np.int64)
    flat: list[int] = []
    for i, s in enumerate(plists):
        ids = [tps[p] for p in (s or "").split(",") if p and p in tps]
        lens[i] = len(ids)
        flat.extend(ids)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    code = np.where(pc_ < 0, len(plists), pc_)
    counts = lens[code]
    rep = np.repeat(np.arange(len(code)), counts)
    within = np.arange(len(rep)) - np.repeat(np.cumsum(counts) - counts, counts)
    tp_ids = np.asarray(flat, np.int64)[offsets[code[rep]] + within] if len(rep) else _NONE
    keys = of[rep] * ntp + tp_ids
    o = np.lexsort((ts[rep], keys))
    keys, reg = keys[o], ts[rep][o]
    keep = _changes(keys)
    return keys[keep], reg[keep]


# -- markers against the coordinator ---------------------------------------------------------

def _against_coordinator(parts: dict, txns: dict, sel: np.ndarray, slack: int, window: int, flags: dict) -> None:
    """The conditions of the parts `sel` (every part of producers with coordinator transactions)
    against the nearest transaction window of each marker (of the two around its time; the
    windows follow each other, so every other one is strictly further), the transaction
    match_markers picks when it lists the partition with the marker's result:
    "unmatched" - none within `window` ms, or one with another result; "unlisted" - it does not
    list the partition; "empty_abort_bumped" - an empty part ABORTed with that transaction's
    epoch + 1; "unmarked" - a completed transaction that registered a partition no marker there is
    matched to; "late" - a part created after the previous marker, whose transaction directly
    follows that marker's, with data older than its transaction's registration of the partition
    by more than `slack` ms."""
    if not sel.any():
        return
    pid, tp, ts, res = parts["pid"][sel], parts["tp"][sel], parts["ts"][sel], parts["result"][sel]
    late, first_ts = parts["late"][sel], parts["first_ts"][sel]
    empty, epoch, has_prev = parts["empty"][sel], parts["epoch"][sel], parts["has_prev"][sel]
    tpid, lo, hi, complete = txns["pid"], txns["lo"], txns["hi"], txns["complete"]
    pids = np.unique(tpid)
    values = np.unique(np.concatenate([lo, ts]))
    width = len(values) + 1
    key_t = np.searchsorted(pids, tpid) * width + np.searchsorted(values, lo)
    o = np.argsort(key_t, kind="stable")                     # by producer, then window start
    key_m = np.searchsorted(pids, pid) * width + np.searchsorted(values, ts)
    j = np.searchsorted(key_t[o], key_m, side="right") - 1   # the last window starting by ts
    before = o[np.maximum(j, 0)]
    after = o[np.minimum(j + 1, len(o) - 1)]
    has_before = (j >= 0) & (tpid[before] == pid)
    has_after = (j + 1 < len(o)) & (tpid[after] == pid)
    d_before = np.where(complete[before] & (ts > hi[before]), ts - hi[before], 0)
    d_after = lo[after] - ts
    use_before = has_before & (~has_after | (d_before <= d_after))    # the first on a tie
    k = np.where(use_before, before, after)
    matched = (has_before | has_after) & (np.where(use_before, d_before, d_after) <= window)
    matched &= txns["result"][k] == res
    # a marker older than its producer's first coordinator window: the full check matches none
    # to it when it is older than the producer's earliest record (__transaction_state compacted)
    first_lo = np.full(len(pids), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_lo, np.searchsorted(pids, tpid), lo)
    at_pid = np.minimum(np.searchsorted(pids, pid), len(pids) - 1)
    matched &= ~((pids[at_pid] == pid) & (ts < first_lo[at_pid]))
    _flag(flags, "unmatched", pid[~matched])
    rk = k * txns["ntp"] + tp
    keys = txns["reg_keys"]
    if len(keys) == 0:
        _flag(flags, "unlisted", pid)
        return
    at = np.minimum(np.searchsorted(keys, rk), len(keys) - 1)
    _flag(flags, "unlisted", pid[keys[at] != rk])           # the transaction lists the partition
    # a completed transaction's registration no marker is matched to: its marker there is missing,
    # and a later one may have ended its data (txn_lost.split_lost_markers)
    reg_txn = keys // txns["ntp"]
    _flag(flags, "unmarked", tpid[reg_txn[complete[reg_txn] & ~np.isin(keys, rk[matched])]])
    _flag(flags, "empty_abort_bumped", pid[empty & (res == ABORT) & (epoch == txns["epoch"][k] + 1)])
    # a marker at another epoch than its transaction's Prepare record (mixed-epoch-transaction)
    _flag(flags, "prep_epoch", pid[~empty & matched & (epoch != txns["prep_epoch"][k])])
    pos = txns["position"][k]
    follows = has_prev & (pos == np.append(-2, pos[:-1]) + 1)   # the previous part's txn, then this one
    _flag(flags, "late", pid[late & follows & (txns["reg"][at] - first_ts > slack)])


def _loose(parts: dict, sel: np.ndarray, window: int, flags: dict) -> None:
    """The conditions of the parts `sel` (whose producer has no coordinator transaction):
    "loose_empty" - a part without data; "loose_mixed" - a COMMIT and an ABORT marker within
    `window` ms of each other (the marker clusters txn_model.group makes would mix results)."""
    if not sel.any():
        return
    _flag(flags, "loose_empty", parts["pid"][sel & parts["empty"]])
    pid, ts, res = parts["pid"][sel], parts["ts"][sel], parts["result"][sel]
    o = np.lexsort((ts, pid))
    pid, ts, res = pid[o], ts[o], res[o]
    idx = np.arange(len(pid))
    bad = np.zeros(len(pid), bool)
    for r in (COMMIT, ABORT):
        last = np.maximum.accumulate(np.where(res == r, idx, -1))     # last marker of result r so far
        prev = np.append(-1, last[:-1])
        p = np.maximum(prev, 0)
        bad |= (res != r) & (prev >= 0) & (pid[p] == pid) & (ts - ts[p] <= window)
    _flag(flags, "loose_mixed", pid[bad])
