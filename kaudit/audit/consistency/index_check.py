"""`index-mismatch`: a segment's `.index` and `.timeindex` checked against the batches of its `.log`,
per replica of a partition, streaming. Files arrive in name order, so a segment's offset index
comes before its log (entries wait, sorted by position, and are matched against each chunk of
batch positions) and its time index after it (checked against the segment's offset and
timestamp range)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Fold, KeyedState, constant, np_col
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.segment_files import is_log, log_sources, stem as segment_stem
from kaudit.timefmt import iso_ms

KEY = ("replica", "topic", "partition")
ORDER = ("source", "position")
BATCH_COLUMNS = KEY + ORDER + ("base_offset", "last_offset", "max_timestamp_ms")
INDEX_COLUMNS = KEY + ORDER + ("index_type", "segment_base_offset", "offset", "file_position", "timestamp_ms")
MAX_FINDINGS_PER_FILE = 20


@rule("index-mismatch", "warning", "disk", "an index entry that does not match its segment",
      "Lookups by offset or time on this segment return wrong positions (consumers may skip or "
      "re-read data). Stop the broker, delete the segment's .index/.timeindex files (keep a copy) "
      "and let it rebuild them on start (Kafka rebuilds missing indexes: LogSegment.recover).")
def index_mismatch(entry: dict, seg: dict | None) -> str | None:
    """Invariant: an offset index entry (offset, position) points at the start of a batch of its
    segment whose base offset is at most the entry's offset, which is at most the segment's last
    offset; entries increase in offset and position (kafka.log.OffsetIndex, LogSegment.append
    indexes the last offset of an append and the position where it starts). A time index entry
    (timestamp, offset) names an offset inside the segment and a timestamp no later than the
    segment's largest timestamp; entries never decrease (kafka.log.TimeIndex).
    Benign causes: none in a closed segment; the broker rebuilds indexes it finds corrupt after
    an unclean shutdown (LogSegment.sanityCheck), so a mismatch on the active segment of a
    crashed broker is repaired on restart."""
    if seg is None:
        return "its segment's .log holds no batches"
    if entry["index_type"] == "time":
        if not seg["first"] <= entry["offset"] <= seg["last"]:
            return f"offset {entry['offset']} is outside the segment's offsets {seg['first']}-{seg['last']}"
        if seg["max_ts"] is not None and entry["timestamp_ms"] > seg["max_ts"]:
            return (f"timestamp {iso_ms(entry['timestamp_ms'])} is later than the segment's largest "
                    f"{iso_ms(seg['max_ts'])}")
        return None
    if entry["offset"] > seg["last"]:
        return f"offset {entry['offset']} is beyond the segment's last offset {seg['last']}"
    return None


def _segment_of(path: str) -> str:
    return segment_stem(path)


class _Entries:
    """One index file's entries as numpy arrays (no per-entry Python objects)."""

    def __init__(self, tables: list[pa.Table]):
        t = pa.concat_tables(tables)
        self.source = t.column("source")[0].as_py()
        self.position = np_col(t, "position", -1, np.int64)
        self.offset = np_col(t, "offset", -1, np.int64)
        self.file_position = np_col(t, "file_position", -1, np.int64)
        self.timestamp = np_col(t, "timestamp_ms", -1, np.int64)
        self.start = 0

    def entry(self, i: int, index_type: str) -> dict:
        return {"source": self.source, "position": int(self.position[i]), "index_type": index_type,
                "offset": int(self.offset[i]), "file_position": int(self.file_position[i]),
                "timestamp_ms": int(self.timestamp[i])}


def _backwards(a: np.ndarray, b: np.ndarray, strict: bool) -> np.ndarray:
    """Rows where (a, b) go back from the previous row (both must increase; strictly for offsets)."""
    bad = np.zeros(a.size, dtype=bool)
    if a.size > 1:
        if strict:
            bad[1:] = (a[1:] <= a[:-1]) | (b[1:] <= b[:-1])
        else:
            bad[1:] = (a[1:] < a[:-1]) | (b[1:] < b[:-1])
    return bad


