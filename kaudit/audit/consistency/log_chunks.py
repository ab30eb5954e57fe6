"""Cheap per-chunk helpers for the disk folds that read every batch of a log (state_files.py,
replicas.py). A decoded chunk is one file of one replica of a partition, and wherever an engine
feeds a fold several files at once (Spark), each file's rows are contiguous: so a column whose
first and last values are equal holds one value, and the per-row string comparisons a generic
filter makes are needed only when they differ."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Fold, KeyedState


def same_ends(col) -> bool:
    """First and last value equal (and not null): the column holds one value, files being
    contiguous runs."""
    n = len(col)
    if n == 0:
        return False
    a, b = col[0].as_py(), col[n - 1].as_py()
    return a is not None and a == b


def log_batches(t: pa.Table):
    """Batches of `.log` segments - not the wire's, not a KRaft snapshot's `.checkpoint` (its
    batches number their offsets from 0)."""
    kind, src = t.column("source_kind"), t.column("source")
    if same_ends(kind) and same_ends(src):
        keep = kind[0].as_py() == "log" and not src[0].as_py().endswith(".checkpoint")
        return pa.array(np.full(t.num_rows, keep))
    return pc.and_(pc.equal(kind, "log"), pc.invert(pc.ends_with(src, ".checkpoint")))


def whole_chunk(t: pa.Table) -> bool | None:
    """For a batch chunk of one file: True when all of it is `log_batches`, False when none is;
    None when the chunk holds several files (the per-row filter decides)."""
    kind, src = t.column("source_kind"), t.column("source")
    if same_ends(kind) and same_ends(src):
        return kind[0].as_py() == "log" and not src[0].as_py().endswith(".checkpoint")
    return None


class LogFold(Fold):
    """A fold whose batch selection is `log_batches`, decided once per chunk of one file."""

    def select(self, kind: str, table: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table | None:
        if kind == "batch" and table.num_rows:
            whole = whole_chunk(table)
            if whole is not None:
                return table.select(list(self.inputs[kind]) + list(extra)) if whole else None
        return super().select(kind, table, extra)


class OneKeyState(KeyedState):
    """KeyedState whose tables hold one key as a rule: checked on their ends, split otherwise."""

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        if table.num_rows and all(same_ends(table.column(k)) for k in self.key_cols):
            return self.feed_key(kind, tuple(table.column(c)[0].as_py() for c in self.key_cols), table)
        return super().feed(kind, table)


class TablesByKind:
    """A fold group that needs all of its key's rows at once (cross-replica, cross-response):
    it keeps their tables by kind and judges them in `finish`."""

    def __init__(self):
        self.tables: dict[str, list[pa.Table]] = {}

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        self.tables.setdefault(kind, []).append(t)
        return []

    def concat(self, kind: str) -> pa.Table | None:
        ts = self.tables.get(kind)
        return pa.concat_tables(ts) if ts else None
