"""`txnindex-mismatch` and `snapshot-mismatch`: a replica's transaction indexes and producer-state
snapshots against its own log, one fold per replica of a partition, streaming in log order (it
also feeds leader_epochs.py's `leader-epoch-mismatch`: one pass over the batches for the three).

Files arrive in name order: a segment's `.log`, then its `.snapshot` (taken at that segment's
base offset, when it was rolled) and `.txnindex`. The producer state is replayed as the batches
come (producer_replay.py) and kept as it was when each segment began, so a snapshot named after
that segment is compared with exactly the batches below its offset; the one written at the log
end (clean shutdown) with the whole log. The `.txnindex` entries are compared at the end.

Compaction (and retention before the first batch) leaves offsets missing: the rules then compare
only what the remaining batches determine (a field is judged when no offset is missing between
the batch that sets it and the snapshot's offset; an index entry's first offset may be below
the first remaining batch of its transaction).
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import np_col
from kaudit.audit.consistency.leader_epochs import ENTRY_COLUMNS, EpochRuns
from kaudit.audit.consistency.log_chunks import LogFold, OneKeyState, log_batches, same_ends
from kaudit.audit.producers.producer_replay import Replay
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.thresholds import PRODUCER_ID_EXPIRATION_MS
from kaudit.audit.consistency.txnindex_check import check_txnindex

KEY = ("replica", "topic", "partition")
ORDER = ("source", "position")
BATCH_COLUMNS = KEY + ORDER + ("base_offset", "last_offset", "magic", "crc_ok", "producer_id", "producer_epoch",
                               "last_sequence", "is_transactional", "is_control", "control_type",
                               "coordinator_epoch", "max_timestamp_ms", "partition_leader_epoch", "record_count")
SNAPSHOT_COLUMNS = KEY + ORDER + ("snapshot_offset", "crc_ok", "producer_id", "producer_epoch", "last_sequence",
                                  "last_offset", "offset_delta", "timestamp_ms", "coordinator_epoch",
                                  "current_txn_first_offset")
TXNINDEX_COLUMNS = KEY + ORDER + ("producer_id", "first_offset", "last_offset", "last_stable_offset")
MAX_FINDINGS = 20   # per rule and replica of a partition
# the snapshot fields compared, with what a broker loading the snapshot would get wrong
FIELDS = {
    "producer_epoch": "it would fence the producer's current epoch or accept a fenced one",
    "last_sequence": "the producer's next batch would be refused (OUT_OF_ORDER_SEQUENCE) or a retry "
                     "stored twice",
    "last_offset": "a retried batch would be answered with the wrong offset",
    "offset_delta": "a retried batch would be answered with the wrong offsets",
    "timestamp_ms": "the producer would expire (producer.id.expiration.ms) at the wrong time",
    "coordinator_epoch": "it would refuse the coordinator's markers or accept a stale coordinator's",
    "current_txn_first_offset": "the last stable offset would be wrong: read_committed consumers would "
                                "stop at a closed transaction or read an open one",
}


@rule("snapshot-mismatch", "warning", "disk",
      "a producer-state snapshot disagrees with the batches below its offset",
      "A broker that starts (or truncates) from this snapshot takes its producer state as is and "
      "only replays the log after it. Stop the broker and move the .snapshot aside (keep a copy): "
      "Kafka then rebuilds the state from the log (ProducerStateManager.truncateAndReload).")
def snapshot_mismatch(field: str, expected, stored) -> str | None:
    """Invariant: `<offset>.snapshot` holds, for every producer not yet expired, the state Kafka's
    ProducerStateManager has after appending every batch below that offset: the epoch of its last
    batch (data or marker), the last sequence, last offset and offset delta of its last data batch
    (reset when a later batch changed the epoch: ProducerStateEntry.maybeUpdateProducerEpoch), the
    timestamp of its last batch, the coordinator epoch of its last COMMIT/ABORT marker and the
    first offset of its open transaction (-1 when none). A producer with an open transaction is
    never expired, so it must be listed.
    Severity: error when the open transaction differs (read_committed consumers are affected),
    warning otherwise.
    Benign causes: producers missing because they expired (producer.id.expiration.ms,
    transactional.id.expiration.ms in 3.0), or listed with coordinator epoch -1 when they wrote
    again after idling past producer.id.expiration.ms since their last marker (their state expired
    and a new entry began with that write, thresholds.PRODUCER_ID_EXPIRATION_MS); fields set by batches compaction or retention removed
    (not compared: kaudit compares only fields whose batch is followed by no missing offsets)."""
    if expected == stored:
        return None
    return f"{field} {stored} (the log gives {expected}): {FIELDS.get(field, '')}"


@rule("txnindex-mismatch", "error", "both",
      "a transaction index that does not list exactly the aborted transactions of its log",
      "Consumers in read_committed get their aborted-transaction lists from this file: stop the "
      "broker, move the partition's .txnindex and .index files aside (keep copies) so that log "
      "recovery rebuilds them from the log, or re-replicate the partition from a healthy replica.")
def txnindex_mismatch(what: str) -> str:
    """Invariant: a partition's `.txnindex` files list every transaction that ended in ABORT with
    data (ProducerAppendInfo.appendEndTxnMarker, LogSegment.updateTxnIndex): its producer id, the
    offset of its first batch, the offset of its ABORT marker and the last stable offset after it
    (the first offset of the oldest other open transaction, else the marker's offset + 1), and
    nothing else. The broker answers read_committed Fetch requests with the entries overlapping
    the fetched range (UnifiedLog.collectAbortedTransactions): a missing entry makes consumers
    deliver aborted records, an entry over committed records hides them, a last stable offset too
    high stops the search before later segments' entries. On the wire (`kaudit audit`): a
    read_committed Fetch response that returned data of a transaction an index entry lists
    aborted without listing it, or that lists a transaction the log commits.
    Benign causes: compaction (the cleaner keeps an entry while its transaction has data left,
    and its first offset may precede the first remaining batch; replicas clean apart, so a
    response around discarded data may omit an entry another replica still lists); an entry whose last stable
    offset is lower than kaudit computes (harmless: the broker only searches further); after a
    power loss, entries of segments past the recovery point, which log recovery rebuilds."""
    return what


class StateFiles:
    def __init__(self, key: tuple):
        self.replica, self.topic, self.partition = key
        self.replay = Replay()
        self.epochs = EpochRuns(key)   # leader-epoch-mismatch reads the same batches
        self.segment: str | None = None
        self.saved: tuple | None = None      # (segment base offset, producer states, largest offset)
        self.txnindex: list[dict] = []
        self.out: list[dict] = []
        self.snapshots_reported = 0

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        if kind == "batch":
            for src, part in _by_source(t):
                if src != self.segment:
                    self.segment = src
                    base = _base_offset(src)
                    if base is not None:
                        self.saved = (base, self.replay.state.copy(), self.replay.prev_last)
                self._batches(part)
        elif kind == "snapshot_entry":
            for _, part in _by_source(t):
                self._snapshot(part.to_pylist())
        elif kind == "leader_epoch_entry":
            self.epochs.entries.extend(t.to_pylist())
        else:
            self.txnindex.extend(t.to_pylist())
        out, self.out = self.out, []
        return out

    def _batches(self, t: pa.Table) -> None:
        base = np_col(t, "base_offset", -1, np.int64)
        last = np_col(t, "last_offset", -1, np.int64)
        ok = np_col(t, "crc_ok", True, bool)
        self.replay.feed(t, base, last, ok)
        epoch = np_col(t, "partition_leader_epoch", -1, np.int64)
        if (epoch >= 0).any():
            self.epochs.feed(t, epoch, base, last, ok & (np_col(t, "magic", 0, np.int64) >= 2))

    def _where(self) -> str:
        return f"{self.topic}-{self.partition} (replica {self.replica})"

    # -- snapshots --------------------------------------------------------------------------------
    def _snapshot(self, rows: list[dict]) -> None:
        if not rows or any(r["crc_ok"] is False for r in rows):
            return   # crc-mismatch reports the file
        at = rows[0]["snapshot_offset"]
        if self.saved is not None and self.saved[0] == at:
            _, state, prev_last = self.saved
        elif self.replay.prev_last < at:
            state, prev_last = self.replay.state, self.replay.prev_last
        else:
            return   # a snapshot inside a segment already read: its state is not kept
        cut = prev_last + 1 < at   # offsets missing right below the snapshot

        def certain(after: int) -> bool:
            return not cut and not self.replay.gap_between(after, at)

        listed = set()
        for r in rows:
            pid = r["producer_id"]
            listed.add(pid)
            st = state.get(pid)
            if st is None:
                if certain(-1):
                    self._snap_finding(r, at, "warning", f"lists producer {pid}, which has no batch below "
                                       f"offset {at} in a log complete from offset 0", [])
                continue
            diffs = self._diffs(r, st, certain)
            if diffs:
                sev = "error" if any(d.startswith("current_txn_first_offset") for d in diffs) else "warning"
                self._snap_finding(r, at, sev, f"producer {pid}: " + "; ".join(diffs), diffs)
        for pid, st in state.open_items():
            if pid not in listed and certain(st.last_marker_base):
                r = {"producer_id": pid, "producer_epoch": st.epoch, "source": rows[0]["source"], "position": None}
                self._snap_finding(r, at, "error", (
                    f"omits producer {pid}, whose transaction is open from offset {st.txn_first}: a broker "
                    "loading it forgets that transaction (the last stable offset passes it and its ABORT "
                    "would not be indexed: read_committed consumers would read it)"), [])

    @staticmethod
    def _diffs(r: dict, st, certain) -> list[str]:
        exp = st.expected()
        checks = []
        if certain(st.last_base):
            checks += ["producer_epoch", "timestamp_ms"]
        if certain(st.last_data_base):
            checks += ["last_sequence", "last_offset", "offset_delta"]
        if certain(st.last_marker_base):
            checks += ["coordinator_epoch", "current_txn_first_offset"]
            if r["coordinator_epoch"] == -1 and st.idle_after_marker() >= PRODUCER_ID_EXPIRATION_MS:
                checks.remove("coordinator_epoch")   # expired after its marker: a new entry since
        return [why for why in (snapshot_mismatch(n, exp[n], r[n]) for n in checks) if why]

    def _snap_finding(self, r: dict, at: int, severity: str, text: str, diffs: list[str]) -> None:
        self.snapshots_reported += 1
        if self.snapshots_reported > MAX_FINDINGS:
            return
        self.out.append(finding(
            "snapshot-mismatch", f"{self._where()}: {os.path.basename(r['source'])} {text}",
            severity=severity, evidence=[evidence(r["source"], r["position"], "snapshot")],
            topic=self.topic, partition=self.partition, replica=self.replica, producer_id=r["producer_id"],
            producer_epoch=r.get("producer_epoch"), first_offset=at, last_offset=at,
            details={"snapshot_offset": at, "differences": diffs}))

    # -- transaction index -------------------------------------------------------------------------
    def finish(self) -> list[dict]:
        out = self.out + self.epochs.finish()
        self.out = []
        found = check_txnindex(self.replay, self.txnindex)
        for sev, msg, fields, ev, details in found[:MAX_FINDINGS]:
            out.append(finding("txnindex-mismatch", f"{self._where()}: {txnindex_mismatch(msg)}", severity=sev,
                               evidence=ev, details=details, topic=self.topic, partition=self.partition,
                               replica=self.replica, **fields))
        if len(found) > MAX_FINDINGS:
            out[-1]["message"] += f" ({len(found) - MAX_FINDINGS} more index mismatches in this replica)"
        return out


def _base_offset(path: str) -> int | None:
    name = os.path.basename(path)
    return int(name[:20]) if len(name) > 20 and name[:20].isdigit() else None


def _by_source(t: pa.Table):
    """(source, slice) runs of a table (a chunk holds one file; a Spark batch may hold more)."""
    src = t.column("source")
    if same_ends(src):
        yield src[0].as_py(), t
        return
    vals = src.to_pylist()
    start = 0
    for i in range(1, len(vals) + 1):
        if i == len(vals) or vals[i] != vals[start]:
            yield vals[start], t.slice(start, i - start)
            start = i


FOLD = LogFold("disk-state-files", {"batch": BATCH_COLUMNS, "snapshot_entry": SNAPSHOT_COLUMNS,
                                 "txnindex_entry": TXNINDEX_COLUMNS, "leader_epoch_entry": ENTRY_COLUMNS},
            KEY, ORDER, lambda ctx: OneKeyState(KEY, StateFiles), where={"batch": log_batches})
