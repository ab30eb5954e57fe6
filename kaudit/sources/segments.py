"""The on-disk source: a plan of log-dir files -> (kind, Arrow table) chunks, in plan order.

This is the only place (with `segment_log`) that opens log-dir inputs, always read-only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from kaudit.model import table_from_rows
from kaudit.protocol import logfiles
from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError
from kaudit.sources.index_table import index_chunks
from kaudit.sources.logdir import Target
from kaudit.sources.segment_log import decode_log

# Index-like files are small by nature; a bigger one is read only up to this bound.
MAX_SMALL_FILE = 256 * 1024 * 1024


@dataclass
class Options:
    deep: bool = False
    max_batch_bytes: int = DEFAULT_MAX_BYTES


def decode_target(t: Target, options: Options, start: int = 0, stop: int | None = None
                  ) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks of one file; for a segment, optionally one byte range of it
    (sources/splits.py)."""
    place = t.place()
    if t.kind == "skipped":
        yield "skipped", table_from_rows("skipped", [dict(place, reason=t.reason)])
        return
    try:
        if t.kind in ("log", "checkpoint"):
            yield from decode_log(t, deep=options.deep, max_batch_bytes=options.max_batch_bytes,
                                  start=start, stop=stop)
            return
        data = _read_small(t.path)
        if t.kind in ("index", "timeindex"):
            chunks, info = index_chunks(data, t.base_offset, "offset" if t.kind == "index" else "time", place)
            for table in chunks:
                yield "index_entry", table
            issues = [dict(place, **i) for i in _tail_issues(t, info)]
            if issues:
                yield "decode_issue", table_from_rows("decode_issue", issues)
            return
        for kind, rows in _small_file_rows(t, data):
            for r in rows:
                for k, v in place.items():
                    r.setdefault(k, v)
                if r.get("position") is None:
                    r["position"] = 0
            if rows:
                yield kind, table_from_rows(kind, rows)
    except OSError as e:
        yield "decode_issue", table_from_rows("decode_issue", [dict(
            place, position=0, length=None, issue="unreadable",
            message=f"cannot read: {e.strerror or e}", resync_position=None)])
    except DecodeError as e:
        yield "decode_issue", table_from_rows("decode_issue", [dict(
            place, position=max(e.position, 0), length=None, issue=e.kind,
            message=e.message, resync_position=None)])


def _read_small(path: str) -> bytes:
    with open(path, "rb") as f:  # read-only
        return f.read(MAX_SMALL_FILE)


def _small_file_rows(t: Target, data: bytes):
    """[(kind, rows)] for the non-segment files, via the sans-IO decoders in protocol.logfiles."""
    if t.kind == "txnindex":
        entries, info = logfiles.decode_txn_index(data)
        return [("txnindex_entry", entries), ("decode_issue", _tail_issues(t, info))]
    if t.kind == "snapshot":
        entries, info = logfiles.decode_producer_snapshot(data, t.base_offset)
        issues = []
        if not info.crc_ok:
            issues.append(_issue(0, len(data), "crc-mismatch",
                                 f"snapshot CRC {info.crc} != computed {info.computed_crc}"))
        if info.trailing_bytes:
            issues.append(_issue(info.end_position, info.trailing_bytes, "trailing-bytes",
                                 "bytes after the last producer entry (Kafka ignores them)"))
        return [("snapshot_entry", entries), ("decode_issue", issues)]
    if t.kind == "leader-epoch-checkpoint":
        return [("leader_epoch_entry", logfiles.decode_leader_epoch_checkpoint(data))]
    if t.kind == "partition.metadata":
        return [("partition_metadata", [logfiles.decode_partition_metadata(data)])]
    if t.kind == "offset-checkpoint":
        name = os.path.basename(t.path)
        return [("checkpoint_entry", [dict(r, checkpoint=name) for r in logfiles.decode_offset_checkpoint(data)])]
    if t.kind == "meta.properties":
        return [("log_dir", [logfiles.decode_meta_properties(data)])]
    return []  # quorum-state (KRaft election state): read, nothing to model yet


def _issue(position: int, length: int, issue: str, message: str) -> dict:
    return {"position": position, "length": length, "issue": issue, "message": message,
            "resync_position": None}


def _tail_issues(t: Target, info) -> list[dict]:
    """Issue rows for what an index decoder could not use: preallocated zeros (normal on an
    active segment), entries that are neither valid nor zero, a cut last entry."""
    rows = []
    if info.zero_fill_bytes:
        rows.append(_issue(info.end_position, info.zero_fill_bytes, "zero-fill",
                           "preallocated zero entries (active segment)"))
    if info.unexpected_bytes:
        reason = f": {info.error.message}" if info.error else ""
        rows.append(_issue(info.unexpected_position, info.unexpected_bytes, "corrupt",
                           f"index entries after the last valid one{reason}"))
    if info.partial_bytes:
        rows.append(_issue(info.partial_position, info.partial_bytes, "truncated-tail",
                           f"partial {info.entry_size}-byte entry at the end"))
    return rows
