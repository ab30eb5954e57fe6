"""The wire sequence fold's clean-producer pass: which Produce batches of a chunk the checked path
(audit/producers/wire_produce.py) would only record, found with column arithmetic, and their effect on the
producers' state applied in bulk. A batch is clean when the broker accepted it (error 0, an offset),
it keeps its producer's epoch and continues its sequence (base = the previous batch's last + 1, no
wrap past Int.MaxValue), and every earlier batch of that producer in the chunk is clean; a
producer's first batch in the chunk is checked against the carried state (same epoch as the
highest seen, no stored range at or past it, no attempt the broker refused or left unanswered, the
key never sent before). No rule is decided here: such a batch raises none of fenced-epoch,
retried-batch, duplicate-batch or out-of-order-sequence in the checked path, and everything else
goes there."""

from __future__ import annotations

from itertools import repeat

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import np_col, np_indices
from kaudit.audit.producers.producer_state import INT32_MAX, BatchView, ProducerState
from kaudit.audit.producers.wire_attempts import Chunk, LazyRow, Pid

_NO_ERROR = -32768   # a null response_error (no response) as a number no broker sends


def clean_rows(t: pa.Table, pids: dict) -> tuple[np.ndarray, list]:
    """The chunk's clean rows (a mask) and, per producer with any, (pid, row indices ascending)."""
    n = t.num_rows
    mask = np.zeros(n, dtype=bool)
    pid = np_col(t, "producer_id", -1, np.int64)
    rows = np.flatnonzero(pid >= 0)
    if rows.size == 0:
        return mask, []
    epoch = np_col(t, "producer_epoch", -1, np.int64)
    bseq = np_col(t, "base_sequence", -1, np.int64)
    lseq = np_col(t, "last_sequence", -1, np.int64)
    err = np_col(t, "response_error", _NO_ERROR, np.int64)
    off = np_col(t, "response_base_offset", -1, np.int64)
    order = rows[np.argsort(pid[rows], kind="stable")]
    p, ep, bs, ls = pid[order], epoch[order], bseq[order], lseq[order]
    first = np.r_[True, p[1:] != p[:-1]]
    follows = np.r_[False, (ep[1:] == ep[:-1]) & (bs[1:] == ls[:-1] + 1)]
    ok = (err[order] == 0) & (off[order] >= 0) & (bs >= 0) & (ls >= bs) & (ls < INT32_MAX) & (first | follows)
    # a row counts only while every row of its producer before it in the chunk counts
    bad = np.cumsum(~ok)
    starts = np.flatnonzero(first)
    at_start = np.repeat(bad[starts] - (~ok[starts]), np.diff(np.r_[starts, order.size]))
    ok &= bad == at_start
    groups = []
    for a, z in zip(starts.tolist(), np.r_[starts[1:], order.size].tolist()):
        k = int(np.count_nonzero(ok[a:z]))
        if k and _continues(pids.get(int(p[a])), int(ep[a]), int(bs[a])):
            groups.append((int(p[a]), order[a:a + k]))
    for _, sel in groups:
        mask[sel] = True
    return mask, groups


def _continues(p: Pid | None, epoch: int, base_seq: int) -> bool:
    """Whether a producer's first clean-looking row of a chunk continues its carried state."""
    if p is None:
        return True   # a new producer: its first accepted batch only sets the state
    st = p.state
    if st is None or p.attempts.unsettled or p.refused:
        return False
    if not (st.epoch == st.max_epoch == epoch and 0 <= st.last_seq < INT32_MAX and base_seq == st.last_seq + 1):
        return False
    runs = st.intervals.get(epoch)
    return not runs or base_seq > max(runs.top, runs[-1].hi)


