"""Per-producer state of one partition, as the broker keeps it (kafka.log.ProducerStateManager,
ProducerAppendInfo), plus the memory the broker does not have: every sequence range a producer
epoch ever stored, not just the last five batches.

Pure data and small pure functions; the folds in audit/disk_sequences.py and
audit/wire_produce.py drive them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

INT32_MAX = 2**31 - 1
MAX_INTERVALS = 4096  # sequence ranges remembered per producer epoch (older ones are dropped)


def next_sequence(last_seq: int) -> int:
    """The sequence that must follow `last_seq` (ProducerStateManager.inSequence: wraps at
    Int.MaxValue); -1 (no sequence yet in this epoch) is followed by 0."""
    return 0 if last_seq in (-1, INT32_MAX) else last_seq + 1


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


@dataclass(slots=True)
class ProducerState:
    """What the partition knows of one producer id."""

    epoch: int                 # current epoch (that of the last write the log accepted)
    last_seq: int              # last sequence of that epoch; -1 after an epoch bump by a marker
    max_epoch: int             # highest epoch ever used (data or marker)
    last_offset: int | None
    offset_gaps: int           # the partition's offset-gap count at the last batch (compaction)
    intervals: dict[int, list[Interval]] = field(default_factory=dict)
    recent: list[str] = field(default_factory=list)   # timeline excerpt, last few batches
    open_fenced: dict | None = None
    applied_upto: int | None = None   # row of the current chunk last applied (fold bookkeeping)
    noted_upto: int | None = None

    def history(self, epoch: int) -> list[Interval]:
        return self.intervals.setdefault(epoch, [])

    def remember(self, b: BatchView) -> None:
        """Record a stored data batch in the sequence history (merging consecutive runs)."""
        runs = self.history(b.producer_epoch)
        if runs and runs[-1].hi != INT32_MAX and b.base_sequence == runs[-1].hi + 1 and \
                not overlaps(runs[:-1], b.base_sequence, b.last_sequence):
            runs[-1].hi = b.last_sequence
            runs[-1].last_offset = b.last_offset
        else:
            runs.append(Interval(b.base_sequence, b.last_sequence, b.base_offset, b.last_offset, b))
            if len(runs) > MAX_INTERVALS:
                del runs[0]

    def dirty(self) -> bool:
        """True when a stored range lies ahead of the current sequence: a later batch may
        overlap it, so this producer's batches take the checked path."""
        if self.open_fenced is not None:
            return True
        runs = self.intervals.get(self.epoch)
        if not runs or len(runs) < 2:
            return False
        return any(r.hi > self.last_seq for r in runs[:-1])

    def note(self, line: str, keep: int = 4) -> None:
        self.recent.append(line)
        if len(self.recent) > keep:
            del self.recent[0]


def overlaps(runs: list[Interval], lo: int, hi: int) -> list[Interval]:
    return [r for r in runs if r.lo <= hi and lo <= r.hi]