class IndexGroup:
    def __init__(self, key: tuple):
        self.replica, self.topic, self.partition = key
        self.segments: dict[str, dict] = {}          # segment path stem -> first/last offset, max ts
        self.offset_tables: dict[str, list] = {}     # stem -> offset-index tables not yet used
        self.offsets: dict[str, _Entries] = {}       # stem -> offset index entries being matched
        self.time_tables: dict[str, list] = {}       # stem -> time-index tables (checked at the end)
        self.out: list[dict] = []
        self.reported: dict[str, int] = {}
        self.cut: set[str] = set()                   # stems whose .log ends mid-batch or in zeros
        self.past_end: list[tuple] = []              # (stem, entry, why): entries past the .log's end

    def _past_end(self, stem: str, entry: dict, why: str) -> None:
        """An entry naming data past its .log's end: a loss when the .log was cut or a later
        segment exists (missing-offsets, truncated-tail tell it, with the range), else reported."""
        self.past_end.append((stem, entry, why))

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        if kind == "decode_issue":
            for src, issue in zip(t.column("source").to_pylist(), t.column("issue").to_pylist()):
                if issue in ("truncated-tail", "zero-fill") and is_log(src):
                    self.cut.add(_segment_of(src))
            return []
        if kind == "index_entry":
            for (src, typ), part in _by_source_and_type(t):
                stem = _segment_of(src)
                if typ == "time" and stem in self.segments:
                    self._check_time(stem, [part])  # its log came first (name order): check now
                    continue
                target = self.offset_tables if typ == "offset" else self.time_tables
                target.setdefault(stem, []).append(part)
        else:
            self._batches(t)
        out, self.out = self.out, []
        return out

    def _offset_entries(self, stem: str) -> _Entries | None:
        tables = self.offset_tables.pop(stem, None)
        if tables:
            e = _Entries(tables)
            bad = _backwards(e.offset, e.file_position, strict=True)
            for i in np.flatnonzero(bad).tolist():
                self._report(e.entry(i, "offset"), f"goes back from (offset {int(e.offset[i - 1])}, "
                                                   f"position {int(e.file_position[i - 1])})")
            keep = ~bad
            e.offset, e.file_position, e.position, e.timestamp = (
                e.offset[keep], e.file_position[keep], e.position[keep], e.timestamp[keep])
            self.offsets[stem] = e
        return self.offsets.get(stem)

    def _batches(self, t: pa.Table) -> None:
        one, src0 = constant(t.column("source"))
        if one:
            idx, names = None, [src0]
        else:
            enc = pc.dictionary_encode(t.column("source")).combine_chunks()
            idx, names = np.asarray(enc.indices), enc.dictionary.to_pylist()
        pos = np_col(t, "position", -1, np.int64)
        base = np_col(t, "base_offset", -1, np.int64)
        last = np_col(t, "last_offset", -1, np.int64)
        mts = np_col(t, "max_timestamp_ms", -1, np.int64)
        for k, src in enumerate(names):
            m = idx == k if len(names) > 1 else slice(None)
            stem = _segment_of(src)
            p, b = pos[m], base[m]
            s = self.segments.setdefault(stem, {"first": int(b.min()), "last": -1, "max_ts": None})
            s["first"] = min(s["first"], int(b.min()))
            s["last"] = max(s["last"], int(last[m].max()))
            ts = int(mts[m].max())
            s["max_ts"] = ts if s["max_ts"] is None else max(s["max_ts"], ts)
            e = self._offset_entries(stem)
            if e is None or e.start >= e.offset.size:
                continue
            lo = e.start
            hi = int(np.searchsorted(e.file_position, p[-1], side="right"))
            if hi <= lo:
                continue
            fp, off = e.file_position[lo:hi], e.offset[lo:hi]
            j = np.minimum(np.searchsorted(p, fp), p.size - 1)
            found = p[j] == fp
            late = found & (b[j] > off)
            for i in np.flatnonzero(~found | late).tolist():
                entry = e.entry(lo + i, "offset")
                if found[i]:
                    self._report(entry, f"points at position {entry['file_position']}, a batch starting "
                                        f"at offset {int(b[j[i]])}, after the entry's offset {entry['offset']}")
                else:
                    self._report(entry, f"position {entry['file_position']} is not the start of a batch")
            e.start = hi

    def _check_time(self, stem: str, tables: list) -> None:
        e = _Entries(tables)
        seg = self.segments.get(stem)
        if seg is None:
            bad = np.ones(e.offset.size, dtype=bool)
        else:
            bad = (e.offset < seg["first"]) | (e.offset > seg["last"])
            if seg["max_ts"] is not None:
                bad |= e.timestamp > seg["max_ts"]
        if seg is None:
            return   # no batches: a lost .log (missing-offsets) or an unreadable one (corrupt-batch)
        for i in np.flatnonzero(bad).tolist():
            entry = e.entry(i, "time")
            why = index_mismatch(entry, seg) or "out of range"
            if entry["offset"] > seg["last"]:
                self._past_end(stem, entry, why)
            else:
                self._report(entry, why)
        good = np.flatnonzero(~bad)
        back = _backwards(e.timestamp[good], e.offset[good], strict=False)
        for k in np.flatnonzero(back).tolist():
            i, prev = good[k], good[k - 1]
            self._report(e.entry(int(i), "time"), f"goes back from (timestamp {int(e.timestamp[prev])}, "
                                                  f"offset {int(e.offset[prev])})")

    def _report(self, e: dict, why: str) -> None:
        n = self.reported.get(e["source"], 0)
        self.reported[e["source"]] = n + 1
        if n >= MAX_FINDINGS_PER_FILE:
            return
        what = (f"offset index entry (offset {e['offset']}, position {e['file_position']})"
                if e["index_type"] == "offset" else
                f"time index entry (timestamp {iso_ms(e['timestamp_ms'])}, offset {e['offset']})")
        self.out.append(finding(
            "index-mismatch", f"{self.topic}-{self.partition} (replica {self.replica}): "
            f"{os.path.basename(e['source'])}: {what}: {why}",
            evidence=[evidence(e["source"], e["position"], "index")],
            topic=self.topic, partition=self.partition, replica=self.replica,
            first_offset=e["offset"], last_offset=e["offset"]))

    def finish(self) -> list[dict]:
        for stem in list(self.offset_tables):
            self._offset_entries(stem)
        for stem, e in self.offsets.items():
            if self.segments.get(stem) is None:
                continue   # no batches: a lost .log (missing-offsets) or an unreadable one (corrupt-batch)
            for i in range(e.start, e.offset.size):
                entry = e.entry(i, "offset")
                self._past_end(stem, entry, f"position {entry['file_position']} is beyond the segment's last batch")
        for stem, tables in self.time_tables.items():
            self._check_time(stem, tables)
        for stem, entry, why in self.past_end:
            later = min((seg["first"] for st, seg in self.segments.items() if st > stem), default=None)
            lost = (stem in self.cut or later is not None) and (later is None or entry["offset"] < later)
            if not lost:
                self._report(entry, why)
        out, self.out = self.out, []
        for src, n in self.reported.items():
            if n > MAX_FINDINGS_PER_FILE:
                out.append(finding(
                    "index-mismatch", f"{self.topic}-{self.partition} (replica {self.replica}): "
                    f"{os.path.basename(src)}: {n - MAX_FINDINGS_PER_FILE} more mismatching entries",
                    evidence=[evidence(src, None, "index")], topic=self.topic,
                    partition=self.partition, replica=self.replica))
        return out


def _by_source_and_type(t: pa.Table):
    """(source, index_type) runs of an index_entry table (one file's entries are contiguous)."""
    src = t.column("source")
    typ = t.column("index_type")
    n = t.num_rows
    if pc.count_distinct(src).as_py() == 1 and pc.count_distinct(typ).as_py() == 1:
        yield (src[0].as_py(), typ[0].as_py()), t
        return
    keys = list(zip(src.to_pylist(), typ.to_pylist()))
    start = 0
    for i in range(1, n + 1):
        if i == n or keys[i] != keys[start]:
            yield keys[start], t.slice(start, i - start)
            start = i


def _log_batches(t: pa.Table):
    return pc.equal(t.column("source_kind"), "log")


def _log_issues(t: pa.Table):
    return pc.and_(pc.is_null(t.column("connection")), log_sources(t.column("source")))


FOLD = Fold("disk-indexes", {"batch": BATCH_COLUMNS, "index_entry": INDEX_COLUMNS,
                             "decode_issue": KEY + ORDER + ("issue",)}, KEY, ORDER,
            lambda ctx: KeyedState(KEY, IndexGroup), where={"batch": _log_batches, "decode_issue": _log_issues})
