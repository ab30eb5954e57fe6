"""wire_acked's comparison of the fetched batches with the acknowledged writes they overlap,
column-wise: the pairs a fetched batch meets (wire_acked._refetched's reference loop: the writes
acknowledged before it was requested, at overlapping offsets, of the same topic incarnation) and
`same_columns`, acked_writes.same_write over every pair at once. Python is left only the pairs
that say something: a loss (a lazy `Fetched`: a Batch, and its row a dict, only where a finding
names it) or a read of the write itself.

Both share tests/audit/wire/test_wire_acked.py (every case run both ways) and
tests/audit/wire/test_acked_pairs.py (same_columns against same_write on generated batches).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import np_col
from kaudit.audit.producers import acked_writes as A

BLOCK_PAIRS = 200_000    # candidate pairs compared at once (~30 arrays of that many)
MAX_PAIRS = 2_000_000    # one fetched batch meeting more writes: the reference loop


def same_columns(a: dict, x: dict, stored: bool = True) -> np.ndarray:
    """A.same_write(a_k, x_k, stored) of each pair k: 1 True, 0 False, -1 None. Each side:
    int64 arrays lo, hi, pid, epoch, seq, magic, count, crc, content, codec (0: none) and bool
    arrays has_crc, has_content."""
    span_eq = (a["lo"] == x["lo"]) & (a["hi"] == x["hi"])
    eq5 = span_eq & (a["pid"] == x["pid"]) & (a["epoch"] == x["epoch"]) & (a["seq"] == x["seq"])
    unknown = (((a["codec"] != 0) & (x["codec"] != 0) & (a["codec"] != x["codec"]))
               | ~a["has_content"] | ~x["has_content"])
    plain = np.where(a["has_crc"] & x["has_crc"] & (a["crc"] == x["crc"]), 1,
                     np.where(unknown, -1, (a["content"] == x["content"]).astype(np.int8)))
    plain = np.where(a["count"] != x["count"], np.where(stored & (x["count"] < a["count"]), -1, 0), plain)
    plain = np.where(span_eq, plain, 0)
    out = np.where((a["pid"] >= 0) | (x["pid"] >= 0), eq5.astype(np.int8), plain)
    return np.where((a["magic"] < 2) | (x["magic"] < 2), -1, out).astype(np.int8)


class Codes:
    """Small ints for values compared only for equality: 0 for None (and for '' with `falsy`:
    a codec is compared only where both have one; a topic id where neither is None)."""

    def __init__(self, falsy: bool):
        self.of: dict = {}
        self.falsy = falsy

    def __call__(self, values) -> np.ndarray:
        of = self.of
        if self.falsy:
            return np.fromiter((of.setdefault(v, len(of) + 1) if v else 0 for v in values), np.int64)
        return np.fromiter((0 if v is None else of.setdefault(v, len(of) + 1) for v in values), np.int64)


def _opt(values) -> tuple[np.ndarray, np.ndarray]:
    has = np.fromiter((v is not None for v in values), bool)
    return np.fromiter((0 if v is None else v for v in values), np.int64), has


def acked_columns(order: list[A.Batch], codes: Codes, topics: Codes) -> dict:
    crc, has_crc = _opt([w.row.get("crc") for w in order])
    content, has_content = _opt([w.content for w in order])
    ts = [w.row.get("response_ts") for w in order]
    return {"lo": np.fromiter((w.lo for w in order), np.int64), "hi": np.fromiter((w.hi for w in order), np.int64),
            "pid": np.fromiter((w.pid for w in order), np.int64),
            "epoch": np.fromiter((w.epoch for w in order), np.int64),
            "seq": np.fromiter((w.seq for w in order), np.int64),
            "magic": np.fromiter((w.magic for w in order), np.int64),
            "count": np.fromiter((w.count for w in order), np.int64), "crc": crc, "has_crc": has_crc,
            "content": content, "has_content": has_content, "codec": codes(w.codec for w in order),
            "topic": topics(w.row.get("topic_id") for w in order),
            "ts": np.array([np.nan if v is None else v for v in ts], dtype=np.float64)}


def fetched_columns(t: pa.Table, sums: list, codes: Codes, topics: Codes) -> dict:
    """A.batch_of(row, row's base offset, its content) of each fetched row, as columns."""
    lo = np_col(t, "base_offset", 0, np.int64)
    both = ~(t.column("base_offset").is_null().to_numpy(zero_copy_only=False)
             | t.column("last_offset").is_null().to_numpy(zero_copy_only=False))
    count = np_col(t, "record_count", 0, np.int64)
    span = np.where(both, np_col(t, "last_offset", 0, np.int64) - lo, np.maximum(np.where(count == 0, 1, count) - 1, 0))
    crc, has_crc = _opt(t.column("crc").to_pylist())
    content, has_content = _opt(sums)
    return {"lo": lo, "hi": lo + np.maximum(span, 0), "pid": np_col(t, "producer_id", -1, np.int64),
            "epoch": np_col(t, "producer_epoch", -1, np.int64), "seq": np_col(t, "base_sequence", -1, np.int64),
            "magic": np_col(t, "magic", 2, np.int64), "count": count, "crc": crc, "has_crc": has_crc,
            "content": content, "has_content": has_content, "codec": codes(t.column("codec").to_pylist()),
            "topic": topics(t.column("topic_id").to_pylist()),
            "asked": np_col(t, "request_ts", np.nan, np.float64)}


def spans(a: dict, x: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per fetched row: the first acknowledged write (by offset) the reference loop looks at, and
    how many it looks at."""
    los = a["lo"]
    span = int((a["hi"] - los).max(initial=0))
    i = np.searchsorted(los, x["lo"] - span, side="left")
    return i, np.maximum(np.searchsorted(los, x["hi"], side="right") - i, 0)


def blocks(n: np.ndarray, size: int | None = None) -> list[tuple[int, int]] | None:
    """Consecutive runs of fetched rows of about `size` (BLOCK_PAIRS) candidate pairs each (the
    pair arrays stay small); None where one row alone has more than MAX_PAIRS."""
    size = BLOCK_PAIRS if size is None else size
    if n.size and int(n.max()) > MAX_PAIRS:
        return None
    ends = np.cumsum(n)
    out, start = [], 0
    while start < n.size:
        base = int(ends[start - 1]) if start else 0
        stop = max(int(np.searchsorted(ends, base + size, side="right")), start + 1)
        out.append((start, min(stop, n.size)))
        start = out[-1][1]
    return out


def pairs(a: dict, x: dict, i: np.ndarray, n: np.ndarray, rows: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(fetched row, acknowledged write) index pairs of the fetched rows [rows), in order and each
    one's writes by offset (the reference loop's order), kept where the loop compares them."""
    lo, hi = rows
    n = n[lo:hi]
    total = int(n.sum())
    fi = np.repeat(np.arange(lo, hi), n)
    wi = i[fi] + (np.arange(total) - np.repeat(np.cumsum(n) - n, n))
    keep = (a["lo"][wi] <= x["hi"][fi]) & (x["lo"][fi] <= a["hi"][wi])
    ta, tx = a["topic"][wi], x["topic"][fi]
    keep &= (ta == 0) | (tx == 0) | (ta == tx)
    asked, ts = x["asked"][fi], a["ts"][wi]
    keep &= ~np.isnan(asked) & ~np.isnan(ts) & (asked > ts)
    return fi[keep], wi[keep]


def compared(a: dict, x: dict, fi: np.ndarray, wi: np.ndarray) -> np.ndarray:
    """same_columns of the pairs (fi, wi)."""
    return same_columns({k: v[wi] for k, v in a.items()}, {k: v[fi] for k, v in x.items()})


class FetchedRows:
    """The fetched rows as wire_acked's reference makes them (the columns read, and `content`),
    made dicts one at a time from columns made lists once."""

    def __init__(self, t: pa.Table, sums: list, columns):
        self.t, self.sums, self.columns = t, sums, [c for c in t.column_names if c in columns]
        self.lists: dict | None = None
        self.batches: dict[int, A.Batch] = {}

    def row(self, i: int) -> dict:
        if self.lists is None:
            self.lists = {c: self.t.column(c).to_pylist() for c in self.columns}
        r = {c: v[i] for c, v in self.lists.items()}
        r["content"] = self.sums[i]
        return r

    def batch(self, i: int) -> A.Batch:
        b = self.batches.get(i)
        if b is None:
            r = self.row(i)
            b = self.batches[i] = A.batch_of(r, r["base_offset"], r.get("content"))
        return b


class Fetched:
    """A fetched batch that replaced an acknowledged write: its Batch made when first read."""

    __slots__ = ("rows", "i")

    def __init__(self, rows: FetchedRows, i: int):
        self.rows, self.i = rows, i

    def __getattr__(self, name):
        return getattr(self.rows.batch(self.i), name)


def data_and_markers(t: pa.Table) -> tuple[pa.Table, list[dict]]:
    """The fetched data batches (a table) and the COMMIT markers (rows)."""
    control = pc.fill_null(t.column("is_control"), False)
    commit = pc.and_(control, pc.fill_null(pc.equal(t.column("control_type"), "COMMIT"), False))
    return t.filter(pc.invert(control)), t.filter(commit).to_pylist()
