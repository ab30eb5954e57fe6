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

from kaudit.audit.folds import Fold, KeyedState, np_col
from kaudit.audit.registry import evidence, finding, rule

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
            return f"timestamp {entry['timestamp_ms']} is later than the segment's largest {seg['max_ts']}"
        return None
    if entry["offset"] > seg["last"]:
        return f"offset {entry['offset']} is beyond the segment's last offset {seg['last']}"
    return None


def _segment_of(path: str) -> str:
    return os.path.splitext(path)[0]


class IndexGroup:
    def __init__(self, key: tuple):
        self.replica, self.topic, self.partition = key
        self.segments: dict[str, dict] = {}     # segment path stem -> first/last offset, max ts
        self.pending: dict[str, list[dict]] = {}  # offset-index entries waiting for their log
        self.time_entries: list[dict] = []
        self.out: list[dict] = []
        self.reported: dict[str, int] = {}

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        if kind == "index_entry":
            for r in t.to_pylist():
                if r["index_type"] == "offset":
                    waiting = self.pending.setdefault(_segment_of(r["source"]), [])
                    if waiting and (r["offset"] <= waiting[-1]["offset"]
                                    or r["file_position"] <= waiting[-1]["file_position"]):
                        self._report(r, f"goes back from (offset {waiting[-1]['offset']}, position "
                                        f"{waiting[-1]['file_position']})")
                        continue
                    waiting.append(r)
                else:
                    self.time_entries.append(r)
        else:
            self._batches(t)
        out, self.out = self.out, []
        return out

    def _batches(self, t: pa.Table) -> None:
        enc = pc.dictionary_encode(t.column("source")).combine_chunks()
        idx = np.asarray(enc.indices)
        pos = np_col(t, "position", -1, np.int64)
        base = np_col(t, "base_offset", -1, np.int64)
        last = np_col(t, "last_offset", -1, np.int64)
        mts = np_col(t, "max_timestamp_ms", -1, np.int64)
        for k, src in enumerate(enc.dictionary.to_pylist()):
            m = idx == k
            stem = _segment_of(src)
            s = self.segments.setdefault(stem, {"first": int(base[m].min()), "last": -1, "max_ts": None})
            s["first"] = min(s["first"], int(base[m].min()))
            s["last"] = max(s["last"], int(last[m].max()))
            ts = int(mts[m].max())
            s["max_ts"] = ts if s["max_ts"] is None else max(s["max_ts"], ts)
            waiting = self.pending.get(stem)
            if not waiting:
                continue
            p, b = pos[m], base[m]
            keep = []
            for e in waiting:
                j = int(np.searchsorted(p, e["file_position"]))
                if j < p.size and p[j] == e["file_position"]:
                    if b[j] > e["offset"]:
                        self._report(e, f"points at position {e['file_position']}, a batch starting at "
                                        f"offset {int(b[j])}, after the entry's offset {e['offset']}")
                elif p.size and e["file_position"] <= p[-1]:
                    self._report(e, f"position {e['file_position']} is not the start of a batch")
                else:
                    keep.append(e)  # beyond this chunk: a later chunk of the same log
            self.pending[stem] = keep

    def _report(self, e: dict, why: str) -> None:
        n = self.reported.get(e["source"], 0)
        self.reported[e["source"]] = n + 1
        if n >= MAX_FINDINGS_PER_FILE:
            return
        what = (f"offset index entry (offset {e['offset']}, position {e['file_position']})"
                if e["index_type"] == "offset" else
                f"time index entry (timestamp {e['timestamp_ms']}, offset {e['offset']})")
        self.out.append(finding(
            "index-mismatch", f"{self.topic}-{self.partition} (replica {self.replica}): "
            f"{os.path.basename(e['source'])}: {what}: {why}",
            evidence=[evidence(e["source"], e["position"], "index")],
            topic=self.topic, partition=self.partition, replica=self.replica,
            first_offset=e["offset"], last_offset=e["offset"]))

    def finish(self) -> list[dict]:
        for stem, entries in self.pending.items():
            seg = self.segments.get(stem)
            for e in entries:
                if seg is None:
                    self._report(e, "its segment's .log holds no batches")
                else:
                    self._report(e, f"position {e['file_position']} is beyond the segment's last batch")
        prev: dict[str, tuple] = {}
        for e in self.time_entries:
            seg = self.segments.get(_segment_of(e["source"]))
            why = index_mismatch(e, seg)
            p = prev.get(e["source"])
            if why is None and p is not None and (e["timestamp_ms"] < p[0] or e["offset"] < p[1]):
                why = f"goes back from (timestamp {p[0]}, offset {p[1]})"
            if why:
                self._report(e, why)
            else:
                prev[e["source"]] = (e["timestamp_ms"], e["offset"])
        out, self.out = self.out, []
        for src, n in self.reported.items():
            if n > MAX_FINDINGS_PER_FILE:
                out.append(finding(
                    "index-mismatch", f"{self.topic}-{self.partition} (replica {self.replica}): "
                    f"{os.path.basename(src)}: {n - MAX_FINDINGS_PER_FILE} more mismatching entries",
                    evidence=[evidence(src, None, "index")], topic=self.topic,
                    partition=self.partition, replica=self.replica))
        return out


def _log_batches(t: pa.Table):
    return pc.equal(t.column("source_kind"), "log")


FOLD = Fold("disk-indexes", {"batch": BATCH_COLUMNS, "index_entry": INDEX_COLUMNS}, KEY, ORDER,
            lambda ctx: KeyedState(KEY, IndexGroup), where={"batch": _log_batches})
