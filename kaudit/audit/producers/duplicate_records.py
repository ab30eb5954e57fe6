"""`duplicate-records` on stored batches: a non-idempotent producer's retry stored twice (and,
through session_copies, records re-sent by a new producer session; through repeated_records,
the batches without a timestamp that only repeat earlier records).

A retried batch carries the very bytes of the original (same create timestamps, keys, values,
headers), so its CRC, size and timestamps are equal; a 64-bit fingerprint of those fields finds
the pairs. Memory is bounded by a time window: a retry follows its original within the producer's
delivery timeout (delivery.timeout.ms, 2 minutes by default), so originals more than WINDOW_MS
(5 minutes) older than the partition's newest timestamp are forgotten — unless they are among the
partition's last RECENT_ROWS batches, so that a producer whose clock lags the others' still has its
retries paired. The window is applied to each pair (the original's create time against the newest
timestamp up to the copy, and their distance in batches), not only by eviction, so the findings do
not depend on how the rows were chunked (local or Spark engine).
Fingerprints live in one sorted numpy run per chunk behind a Bloom filter of the window's fingerprints:
only the few rows the bitmap lets through are looked up, and no run is ever re-sorted.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import constant, np_col
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.producers.repeated_records import Repetitions
from kaudit.audit.producers.session_copies import SessionCopies
from kaudit.audit.thresholds import WINDOW_MS
from kaudit.ranges import offsets as offset_span, verb

RECENT_ROWS = 100_000  # batches: a copy this close behind its original is paired whatever the clocks
_MASK = np.uint64((1 << 23) - 1)  # fingerprint bitmap: 8 MB
# Three probes per fingerprint (a Bloom filter): ~0.2% of rows pass a full window's bitmap where
# one probe let ~4% through, each then searched in every run of the window
_SHIFTS = (np.uint64(0), np.uint64(23), np.uint64(41))
_K1, _K2, _K3 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)


@rule("duplicate-records", "error", "both", "the same records stored twice (non-idempotent retry)",
      "Consumers processed these records twice. Enable idempotence on the producer "
      "(enable.idempotence=true, the default since Kafka 3.0) and deduplicate downstream by key.")
def duplicate_records(original: dict, dup: dict) -> bool:
    """Invariant: records a producer sent once are stored once. Idempotence (KIP-98) enforces it
    only within one producer session: kafka.log.ProducerStateManager checks each batch's
    (producer id, epoch, sequence) against the session's last five batches and answers a retry
    with the original offset. It does nothing for producer id -1, and nothing across sessions:
    a new producer id (a restarted application's InitProducerId) or an idempotent producer's
    bumped epoch with sequences from 0 (KIP-360, after unresolved batches) is new data to it.
    Flagged, each on its evidence:
    - producer id -1: a batch equal in CRC, size, record count and create timestamps to an
      earlier batch of the partition within the retry window - only a client's retry re-sends a
      batch's own create time (a batch without one is repeated-records, never this);
    - across sessions (session_copies.py): the first batches of a new session hold the same
      records (keys, values, headers, offset and timestamp deltas) as an earlier session's last
      writes, the earlier one having stopped - an application that re-sent after a failed or
      timed-out send;
    - on the wire (wire_resends.py): a new session's acknowledged records equal to a failed or
      unanswered send's, at warning - whether the first was stored the capture cannot tell. With
      the log dirs (`kaudit audit`, joint/settle.py) the join decides it: stored once (the first
      send never was) disproves it (left out: the join's produce-outcome tells the crash at
      info), stored twice makes it the error.
    Benign causes: an application that sends the same records with the same create timestamps
    on purpose (rare; check the keys)."""
    return original["fp"] == dup["fp"]


def fingerprints(t: pa.Table, mask: np.ndarray) -> np.ndarray:
    crc = np_col(t, "crc", 0, np.uint64)[mask]
    size = np_col(t, "batch_size", 0, np.uint64)[mask]
    count = np_col(t, "record_count", 0, np.uint64)[mask]
    bts = np_col(t, "base_timestamp_ms", 0, np.int64)[mask].view(np.uint64)
    mts = np_col(t, "max_timestamp_ms", 0, np.int64)[mask].view(np.uint64)
    # chained through a 64-bit mixer (splitmix64's finaliser): a sum of per-field products made
    # a timestamp t and -t collide (odd t, base = max timestamp)
    return _mix(_mix(_mix(crc | (size << np.uint64(32))) ^ bts) ^ mts ^ (count * _K3))


def _mix(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _K1
        z = (z ^ (z >> np.uint64(27))) * _K2
        return z ^ (z >> np.uint64(31))


def _probes(fp: np.ndarray) -> list[np.ndarray]:
    return [((fp >> s) & _MASK).astype(np.intp) for s in _SHIFTS]


def _mark(bits: np.ndarray, probes: list[np.ndarray]) -> None:
    for p in probes:
        bits[p] = True


def _maybe(bits: np.ndarray, probes: list[np.ndarray]) -> np.ndarray:
    """Rows whose fingerprint may be in the bitmap (every probe set)."""
    hit = bits[probes[0]]
    for p in probes[1:]:
        hit &= bits[p]
    return hit


def log_order(fp: np.ndarray) -> np.ndarray:
    """argsort of `fp` with equal fingerprints in log order: what a stable sort gives, from the
    default sort (several times faster on 64-bit keys) with its rare runs of equal keys put back
    in row order."""
    o = np.argsort(fp)
    s = fp[o]
    eq = np.flatnonzero(s[1:] == s[:-1])
    if eq.size:
        last = np.r_[eq[1:] != eq[:-1] + 1, True]   # the run's last pair
        first = np.r_[True, eq[1:] != eq[:-1] + 1]
        for a, b in zip(eq[first].tolist(), (eq[last] + 1).tolist()):
            o[a:b + 1] = np.sort(o[a:b + 1])
    return o


def _sorted_fingerprints(fp: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(the fingerprints sorted, their rows' order where two are equal, else None): whether a
    chunk holds any duplicate is told by the sort of the values (faster than the rows' order)."""
    sorted_fp = np.sort(fp)
    same = sorted_fp[1:] == sorted_fp[:-1]
    return sorted_fp, (log_order(fp) if same.any() else None)   # sorted_fp is fp[order]


def _within(run: "_Run", found: dict[int, tuple], threshold: np.ndarray, min_row: np.ndarray) -> None:
    """Duplicates inside one chunk (`run`): a later row equal to an earlier one within its
    window, where no earlier chunk's row was found for it (`found`, completed in place)."""
    sorted_fp, order = run.fp, run.order   # (order: None where no two are equal)
    if order is None:
        return
    same = np.flatnonzero(sorted_fp[1:] == sorted_fp[:-1])
    for s_ in same[np.r_[True, np.diff(same) > 1]].tolist():
        e_ = s_ + 1
        while e_ + 1 < sorted_fp.size and sorted_fp[e_ + 1] == sorted_fp[s_]:
            e_ += 1
        group = order[s_:e_ + 1].tolist()  # equal fingerprints, in log order
        for i, b in enumerate(group[1:], 1):
            if b in found:
                continue
            a = next((a for a in group[:i] if run.ts[a] >= threshold[b] or run.row[a] >= min_row[b]), None)
            if a is not None:
                found[b] = (int(run.row[a]), int(run.base[a]), int(run.base[a] + run.count[a] - 1),
                            int(run.pos[a]), int(run.src[a]))


class _Run:
    """One chunk's rows in log order - fingerprint, evidence (base offset, record count,
    position, source id), create time (window, eviction) and row number in the partition's log
    order - and its fingerprints sorted, for the look-ups. The rows' order by fingerprint (equal
    ones in log order) is made only when a look-up finds an equal one (a copy: rare), or was
    made for the chunk's own copies."""

    __slots__ = ("fp", "raw", "order", "base", "count", "pos", "src", "ts", "row", "max_ts", "max_row")

    def __init__(self, fp, base, count, pos, src, ts, row, sorted_fp, order=None):
        self.fp = sorted_fp
        self.raw, self.order = fp, order
        self.base, self.count, self.pos, self.src, self.ts, self.row = base, count, pos, src, ts, row
        self.max_ts = int(ts.max())
        self.max_row = int(row.max())

    def last(self, j: int) -> int:
        return int(self.base[j] + self.count[j] - 1)

    def find(self, fp: np.ndarray, threshold: np.ndarray, min_row: np.ndarray) -> np.ndarray:
        """For each of `fp`: the row (in this run's log order) of the earliest equal fingerprint
        in the retry window (created at or after `threshold`, or at row `min_row` or later), or -1."""
        lo = np.searchsorted(self.fp, fp, "left")
        hi = np.searchsorted(self.fp, fp, "right")
        out = np.full(fp.size, -1, dtype=np.int64)
        for k in np.flatnonzero(hi > lo).tolist():
            if self.order is None:
                self.order = log_order(self.raw)   # self.fp is self.raw[self.order]
            at = self.order[lo[k]:hi[k]]   # the equal ones, in log order
            ok = at[(self.ts[at] >= threshold[k]) | (self.row[at] >= min_row[k])]
            if ok.size:
                out[k] = ok[0]
        return out


class RecordDuplicates:
    def __init__(self, key: tuple):
        self.replica, self.topic, self.partition = key
        self.runs: list[_Run] = []
        self.bits: np.ndarray | None = None
        self.marked = 0  # fingerprints marked in the bitmap since it was last rebuilt
        self.sources: list[str] = []
        self.newest_ts = None
        self.rows = 0  # rows seen: their number in the partition's log order
        self.evicted_at = 0
        self.out: list[dict] = []
        self.open = None
        self.repeats = Repetitions(key, self.sources)
        self.sessions = SessionCopies(key, self._sources)

    def feed(self, t: pa.Table, mask: np.ndarray) -> None:
        """The data batches `mask` of a chunk: those with their create time to the retry check,
        those without one to the repetitions (repeated_records)."""
        if not mask.any():
            return
        # Kafka's NO_TIMESTAMP (-1) on the batch: a magic 0 message or a batch converted from one
        timed = ((np_col(t, "base_timestamp_ms", -1, np.int64) != -1)
                 | (np_col(t, "max_timestamp_ms", -1, np.int64) != -1))
        untimed = mask & ~timed
        if untimed.any():
            self.repeats.feed(t, untimed, self._sources(t, untimed))
        mask = mask & timed
        if mask.any():
            self._feed(t, mask)

    def _sources(self, t: pa.Table, mask: np.ndarray) -> np.ndarray:
        one, src0 = constant(t.column("source"))
        if one:
            return np.full(int(mask.sum()), self._source_id(src0), dtype=np.int32)
        enc = pc.dictionary_encode(t.column("source")).combine_chunks()
        ids = np.array([self._source_id(s) for s in enc.dictionary.to_pylist()], dtype=np.int32)
        return ids[np.asarray(enc.indices.fill_null(0))][mask]

    def _feed(self, t: pa.Table, mask: np.ndarray) -> None:
        fp = fingerprints(t, mask)
        probes = _probes(fp)   # the bitmap's probes, for the lookup and the marking
        base = np_col(t, "base_offset", -1, np.int64)[mask]
        count = (np_col(t, "last_offset", -1, np.int64)[mask] - base + 1).astype(np.int32)
        pos = np_col(t, "position", -1, np.int64)[mask]
        src = self._sources(t, mask)
        mts = np_col(t, "max_timestamp_ms", 0, np.int64)[mask]
        row = self.rows + np.arange(fp.size, dtype=np.int64)
        self.rows += fp.size
        # the retry window of each row: originals created at most WINDOW_MS before the newest
        # timestamp seen up to that row (whatever the chunking)
        seen = np.maximum.accumulate(mts)
        if self.newest_ts is not None:
            seen = np.maximum(seen, self.newest_ts)
        threshold = seen - WINDOW_MS
        min_row = row - RECENT_ROWS
        found = self._in_runs(fp, probes, threshold, min_row)  # row of this chunk -> (original's row, evidence)
        run = _Run(fp, base, count, pos, src, mts, row, *_sorted_fingerprints(fp))
        _within(run, found, threshold, min_row)
        for k in sorted(found):
            _, ob, ol, op, os_ = found[k]
            self._report(int(base[k]), int(base[k] + count[k] - 1), int(pos[k]), int(src[k]),
                         int(mts[k]), ob, ol, op, os_)
        # one sorted run per chunk, never merged: the bitmap leaves few rows to look up in them
        self.runs.append(run)
        if self.bits is None:
            self.bits = np.zeros(int(_MASK) + 1, dtype=bool)
        _mark(self.bits, probes)
        self.marked += fp.size
        newest = int(mts.max())
        self.newest_ts = newest if self.newest_ts is None else max(self.newest_ts, newest)
        self._evict()

    def _in_runs(self, fp: np.ndarray, probes, threshold: np.ndarray, min_row: np.ndarray) -> dict[int, tuple]:
        """The rows of a chunk (fingerprints `fp`) equal to one of the window's earlier chunks:
        row -> (the original's row, base, last offset, position, source), the earliest."""
        found: dict[int, tuple] = {}
        if not self.runs:
            return found
        # a bitmap of the window's fingerprints rules out almost every row before any search
        cand = np.flatnonzero(_maybe(self.bits, probes))
        for run in self.runs if cand.size else ():
            j = run.find(fp[cand], threshold[cand], min_row[cand])
            for k in np.flatnonzero(j >= 0).tolist():
                jj, c = int(j[k]), int(cand[k])
                if c not in found or run.row[jj] < found[c][0]:
                    found[c] = (int(run.row[jj]), int(run.base[jj]), run.last(jj), int(run.pos[jj]),
                                int(run.src[jj]))
        return found

    def _evict(self) -> None:
        """Drops the runs out of every later row's window (created before the cutoff and
        RECENT_ROWS rows back), at most once per RECENT_ROWS/4 rows. A dropped run's bits only
        let rows through to a search that finds nothing, so the bitmap is rebuilt once it holds
        as many dropped fingerprints as live ones (amortised: not the window per eviction)."""
        if self.rows - self.evicted_at < RECENT_ROWS // 4:
            return
        cutoff = self.newest_ts - WINDOW_MS
        kept = [r for r in self.runs if r.max_ts >= cutoff or r.max_row >= self.rows - RECENT_ROWS]
        if len(kept) < len(self.runs):
            self.evicted_at = self.rows
            self.runs = kept
            live = sum(r.fp.size for r in kept)
            if self.marked > 2 * live:
                self.bits[:] = False
                for r in kept:
                    _mark(self.bits, _probes(r.fp))
                self.marked = live

    def _source_id(self, s: str) -> int:
        try:
            return self.sources.index(s)
        except ValueError:
            self.sources.append(s)
            return len(self.sources) - 1

    def _report(self, base, last, pos, src, ts, obase, olast, opos, osrc) -> None:
        o = self.open
        if o is not None and base == o["last_offset"] + 1 and obase == o["_orig_last"] + 1:
            o["last_offset"] = last
            o["_orig_last"] = olast
            o["_batches"] += 1
            o["evidence"].append(evidence(self.sources[src], pos, "batch"))
            return
        self._flush()
        where = f"{self.topic}-{self.partition} (replica {self.replica})"
        self.open = finding(
            "duplicate-records", f"{where}: records at {offset_span(base, last)} are byte-identical to "
            f"those at {offset_span(obase, olast)} (same CRC, size and timestamps; producer id -1, so "
            f"the broker could not deduplicate the retry)",
            evidence=[evidence(self.sources[src], pos, "batch"),
                      evidence(self.sources[osrc], opos, "batch", "original")],
            topic=self.topic, partition=self.partition, replica=self.replica, producer_id=-1,
            first_offset=base, last_offset=last, first_ts_ms=ts, last_ts_ms=ts)
        self.open["_orig_first"], self.open["_orig_last"], self.open["_batches"] = obase, olast, 1

    def _flush(self) -> None:
        o = self.open
        if o is None:
            return
        n = o.pop("_batches")
        first, last = o.pop("_orig_first"), o.pop("_orig_last")
        if n > 1:
            o["message"] = (f"{self.topic}-{self.partition} (replica {self.replica}): {n} batches at "
                            f"{offset_span(o['first_offset'], o['last_offset'])} {verb(o['first_offset'], o['last_offset'], 'is', 'are')} byte-identical to those "
                            f"at {offset_span(first, last)} (producer id -1: a non-idempotent retry)")
        import json

        o["details"] = json.dumps({"original_first_offset": first, "original_last_offset": last,
                                   "batches": n}, sort_keys=True)
        self.out.append(o)
        self.open = None

    def finish(self) -> list[dict]:
        self._flush()
        out, self.out = self.out + self.sessions.finish(self.sources) + self.repeats.finish(), []
        self.runs = []
        self.bits = None
        return out
