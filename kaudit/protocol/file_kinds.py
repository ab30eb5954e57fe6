"""The broker files kaudit decodes whole - besides segments and their offset and time indexes -
by file name: each one's decoder (protocol.logfiles) turned into rows of a row kind, with its
decode issues. A new kind of log file is a decoder registered here (`log_file`) and its row kind
in kaudit.model: the log-dir walk (sources.logdir), the decode (sources.segments) and both
engines take it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kaudit.protocol import logfiles as lf


@dataclass(frozen=True)
class LogFile:
    """A file name - or a segment's suffix: ".txnindex" for `<base offset>.txnindex` -, where it
    lies ("partition": in a topic-partition dir, "log_dir": at a log dir's root) and its rows:
    `decode(data, base offset, file name)` -> [(row kind, rows without their place)]."""

    name: str
    where: str
    decode: Callable[[bytes, int | None, str], list[tuple[str, list[dict]]]]


LOG_FILES: dict[str, LogFile] = {}


def log_file(*names: str, where: str = "partition"):
    """Register the decorated function as the rows of the files `names`."""
    def register(fn):
        for name in names:
            LOG_FILES[name] = LogFile(name, where, fn)
        return fn
    return register


def issue(position: int, length: int, kind: str, message: str) -> dict:
    return {"position": position, "length": length, "issue": kind, "message": message, "resync_position": None}


def tail_issues(info: lf.IndexTail) -> list[dict]:
    """Issue rows for what an index decoder could not use: preallocated zeros (normal on an
    active segment), entries that are neither valid nor zero, a cut last entry."""
    rows = []
    if info.zero_fill_bytes:
        rows.append(issue(info.end_position, info.zero_fill_bytes, "zero-fill",
                          "preallocated zero entries (active segment)"))
    if info.unexpected_bytes:
        reason = f": {info.error.message}" if info.error else ""
        rows.append(issue(info.unexpected_position, info.unexpected_bytes, "corrupt",
                          f"index entries after the last valid one{reason}"))
    if info.partial_bytes:
        rows.append(issue(info.partial_position, info.partial_bytes, "truncated-tail",
                          f"partial {info.entry_size}-byte entry at the end"))
    return rows


@log_file(".txnindex")
def _txnindex(data, base_offset, name):
    entries, info = lf.decode_txn_index(data)
    return [("txnindex_entry", entries), ("decode_issue", tail_issues(info))]


@log_file(".snapshot")
def _snapshot(data, base_offset, name):
    entries, info = lf.decode_producer_snapshot(data, base_offset)
    issues = []
    if not info.crc_ok:
        issues.append(issue(0, len(data), "crc-mismatch", f"snapshot CRC {info.crc} != computed {info.computed_crc}"))
    if info.trailing_bytes:
        issues.append(issue(info.end_position, info.trailing_bytes, "trailing-bytes",
                            "bytes after the last producer entry (Kafka ignores them)"))
    return [("snapshot_entry", entries), ("decode_issue", issues)]


@log_file("leader-epoch-checkpoint")
def _leader_epochs(data, base_offset, name):
    return [("leader_epoch_entry", lf.decode_leader_epoch_checkpoint(data))]


@log_file("partition.metadata")
def _partition_metadata(data, base_offset, name):
    return [("partition_metadata", [lf.decode_partition_metadata(data)])]


@log_file("quorum-state")
def _quorum_state(data, base_offset, name):
    return []   # KRaft election state: read, nothing to model yet


@log_file("meta.properties", where="log_dir")
def _meta_properties(data, base_offset, name):
    return [("log_dir", [lf.decode_meta_properties(data)])]


# A log dir's offset checkpoints: recovery points, high watermarks, log start offsets, cleaner.
@log_file("cleaner-offset-checkpoint", "log-start-offset-checkpoint", "recovery-point-offset-checkpoint",
          "replication-offset-checkpoint", where="log_dir")
def _offset_checkpoint(data, base_offset, name):
    return [("checkpoint_entry", [dict(r, checkpoint=name) for r in lf.decode_offset_checkpoint(data)])]


@log_file("bootstrap.checkpoint", where="log_dir")
def _bootstrap(data, base_offset, name):
    """The KRaft bootstrap snapshot `kafka-storage format` wrote: the cluster's initial finalized
    features (metadata.version, transaction.version, ...) as metadata records."""
    from kaudit.protocol.metadata.rows import buffer_rows

    rows, issues = buffer_rows(data)
    return [("metadata_record", rows), ("decode_issue", issues)]
