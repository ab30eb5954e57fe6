"""Per-producer state of one partition, as the broker keeps it (kafka.log.ProducerStateManager,
ProducerAppendInfo), plus the memory the broker does not have: every sequence range a producer
epoch ever stored, not just the last five batches.

Pure data and small pure functions; the folds in audit/producers/disk_sequences.py and
audit/producers/wire_produce.py drive them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import islice

INT32_MAX = 2**31 - 1
MAX_INTERVALS = 4096  # sequence ranges remembered per producer epoch (older ones are dropped)
# `last_seq` when the log shows the producer's epoch but none of its sequences (its first batch
# in what the log holds is a marker: retention removed the data before it): any sequence fits.
UNKNOWN_SEQUENCE = -2
_AHEAD = 2**30  # a stored range up to this far past the current sequence is "ahead" (not wrapped)


def next_sequence(last_seq: int) -> int:
    """The sequence that must follow `last_seq` (ProducerStateManager.inSequence: wraps at
    Int.MaxValue); -1 (no sequence yet in this epoch) is followed by 0."""
    return 0 if last_seq in (-1, INT32_MAX) else last_seq + 1


def sequence_parts(lo: int, hi: int) -> list[tuple[int, int]]:
    """A batch's sequence range as plain ranges: one, or two when it wraps past Int.MaxValue
    (DefaultRecordBatch.incrementSequence: base INT32_MAX-1 with 4 records ends at 1)."""
    if hi < lo:
        return [(lo, INT32_MAX), (0, hi)]
    return [(lo, hi)]


# batches whose views a producer keeps: the timeline shows the last 4, a sequence stored again
# is compared with the batch that first held it when it is among them (duplicate_batch)
NOTED = 32


@dataclass(slots=True)
class BatchView:
    """The facts of one batch that the sequence rules read (disk or wire)."""

    source: str
    position: int
    base_offset: int | None
    last_offset: int | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    record_count: int
    crc: int | None
    batch_size: int | None
    is_control: bool = False
    control_type: str | None = None
    first_ts_ms: int | None = None
    last_ts_ms: int | None = None
    attributes: int | None = None   # the batch attributes (codec, flags): its records' checksum

    def describe(self) -> str:
        where = f"{os.path.basename(self.source or '')}@{self.position}"
        if self.is_control:
            return (f"offset {self.base_offset} {self.control_type or 'CONTROL'} marker "
                    f"epoch {self.producer_epoch} ({where})")
        off = "" if self.base_offset is None else f"offsets {self.base_offset}-{self.last_offset} "
        return (f"{off}epoch {self.producer_epoch} seq {self.base_sequence}-{self.last_sequence} "
                f"({self.record_count} records, crc {self.crc}) ({where})")


@dataclass(slots=True)
class Interval:
    """A run of consecutive sequences stored by one producer epoch, and where."""

    lo: int
    hi: int
    first_offset: int | None
    last_offset: int | None
    first: BatchView | None = None  # the batch that opened the run (exact evidence)


class Runs(list):
    """One producer epoch's runs in the order they were stored, with a bound on the runs before
    the last: the highest and lowest `hi` among them. Only the last run grows in place (merging
    the next batch), so the bound changes only when a run is appended; dropping the oldest run
    leaves it loose, never wrong. It spares the common case - a batch above every stored range,
    as after compaction or retention gaps - a scan of up to MAX_INTERVALS runs per batch."""

    __slots__ = ("top", "bottom")

    def __init__(self):
        super().__init__()
        self.top, self.bottom = -1, INT32_MAX   # over self[:-1]; empty: nothing to bound

    def append(self, run: Interval) -> None:
        if self:
            self.top, self.bottom = max(self.top, self[-1].hi), min(self.bottom, self[-1].hi)
        super().append(run)
        if len(self) > MAX_INTERVALS:
            del self[0]


@dataclass(slots=True)
class ProducerState:
    """What the partition knows of one producer id."""

    epoch: int                 # current epoch (that of the last write the log accepted)
    last_seq: int              # last sequence of that epoch; -1 after an epoch bump by a marker
    max_epoch: int             # highest epoch ever used (data or marker)
    last_offset: int | None
    offset_gaps: int           # the partition's offset-gap count at the last batch (compaction)
    intervals: dict[int, Runs] = field(default_factory=dict)
    # the last few batches (timeline excerpt): views, or a view's fields in order (a tuple) until
    # a finding reads them (`noted`) - the fast path notes every producer's last rows
    views: list = field(default_factory=list)
    open_fenced: dict | None = None
    applied_upto: int | None = None   # row of the current chunk last applied (fold bookkeeping)
    noted_upto: int | None = None
    seq_offset_gaps: int | None = None   # offset_gaps where last_seq was set (set_sequence)

    def set_sequence(self, last_seq: int, offset_gaps: int) -> None:
        """The sequence the next data batch continues (a data batch's last one, or -1 after an
        epoch bump) and the partition's offset-gap count there: only an offset gap after this
        point - compaction removed what came next - excuses a sequence gap."""
        self.last_seq, self.seq_offset_gaps = last_seq, offset_gaps

    def history(self, epoch: int) -> Runs:
        runs = self.intervals.get(epoch)
        if runs is None:
            runs = self.intervals[epoch] = Runs()
        return runs

    def remember(self, b: BatchView) -> None:
        """Record a stored data batch in the sequence history (merging consecutive runs). A
        batch that wraps past Int.MaxValue is kept as two runs, [base, MAX] and [0, last]."""
        runs = self.history(b.producer_epoch)
        parts = sequence_parts(b.base_sequence, b.last_sequence)
        for k, (lo, hi) in enumerate(parts):
            first_off = b.base_offset if k == 0 else _offset_at(b, lo)
            last_off = b.last_offset if k == len(parts) - 1 else _offset_at(b, hi)
            if _merges(runs, lo, hi):
                runs[-1].hi = hi
                runs[-1].last_offset = last_off
            else:
                runs.append(Interval(lo, hi, first_off, last_off, b))

    def extends(self, epoch: int, lo: int, hi: int) -> bool:
        """Whether `remember` would merge a data batch of `epoch` holding sequences lo..hi (not
        wrapping) into the epoch's last run - then `extend` does it without the batch's view."""
        runs = self.intervals.get(epoch)
        return lo <= hi and runs is not None and _merges(runs, lo, hi)

    def extend(self, epoch: int, hi: int, last_offset: int | None) -> None:
        """`remember` of a batch `extends` said merges: the epoch's last run now ends there."""
        run = self.intervals[epoch][-1]
        run.hi, run.last_offset = hi, last_offset

    def dirty(self) -> bool:
        """True when a stored range lies ahead of the current sequence: a later batch may
        overlap it, so this producer's batches take the checked path. Ranges before a wrap
        past Int.MaxValue are behind, not ahead."""
        if self.open_fenced is not None:
            return True
        runs = self.intervals.get(self.epoch)
        if not runs or len(runs) < 2:
            return False
        last = self.last_seq
        if runs.top <= last and last - runs.bottom < _AHEAD:
            return False   # every earlier run ends at or behind `last`, none so far it wraps ahead
        return any(0 < (r.hi - last) % (INT32_MAX + 1) < _AHEAD for r in islice(runs, len(runs) - 1))

    def note(self, view: BatchView, keep: int = NOTED) -> None:
        self.views.append(view)
        if len(self.views) > keep:
            del self.views[0]

    def noted(self) -> list[BatchView]:
        """The last NOTED batches' views (fields noted as a tuple become their view here)."""
        views = self.views
        for k, v in enumerate(views):
            if not isinstance(v, BatchView):   # noted fields, or a row read when asked (wire)
                views[k] = v.batch_view() if hasattr(v, "batch_view") else BatchView(*v)
        return views

    @property
    def recent(self) -> list[str]:
        """The timeline excerpt: the last few batches, described only when a finding asks
        (most producers never need it)."""
        return [v.describe() for v in self.noted()[-4:]]

    def stored(self, epoch: int, lo: int, hi: int) -> BatchView | None:
        """A recent data batch of `epoch` holding sequences lo..hi (exact evidence), if noted."""
        for v in reversed(self.noted()):
            if (not v.is_control and v.producer_epoch == epoch and v.base_sequence <= lo
                    and hi <= v.last_sequence):
                return v
        return None


