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
    marker_ts: int = -1       # the time of its last marker
    after_ts: int = -1        # the time of its first data batch after that marker (-1: none yet)

    def idle_after_marker(self) -> int:
        """How long the producer wrote nothing after its last marker, when it wrote after it
        (-1 otherwise): its state may have expired in between (producer.id.expiration.ms)."""
        return self.after_ts - self.marker_ts if self.after_ts >= 0 and self.marker_ts >= 0 else -1

    def expected(self) -> dict:
        """The snapshot entry fields this state implies."""
        data = self.last_data_base >= 0 and not self.cleared
        return {"producer_epoch": self.epoch, "last_sequence": self.last_sequence if data else -1,
                "last_offset": self.last_offset if data else -1, "offset_delta": self.offset_delta if data else 0,
                "timestamp_ms": self.timestamp, "coordinator_epoch": self.coordinator_epoch,
                "current_txn_first_offset": self.txn_first}


FIELDS = ("epoch", "timestamp", "last_base", "data_epoch", "last_sequence", "last_offset", "offset_delta",
          "last_data_base", "cleared", "coordinator_epoch", "last_marker_base", "txn_first", "marker_ts", "after_ts")
DEFAULTS = {"epoch": -1, "timestamp": -1, "last_base": -1, "data_epoch": -1, "last_sequence": -1,
            "last_offset": -1, "offset_delta": 0, "last_data_base": -1, "cleared": 0, "coordinator_epoch": -1,
            "last_marker_base": -1, "txn_first": -1, "marker_ts": -1, "after_ts": -1}


class States:
    """Every producer's state as arrays (a slot per producer id): updated a chunk at a time with
    numpy, copied whole when a segment begins (a snapshot may be named after it)."""

    def __init__(self):
        self.slot: dict[int, int] = {}
        self.cols = {f: np.full(16, DEFAULTS[f], np.int64) for f in FIELDS}
        self.pids = np.zeros(16, np.int64)
        self.n = 0

    def slots(self, pids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots, known) for a chunk's producer ids, new ones given fresh slots."""
        out = np.empty(pids.size, np.int64)
        known = np.ones(pids.size, bool)
        for i, p in enumerate(pids.tolist()):
            j = self.slot.get(p)
            if j is None:
                j = self.slot[p] = self.n
                self.n += 1
                known[i] = False
            out[i] = j
        if self.n > self.pids.size:
            size = max(self.n, 2 * self.pids.size)
            for f in FIELDS:
                self.cols[f] = np.concatenate([self.cols[f], np.full(size - self.cols[f].size, DEFAULTS[f], np.int64)])
            self.pids = np.concatenate([self.pids, np.zeros(size - self.pids.size, np.int64)])
        self.pids[out] = pids
        return out, known

    def copy(self) -> "States":
        c = States.__new__(States)
        c.slot, c.n, c.pids = dict(self.slot), self.n, self.pids[: self.n].copy()
        c.cols = {f: v[: self.n].copy() for f, v in self.cols.items()}
        return c

    def get(self, pid: int) -> Producer | None:
        j = self.slot.get(pid)
        if j is None:
            return None
        values = {f: int(self.cols[f][j]) for f in FIELDS}
        values["cleared"] = bool(values["cleared"])
        return Producer(**values)

    def open_items(self):
        """(pid, state) of the producers with an open transaction, by producer id."""
        tf = self.cols["txn_first"][: self.n]
        for j in np.flatnonzero(tf >= 0).tolist():
            pid = int(self.pids[j])
            yield pid, self.get(pid)

    def open_firsts(self) -> np.ndarray:
        tf = self.cols["txn_first"][: self.n]
        return tf[tf >= 0]


