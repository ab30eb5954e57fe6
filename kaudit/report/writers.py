"""Row writers: NDJSON (one object per row with its `kind`), JSON (one document), Parquet (one
file per kind in a folder) and the view for people (report/dump.py). Each consumes (kind, Arrow
table) chunks."""

from __future__ import annotations

import base64
import json
import os
import queue
import sys
import threading
from collections import Counter
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from kaudit.model import SCHEMAS


def _jsonable(v):
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")  # binary key/value: base64 in JSON
    return v


def row_dicts(kind: str, table: pa.Table):
    for row in table.to_pylist():
        out = {"kind": kind}
        for k, v in row.items():
            out[k] = _jsonable(v)
        yield out


def _total(column: pa.ChunkedArray) -> int:
    """The sum of an integer column, nulls left out (numpy's, where there is none: the
    decode then never imports pyarrow.compute, ~0.02 s of start-up)."""
    if column.null_count:
        import pyarrow.compute as pc

        return int(pc.sum(column).as_py() or 0)
    return sum(int(c.to_numpy().sum(dtype="int64")) for c in column.chunks)


class Counts:
    """Rows per kind and what the coverage line reports."""

    def __init__(self):
        self.rows = Counter()
        self.selected = Counter()   # rows written (after --kind and the selection)
        self.bytes_decoded = 0

    def add(self, kind: str, table: pa.Table) -> None:
        self.rows[kind] += table.num_rows
        if kind == "batch" and table.num_rows:
            self.bytes_decoded += _total(table.column("batch_size"))


class NdjsonWriter:
    def __init__(self, out):
        self.out = out

    def write(self, kind: str, table: pa.Table) -> None:
        w = self.out.write
        for d in row_dicts(kind, table):
            w(json.dumps(d, separators=(",", ":")))
            w("\n")

    def close(self, header: dict) -> None:
        self.out.flush()


class JsonWriter:
    """One JSON document: the header (tool, inputs, counts) and every row."""

    def __init__(self, out):
        self.out = out
        self.rows = []

    def write(self, kind: str, table: pa.Table) -> None:
        self.rows.extend(row_dicts(kind, table))

    def close(self, header: dict) -> None:
        json.dump(dict(header, rows=self.rows), self.out, indent=1)
        self.out.write("\n")
        self.out.flush()


# Parquet encoding is the decode's bottleneck on small batches (one-record batches: ~2 M rows/s
# with Arrow's defaults, measured, against ~3.5 M/s with these). A dictionary page only pays for
# the columns that repeat a few values (the place, codes, flags); on the others (offsets,
# positions, CRCs, keys, values) Parquet builds it, then falls back to plain encoding. Statistics
# are kept where a reader prunes row groups by them (partition, offsets, producer id, times) and
# left out elsewhere (min/max of a CRC or a string column: pure cost). Same rows, same schema.
_STAT_COLUMNS = ("partition", "offset", "base_offset", "last_offset", "batch_base_offset", "producer_id",
                 "timestamp_ms", "base_timestamp_ms", "max_timestamp_ms", "first_offset")
_DICT_TYPES = (pa.types.is_string, pa.types.is_boolean, pa.types.is_int8, pa.types.is_int16)
_DICT_COLUMNS = {"partition", "coordinator_epoch"}
# strings that are nearly all distinct
_PLAIN_STRINGS = {"record": {"key", "value"}}


def _dictionary_columns(kind: str) -> list[str]:
    plain = _PLAIN_STRINGS.get(kind, ())
    return [f.name for f in SCHEMAS[kind] if f.name not in plain
            and (f.name in _DICT_COLUMNS or any(t(f.type) for t in _DICT_TYPES))]


def _statistics_columns(kind: str) -> list[str]:
    return [n for n in SCHEMAS[kind].names if n in _STAT_COLUMNS]


# A row group gathers chunks up to this many rows (or bytes): each group costs its own pages,
# dictionaries and statistics per column (one-record batches: 16,384-row groups ~12% slower).
GROUP_ROWS = 65536
GROUP_BYTES = 16 << 20


class _KindWriter:
    """One kind's Parquet file, encoded on its own thread (Arrow releases the GIL): the kinds
    encode in parallel and beside decoding; its queue is small, so memory stays bounded by a few
    chunks."""

    def __init__(self, folder: str, kind: str):
        self.path = os.path.join(folder, f"{kind}.parquet")
        self.kind = kind
        self.writer = None
        self.queue: queue.Queue = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"kaudit-parquet-{kind}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending: list[pa.Table] = []
        while True:
            table = self.queue.get()
            if table is not None:
                pending.append(table)
            if pending and (table is None or sum(t.num_rows for t in pending) >= GROUP_ROWS
                            or sum(t.nbytes for t in pending) >= GROUP_BYTES):
                self._write(pending)
                pending = []
            if table is None:
                return

    def _write(self, tables: list[pa.Table]) -> None:
        if self.error is not None:
            return
        try:
            if self.writer is None:
                self.writer = pq.ParquetWriter(
                    self.path, SCHEMAS[self.kind], compression="snappy",
                    use_dictionary=_dictionary_columns(self.kind),
                    write_statistics=_statistics_columns(self.kind))
            self.writer.write_table(pa.concat_tables(tables) if len(tables) > 1 else tables[0])
        except BaseException as e:  # surfaced to the caller on the next write or close
            self.error = e

    def finish(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.writer is not None:
            self.writer.close()


class ParquetWriter:
    """`<folder>/<kind>.parquet`, one file per kind, written as chunks arrive (bounded memory),
    each kind on its own encoding thread (_KindWriter)."""

    def __init__(self, folder: str):
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self.writers: dict[str, _KindWriter] = {}

    def _error(self) -> BaseException | None:
        return next((w.error for w in self.writers.values() if w.error is not None), None)

    def write(self, kind: str, table: pa.Table) -> None:
        error = self._error()
        if error is not None:
            raise error
        w = self.writers.get(kind)
        if w is None:
            w = self.writers[kind] = _KindWriter(self.folder, kind)
        w.queue.put(table)

    def close(self, header: dict) -> None:
        for w in self.writers.values():
            w.finish()
        error = self._error()
        if error is not None:
            raise error
        with open(os.path.join(self.folder, "_kaudit.json"), "w") as f:
            json.dump(header, f, indent=1)


def make_writer(fmt: str, output: str | None, deep: bool = False):
    if fmt == "parquet":
        if not output:
            raise ValueError("--format parquet needs --output FOLDER")
        return ParquetWriter(output), None
    out = open(output, "w", encoding="utf-8") if output else sys.stdout
    if fmt == "table":
        from kaudit.report.dump import TableWriter

        return TableWriter(out, deep=deep), (out if output else None)
    writer = {"ndjson": NdjsonWriter, "json": JsonWriter}[fmt](out)
    return writer, (out if output else None)


def write_all(writer, chunks: Iterable[tuple[str, pa.Table]], counts: Counts, kinds=None, select=None) -> None:
    """`select(kind, table)`: the rows of a chunk to write (None: none), after counting it."""
    for kind, table in chunks:
        counts.add(kind, table)
        if kinds is None or kind in kinds:
            if select is not None:
                table = select(kind, table)
                if table is None:
                    continue
            counts.selected[kind] += table.num_rows
            writer.write(kind, table)
