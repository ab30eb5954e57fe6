"""The sequence fold's fast pass (disk_sequences.py): the effect of a chunk's batches that the
checked path would merely record - a producer's next batches of its epoch, its first sight, a
marker's epoch bump - applied in bulk to the producers' states (`CatchUp`, mixed into
PartitionTimeline, whose `feed` sets the chunk's arrays it reads), and the BatchViews of a
chunk's rows gathered from its columns (`_Views`). It never decides a finding: every other
batch goes to the checked path, and tests/audit/disk/test_disk_fast_pass.py holds both paths
to the same findings and states.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit.audit.producers.producer_state import NOTED, UNKNOWN_SEQUENCE, BatchView, ProducerState

KEY = ("replica", "topic", "partition")
ORDER = ("source", "position")
COLUMNS = KEY + ORDER + (
    "base_offset", "last_offset", "magic", "crc", "crc_ok", "is_control", "control_type",
    "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count", "batch_size",
    "base_timestamp_ms", "max_timestamp_ms", "attributes", "is_transactional",
)


class CatchUp:
    """The fast pass's methods of PartitionTimeline (its state: `producers`, and per chunk the
    arrays `feed` sets - `_epoch`, `_control`, `_last_off`, `_gaps_before`, `_slices`,
    `_view_arrays`)."""

    def _fast(self, order, pid, epoch, bseq, lseq, control) -> np.ndarray:
        """Which of a chunk's tracked rows (`order`: grouped by producer, ascending) the checked
        path would only record: every row keeps its producer's epoch (that of the row before it,
        of the producer's previous data row, and of the carried state where the chunk has no
        earlier data row), a data row continues the sequence of the producer's previous data
        row, and a marker consumes no sequence (ProducerAppendInfo: a control batch of the
        current epoch only ends the transaction). Anything else - a bump, a gap, a producer with a
        range ahead - is left to the checked path."""
        n = order.size
        p, ep, bs, ls, ctl = pid[order], epoch[order], bseq[order], lseq[order], control[order]
        idx = np.arange(n)
        first = np.ones(n, dtype=bool)
        first[1:] = p[1:] != p[:-1]
        group_start = np.maximum.accumulate(np.where(first, idx, 0))
        # the producer's previous data row in this chunk (index into order), -1 if none
        run = np.maximum.accumulate(np.where(ctl, -1, idx))
        prev_data = np.r_[-1, run[:-1]]
        prev_data = np.where(prev_data >= group_start, prev_data, -1)
        has_pd = prev_data >= 0
        pd = np.maximum(prev_data, 0)
        prev_any = np.maximum(idx - 1, 0)
        # the highest epoch of the producer's earlier rows in this chunk (-1: none)
        span = (np.cumsum(first) - 1) * (1 << 17)
        top = np.maximum.accumulate(span + ep + 1) - span - 1
        prev_max = np.where(first, -1, top[prev_any])
        same_epoch = ~first & (ep == ep[prev_any]) & (~has_pd | (ep == ep[pd]))
        ok = same_epoch & (ctl | (has_pd & (bs == ls[pd] + 1)))
        # a marker above every earlier epoch bumps the epoch (KIP-890's markers, a coordinator's
        # abort; ProducerAppendInfo): sequences restart, the epoch's first data batch at 0
        ok |= ~first & ctl & (ep > prev_max)
        ok |= (~first & ~ctl & (bs == 0) & ctl[prev_any] & (ep == ep[prev_any]) & (ep == prev_max)
               & has_pd & (ep[pd] < ep))
        # rows checked against the carried state: each producer's first row, and data rows with
        # only markers before them in the chunk
        for j in np.flatnonzero(first | (~ctl & ~has_pd)).tolist():
            ok[j] = self._continues(self.producers.get(int(p[j])), int(ep[j]), int(bs[j]), bool(ctl[j]),
                                    bool(first[j]), bool(same_epoch[j]),
                                    bool(ctl[prev_any[j]]) and ep[prev_any[j]] == ep[j] == prev_max[j])
        return ok

    @staticmethod
    def _continues(st, ep: int, bs: int, ctl: bool, first: bool, same_epoch: bool, bumped: bool) -> bool:
        """Whether a row the chunk cannot judge alone (a producer's first; a data row after markers
        only) continues the carried state: same epoch and the next sequence, or a new epoch above
        every earlier one (a marker, or data starting at 0; `bumped`: the markers before it in the
        chunk are at its epoch)."""
        if st is None:
            return first   # its first batch anywhere: it only opens the producer's state
        if st.dirty():
            return False
        if ep > st.max_epoch and (first or bumped):
            return ctl or bs == 0
        if st.epoch != ep or st.max_epoch != ep or not (first or same_epoch):
            return False
        if ctl:
            return True
        return (st.last_seq >= 0 and bs == st.last_seq + 1) or (st.last_seq == -1 and bs == 0)

    def _catch_up(self, order, pid, upto: int, t, cols) -> None:
        """Apply to each producer's state its last fast-path batch before row `upto` (the chunk's
        end: every producer at once, `_catch_up_all`)."""
        if order.size == 0:
            return
        if upto >= t.num_rows:
            self._catch_up_all(order, pid, t, cols)
            return
        q = int(pid[upto])
        if q < 0:
            return
        a, z = self._slices.get(q, (0, 0))
        seg = order[a:z]
        sel = seg[:int(np.searchsorted(seg, upto))]
        views = _Views(t, cols, self._arrays)
        if sel.size and q not in self.producers:   # seen for the first time: its first batch opens the state
            self._first_sight(views.get(int(sel[0])), int(sel[0]))
        st = self.producers.get(q)
        if st is None or sel.size == 0:
            return
        i = int(sel[-1])
        if st.applied_upto is not None and i <= st.applied_upto:
            return
        if st.applied_upto is not None:
            sel = sel[sel > st.applied_upto]
        noted = -1 if st.noted_upto is None else st.noted_upto
        runs, bump = self._epoch_runs(st, sel)
        self._apply([(st, i, runs, bump, [j for j in sel[-NOTED:].tolist() if j > noted])], views)

    def _catch_up_all(self, order, pid, t, cols) -> None:
        """`_catch_up` at the chunk's end: every producer's rows not yet applied (a suffix of its
        slice of `order`), their epochs, first and last data rows and last rows, taken with numpy
        over the whole chunk at once, not producer by producer; a producer whose rows span
        several epochs (rare) takes `_epoch_runs`."""
        p = pid[order]
        starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
        ends = np.r_[starts[1:], order.size]
        qs, heads = p[starts].tolist(), order[starts].tolist()
        views = _Views(t, cols, self._arrays)
        producers = self.producers
        # producers seen for the first time: their first batch opens the state
        firsts = [h for q, h in zip(qs, heads) if q not in producers]
        views.prefetch(firsts)
        for j in firsts:
            self._first_sight(views.get(j), j)
        states = [producers[q] for q in qs]
        applied = np.fromiter((-1 if st.applied_upto is None else st.applied_upto for st in states),
                              np.int64, len(states))
        seg = np.repeat(np.arange(len(starts)), ends - starts)
        keep = order > applied[seg]   # rows ascend within a slice: the rows kept are its suffix
        first = ends - np.bincount(seg[keep], minlength=len(starts))
        last = ends - 1
        ep = self._epoch[order]
        one_epoch = (ep[np.minimum(first, last)] == ep[last]).tolist()
        pos = np.arange(order.size)
        data = keep & ~self._control[order]
        first_data = np.minimum.reduceat(np.where(data, pos, order.size - 1), starts)
        last_data = np.maximum.reduceat(np.where(data, pos, -1), starts)
        has_data = (last_data >= 0).tolist()
        first_data, last_data = order[first_data].tolist(), order[np.maximum(last_data, 0)].tolist()
        epochs, last_row = ep[last].tolist(), order[last].tolist()
        first_row = order[np.minimum(first, last)].tolist()
        rows, first, ends = order.tolist(), first.tolist(), ends.tolist()
        steps = []   # (state, last row, [(epoch, first data row, last data row)], bump, rows to note)
        for k, st in enumerate(states):
            a, z = first[k], ends[k]
            if a == z:   # every row already applied
                continue
            if not one_epoch[k]:
                runs, bump = self._epoch_runs(st, order[a:z])
            elif has_data[k]:
                runs, bump = [(epochs[k], first_data[k], last_data[k])], None
            else:
                runs, bump = [], (first_row[k] if epochs[k] != st.epoch else None)
            noted = -1 if st.noted_upto is None else st.noted_upto
            steps.append((st, last_row[k], runs, bump, [j for j in rows[max(a, z - NOTED):z] if j > noted]))
        self._apply(steps, views)

    def _apply(self, steps: list, views: "_Views") -> None:
        """Each producer's catch-up step applied to its state, as the checked path would leave it.
        A run's first batch that continues its epoch's last run (most: a producer's next batches)
        extends it from the chunk's columns, with no view of the batch (ProducerState.extends)."""
        arrays = self._arrays()
        merge = set()
        if arrays is not None:
            bseq, lseq, last_off = arrays["base_sequence"], arrays["last_sequence"], arrays["last_offset"]
            merge = {a for st, _, runs, _, _ in steps for e, a, _ in runs if st.extends(e, int(bseq[a]), int(lseq[a]))}
        views.prefetch([r for s in steps for e, a, z in s[2] for r in (() if a in merge else (a,))
                        + (() if arrays is not None else (z,))])
        views.prefetch_fields([r for s in steps for r in s[4]])
        for st, i, runs, bump, notes in steps:
            for e, a, z in runs:
                # the run's first batch stored as the checked path stores it (it continues the
                # epoch's last range, or opens a bumped epoch's); the next ones each continue it
                if a in merge:
                    st.extend(e, int(lseq[a]), int(last_off[a]))
                else:
                    st.remember(views.get(a))
                if arrays is not None:
                    z_seq, z_off = int(lseq[z]), int(last_off[z])
                else:
                    b = views.get(z)
                    z_seq, z_off = b.last_sequence, b.last_offset
                history = st.history(e)
                history[-1].hi = z_seq
                history[-1].last_offset = z_off
                st.epoch, st.max_epoch = e, max(st.max_epoch, e)
                st.set_sequence(z_seq, int(self._gaps_before[z]))
            if bump is not None:   # a marker bumped the epoch after the last data batch
                e = int(self._epoch[bump])
                st.epoch, st.max_epoch = e, max(st.max_epoch, e)
                st.set_sequence(-1, int(self._gaps_before[bump]))
            st.last_offset = int(self._last_off[i])
            st.offset_gaps = int(self._gaps_before[i])
            st.applied_upto = i
            for j in notes:
                st.note(views.fields(j))
            st.noted_upto = i

    def _arrays(self) -> dict | None:
        """The chunk's columns BatchViews read, as numpy arrays (once per chunk), or None when one
        has a null (batch_view's rules for those apply)."""
        t = self._view_arrays
        if isinstance(t, dict) or t is None:
            return t
        cols = _VIEW_NUMBERS + _VIEW_TIMES
        self._view_arrays = None if any(t.column(c).null_count for c in cols) else \
            {c: t.column(c).to_numpy() for c in cols}
        return self._view_arrays

    def _first_sight(self, b: BatchView, i: int) -> None:
        """A producer's state opened by its first batch `b` (row `i`): no finding."""
        gaps = int(self._gaps_before[i])
        st = self.producers[b.producer_id] = ProducerState(
            b.producer_epoch, UNKNOWN_SEQUENCE if b.is_control else b.last_sequence,
            b.producer_epoch, b.last_offset, gaps, seq_offset_gaps=gaps)
        st.applied_upto = st.noted_upto = i
        if not b.is_control:
            st.remember(b)
        st.note(b)

    def _epoch_runs(self, st: ProducerState, sel: np.ndarray) -> tuple[list, int | None]:
        """A producer's fast rows `sel` (ascending) as [(epoch, first data row, last data row)] per
        epoch in order, and the marker that bumped the epoch after the last data row (or None)."""
        ep = self._epoch[sel]
        data = ~self._control[sel]
        if ep[0] == ep[-1]:   # one epoch (the fast rows' epochs never go down): most producers
            e, rows = int(ep[0]), sel[data]
            if rows.size:
                return [(e, int(rows[0]), int(rows[-1]))], None
            return [], (int(sel[0]) if e != st.epoch else None)
        out, bump = [], None
        cuts = np.flatnonzero(np.r_[True, ep[1:] != ep[:-1]]).tolist() + [sel.size]
        for a, z in zip(cuts[:-1], cuts[1:]):
            rows = sel[a:z][data[a:z]]
            e = int(ep[a])
            if rows.size:
                out.append((e, int(rows[0]), int(rows[-1])))
                bump = None
            elif e != (out[-1][0] if out else st.epoch):
                bump = int(sel[a])
        return out, bump

    @staticmethod
    def _view(t, cols, i: int) -> BatchView:
        if cols is None:
            r = {k: t.column(k)[i].as_py() for k in COLUMNS}
        else:
            r = {k: cols[k][i] for k in COLUMNS}
        return batch_view(r)


# the BatchView fields after `source`, in order, as batch columns (control_type aside: a string)
_VIEW_NUMBERS = ("position", "base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence",
                 "last_sequence", "record_count", "crc", "batch_size", "is_control")
_VIEW_TIMES = ("base_timestamp_ms", "max_timestamp_ms", "attributes")


class _Views:
    """BatchViews of one chunk's rows: many at once gathered from the columns (the timeline notes
    of every producer at a chunk's end), a few cell by cell. Rows only noted (`fields`) are kept
    as their views' fields, made views when a finding reads them (ProducerState.noted)."""

    def __init__(self, t, cols, arrays=None):
        self.t, self.cols, self.cache, self.arrays, self.raw = t, cols, {}, arrays, {}

    def _gather(self, need: list[int]) -> list[tuple] | None:
        """The BatchView fields of rows `need`, from the chunk's numpy columns (None: a column
        has a null, batch_view's rules apply)."""
        arrays = self.arrays() if self.arrays is not None else None
        if arrays is None:
            return None
        idx = np.asarray(need, dtype=np.int64)
        take = pa.array(idx)
        strings = [self.t.column(c).take(take).to_pylist() for c in ("source", "control_type")]
        nums = [arrays[c][idx].tolist() for c in _VIEW_NUMBERS + _VIEW_TIMES]
        return list(zip(strings[0], *nums[:len(_VIEW_NUMBERS)], strings[1], *nums[len(_VIEW_NUMBERS):]))

    def prefetch(self, rows: list[int]) -> None:
        need = sorted({i for i in rows if i not in self.cache})
        if self.cols is not None or len(need) <= 8:
            return
        fields = self._gather(need)
        if fields is None:
            taken = self.t.take(pa.array(need, pa.int64())).select(list(COLUMNS)).to_pylist()
            self.cache.update((i, batch_view(r)) for i, r in zip(need, taken))
            return
        self.cache.update(zip(need, (BatchView(*f) for f in fields)))

    def prefetch_fields(self, rows: list[int]) -> None:
        """Gather rows that will only be noted, as fields (`fields`)."""
        need = sorted({i for i in rows if i not in self.cache and i not in self.raw})
        if self.cols is not None or len(need) <= 8:
            return
        fields = self._gather(need)
        if fields is not None:
            self.raw.update(zip(need, fields))

    def get(self, i: int) -> BatchView:
        v = self.cache.get(i)
        if v is None:
            f = self.raw.get(i)
            v = self.cache[i] = CatchUp._view(self.t, self.cols, i) if f is None else BatchView(*f)
        return v

    def fields(self, i: int):
        """Row i's view if made, else its fields if gathered, else its view."""
        v = self.cache.get(i)
        if v is None:
            v = self.raw.get(i)
        return self.get(i) if v is None else v


def batch_view(r: dict) -> BatchView:
    """A BatchView of one batch row (COLUMNS)."""
    return BatchView(
        r["source"], r["position"], r["base_offset"], r["last_offset"],
        -1 if r["producer_id"] is None else r["producer_id"],
        -1 if r["producer_epoch"] is None else r["producer_epoch"],
        -1 if r["base_sequence"] is None else r["base_sequence"],
        -1 if r["last_sequence"] is None else r["last_sequence"],
        r["record_count"] or 0, r["crc"], r["batch_size"], bool(r["is_control"]),
        r["control_type"], r["base_timestamp_ms"], r["max_timestamp_ms"], r["attributes"])
