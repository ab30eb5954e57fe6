"""Row writers: NDJSON (one object per row with its `kind`), JSON (one document), Parquet (one
file per kind in a folder) and a rich table view. Each consumes (kind, Arrow table) chunks."""

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


class Counts:
    """Rows per kind and what the coverage line reports."""

    def __init__(self):
        self.rows = Counter()
        self.bytes_decoded = 0

    def add(self, kind: str, table: pa.Table) -> None:
        self.rows[kind] += table.num_rows
        if kind == "batch" and table.num_rows:
            self.bytes_decoded += int(pa.compute.sum(table.column("batch_size")).as_py() or 0)


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
                    w = self.writers[kind] = pq.ParquetWriter(path, SCHEMAS[kind], compression="snappy")
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


# Columns shown per kind in the table view (the full rows are in the machine formats).
TABLE_COLUMNS = {
    "batch": ["replica", "topic", "partition", "position", "base_offset", "last_offset",
              "record_count", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
              "is_transactional", "control_type", "coordinator_epoch", "codec", "crc_ok"],
    "txn_log": ["replica", "partition", "offset", "transactional_id", "producer_id",
                "producer_epoch", "state", "partitions", "transaction_timeout_ms"],
    "offset_commit": ["replica", "partition", "offset", "group", "commit_topic",
                      "commit_partition", "committed_offset", "is_transactional", "tombstone"],
    "group_metadata": ["replica", "partition", "offset", "group", "protocol_type", "generation",
                       "protocol", "member_count"],
    "snapshot_entry": ["replica", "topic", "partition", "snapshot_offset", "producer_id",
                       "producer_epoch", "first_sequence", "last_sequence", "last_offset",
                       "current_txn_first_offset", "crc_ok"],
    "txnindex_entry": ["replica", "topic", "partition", "producer_id", "first_offset",
                       "last_offset", "last_stable_offset"],
    "decode_issue": ["source", "position", "issue", "length", "message"],
    "skipped": ["source", "reason"],
    "log_dir": ["source", "node_id", "broker_id", "cluster_id"],
}
TABLE_ROW_LIMIT = 200


class TableWriter:
    """A readable view for people: rows of the important kinds, then a summary."""

    def __init__(self, out, limit: int = TABLE_ROW_LIMIT):
        from rich.console import Console

        self.console = Console(file=out, width=200 if not out.isatty() else None)
        self.limit = limit
        self.rows: dict[str, list[dict]] = {}
        self.counts = Counter()

    def write(self, kind: str, table: pa.Table) -> None:
        self.counts[kind] += table.num_rows
        if kind not in TABLE_COLUMNS:
            return
        kept = self.rows.setdefault(kind, [])
        room = self.limit - len(kept)
        if room > 0:
            kept.extend(table.slice(0, room).select(TABLE_COLUMNS[kind]).to_pylist())

    def close(self, header: dict) -> None:
        from rich.table import Table

        for kind, rows in self.rows.items():
            if not rows:
                continue
            shown = f"{len(rows)} of {self.counts[kind]}" if self.counts[kind] > len(rows) else str(len(rows))
            t = Table(title=f"{kind} ({shown})", title_justify="left", show_lines=False)
            for c in TABLE_COLUMNS[kind]:
                t.add_column(c, overflow="fold")
            for r in rows:
                t.add_row(*("" if r[c] is None else str(r[c]) for c in TABLE_COLUMNS[kind]))
            self.console.print(t)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        self.console.print(f"[bold]kaudit {header.get('command')}[/bold]: {summary or 'no rows'}")


def make_writer(fmt: str, output: str | None):
    if fmt == "parquet":
        if not output:
            raise ValueError("--format parquet needs --output FOLDER")
        return ParquetWriter(output), None
    out = open(output, "w", encoding="utf-8") if output else sys.stdout
    writer = {"ndjson": NdjsonWriter, "json": JsonWriter, "table": TableWriter}[fmt](out)
    return writer, (out if output else None)


def write_all(writer, chunks: Iterable[tuple[str, pa.Table]], counts: Counts, kinds=None) -> None:
    for kind, table in chunks:
        counts.add(kind, table)
        if kinds is None or kind in kinds:
            writer.write(kind, table)