class Replay:
    def __init__(self):
        self.state = States()
        self.prev_last = -1                  # the largest offset of a valid batch so far
        self.gap_ends: list[np.ndarray] = []
        self.gap_starts: list[np.ndarray] = []
        self._gaps: tuple[np.ndarray, np.ndarray] | None = None
        # every COMMIT/ABORT marker: producer id, offset, is ABORT, first offset of its data (-1)
        self.markers: list[tuple[np.ndarray, ...]] = []
        # ABORT markers with data: (pid, first offset, marker offset, position) arrays and the source
        self.aborts: list[tuple] = []

    # -- feeding ---------------------------------------------------------------------------------
    def feed(self, t: pa.Table, base: np.ndarray, last: np.ndarray, ok: np.ndarray) -> None:
        """One source's batches (log order); `ok`: the valid ones (CRC), as arrays."""
        every = ok.all()
        self._gaps_of(base if every else base[ok], last if every else last[ok])
        self._thinned(t, base, last, ok)
        pid = np_col(t, "producer_id", -1, np.int64)
        use = ok & (pid >= 0)
        if not use.any():
            return
        use &= np_col(t, "magic", 0, np.int64) >= 2
        ctrl = np_col(t, "is_control", False, bool)
        abort = commit = np.zeros(t.num_rows, bool)
        if (ctrl & use).any():
            ctype = t.column("control_type")
            abort, commit = _eq(ctype, "ABORT"), _eq(ctype, "COMMIT")
        marker = ctrl & (abort | commit)
        idx = np.flatnonzero(use & (~ctrl | marker))
        if idx.size:
            self._producers(t, idx, pid[idx], base[idx], last[idx], marker[idx], abort[idx])

    def _gaps_of(self, base: np.ndarray, last: np.ndarray) -> None:
        if base.size == 0:
            return
        if base[0] == self.prev_last + 1 and (base[1:] == last[:-1] + 1).all():
            self.prev_last = max(self.prev_last, int(last[-1]))   # contiguous: the common case
            return
        prev = np.maximum.accumulate(np.concatenate(([self.prev_last], last[:-1])))
        irregular = base != prev + 1    # missing offsets before the batch, or an overlap
        if irregular.any():
            self.gap_ends.append(base[irregular])
            self.gap_starts.append(np.minimum(prev[irregular] + 1, base[irregular]))
            self._gaps = None
        self.prev_last = max(self.prev_last, int(last.max()))

    def _thinned(self, t: pa.Table, base: np.ndarray, last: np.ndarray, ok: np.ndarray) -> None:
        """A v2 data batch holding fewer records than offsets: the log cleaner removed records
        from it and rebuilt it (MemoryRecords.buildRetainedRecordsInto keeps the base offset and the
        last offset delta, not the max timestamp), or kept it as an empty header for its producer's
        sequence state. Its offsets count as missing: what it held is no longer all shown."""
        count = np_col(t, "record_count", -1, np.int64)
        thin = ok & (count >= 0) & (count < last - base + 1) & ~np_col(t, "is_control", False, bool)
        if thin.any():
            thin &= np_col(t, "magic", 0, np.int64) >= 2
            self.gap_ends.append(last[thin])
            self.gap_starts.append(base[thin])
            self._gaps = None

    def _producers(self, t, idx, pid, base, last, marker, abort) -> None:
        n = idx.size
        col = {name: np_col(t, name, -1, np.int64)[idx] for name in
               ("producer_epoch", "last_sequence", "coordinator_epoch", "max_timestamp_ms")}
        txn = np_col(t, "is_transactional", False, bool)[idx]
        order = np.lexsort((np.arange(n), pid))
        ps, bs, ls, ms = pid[order], base[order], last[order], marker[order]
        sel = {k: v[order] for k, v in col.items()}
        es = sel["producer_epoch"]
        starts = np.flatnonzero(np.concatenate(([True], ps[1:] != ps[:-1])))
        ends = np.append(starts[1:], n)
        g = np.repeat(np.arange(starts.size), ends - starts)
        pos = np.arange(n)
        data = ~ms
        last_data = np.maximum.reduceat(np.where(data, pos, -1), starts)
        last_mk = np.maximum.reduceat(np.where(ms, pos, -1), starts)
        st = self.state
        slot, known = st.slots(ps[starts])
        c = st.cols
        carry_tf = np.where(known, c["txn_first"][slot], -1)
        carry_de = np.where(known & (c["last_data_base"][slot] >= 0), c["data_epoch"][slot], -2)
        # transactions: a segment of a producer's rows ends at each of its markers
        seg_start = np.zeros(n, bool)
        seg_start[starts] = True
        seg_start[1:] |= ms[:-1]
        seg = np.cumsum(seg_start) - 1
        tf_of_seg = np.full(int(seg[-1]) + 1, NONE, np.int64)
        td = data & txn[order]
        np.minimum.at(tf_of_seg, seg[td], bs[td])
        has_carry = carry_tf >= 0
        tf_of_seg[seg[starts][has_carry]] = carry_tf[has_carry]   # carried-in is always earlier
        # the batch metadata is cleared by a later batch of another epoch
        ref = np.where(last_data >= 0, es[np.maximum(last_data, 0)], carry_de)
        after = pos > last_data[g]
        cleared_now = np.maximum.reduceat((after & (es != ref[g])).astype(np.int64), starts)
        self._markers(ps, bs, ms, seg, tf_of_seg, order, idx, t, abort)
        tail = np.where(ms[ends - 1], NONE, tf_of_seg[seg[ends - 1]])
        la = ends - 1
        c["epoch"][slot], c["timestamp"][slot], c["last_base"][slot] = es[la], sel["max_timestamp_ms"][la], bs[la]
        d = last_data >= 0
        sd, rd = slot[d], last_data[d]
        c["data_epoch"][sd], c["last_sequence"][sd], c["last_offset"][sd] = es[rd], sel["last_sequence"][rd], ls[rd]
        c["offset_delta"][sd], c["last_data_base"][sd] = ls[rd] - bs[rd], bs[rd]
        c["cleared"][sd] = cleared_now[d]
        c["cleared"][slot[~d]] |= cleared_now[~d]
        m = last_mk >= 0
        c["coordinator_epoch"][slot[m]] = sel["coordinator_epoch"][last_mk[m]]
        self._idle(c, slot, g, pos, data, last_mk, starts, sel["max_timestamp_ms"])
        c["last_marker_base"][slot[m]] = bs[last_mk[m]]
        c["txn_first"][slot] = np.where(tail == NONE, -1, tail)

    @staticmethod
    def _idle(c, slot, g, pos, data, last_mk, starts, ts) -> None:
        """marker_ts / after_ts: each producer's last marker's time and its first data batch's
        after it (a marker rewritten by the cleaner keeps its record's time as the max)."""
        m = last_mk >= 0
        c["marker_ts"][slot[m]] = ts[last_mk[m]]
        big = np.iinfo(np.int64).max
        first_after = np.minimum.reduceat(np.where(data & (pos > last_mk[g]), pos, big), starts)
        fresh = m & (first_after < big)
        c["after_ts"][slot[m]] = -1
        c["after_ts"][slot[fresh]] = ts[first_after[fresh]]
        # no marker here: the first data after a marker of an earlier chunk
        carry = ~m & (c["after_ts"][slot] < 0) & (c["marker_ts"][slot] >= 0)
        first = np.minimum.reduceat(np.where(data, pos, big), starts)
        carry &= first < big
        c["after_ts"][slot[carry]] = ts[first[carry]]

    def _markers(self, ps, bs, ms, seg, tf_of_seg, order, idx, t, abort) -> None:
        m = np.flatnonzero(ms)
        if not m.size:
            return
        tf = tf_of_seg[seg[m]]
        tf = np.where(tf == NONE, -1, tf)
        ab = abort[order][m]
        self.markers.append((ps[m], bs[m], ab, tf))
        k = np.flatnonzero(ab & (tf >= 0))
        if k.size:
            rows = idx[order][m][k]
            position = np_col(t, "position", -1, np.int64)[rows]
            self.aborts.append((ps[m][k], tf[k], bs[m][k], position, t.column("source")[int(rows[0])].as_py()))

    def abort_rows(self):
        """(pid, first offset, marker offset, source, position) of every ABORT with data."""
        for p, f, m, pos, src in self.aborts:
            for row in zip(p.tolist(), f.tolist(), m.tolist(), [src] * p.size, pos.tolist()):
                yield row

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
