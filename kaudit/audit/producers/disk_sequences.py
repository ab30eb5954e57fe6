"""Idempotence and sequence rules on stored batches: one fold per replica of a partition, in log
order (file, byte position). Vectorised: a batch that simply continues its producer's sequence
(same epoch, next sequence, no earlier range ahead of it, no offset overlap) costs a few numpy
operations (the fast pass, sequence_catchup.py); every other batch takes the checked path
through the rule functions below.
"""

from __future__ import annotations

import heapq

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import Fold, KeyedState, np_col, of_log_segments
from kaudit.audit.producers.producer_state import (
    UNKNOWN_SEQUENCE,
    BatchView,
    ProducerState,
    next_sequence,
    overlaps,
    sequence_parts,
)
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.producers.duplicate_records import RecordDuplicates
from kaudit.audit.producers.record_content import records_differ, same_records
from kaudit.audit.producers.sequence_catchup import COLUMNS, KEY, ORDER, CatchUp
from kaudit.ranges import offsets as offset_span

# Batches the group coordinator appends for TxnOffsetCommit carry the producer id and epoch but
# always base sequence 0: AppendOrigin.Coordinator skips ProducerAppendInfo's sequence check.
COORDINATOR_TOPICS = frozenset({"__consumer_offsets"})
# Topics only brokers write (coordinators, the KRaft quorum): no producer retries there, and two
# identical commits in one millisecond are two commits, so duplicate-records does not apply.
BROKER_WRITTEN_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})


REUSED_REMEDIATION = (
    "Not a copy: the second batch holds other records under sequences the partition already had, "
    "so the producer's sequence numbers were reused - by a second instance sharing its producer id "
    "and epoch, or after the broker lost the producer's state (transactional.id.expiration.ms / "
    "producer.id.expiration.ms, unclean leader election, deleted snapshots). Check the producers' "
    "logs for OutOfOrderSequenceException and compare both offset ranges with the application's "
    "records: some may be missing or out of order.")
UNCOMPARED_REMEDIATION = (
    "Compare both offset ranges (`kaudit decode segments --deep`, or kafka-dump-log.sh "
    "--print-data-log): the same records mean consumers processed them twice - deduplicate "
    "downstream by (producer id, epoch, sequence); other records mean the producer's sequence "
    "numbers were reused (a second instance sharing its producer id and epoch, or the broker lost "
    "its state: transactional.id.expiration.ms / producer.id.expiration.ms, unclean leader "
    "election, deleted snapshots).")
REMEDIATIONS = {"different": REUSED_REMEDIATION, "unknown": UNCOMPARED_REMEDIATION}


def _same_sequences(v: BatchView | None, b: BatchView) -> BatchView | None:
    return v if v is not None and (v.base_sequence, v.last_sequence) == (b.base_sequence, b.last_sequence) else None


@rule("duplicate-batch", "error", "both", "a producer's sequences stored twice",
      "The records were written twice: consumers saw them twice. Deduplicate downstream by "
      "(producer id, epoch, sequence); find why the broker lost the producer's state (producer "
      "state expiry: transactional.id.expiration.ms / producer.id.expiration.ms, unclean leader "
      "election, deleted snapshots) and upgrade if it is a known broker bug.")
