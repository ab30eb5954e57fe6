"""The broker's producer state, replayed from one replica's batches in log order, vectorised per
chunk: what a `.snapshot` at an offset must hold (ProducerStateManager / ProducerStateEntry) and
what the `.txnindex` must list (ProducerAppendInfo.appendEndTxnMarker: one entry per ABORT
that ends a transaction with data). Used by state_files.py.

It also records where the log is not contiguous (`gaps`: the first offset after missing
offsets - compaction, retention before the first batch, a corrupt or CRC-failed region), so the
rules only compare what the remaining batches determine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import np_col

NONE = np.iinfo(np.int64).max   # "no such row / offset" in the vectorised columns


@dataclass(frozen=True, slots=True)
class Producer:
    """One producer's state after a prefix of the log (ProducerStateEntry's fields), plus the
    offsets that say how far back the log must be complete for each field to be certain."""

    epoch: int
    timestamp: int
    last_base: int            # base offset of its last batch (data or marker)
    data_epoch: int = -1      # epoch of its last data batch
    last_sequence: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    last_data_base: int = -1
    cleared: bool = False     # a later batch changed the epoch: the batch metadata is gone
    coordinator_epoch: int = -1
    last_marker_base: int = -1
    txn_first: int = -1       # currentTxnFirstOffset

    def expected(self) -> dict:
        """The snapshot entry fields this state implies."""
        data = self.last_data_base >= 0 and not self.cleared
        return {"producer_epoch": self.epoch, "last_sequence": self.last_sequence if data else -1,
                "last_offset": self.last_offset if data else -1, "offset_delta": self.offset_delta if data else 0,
                "timestamp_ms": self.timestamp, "coordinator_epoch": self.coordinator_epoch,
                "current_txn_first_offset": self.txn_first}


class Replay:
    def __init__(self):
        self.state: dict[int, Producer] = {}
        self.prev_last = -1                  # the largest offset of a valid batch so far
        self.gap_ends: list[np.ndarray] = []
        self.gap_starts: list[np.ndarray] = []
        self._gaps: tuple[np.ndarray, np.ndarray] | None = None
        # every COMMIT/ABORT marker: producer id, offset, is ABORT, first offset of its data (-1)
        self.markers: list[tuple[np.ndarray, ...]] = []
        # ABORT markers with data: (pid, first offset, marker offset, source, position)
        self.aborts: list[tuple] = []

    # -- feeding ---------------------------------------------------------------------------------
    def feed(self, t: pa.Table) -> None:
        """One source's batches (log order)."""
        ok = np_col(t, "crc_ok", True, bool)
        base = np_col(t, "base_offset", -1, np.int64)
        last = np_col(t, "last_offset", -1, np.int64)
        self._gaps_of(base[ok], last[ok])
        pid = np_col(t, "producer_id", -1, np.int64)
        ctrl = np_col(t, "is_control", False, bool)
        ctype = t.column("control_type")
        abort = _eq(ctype, "ABORT")
        commit = _eq(ctype, "COMMIT")
        marker = ctrl & (abort | commit)
        use = ok & (pid >= 0) & (np_col(t, "magic", 0, np.int64) >= 2) & (~ctrl | marker)
        idx = np.flatnonzero(use)
        if idx.size:
            self._producers(t, idx, pid[idx], base[idx], last[idx], marker[idx], abort[idx])

    def _gaps_of(self, base: np.ndarray, last: np.ndarray) -> None:
        if base.size == 0:
            return
        prev = np.maximum.accumulate(np.concatenate(([self.prev_last], last[:-1])))
        irregular = base != prev + 1    # missing offsets before the batch, or an overlap
        if irregular.any():
            self.gap_ends.append(base[irregular])
            self.gap_starts.append(np.minimum(prev[irregular] + 1, base[irregular]))
            self._gaps = None
        self.prev_last = max(self.prev_last, int(last.max()))

    def _producers(self, t, idx, pid, base, last, marker, abort) -> None:
        n = idx.size
        col = {name: np_col(t, name, -1, np.int64)[idx] for name in
               ("producer_epoch", "last_sequence", "coordinator_epoch", "max_timestamp_ms")}
        txn = np_col(t, "is_transactional", False, bool)[idx]
        order = np.lexsort((np.arange(n), pid))
        ps, bs, ls, ms = pid[order], base[order], last[order], marker[order]
        es = col["producer_epoch"][order]
        starts = np.flatnonzero(np.concatenate(([True], ps[1:] != ps[:-1])))
        ends = np.append(starts[1:], n)
        g = np.repeat(np.arange(starts.size), ends - starts)
        pos = np.arange(n)
        data = ~ms
        last_data = np.maximum.reduceat(np.where(data, pos, -1), starts)
        last_mk = np.maximum.reduceat(np.where(ms, pos, -1), starts)
        carried = [self.state.get(int(p)) for p in ps[starts].tolist()]
        carry_tf = np.array([c.txn_first if c is not None else -1 for c in carried], np.int64)
        carry_de = np.array([c.data_epoch if c is not None and c.last_data_base >= 0 else -2 for c in carried],
                            np.int64)
        # transactions: a segment of a producer's rows ends at each of its markers
        seg_start = np.zeros(n, bool)
        seg_start[starts] = True
        seg_start[1:] |= ms[:-1]
        seg = np.cumsum(seg_start) - 1
        first_txn = np.full(int(seg[-1]) + 1, NONE, np.int64)
        td = data & txn[order]
        np.minimum.at(first_txn, seg[td], bs[td])
        first_seg = seg[starts]
        tf_of_seg = first_txn.copy()
        has_carry = carry_tf >= 0
        tf_of_seg[first_seg[has_carry]] = carry_tf[has_carry]   # carried-in is always earlier
        # the batch metadata is cleared by a later batch of another epoch
        ref = np.where(last_data >= 0, es[np.maximum(last_data, 0)], carry_de)
        after = pos > last_data[g]
        cleared_now = np.maximum.reduceat((after & (es != ref[g])).astype(np.int8), starts).astype(bool)
        self._markers(ps, bs, ms, seg, tf_of_seg, order, idx, t, abort)
        tail = np.where(ms[ends - 1], NONE, tf_of_seg[seg[ends - 1]])
        sel = {k: v[order] for k, v in col.items()}
        for j, c in enumerate(carried):
            self.state[int(ps[starts[j]])] = _merge(c, j, ends[j] - 1, last_data[j], last_mk[j], bs, ls, sel,
                                                    bool(cleared_now[j]), int(tail[j]))

    def _markers(self, ps, bs, ms, seg, tf_of_seg, order, idx, t, abort) -> None:
        m = np.flatnonzero(ms)
        if not m.size:
            return
        tf = tf_of_seg[seg[m]]
        tf = np.where(tf == NONE, -1, tf)
        ab = abort[order][m]
        self.markers.append((ps[m], bs[m], ab, tf))
        rows = idx[order][m]
        for k in np.flatnonzero(ab & (tf >= 0)).tolist():
            r = int(rows[k])
            self.aborts.append((int(ps[m][k]), int(tf[k]), int(bs[m][k]), t.column("source")[r].as_py(),
                                t.column("position")[r].as_py()))

    # -- queries ---------------------------------------------------------------------------------
    @property
    def gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of the missing ranges [start, end), in log order."""
        if self._gaps is None:
            z = np.zeros(0, np.int64)
            s = np.concatenate(self.gap_starts) if self.gap_starts else z
            e = np.concatenate(self.gap_ends) if self.gap_ends else z
            order = np.argsort(e, kind="stable")   # in log order already, unless batches overlap
            self._gaps = (s[order], e[order])
        return self._gaps

    def gap_between(self, lo: int, hi: int) -> bool:
        """Whether offsets are missing after the batch at `lo` and before `hi` (a gap ending in
        (lo, hi]): what the log shows there may not be all it held."""
        g = self.gaps[1]
        i = int(np.searchsorted(g, lo, side="right"))
        return i < g.size and int(g[i]) <= hi

    def missing(self, offset: int) -> bool:
        """Whether `offset` lies in a missing range (or past the last batch)."""
        if offset > self.prev_last:
            return True
        s, e = self.gaps
        i = int(np.searchsorted(e, offset, side="right"))
        return i < e.size and int(s[i]) <= offset

    def marker_table(self) -> tuple[np.ndarray, ...]:
        """(pid, offset, is_abort, data first offset) of every marker, sorted by (pid, offset)."""
        if not self.markers:
            z = np.zeros(0, np.int64)
            return z, z, np.zeros(0, bool), z
        p, o, a, f = (np.concatenate(x) for x in zip(*self.markers))
        order = np.lexsort((o, p))
        return p[order], o[order], a[order], f[order]


def _eq(col, value: str) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False)


def _merge(c: Producer | None, j: int, last_any: int, last_data: int, last_mk: int, bs, ls, sel,
           cleared_now: bool, tail_first: int) -> Producer:
    """A producer's state after one chunk of its rows (sorted positions `last_*`, -1: none)."""
    ep, ts = int(sel["producer_epoch"][last_any]), int(sel["max_timestamp_ms"][last_any])
    fields = {} if c is None else {k: getattr(c, k) for k in Producer.__slots__}
    fields.update(epoch=ep, timestamp=ts, last_base=int(bs[last_any]))
    if last_data >= 0:
        fields.update(data_epoch=int(sel["producer_epoch"][last_data]),
                      last_sequence=int(sel["last_sequence"][last_data]), last_offset=int(ls[last_data]),
                      offset_delta=int(ls[last_data] - bs[last_data]), last_data_base=int(bs[last_data]),
                      cleared=cleared_now)
    elif cleared_now:
        fields["cleared"] = True
    if last_mk >= 0:
        fields.update(coordinator_epoch=int(sel["coordinator_epoch"][last_mk]), last_marker_base=int(bs[last_mk]))
    fields["txn_first"] = -1 if tail_first == NONE else tail_first
    return Producer(**fields)
