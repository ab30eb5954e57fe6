"""`missing-offsets`: offsets a replica's log lost - a segment whose `.log` is gone while its
indexes remain, a closed segment cut short, a gap between two segments - each with the offset
range lost and the byte positions that show it. One fold per replica of a partition, streaming:
its files arrive in name order (a segment's `.index`, `.log`, `.timeindex` together).

What is judged, per segment (its base offset is its file name's):
- its offsets: the first and last batch offsets of its `.log`, the end of its last batch, and
  whether offsets are missing between its own batches (only the log cleaner removes those);
- its indexes: the largest offset and file position they name;
- its `.log`'s cut (a `truncated-tail` or zero-filled tail) or corrupt region.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Fold, KeyedState, constant, np_col
from kaudit.audit.consistency.log_chunks import log_batches
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.segment_files import is_log, log_sources, stem as segment_stem

KEY = ("replica", "topic", "partition")
ORDER = ("source", "position")
BATCH_COLUMNS = KEY + ORDER + ("base_offset", "last_offset", "batch_size", "crc_ok", "has_delete_horizon", "magic",
                               "record_count")
INDEX_COLUMNS = KEY + ORDER + ("index_type", "segment_base_offset", "offset", "file_position")
ISSUE_COLUMNS = KEY + ORDER + ("issue", "length", "message")
EPOCH_COLUMNS = KEY + ORDER + ("leader_epoch", "start_offset")
SEGMENT_LOG = re.compile(r"^\d{20}(-\d+)?\.log$")
SNAPSHOT = re.compile(r"^(\d{20})\.snapshot$")
# Kafka renames a segment's files while deleting (retention) or replacing (compaction) it: a copy
# taken meanwhile holds its .log under one of these names (LogLoader completes a swap on start).
# Looked up beside the segment's indexes (the plan lists such files as skipped, not as rows a
# streamed fold is given).
RENAMED = (".deleted", ".cleaned", ".swap")
# Kafka's own compacted topics (cleanup.policy=compact, always)
COMPACTED_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
CUT_ISSUES = ("truncated-tail", "truncated", "zero-fill")
# a remote (tiered) segment's files merged into a replica's log (sources.remote): <offset>-<segment id>
REMOTE_STEM = re.compile(r"^\d{1,19}-[A-Za-z0-9_-]{22}$")


@rule("missing-offsets", "error", "disk",
      "offsets missing from a partition's log (a lost .log, a segment cut short, a gap between segments)",
      "The records at these offsets are gone from this replica: Kafka neither notices nor repairs it "
      "(a broker deletes index files without their .log at start-up, and a fetch at a missing offset "
      "returns the next batch, so consumers skip them silently). Keep a copy of the partition dir; if "
      "another replica holds the offsets (see replica-divergence), move this replica's partition dir "
      "aside and let the broker re-replicate it; otherwise restore the segment from a backup. Check "
      "how the log dir was copied and the disk (SMART, dmesg).")
def missing_offsets(last: int, next_base: int, compacted: bool, index_past: bool) -> bool:
    """Invariant: a partition's log is contiguous in offsets. Kafka names each segment after the
    offset of the first batch appended to it, and rolls a new segment at the log end offset
    (UnifiedLog.roll: max(expected next offset, log end offset)), so segment N+1's base offset is
    segment N's last offset + 1, and every batch of a segment lies in [its base, the next base).
    Transaction markers take offsets of their own (they leave no hole); only the log cleaner
    (compacted topics; it also removes aborted transactions' data there) removes batches, leaving
    offsets missing inside a segment or at its end, and it rebuilds the segment's indexes from
    what it keeps (LogCleaner.cleanSegments) - so an index naming an offset or byte past the end
    of its `.log` always means the `.log` lost data.
    Flagged: a segment's indexes remain without a `.log` holding batches (LogLoader deletes such
    orphaned indexes: the offsets from its base to the next segment's are lost); a segment that
    ends mid-batch or in zeros while a later segment exists (closed segments are immutable: its
    end was lost after the roll); a segment whose last offset + 1 is below the next segment's base
    offset, when its indexes name offsets past its end, or when the partition shows no sign of
    compaction (no offsets missing between the batches of any segment, no batch with the delete
    horizon flag that only the cleaner sets, no v2 batch holding fewer records than its offsets
    (the cleaner keeps a rebuilt batch's last offset delta), every segment's first batch at its
    base offset, no segment read from an interrupted cleaning's `.swap` file, no `.cleaned` file in
    the partition dir and no segment's `.log.deleted` beside a `.log` of the same base offset -
    the cleaner's output and the segment it replaced, left by a broker that stopped before it
    deleted them - not __consumer_offsets / __transaction_state).
    Benign causes: compaction (as above: a gap at a segment's end in a compacted partition with no
    index naming it is not reported). A log dir copied while Kafka deleted (retention) or replaced
    (compaction) a segment: its files are renamed `.deleted`, `.cleaned`, `.swap` one by one, so a
    copy may hold the indexes under their names and the .log renamed - not reported (the data is
    there, or was due to go). A first segment's .log missing may be the same race with retention
    (its finding says so: compare the log-start-offset-checkpoint). Tiered storage (KIP-405): a
    gap beside a remote segment merged into the log whose offsets `__remote_log_metadata` lists
    as copied (no input holds that segment) is not read, not lost: the report's coverage names
    it (`remote_not_read`); without such a record it stays a loss."""
    return next_base > last + 1 and (index_past or not compacted)


def _stem_base(stem: str) -> int | None:
    name = os.path.basename(stem).split("-")[0]
    return int(name) if name.isdigit() else None


class _Segment:
    __slots__ = ("stem", "base", "log", "first", "last", "end", "end_pos", "prev_last", "inner_gap",
                 "cut", "corrupt", "idx_offset", "idx_ev", "idx_pos", "idx_pos_ev", "renamed")

    def __init__(self, stem: str, base: int | None):
        self.stem, self.base = stem, base
        self.log = None                  # the .log's path when it gave any row
        self.first = self.last = self.prev_last = None
        self.end = 0                     # byte after the last batch
        self.end_pos = None              # position of the last batch
        self.inner_gap = False
        self.cut = None                  # (position, length, issue, message) of a cut tail
        self.corrupt = False
        self.idx_offset, self.idx_ev = -1, None   # the largest offset an index names, and where
        self.idx_pos, self.idx_pos_ev = -1, None  # the largest .log position the offset index names
        self.renamed = None              # the .log renamed .deleted/.cleaned/.swap, when the copy holds it


class LossGroup:
    def __init__(self, key: tuple, unread: dict | None = None):
        self.replica, self.topic, self.partition = key
        # offset ranges copied to remote storage that no input holds (sources.remote.not_read)
        self.unread = (unread or {}).get((self.topic, self.partition), ())
        self.segments: dict[str, _Segment] = {}
        self.compacted = self.topic in COMPACTED_TOPICS
        self.epoch_start = None          # (offset, source, position): the latest leader epoch's start
        self.epoch_first = None          # the earliest leader epoch's start (Kafka drops those below the log start)
        self.pdir = None                 # the partition dir (from any file of it)
        self._on_disk: dict | None = None
        self._cleaner_files = False      # the partition dir shows the cleaner's work (_logs_on_disk)

    def _seg(self, src: str) -> _Segment:
        stem = segment_stem(src)
        s = self.segments.get(stem)
        if s is None:
            s = self.segments[stem] = _Segment(stem, _stem_base(stem))
        return s

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        if kind == "leader_epoch_entry":
            for r in t.to_pylist():
                self.pdir = os.path.dirname(r["source"])
                off = r["start_offset"]
                if off is not None and (self.epoch_start is None or off > self.epoch_start[0]):
                    self.epoch_start = (off, r["source"], r["position"])
                if off is not None and (self.epoch_first is None or off < self.epoch_first):
                    self.epoch_first = off
            return []
        for src, part in _by_source(t):
            self.pdir = os.path.dirname(src)
            s = self._seg(src)
            if kind == "batch":
                self._batches(s, src, part)
            elif kind == "index_entry":
                self._index(s, src, part)
            elif is_log(src):
                s.log = src
                for r in part.to_pylist():
                    if r["issue"] in CUT_ISSUES:
                        s.cut = (r["position"], r["length"], r["issue"], r["message"])
                    else:   # corrupt, too large, undecodable records: corrupt-batch tells them
                        s.corrupt = True
        return []

    def _batches(self, s: _Segment, src: str, t: pa.Table) -> None:
        s.log = src
        pos = np_col(t, "position", -1, np.int64)
        size = np_col(t, "batch_size", 0, np.int64)
        s.end = max(s.end, int((pos + size).max()))
        s.end_pos = int(pos.max())
        ok = np_col(t, "crc_ok", True, bool)
        if not ok.all():
            s.corrupt = True   # a batch whose header is not trusted: crc-mismatch tells it
        if np_col(t, "has_delete_horizon", False, bool).any() or src.endswith(".swap"):
            # (a .swap segment, read where Kafka's start-up renames it, is the cleaner's output)
            self.compacted = True
        base = np_col(t, "base_offset", -1, np.int64)[ok]
        last = np_col(t, "last_offset", -1, np.int64)[ok]
        if not base.size:
            return
        count = np_col(t, "record_count", -1, np.int64)[ok]
        if ((np_col(t, "magic", -1, np.int64)[ok] == 2) & (count >= 0) & (count < last - base + 1)).any():
            self.compacted = True   # a v2 batch with fewer records than offsets: rebuilt by the cleaner
        prev = np.concatenate(([s.prev_last if s.prev_last is not None else base[0] - 1], last[:-1]))
        if (base > prev + 1).any():
            s.inner_gap = self.compacted = True
        s.prev_last = int(last[-1])
        s.first = int(base.min()) if s.first is None else min(s.first, int(base.min()))
        s.last = int(last.max()) if s.last is None else max(s.last, int(last.max()))
        if s.base is not None and s.first > s.base:
            self.compacted = True   # only the cleaner removes a segment's first batch

    def _index(self, s: _Segment, src: str, t: pa.Table) -> None:
        off = np_col(t, "offset", -1, np.int64)
        if off.size:
            i = int(off.argmax())
            if int(off[i]) > s.idx_offset:
                s.idx_offset = int(off[i])
                s.idx_ev = (src, int(t.column("position")[i].as_py()))
        fp = np_col(t, "file_position", -1, np.int64)
        if fp.size and int(fp.max()) > s.idx_pos:
            i = int(fp.argmax())
            s.idx_pos = int(fp[i])
            s.idx_pos_ev = (src, int(t.column("position")[i].as_py()))

    def finish(self) -> list[dict]:
        segs = sorted((s for s in self.segments.values() if s.base is not None), key=lambda s: s.base)
        out = []
        for i, s in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            f = self._judge(s, nxt)
            if f is not None:
                out.append(f)
        if not any(s.log for s in segs):
            f = self._no_log_at_all(segs)
            if f is not None:
                out = [f]
        return out

    def _no_log_at_all(self, segs: list[_Segment]) -> dict | None:
        """A partition dir without any .log file (every partition has one: its active segment,
        empty after retention), whose other files show offsets it held: the leader epoch
        checkpoint (an epoch starts at the log end offset of its time), producer snapshots (taken
        at the log end offset), indexes."""
        if self.pdir is None:
            return None
        try:
            names = os.listdir(self.pdir)
        except OSError:
            return None
        if any(SEGMENT_LOG.match(n) or any(n.endswith(".log" + x) for x in RENAMED) for n in names):
            return None
        ends, ev = [], []
        snaps = sorted(int(m[1]) for m in map(SNAPSHOT.match, names) if m)
        if snaps and snaps[-1] > 0:
            ends.append(snaps[-1])
            ev.append(evidence(os.path.join(self.pdir, f"{snaps[-1]:020d}.snapshot"), None, "file",
                               f"producer snapshot taken at offset {snaps[-1]}"))
        if self.epoch_start is not None and self.epoch_start[0] > 0:
            ends.append(self.epoch_start[0])
            ev.append(evidence(self.epoch_start[1], self.epoch_start[2], "checkpoint",
                               f"a leader epoch starts at offset {self.epoch_start[0]}"))
        idx = [s for s in segs if s.idx_ev is not None]
        if idx:
            ends.append(max(s.idx_offset for s in idx) + 1)
            ev.append(evidence(*max(idx, key=lambda s: s.idx_offset).idx_ev, "index", "names offsets"))
        if not ends:
            return None
        floors = [s.base for s in segs if s.base is not None] + \
            ([self.epoch_first] if self.epoch_first is not None else [])
        first = min(floors) if floors else 0
        last = max(ends) - 1
        if last < first:
            return None
        why = (f"the partition dir holds no .log at all (Kafka keeps one even when retention empties the "
               f"log); its other files show offsets up to at least {last}: " + "; ".join(e["note"] for e in ev)
               + ("" if floors else "; where the log started is not known (no index, no leader epoch)"))
        s = _Segment(os.path.join(self.pdir, f"{first:020d}"), first)
        return self._finding(s, first, last, why, ev, None)

    def _logs_on_disk(self) -> dict[int, int]:
        """Base offset -> size of every segment .log in the partition dir: the user may have
        named only some files of it, and a file not given is not a file lost."""
        if self._on_disk is None:
            self._on_disk, replaced = {}, set()
            try:
                for n in os.listdir(self.pdir) if self.pdir else ():
                    if SEGMENT_LOG.match(n):
                        self._on_disk[int(n[:20])] = os.path.getsize(os.path.join(self.pdir, n))
                    elif n.endswith(".cleaned"):
                        self._cleaner_files = True
                    elif n.endswith(".log.deleted") and n[:20].isdigit():
                        replaced.add(int(n[:20]))
            except OSError:
                pass
            # a segment's .log.deleted beside a .log of the same base: the cleaner replaced it
            # (retention deletes a segment whole; a new one starts at the log end, past it)
            self._cleaner_files = self._cleaner_files or bool(replaced & self._on_disk.keys())
        return self._on_disk

    def _where(self) -> str:
        return f"{self.topic}-{self.partition} (replica {self.replica})"

    def _judge(self, s: _Segment, nxt: _Segment | None) -> dict | None:
        if s.first is None and s.log is None:
            return self._no_log(s, nxt)
        if s.first is None or nxt is None:
            return None   # the active tail is no loss
        if s.corrupt and s.cut is None:
            return None   # corrupt-batch / crc-mismatch tell unreadable regions and batches
        if any(s.base < b < nxt.base for b in self._logs_on_disk()):
            return None   # a segment between them is on disk, not among the inputs
        index_past = s.idx_offset > s.last or s.idx_pos >= s.end
        if s.cut is not None:
            pos, length, issue, _ = s.cut
            how = "ends in zero bytes" if issue == "zero-fill" else "ends mid-batch"
            why = (f"{os.path.basename(s.log)} {how} at byte {pos} ({length} bytes) although a later "
                   f"segment exists (a closed segment is never written again): its end was lost")
            ev = [evidence(s.log, pos, "file", "the cut")]
        elif missing_offsets(s.last, nxt.base, self.compacted or self._cleaner_files, index_past):
            why = (f"{os.path.basename(s.log)} ends at offset {s.last} (byte {s.end}) but the next "
                   f"segment starts at offset {nxt.base}")
            ev = [evidence(s.log, s.end_pos, "batch", "the last batch")]
        else:
            return None
        first, last = s.last + 1, nxt.base - 1
        if first > last:
            return None
        tiered = _remote(s) or _remote(nxt)
        if tiered and _within(first, last, self.unread):
            return None   # copied to remote storage, not among the inputs: coverage says not read
        why += self._index_words(s, ev)
        if tiered:
            why += ("; a remote (tiered) segment borders the gap and no __remote_log_metadata record in "
                    "the inputs lists a copied segment holding these offsets")
        return self._finding(s, first, last, why, ev, nxt)

    def _index_words(self, s: _Segment, ev: list) -> str:
        words = []
        if s.last is not None and s.idx_offset > s.last:
            words.append(f"its indexes name offset {s.idx_offset}")
            ev.append(evidence(*s.idx_ev, "index", f"names offset {s.idx_offset}"))
        if s.idx_pos >= s.end:
            words.append(f"its offset index names byte {s.idx_pos} of the .log, past its end")
            if s.idx_pos_ev != s.idx_ev:
                ev.append(evidence(*s.idx_pos_ev, "index", f"names byte {s.idx_pos}"))
        return f"; {', '.join(words)}" if words else ""

    def _no_log(self, s: _Segment, nxt: _Segment | None) -> dict | None:
        s.renamed = next((s.stem + ".log" + x for x in RENAMED if os.path.isfile(s.stem + ".log" + x)), None)
        if s.idx_ev is None or s.renamed is not None:
            # no index entry names data (nothing shows the segment held any), or Kafka was
            # deleting or replacing it when the copy was taken (its .log is there, renamed)
            return None
        if self._logs_on_disk().get(s.base):
            return None   # the .log is there, not among the inputs
        if _remote(s) and _within(s.base, nxt.base - 1 if nxt is not None else s.idx_offset, self.unread):
            return None
        state = "is empty" if s.base in self._logs_on_disk() else "is missing"
        ev = [evidence(*s.idx_ev, "index", f"names offset {s.idx_offset}")]
        if nxt is not None:
            first, last = s.base, nxt.base - 1
            tail = f"the next segment starts at offset {nxt.base}"
        else:
            first, last = s.base, s.idx_offset
            tail = f"no later segment: at least offsets {s.base}-{s.idx_offset} (the last its indexes name)"
        why = (f"segment {os.path.basename(s.stem)}: its .log {state} while its indexes remain "
               f"(they name offsets up to {s.idx_offset}); {tail}")
        if all(o.base is None or o.base >= s.base for o in self.segments.values() if o is not s):
            why += ("; it is the partition's first segment: if retention was deleting it while the log "
                    "dir was copied, these offsets were due to go (compare log-start-offset-checkpoint)")
        return self._finding(s, first, last, why, ev, nxt)

    def _finding(self, s, first, last, why, ev, nxt) -> dict:
        n = last - first + 1
        return finding(
            "missing-offsets", f"{self._where()}: offsets {first}-{last} ({n:,} offset(s)) are lost: {why}",
            evidence=ev, topic=self.topic, partition=self.partition, replica=self.replica,
            first_offset=first, last_offset=last,
            details={"segment": os.path.basename(s.stem), "segment_base_offset": s.base,
                     "next_segment_base_offset": nxt.base if nxt is not None else None,
                     "log_last_offset": s.last, "log_end_position": s.end if s.log else None,
                     "cut": None if s.cut is None else {"position": s.cut[0], "length": s.cut[1],
                                                        "issue": s.cut[2]},
                     "index_last_offset": s.idx_offset if s.idx_offset >= 0 else None,
                     "compacted": self.compacted or self._cleaner_files})


def _remote(s: _Segment | None) -> bool:
    return s is not None and REMOTE_STEM.match(os.path.basename(s.stem)) is not None


def _within(first: int, last: int, spans) -> bool:
    """Whether the merged, sorted `spans` cover [first, last] whole."""
    at = first
    for lo, hi in spans:
        if lo > at:
            return False
        at = max(at, hi + 1)
        if at > last:
            return True
    return at > last


def _by_source(t: pa.Table):
    """(source, rows) runs of a chunk (one file's rows are contiguous)."""
    one, src = constant(t.column("source"))
    if one:
        yield src, t
        return
    keys = t.column("source").to_pylist()
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            yield keys[start], t.slice(start, i - start)
            start = i


def _log_issues(t: pa.Table):
    return pc.and_(pc.is_null(t.column("connection")), log_sources(t.column("source")))


def _make(ctx, unread: tuple = ()) -> KeyedState:
    spans = dict(unread)
    return KeyedState(KEY, lambda key: LossGroup(key, spans))


@dataclass(frozen=True)
class LossFold(Fold):
    # (topic, partition) -> ranges copied to remote storage that no input holds, bound by the
    # engines from the plan (sources.remote.not_read)
    unread: tuple = ()

    def bind_unread(self, spans: dict) -> "LossFold":
        bound = tuple(sorted(((k, tuple(v)) for k, v in spans.items()), key=lambda kv: (str(kv[0][0]), kv[0][1])))
        return replace(self, unread=bound, make=partial(_make, unread=bound))


FOLD = LossFold("disk-segment-loss", {"batch": BATCH_COLUMNS, "index_entry": INDEX_COLUMNS,
                                      "decode_issue": ISSUE_COLUMNS, "leader_epoch_entry": EPOCH_COLUMNS},
                KEY, ORDER, partial(_make, unread=()),
                where={"batch": log_batches, "decode_issue": _log_issues})