def duplicate_batch(st: ProducerState, b: BatchView) -> list[tuple[str, dict]]:
    """Invariant: within one producer id and epoch, a sequence number is stored at most once per
    partition. The broker enforces it with the last five batches of each producer
    (ProducerStateManager / ProducerAppendInfo, KIP-98 idempotence): a retry of one of them is
    answered with the original offset and not appended. kaudit remembers every range ever stored,
    so it also sees duplicates the broker accepted after losing the producer's state (state
    expiry, KAFKA-5793-style loss on truncation). On the wire: two successful responses with
    different base offsets for the same sequence range.
    Benign causes: none once stored at two offsets (a deduplicated retry is `retried-batch`)."""
    out = []
    runs = st.intervals.get(b.producer_epoch, [])
    parts = sequence_parts(b.base_sequence, b.last_sequence)  # two when b wraps past Int.MaxValue
    reported = set()   # sequence ranges already reported for b: against their first copy only
    # a noted batch that held exactly b's sequences (the views are noted once: looked up once)
    noted = _same_sequences(st.stored(b.producer_epoch, b.base_sequence, b.last_sequence), b)
    for r in overlaps(runs, b.base_sequence, b.last_sequence):
        # a copy is judged by its records (keys, values, headers, offset and timestamp deltas),
        # not the batch CRC: a producer whose state the broker lost may have the same records
        # stored again under a new batch timestamp. The first copy: the batch that held exactly
        # these sequences - the run's first, or one of the last few noted
        orig = _same_sequences(r.first, b) or noted
        copy = same_records(orig, b)
        same = copy is not None
        orig = orig or r.first
        lo, hi = next((max(r.lo, pl), min(r.hi, ph)) for pl, ph in parts if r.lo <= ph and pl <= r.hi)
        if (lo, hi) in reported:   # stored more than once already: n copies, n findings (not n^2/2)
            continue
        reported.add((lo, hi))
        if same and any(d["original"] is orig for _, d in out):
            continue  # a wrapped original is kept as two runs: one finding for it
        if same:
            first, last, exact = orig.base_offset, orig.last_offset, True
        elif (r.first_offset is not None and r.last_offset is not None
              and r.last_offset - r.first_offset == r.hi - r.lo):
            # the run holds only this producer's records: offsets follow sequences one to one
            first, last, exact = r.first_offset + lo - r.lo, r.first_offset + hi - r.lo, True
        else:
            first, last, exact = r.first_offset, r.last_offset, False
        # "different" where the records were compared, or where the first copy held these
        # sequences in a batch of other bounds (a client resends a batch whole: not a resend);
        # "unknown" where that batch is not at hand
        stored = st.stored(b.producer_epoch, lo, hi) if not same or r.lo != lo else None
        held = stored if not same else None
        rebatched = held is not None and _same_sequences(held, b) is None
        kind = ("identical" if same else "different" if rebatched or records_differ(_same_sequences(orig, b), b)
                else "unknown")
        out.append((kind, {
            "original_first_offset": first, "original_last_offset": last, "exact": exact,
            "original_sequences": [lo, hi], **({"copy": copy} if copy == "same-records" else {}),
            **({"original_batch_sequences": [held.base_sequence, held.last_sequence]} if rebatched else {}),
            "original": orig if same or r.lo == lo else stored,
        }))
    return out


@rule("out-of-order-sequence", "error", "both", "a producer's sequence jumped or went back",
      "A gap means batches the producer sent are not in the log (lost acknowledged writes if they "
      "were acknowledged); a regression re-used sequences. Check the producer's logs for "
      "OutOfOrderSequenceException and the broker for producer state loss; compare with the "
      "application's records.")
def out_of_order_sequence(st: ProducerState, b: BatchView) -> tuple[str, int] | None:
    """Invariant: within one producer epoch the next batch starts at last_sequence + 1 (wrapping at
    Int.MaxValue), and a new epoch starts at sequence 0 (ProducerAppendInfo.checkSequence,
    kafka.log.ProducerStateManager; KIP-98, KIP-360). The broker answers a violation with
    OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    Benign causes, not flagged: a producer's first batch in what the log still holds (retention),
    a gap where the offsets also jump (compaction removed the batches between), the sequence
    reset of a bumped epoch (KIP-360), a new producer id after re-initialisation; on the wire, a
    refused batch whose missing sequences were in flight in batches the broker refused too
    (pipelined requests: OUT_OF_ORDER_SEQUENCE_NUMBER in their wake, or NOT_LEADER_OR_FOLLOWER
    from a leader deposed while they waited for the ISR - the producer retries them in order)."""
    if b.producer_epoch > st.epoch:
        return ("new-epoch", 0) if b.base_sequence != 0 else None
    if st.last_seq == UNKNOWN_SEQUENCE:
        return None  # only a marker of this epoch is known (retention removed its data)
    expected = next_sequence(st.last_seq)
    if b.base_sequence == expected:
        return None
    return ("gap" if b.base_sequence > expected else "regression"), expected