def apply_clean(t: pa.Table, view: type, pids: dict, groups: list, mask: np.ndarray) -> None:
    """Each producer's clean rows, as the checked path would record them: the attempts, the last
    four rows, the state (epoch, last sequence) and the stored sequence range. A row whose key was
    sent before (a retry the state hides) and the rest of its producer's rows go back to the
    checked path (cleared in `mask`)."""
    if not groups:
        return
    cols = {c: np_col(t, c, -1, np.int64) for c in ("producer_epoch", "base_sequence", "last_sequence")}
    ts = t.column("request_ts").to_pylist()
    count = np_col(t, "record_count", 0, np.int64)
    chunk = Chunk(view, t, ts, t.column("response_base_offset").to_pylist())
    # each run's first row as _advance reads it, all in one take
    firsts = np.array([sel[0] for _, sel in groups], dtype=np.int64)
    heads = t.select([c for c in _FIRST if t.schema.get_field_index(c) >= 0]).take(np_indices(firsts)).to_pylist()
    rts = None
    for (q, sel), head in zip(groups, heads):
        p = pids.get(q)
        if p is None:   # a producer new to the partition: nothing held to cut at
            if rts is None:   # `ts or 0.0` as add_new reads it (-0.0 compares as 0.0)
                rts = np_col(t, "request_ts", 0.0, np.float64)
            if _add_later(pids, q, sel, cols, rts, chunk, count, head, ts):
                continue
        idx = sel.tolist()
        keys = list(zip(cols["producer_epoch"][sel].tolist(), cols["base_sequence"][sel].tolist(),
                        cols["last_sequence"][sel].tolist()))
        if p is not None:
            held = p.attempts.by_key
            cut = next((j for j, k in enumerate(keys) if k in held), None)
            if cut is not None:
                mask[sel[cut:]] = False
                idx, keys = idx[:cut], keys[:cut]
                if not idx:
                    continue
        else:
            p = pids[q] = Pid()
        rows = list(map(LazyRow, zip(repeat(chunk), idx)))
        _advance(p, chunk.off, idx, keys, count, head)
        p.attempts.add_new(keys, rows, [ts[i] for i in idx])
        p.recent.extend(rows[-4:])
        del p.recent[:-4]
        _note(p.state, rows[1:][-4:])   # the first is noted by _advance


def _add_later(pids: dict, q: int, sel: np.ndarray, cols: dict, rts: np.ndarray, chunk: Chunk, count: np.ndarray,
               head: dict, ts: list) -> bool:
    """apply_clean's steps for a new producer's rows `sel`, its attempts made only when read
    (Attempts.add_later); False (nothing done) where add_new would not take its bulk way or a
    request time is NaN (Python's max, not numpy's, says what then)."""
    times = rts[sel]
    if np.isnan(times).any():
        return False
    p = Pid()
    ends = [int(sel[0]), int(sel[-1])] if sel.size > 1 else [int(sel[0])]
    key = lambda i: (int(cols["producer_epoch"][i]), int(cols["base_sequence"][i]), int(cols["last_sequence"][i]))  # noqa: E731

    def make():
        keys = list(zip(cols["producer_epoch"][sel].tolist(), cols["base_sequence"][sel].tolist(),
                        cols["last_sequence"][sel].tolist()))
        idx = sel.tolist()
        return keys, list(map(LazyRow, zip(repeat(chunk), idx))), [ts[i] for i in idx]

    if not p.attempts.add_later(int(sel.size), float(times[0]), float(times.max()), make):
        return False
    pids[q] = p
    _advance(p, chunk.off, ends, [key(i) for i in ends], count, head)
    last = [LazyRow((chunk, i)) for i in sel[-4:].tolist()]
    p.recent.extend(last)
    _note(p.state, last)
    return True


def _note(st, rows: list) -> None:
    """A clean run's last rows at hand in the state (the last four, as `recent`: a capture's
    copies are mostly retries of recent batches), read only if a later copy is compared."""
    for r in rows:
        st.note(r)


_FIRST = ("response_base_offset", "source", "position", "producer_id", "crc", "batch_size", "base_timestamp_ms",
          "max_timestamp_ms", "attributes")   # what _advance reads of a run's first row


def _advance(p: Pid, offsets: list, idx: list, keys: list, count: np.ndarray, r: dict) -> None:
    """The state after the clean rows `idx` (keys (epoch, base, last)): the first is remembered as
    the checked path does; the others extend the run it ends (each follows the one before).
    `offsets`: the chunk's response_base_offset; `r`: the first row's _FIRST columns."""
    epoch, base, last = keys[0]
    i = idx[0]
    off = int(r["response_base_offset"])
    b = BatchView(r["source"], r["position"], off, off + int(count[i]) - 1,
                  r["producer_id"], epoch, base, last, int(count[i]), r["crc"], r["batch_size"], False, None,
                  *(r.get(c) for c in ("base_timestamp_ms", "max_timestamp_ms", "attributes")))
    st = p.state
    if st is None:
        st = p.state = ProducerState(epoch, last, epoch, None, 0)
    st.epoch, st.last_seq = epoch, last
    st.remember(b)
    st.note(b)
    if len(idx) > 1:
        j = idx[-1]
        run = st.history(epoch)[-1]
        run.hi = keys[-1][2]
        run.last_offset = int(offsets[j]) + int(count[j]) - 1
        st.last_seq = run.hi
