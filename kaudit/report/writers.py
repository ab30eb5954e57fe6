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
import pyarrow.compute as pc
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


class Counts:
    """Rows per kind and what the coverage line reports."""

    def __init__(self):
        self.rows = Counter()
        self.selected = Counter()   # rows written (after --kind and the selection)
        self.bytes_decoded = 0

    def add(self, kind: str, table: pa.Table) -> None:
        self.rows[kind] += table.num_rows
        if kind == "batch" and table.num_rows:
            self.bytes_decoded += int(pc.sum(table.column("batch_size")).as_py() or 0)


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


# Columns whose values are nearly all distinct: a dictionary page only costs time and memory
# before Parquet falls back to plain encoding (record keys and values: ~40% of --deep's time).
_PLAIN_COLUMNS = {"record": {"key", "value", "offset", "timestamp_ms", "headers"}}


def _dictionary_columns(kind: str):
    plain = _PLAIN_COLUMNS.get(kind)
    return True if plain is None else [n for n in SCHEMAS[kind].names if n not in plain]


class ParquetWriter:
    """`<folder>/<kind>.parquet`, one file per kind, written as chunks arrive (bounded memory).

    Encoding runs on a background thread (Arrow releases the GIL) so it overlaps decoding;
    the queue is small, so memory stays bounded by a few chunks.
    """

    def __init__(self, folder: str):
        os.makedirs(folder, exist_ok=True)
        self.folder = folder
        self.writers: dict[str, pq.ParquetWriter] = {}
        self.queue: queue.Queue = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="kaudit-parquet", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if self.error is not None:
                continue
            kind, table = item
            try:
                w = self.writers.get(kind)
                if w is None:
                    path = os.path.join(self.folder, f"{kind}.parquet")
                    w = self.writers[kind] = pq.ParquetWriter(path, SCHEMAS[kind], compression="snappy",
                                                              use_dictionary=_dictionary_columns(kind))
                w.write_table(table)
            except BaseException as e:  # surfaced to the caller on the next write or close
                self.error = e

    def write(self, kind: str, table: pa.Table) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put((kind, table))

    def close(self, header: dict) -> None:
        self.queue.put(None)
        self.thread.join()
        for w in self.writers.values():
            w.close()
        if self.error is not None:
            raise self.error
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