@rule("fenced-epoch", "error", "both", "a write from an older producer epoch (a zombie)",
      "An older instance of the producer kept writing after a newer one took over (or after the "
      "coordinator bumped the epoch). Stop the zombie instance; on disk, check the data it wrote "
      "after being fenced (the broker should have refused it).")
def fenced_epoch(st: ProducerState, b: BatchView) -> bool:
    """Invariant: once a producer id has used epoch E in a partition, no write or marker with an
    epoch below E is accepted (ProducerAppendInfo.checkProducerEpoch; KIP-98 fencing, KIP-588).
    The broker answers INVALID_PRODUCER_EPOCH (47) or PRODUCER_FENCED (90).
    On the wire this is a warning when the broker rejected it (it did its job), an error when it
    was accepted. Benign causes: none; a new producer id after re-initialisation is not an older
    epoch."""
    return b.producer_epoch < st.max_epoch


@rule("offset-overlap", "error", "disk", "batches whose offsets overlap or go back",
      "The log is inconsistent (a bad truncation or a copied segment). Compare the replicas; "
      "re-replicate the partition from a good replica.")
def offset_overlap(prev_last_offset: int | None, b: BatchView) -> bool:
    """Invariant: in one replica's log, each batch's base offset is above the previous batch's last
    offset (kafka.log.LocalLog / LogSegment append: offsets strictly increase).
    Benign causes: none. Gaps (compaction, retention) are not overlaps."""
    return prev_last_offset is not None and b.base_offset is not None and b.base_offset <= prev_last_offset


