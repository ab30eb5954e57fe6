"""The on-disk source: a plan of log-dir files -> (kind, Arrow table) chunks, in plan order.

This is the only place (with `segment_log`) that opens log-dir inputs, always read-only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from kaudit.model import table_from_rows
from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.file_kinds import tail_issues
from kaudit.sources.index_table import index_chunks
from kaudit.sources.targets import Target
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
    (sources/splits.py). A remote segment merged below a local log (`stop_offset`, sources.remote)
    gives only its rows below that offset: the local log holds the rest."""
    chunks = _decode_target(t, options, start, stop)
    if t.stop_offset is None:
        yield from chunks
        return
    for kind, table in chunks:
        table = clipped(kind, table, t.stop_offset)
        if table.num_rows:
            yield kind, table


# The offset a row of a segment's file stands for: rows at or past a merged remote segment's
# stop offset are dropped (a txnindex entry by its marker's offset)
CLIP_COLUMNS = {"batch": "base_offset", "record": "batch_base_offset", "txn_log": "offset",
                "offset_commit": "offset", "group_metadata": "offset", "index_entry": "offset",
                "txnindex_entry": "last_offset"}


def clipped(kind: str, table: pa.Table, stop_offset: int) -> pa.Table:
    col = CLIP_COLUMNS.get(kind)
    if col is None or col not in table.column_names:
        return table
    import pyarrow.compute as pc

    return table.filter(pc.fill_null(pc.less(table.column(col), stop_offset), True))


def _decode_target(t: Target, options: Options, start: int, stop: int | None) -> Iterator[tuple[str, pa.Table]]:
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
            issues = [dict(place, **i) for i in tail_issues(info)]
            if issues:
                yield "decode_issue", table_from_rows("decode_issue", issues)
            return
        for kind, rows in t.reader.decode(data, t.base_offset, os.path.basename(t.path)) if t.reader else ():
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
