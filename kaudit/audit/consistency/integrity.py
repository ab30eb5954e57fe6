"""Integrity rules on stored files: what the decoder could not take as a valid batch, per replica
of a partition (decode issues and batches whose CRC fails)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Fold, KeyedState, constant, np_col
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.segment_files import is_log, log_sources, renamed, stem as segment_stem
from kaudit.ranges import offsets as offset_span

KEY = ("replica", "topic", "partition")
ORDER = ("source", "position")
BATCH_COLUMNS = KEY + ORDER + ("base_offset", "last_offset", "crc", "crc_ok", "batch_size",
                               "producer_id", "producer_epoch", "base_sequence", "last_sequence")
ISSUE_COLUMNS = KEY + ORDER + ("issue", "length", "message", "resync_position")
SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")  # the files of one log segment


@rule("crc-mismatch", "error", "both", "a batch (or snapshot) whose CRC does not match its bytes",
      "The bytes changed after the producer (or broker) wrote them: disk, memory or network "
      "corruption. Compare with the other replicas and re-replicate the partition from a good one; "
      "check the disk (SMART, dmesg).")
def crc_mismatch(row: dict) -> bool:
    """Invariant: the CRC-32C stored in a v2 batch header covers attributes through the last record
    and matches them (DefaultRecordBatch.isValid / ensureValid); snapshot files carry their own
    CRC (ProducerStateManager.readSnapshot). Consumers with check.crcs=true fail on such a batch.
    Benign causes: none."""
    return row.get("crc_ok") is False or row.get("issue") == "crc-mismatch"


@rule("corrupt-batch", "error", "disk", "bytes in a segment that are not a valid batch",
      "Kafka's log recovery truncates a segment at the first invalid batch (LogSegment.recover) "
      "after an unclean shutdown; everything after it is lost. Check the replicas: if another one "
      "holds the data, let the broker re-replicate; keep a copy of the segment first.")
def corrupt_batch(row: dict) -> bool:
    """Invariant: a segment is a sequence of complete record batches with sane lengths and magic
    (LogSegment, FileRecords.batchIterator; LogSegment.recover). kaudit reports the bytes it had
    to skip and where it found the next valid batch. Also used when a batch exceeds
    --max-batch-bytes or its records cannot be decoded. Benign causes: none in a closed segment."""
    return row.get("issue") in ("corrupt", "limit", "records", "coordinator-record")


@rule("truncated-tail", "warning", "disk", "a segment or index ends in the middle of an entry",
      "On the active segment of a running broker this is a write in progress (info). Otherwise "
      "the broker stopped mid-write; log recovery truncates it on the next start.")
def truncated_tail(row: dict, active: bool) -> str:
    """Invariant: a closed segment ends exactly after its last batch (LogSegment.recover truncates
    a partial batch at the end). Severity: info on the partition's active (last) segment, where a
    copy taken while the broker writes ends mid-batch, warning on an older one. A zero-filled tail
    (log.preallocate, or a crash on some filesystems) is reported the same way.
    Benign causes: copying the log dir of a running broker."""
    return "info" if active else "warning"


def _producer(r: dict) -> dict:
    """The producer fields of a batch row for a finding (none for producer id -1)."""
    if r["producer_id"] is None or r["producer_id"] < 0:
        return {"producer_id": r["producer_id"]}
    return {"producer_id": r["producer_id"], "producer_epoch": r["producer_epoch"],
            "base_sequence": r["base_sequence"], "last_sequence": r["last_sequence"]}


class IntegrityGroup:
    def __init__(self, key: tuple):
        self.replica, self.topic, self.partition = key
        self.last_log = None
        self.issues: list[dict] = []
        self.out: list[dict] = []

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        one, src = constant(t.column("source"))
        if one:
            m = src if is_log(src) else None
        else:
            logs = pc.filter(t.column("source"), log_sources(t.column("source")))
            m = pc.max(logs).as_py() if len(logs) else None
        if m is not None and (self.last_log is None or m > self.last_log):
            self.last_log = m
        if kind == "batch":
            bad = np.flatnonzero(~np_col(t, "crc_ok", True, bool))
            for i in bad.tolist():
                r = {k: t.column(k)[i].as_py() for k in BATCH_COLUMNS}
                self.out.append(finding(
                    "crc-mismatch", f"{self._where()}: batch at {offset_span(r['base_offset'], r['last_offset'])} "
                    f"({r['batch_size']} bytes) fails its CRC (stored {r['crc']})",
                    evidence=[evidence(r["source"], r["position"], "batch")],
                    topic=self.topic, partition=self.partition, replica=self.replica,
                    first_offset=r["base_offset"], last_offset=r["last_offset"],
                    details={"stored_crc": r["crc"], "batch_size": r["batch_size"]},
                    **_producer(r)))
        elif kind == "decode_issue":
            self.issues.extend(t.select(list(ISSUE_COLUMNS)).to_pylist())
        out, self.out = self.out, []
        return out

    def _where(self) -> str:
        return f"{self.topic}-{self.partition} (replica {self.replica})"

    def finish(self) -> list[dict]:
        out = []
        for r in self.issues:
            f = self._issue(r)
            if f is not None:
                out.append(f)
        return out

    def _issue(self, r: dict) -> dict | None:
        src, issue = r["source"] or "", r["issue"]
        name = os.path.basename(src)
        ev = [evidence(src, r["position"], "file", r["message"])]
        common = dict(topic=self.topic, partition=self.partition, replica=self.replica, evidence=ev,
                      details={"issue": issue, "position": r["position"], "length": r["length"],
                               "resync_position": r["resync_position"]})
        length = f"{r['length']} bytes" if r["length"] is not None else "length unknown"
        log = is_log(src)
        batches = log or src.endswith(".checkpoint")  # files of record batches (KRaft snapshots)
        if issue == "crc-mismatch":
            return finding("crc-mismatch", f"{self._where()}: {name}: {r['message']}", **common)
        if issue == "truncated" and not log:
            issue = "truncated-tail"  # a small file (producer snapshot) cut in the middle of an entry
        if issue in ("truncated-tail", "zero-fill") and (log or issue == "truncated-tail"):
            if not log and issue == "zero-fill":
                return None
            active = log and src == self.last_log
            if renamed(src).endswith((".index", ".timeindex", ".txnindex")):
                # index files: compare with the log of the same segment (a producer snapshot is
                # written whole at a roll or shutdown: never "active")
                active = self.last_log is not None and \
                    segment_stem(src) == segment_stem(self.last_log)
            sev = truncated_tail(r, active)
            what = ("ends in zero bytes" if issue == "zero-fill" else
                    "ends mid-batch" if batches else "ends mid-entry")
            seg = f"; {'active' if active else 'closed'} segment" if renamed(src).endswith(SEGMENT_FILES) else ""
            return finding("truncated-tail", f"{self._where()}: {name} {what} at byte {r['position']} "
                           f"({length}{seg}): {r['message']}", severity=sev, **common)
        if issue in ("corrupt", "limit", "records", "coordinator-record"):
            if not batches and issue == "corrupt":
                return None  # index files: see index-mismatch
            resync = r["resync_position"]
            tail = (f"; decoding resumed at byte {resync}"
                    if resync is not None and f"byte {resync}" not in (r["message"] or "") else "")
            sev = "warning" if issue in ("limit", "records", "coordinator-record") else None
            return finding("corrupt-batch", f"{self._where()}: {name} at byte {r['position']} "
                           f"({length}): {r['message']}{tail}", severity=sev, **common)
        return None  # sasl tokens, trailing bytes Kafka ignores, unreadable files (coverage)


FOLD = Fold("disk-integrity", {"batch": BATCH_COLUMNS,
                               "decode_issue": ISSUE_COLUMNS},
            KEY, ORDER, lambda ctx: KeyedState(KEY, IntegrityGroup),
            where={"batch": lambda t: pc.equal(t.column("source_kind"), "log"),
                   "decode_issue": lambda t: pc.is_null(t.column("connection"))})