class PartitionTimeline(CatchUp):
    """The fold state of one replica of one partition."""

    fast_pass = True   # the vectorised pass (`_fast`); False: every producer batch checked

    def __init__(self, key: tuple):
        self.replica, self.topic, self.partition = key
        self.producers: dict[int, ProducerState] = {}
        self.prev_last_offset: int | None = None
        self.offset_gaps = 0
        self.dups = RecordDuplicates(key) if self.topic not in BROKER_WRITTEN_TOPICS else None
        self.after_bad = False  # the last batch seen failed its CRC
        self.out: list[dict] = []

    # -- vectorised pass ---------------------------------------------------------------------
    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        t, unsure = self._trusted(t)
        n = t.num_rows
        if n == 0:
            return []
        base_off = np_col(t, "base_offset", -1, np.int64)
        last_off = np_col(t, "last_offset", -1, np.int64)
        pid = np_col(t, "producer_id", -1, np.int64)
        magic = np_col(t, "magic", 2, np.int64)
        control = np_col(t, "is_control", False, bool)

        # partition level: previous batch's last offset, offset gaps (compaction), overlaps
        prev_last = np.empty(n, dtype=np.int64)
        prev_last[0] = -2 if self.prev_last_offset is None else self.prev_last_offset
        prev_last[1:] = last_off[:-1]
        has_prev = np.ones(n, dtype=bool)
        has_prev[0] = self.prev_last_offset is not None
        overlap = has_prev & (base_off <= prev_last)
        gap = has_prev & ((base_off > prev_last + 1) | unsure)
        gaps_before = self.offset_gaps + np.cumsum(gap)  # gaps up to and including each row
        self._gaps_before = gaps_before

        for st in self.producers.values():
            st.applied_upto = st.noted_upto = None
        tracked = (pid >= 0) & (magic >= 2)
        if self.dups is not None:
            # every batch without a producer id: magic 0/1 messages too (magic 0 has no
            # timestamp: repeated_records, never a retry on its CRC alone)
            self.dups.feed(t, ~tracked & ~control)
            # idempotent producers' writes: copies re-sent by a new producer session
            self.dups.sessions.feed(t, tracked & ~control & ~np_col(t, "is_transactional", False, bool))
        self._control = control
        self._epoch = np_col(t, "producer_epoch", -1, np.int64)
        self._view_arrays = t
        self._last_off = last_off
        order, slow = self._sorted(t, pid, tracked, overlap)
        self._check_slow(t, order, pid, slow, prev_last, has_prev, gaps_before)
        self._catch_up(order, pid, n, t, None)
        self.prev_last_offset = int(last_off[-1])
        self.offset_gaps = int(gaps_before[-1])
        out, self.out = self.out, []
        return out

    def _trusted(self, t: pa.Table) -> tuple[pa.Table, np.ndarray]:
        """The chunk's batches that pass their CRC, and which of them follow one that does not.
        A batch failing its CRC cannot be trusted: its producer, sequences and last offset may be
        the corrupt bytes (crc-mismatch reports it). It is left out, and the place it held counts
        as an offset gap, like a batch compaction removed: what it stored is unknown."""
        crc_ok = np_col(t, "crc_ok", True, bool)
        unsure = np.zeros(int(crc_ok.sum()), dtype=bool)
        bad = ~crc_ok
        if bad.any():
            good = np.flatnonzero(crc_ok)
            unsure = np.diff(np.r_[0, np.cumsum(bad)[good]]) > 0
            t = t.filter(pa.array(crc_ok))
        if unsure.size:
            unsure[0] |= self.after_bad
            self.after_bad = False
        self.after_bad = self.after_bad or bool(bad.any() and bad[-1])
        return t, unsure

    def _sorted(self, t: pa.Table, pid: np.ndarray, tracked: np.ndarray,
                overlap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tracked rows in producer order (each producer's rows one ascending slice of it:
        `_slices`), and the rows the checked path must read: overlaps, and those the fast pass
        cannot clear."""
        slow = overlap.copy()
        rows = np.flatnonzero(tracked)
        if not rows.size:
            self._slices = {}
            return rows, slow
        order = rows[np.argsort(pid[rows], kind="stable")]
        p = pid[order]
        if self.fast_pass:
            bseq = np_col(t, "base_sequence", -1, np.int64)
            lseq = np_col(t, "last_sequence", -1, np.int64)
            count = np_col(t, "record_count", 0, np.int64)
            ok = self._fast(order, pid, self._epoch, bseq, lseq, self._control)
            ok &= self._control[order] | (lseq[order] == bseq[order] + count[order] - 1)
        else:
            ok = np.zeros(order.size, bool)
        dirty = [q for q, st in self.producers.items() if st.dirty()]
        if dirty:
            ok &= ~np.isin(p, dirty)
        slow[order[~ok]] = True
        starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
        ends = np.r_[starts[1:], order.size]
        self._slices = {int(p[a]): (int(a), int(b)) for a, b in zip(starts, ends)}
        return order, slow

    def _check_slow(self, t: pa.Table, order: np.ndarray, pid: np.ndarray, slow: np.ndarray,
                    prev_last: np.ndarray, has_prev: np.ndarray, gaps_before: np.ndarray) -> None:
        """The checked path over the `slow` rows, in log order; a producer whose state it leaves
        with a range ahead has its later rows checked one by one too."""
        slow_rows = np.flatnonzero(slow)
        if not slow_rows.size:
            return
        # a view reads ~15 cells: past a few dozen slow rows one conversion of the columns
        # views read beats reading cell by cell (a partition's first chunk: every producer)
        cols = t.select(list(COLUMNS)).to_pydict() if slow_rows.size > 32 else None
        heap = slow_rows.tolist()  # ascending: already a heap
        while heap:
            i = heapq.heappop(heap)
            self._catch_up(order, pid, i, t, cols)
            b = self._view(t, cols, i)
            self._checked(i, b, int(prev_last[i]) if has_prev[i] else None, int(gaps_before[i]))
            st = self.producers.get(b.producer_id)
            if st is not None and st.dirty():
                # this producer now has a range ahead of it: check its later rows one by one
                a, z = self._slices.get(b.producer_id, (0, 0))
                seg = order[a:z]
                seg = seg[int(np.searchsorted(seg, i, side="right")):]
                later = seg[~slow[seg]]
                slow[later] = True
                for j in later.tolist():
                    heapq.heappush(heap, j)

    # -- checked path --------------------------------------------------------------------------
    def _fields(self, b: BatchView, **kw) -> dict:
        return dict(topic=self.topic, partition=self.partition, replica=self.replica,
                    producer_id=b.producer_id, producer_epoch=None if b.producer_id < 0 else b.producer_epoch,
                    first_offset=b.base_offset, last_offset=b.last_offset,
                    base_sequence=None if b.is_control or b.producer_id < 0 else b.base_sequence,
                    last_sequence=None if b.is_control or b.producer_id < 0 else b.last_sequence,
                    first_ts_ms=b.first_ts_ms, last_ts_ms=b.last_ts_ms, **kw)

    def _checked(self, i: int, b: BatchView, prev_last: int | None, gaps: int) -> None:
        where = f"{self.topic}-{self.partition} (replica {self.replica})"
        if offset_overlap(prev_last, b):
            self.out.append(finding(
                "offset-overlap", f"{where}: batch at {offset_span(b.base_offset, b.last_offset)} "
                f"starts at or below the previous batch's last offset {prev_last}",
                evidence=[evidence(b.source, b.position, "batch")], details={"previous_last_offset": prev_last},
                **self._fields(b)))
        if b.producer_id < 0:
            return
        st = self.producers.get(b.producer_id)
        if st is None:  # first sight: retention may have removed its earlier batches
            self._first_sight(b, i)
            return
        self._flush_fenced(st, b)
        fenced = fenced_epoch(st, b)
        if fenced:
            self._fenced(st, b, where)
        elif b.is_control:
            if b.producer_epoch > st.epoch:  # a bumped epoch (coordinator abort): sequences restart
                st.epoch = b.producer_epoch
                st.set_sequence(-1, gaps)
        else:
            self._sequence(st, b, gaps, where)
        if not b.is_control:
            if not fenced:
                # a zombie's write does not move the producer back to its old epoch: the live
                # instance's next batch is checked against its own epoch and sequence
                st.epoch = b.producer_epoch
                st.set_sequence(b.last_sequence, gaps)
            st.remember(b)
        st.max_epoch = max(st.max_epoch, b.producer_epoch)
        st.last_offset = b.last_offset
        st.offset_gaps = gaps
        st.applied_upto = st.noted_upto = i
        st.note(b)

    def _sequence(self, st: ProducerState, b: BatchView, gaps: int, where: str) -> None:
        if self.topic in COORDINATOR_TOPICS:
            return  # coordinator-origin appends carry sequence 0 and are not sequence-checked
        ev = [evidence(b.source, b.position, "batch")]
        for kind, d in duplicate_batch(st, b):
            orig = d.pop("original")
            if orig is not None:
                ev_o = ev + [evidence(orig.source, orig.position, "batch", "original")]
            else:
                ev_o = ev
            bounds = d.get("original_batch_sequences")
            what = ("sequences re-used with a different payload" if kind == "different" and not bounds else
                    f"sequences re-used by a batch of other bounds (the first copy's batch held sequences "
                    f"{bounds[0]}-{bounds[1]}): not a resend of it - a client resends a batch whole"
                    if kind == "different" else
                    "the records were not compared (the first copy's batch is not at hand, or was batched "
                    "otherwise): compare both offset ranges" if kind == "unknown" else
                    "a byte-identical copy (same CRC)" if d.get("copy") != "same-records" else
                    "a copy of the same records (same keys, values, headers and offset and timestamp "
                    "deltas; only the batch header differs: " + _header_diff(orig, b) + ")")
            lo, hi = d["original_sequences"]
            self.out.append(finding(
                "duplicate-batch", f"{where}: producer {b.producer_id} epoch {b.producer_epoch} "
                f"sequences {b.base_sequence}-{b.last_sequence} at offsets {b.base_offset}-"
                f"{b.last_offset}: sequences {lo}-{hi} were already stored "
                f"{'at' if d['exact'] else 'within'} offsets {d['original_first_offset']}-"
                f"{d['original_last_offset']}: {what}",
                evidence=ev_o, details=dict(d, payload=kind), timeline=st.recent + [b.describe()],
                remediation=REMEDIATIONS.get(kind), **self._fields(b)))
        verdict = out_of_order_sequence(st, b)
        if verdict is None:
            return
        kind, expected = verdict
        # a gap counts from where the sequence was set (set_sequence: a batch compaction removed
        # just before a COMMIT marker or a zombie's write leaves its offset gap before them), a
        # new epoch from the producer's previous batch
        since = st.seq_offset_gaps if kind == "gap" else st.offset_gaps
        if kind in ("gap", "new-epoch") and gaps != since:
            # the offsets jump too: compaction removed the batches in between (for a new epoch,
            # its first batches), or a batch failing its CRC was left out
            return
        text = {"gap": f"jumps from {st.last_seq} to {b.base_sequence} (expected {expected}; "
                       f"sequences {expected}-{b.base_sequence - 1} are missing)",
                "regression": f"goes back from {st.last_seq} to {b.base_sequence} (expected {expected})",
                "new-epoch": f"starts new epoch {b.producer_epoch} at sequence {b.base_sequence}, not 0"}[kind]
        self.out.append(finding(
            "out-of-order-sequence", f"{where}: producer {b.producer_id} epoch {b.producer_epoch} "
            f"{text}, stored at {offset_span(b.base_offset, b.last_offset)}",
            evidence=[evidence(b.source, b.position, "batch")],
            details={"kind": kind, "expected_sequence": expected, "previous_last_sequence": st.last_seq,
                     "previous_epoch": st.epoch, "broker": "accepted (stored)"},
            timeline=st.recent + [b.describe()], **self._fields(b)))

    def _fenced(self, st: ProducerState, b: BatchView, where: str) -> None:
        f = st.open_fenced
        if f is not None and f["producer_epoch"] == b.producer_epoch and not b.is_control:
            f["last_offset"] = b.last_offset
            f["last_sequence"] = b.last_sequence
            f["last_ts_ms"] = b.last_ts_ms
            f["_batches"] += 1
            return
        what = f"{b.control_type or 'control'} marker" if b.is_control else "data"
        st.open_fenced = finding(
            "fenced-epoch", f"{where}: producer {b.producer_id} wrote {what} with epoch "
            f"{b.producer_epoch} after epoch {st.max_epoch} (a zombie the broker accepted)",
            evidence=[evidence(b.source, b.position, "marker" if b.is_control else "batch")],
            details={"stale_epoch": b.producer_epoch, "current_epoch": st.max_epoch,
                     "broker": "accepted (stored)"},
            timeline=st.recent + [b.describe()], **self._fields(b))
        st.open_fenced["_batches"] = 1

    def _flush_fenced(self, st: ProducerState, b: BatchView | None) -> None:
        f = st.open_fenced
        if f is None:
            return
        if b is not None and fenced_epoch(st, b) and f["producer_epoch"] == b.producer_epoch and not b.is_control:
            return
        n = f.pop("_batches")
        if n > 1:
            f["message"] += f"; {n} batches up to offset {f['last_offset']}"
        self.out.append(f)
        st.open_fenced = None

    def finish(self) -> list[dict]:
        # the zombie runs still open, in log order (where each began): the same order whichever
        # path - checked or fast - first saw each producer
        still = [st for st in self.producers.values() if st.open_fenced is not None]
        for st in sorted(still, key=lambda st: _began(st.open_fenced)):
            self._flush_fenced(st, None)
        if self.dups is not None:
            self.out.extend(self.dups.finish())
        out, self.out = self.out, []
        return out


def _began(f: dict) -> tuple:
    """Where a finding's batch is in the log: (file, byte position)."""
    ev = f["evidence"][0]
    return str(ev["source"]), ev["position"] if ev["position"] is not None else -1


def _header_diff(a: BatchView | None, b: BatchView) -> str:
    """What differs between the batch headers of two copies of the same records."""
    if a is None:
        return "unknown"
    diff = [name for name, x, y in (("batch timestamp", (a.first_ts_ms, a.last_ts_ms), (b.first_ts_ms, b.last_ts_ms)),
                                    ("producer id", a.producer_id, b.producer_id),
                                    ("epoch", a.producer_epoch, b.producer_epoch),
                                    ("attributes", a.attributes, b.attributes)) if x != y]
    return ", ".join(diff) or "the CRC"


def _is_log(t: pa.Table):
    """Batches of `.log` segments. A KRaft snapshot (`<offset>-<epoch>.checkpoint`) numbers its
    batches from 0 (RecordsSnapshotWriter's BatchAccumulator): its offsets are not the log's."""
    return of_log_segments(t)


FOLD = Fold("disk-sequences", {"batch": COLUMNS}, KEY, ORDER,
            lambda ctx: KeyedState(KEY, PartitionTimeline), where={"batch": _is_log})
