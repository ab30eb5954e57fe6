"""The replicas fold's rows (replicas.py holds the fold): what a chunk of batches keeps, and each
replica's facts once all its rows are in.

A chunk of a partition that has replicas in several log dirs keeps a row per batch (a few
columns, its path dictionary-encoded); a chunk of a partition with one replica in the inputs
becomes one row spanning it (`batches` counts them, `detail` is false): the checkpoint checks
only need each replica's offset range, segments and compaction marks, and a single replica has
nothing to be compared with - so a log of millions of batches costs a row per chunk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import np_col

DETAIL_COLUMNS = ("replica", "topic", "partition", "source", "position", "base_offset", "last_offset", "crc",
                  "crc_ok", "magic", "producer_id", "producer_epoch", "base_sequence", "is_transactional",
                  "is_control", "control_type", "partition_leader_epoch", "has_delete_horizon")
BATCHES, DH_LAST, DETAIL, CLUSTER = "batches", "dh_last", "detail", "cluster"


def lean(t: pa.Table, detail: bool, clusters: dict | None = None) -> pa.Table:
    """One chunk's selection (one file of one replica of a partition): per batch, or the two
    batches that bound its offsets; tagged with its log dir's cluster id."""
    cluster = (clusters or {}).get(t.column("log_dir")[0].as_py()) if "log_dir" in t.schema.names else None
    base = np_col(t, "base_offset", -1, np.int64)
    last = np_col(t, "last_offset", -1, np.int64)
    if detail:
        rows, n = t, t.num_rows
        dh = np_col(t, "has_delete_horizon", False, bool)
        dh_last = pa.array(np.where(dh, last, -1))
        batches = pa.array(np.ones(n, np.int32))
    else:
        # the checkpoint checks need a replica's offset range and segments: the batches with the
        # lowest base and the highest last offset (one take, no per-batch rows kept)
        # `take` copies: a slice would keep the whole chunk's buffers alive in the buffered rows
        rows, n = t.select(list(DETAIL_COLUMNS)).take(pa.array([int(base.argmin()), int(last.argmax())])), 2
        dh = np_col(t, "has_delete_horizon", False, bool)
        top = int(last[dh].max()) if dh.any() else -1
        dh_last = pa.array([top, top], pa.int64())
        batches = pa.array([t.num_rows, 0], pa.int32())
    arrays = [rows.column(c) for c in DETAIL_COLUMNS]
    arrays[3] = pc.dictionary_encode(arrays[3])
    arrays += [batches, dh_last, pa.array(np.full(n, detail)), pa.array([cluster] * n, pa.string())]
    return pa.Table.from_arrays(arrays, names=list(DETAIL_COLUMNS) + [BATCHES, DH_LAST, DETAIL, CLUSTER])


def split_keys(t: pa.Table):
    """(detail key, slice) runs of a chunk by (topic, partition): one in practice."""
    from kaudit.audit.consistency.log_chunks import same_ends

    if same_ends(t.column("topic")) and same_ends(t.column("partition")):
        yield (t.column("topic")[0].as_py(), t.column("partition")[0].as_py()), t
        return
    from kaudit.audit.folds import split_by_key

    for k, part in split_by_key(t, ("topic", "partition")):
        yield k, part


def segment_base(path: str | None) -> int | None:
    name = os.path.basename(path or "")
    return int(name[:20]) if len(name) > 20 and name[:20].isdigit() else None


@dataclass
class Replica:
    """What one replica of a partition shows: its checkpoints, extent and (detail) batches."""

    name: str
    hw: int | None = None            # replication-offset-checkpoint (high watermark)
    recovery: int | None = None      # recovery-point-offset-checkpoint
    log_start_ckpt: int | None = None
    cleaner: int | None = None       # cleaner-offset-checkpoint: the cleaned part ends there
    checkpoint_ev: dict = field(default_factory=dict)   # checkpoint -> (source, position)
    rows: pa.Table | None = None     # its batch rows, by base offset
    present: bool = False
    cluster: str | None = None

    @property
    def has_batches(self) -> bool:
        return self.rows is not None and self.rows.num_rows > 0

    def arrays(self) -> None:
        t = self.rows
        self.base = np_col(t, "base_offset", -1, np.int64)
        self.last = np_col(t, "last_offset", -1, np.int64)
        self.ok = np_col(t, "crc_ok", True, bool)
        self.detail = bool(np_col(t, DETAIL, False, bool).all())
        known = [c for c in t.column(CLUSTER).unique().to_pylist() if c is not None]
        self.cluster = known[0] if known else None
        seg = [segment_base(s) for s in pc.unique(t.column("source").cast(pa.string())).to_pylist()]
        self.segments = sorted(s for s in seg if s is not None)
        dh = np_col(t, DH_LAST, -1, np.int64)
        # the part its cleaner may have rewritten or removed batches from
        self.cleaned = max(self.cleaner or 0, int(dh.max()) + 1 if dh.size else 0)

    @property
    def log_end(self) -> int:
        """The log end offset as the files show it (a lower bound when the tail is unreadable)."""
        ends = [int(self.last.max()) + 1] if self.base.size else []
        ends += self.segments[-1:] + ([self.cleaner] if self.cleaner is not None else [])
        return max(ends) if ends else 0

    @property
    def log_start(self) -> int:
        first = self.segments[0] if self.segments else (int(self.base.min()) if self.base.size else 0)
        return max(first, self.log_start_ckpt or 0)

    def held(self) -> list[list[int]]:
        """The offsets it holds in valid batches, as merged [first, last] ranges."""
        out: list[list[int]] = []
        for b, e in zip(self.base[self.ok].tolist(), self.last[self.ok].tolist()):
            if out and b <= out[-1][1] + 1:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([b, e])
        return out