def overlaps(runs: Runs, lo: int, hi: int) -> list[Interval]:
    """The runs sharing a sequence with [lo, hi] (which may wrap past Int.MaxValue); `runs`
    empty (any sequence) or a producer epoch's history."""
    if runs and lo <= hi and lo > max(runs.top, runs[-1].hi):
        return []   # above every stored range
    parts = sequence_parts(lo, hi)
    return [r for r in runs if any(r.lo <= h and l <= r.hi for l, h in parts)]


def _merges(runs: Runs, lo: int, hi: int) -> bool:
    """Whether sequences lo..hi (one part of a batch) continue the last run: right after it, no
    earlier run sharing any of them."""
    return bool(runs) and runs[-1].hi != INT32_MAX and lo == runs[-1].hi + 1 and \
        not _overlaps_before_last(runs, lo, hi)


def _overlaps_before_last(runs: Runs, lo: int, hi: int) -> bool:
    """Whether a run before the last shares a sequence with [lo, hi] (lo <= hi)."""
    if lo > runs.top:
        return False
    return any(r.lo <= hi and lo <= r.hi for r in islice(runs, len(runs) - 1))


def _offset_at(b: BatchView, seq: int) -> int | None:
    """The offset of sequence `seq` of batch `b` (records follow sequences one to one)."""
    if b.base_offset is None:
        return None
    return b.base_offset + (seq - b.base_sequence) % (INT32_MAX + 1)
