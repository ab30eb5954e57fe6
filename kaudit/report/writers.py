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


# Row kinds listed in full in the table view; batches are summarised per replica and partition.
TABLE_COLUMNS = {
    "connection": ["connection", "protocol", "syn_seen", "close_reason", "packets",
                   "bytes_to_server", "bytes_to_client", "gaps", "requests", "responses",
                   "unanswered"],
    "decode_issue": ["source", "position", "issue", "length", "message"],
    "skipped": ["source", "reason"],
}
TABLE_ROW_LIMIT = 200
FRAME_ROW_LIMIT = 1000
# Frame fields worth a glance in the conversation view, in this order, when set.
_FRAME_KEYS = (("transactional_id", "txn"), ("producer_id", "pid"), ("producer_epoch", "epoch"),
               ("new_producer_epoch", "new epoch"), ("acks", "acks"), ("committed", "commit"),
               ("group_id", "group"), ("coordinator_key", "key"), ("isolation_level", ""),
               ("partitions", ""), ("sasl_mechanism", "sasl"))
_BATCH_KEY = ("replica", "topic", "partition")


class TableWriter:
    """A readable view for people: one line per replica and partition (offsets, batches,
    producers, markers, CRC failures), then the decode issues and skipped entries."""

    def __init__(self, out, limit: int = TABLE_ROW_LIMIT):
        from rich.console import Console

        self.console = Console(file=out, width=None if out.isatty() else 160)
        self.limit = limit
        self.rows: dict[str, list[dict]] = {}
        self.counts = Counter()
        self.parts: dict[tuple, dict] = {}
        self.frames: list[dict] = []

    def write(self, kind: str, table: pa.Table) -> None:
        self.counts[kind] += table.num_rows
        if kind == "frame":
            room = FRAME_ROW_LIMIT - len(self.frames)
            if room > 0:
                self.frames.extend(table.slice(0, room).to_pylist())
        elif kind == "batch" and table.num_rows and table.column("source_kind")[0].as_py() == "log":
            self._summarise(table)
        elif kind in TABLE_COLUMNS:
            kept = self.rows.setdefault(kind, [])
            room = self.limit - len(kept)
            if room > 0:
                kept.extend(table.slice(0, room).select(TABLE_COLUMNS[kind]).to_pylist())

    def _summarise(self, table: pa.Table) -> None:
        t = table.append_column("commit", pc.equal(table["control_type"], "COMMIT")).append_column(
            "abort", pc.equal(table["control_type"], "ABORT")).append_column(
            "crc_bad", pc.invert(table["crc_ok"]))
        agg = t.group_by(list(_BATCH_KEY)).aggregate([
            ("base_offset", "min"), ("last_offset", "max"), ("position", "count"),
            ("record_count", "sum"), ("batch_size", "sum"), ("producer_id", "distinct"),
            ("commit", "sum"), ("abort", "sum"), ("crc_bad", "sum"), ("source", "distinct"),
        ])
        for r in agg.to_pylist():
            key = tuple(r[k] for k in _BATCH_KEY)
            p = self.parts.setdefault(key, {"first": None, "last": None, "batches": 0, "records": 0,
                                            "bytes": 0, "producers": set(), "commit": 0, "abort": 0,
                                            "crc_bad": 0, "segments": set()})
            lo, hi = r["base_offset_min"], r["last_offset_max"]
            p["first"] = lo if p["first"] is None else min(p["first"], lo)
            p["last"] = hi if p["last"] is None else max(p["last"], hi)
            p["batches"] += r["position_count"]
            p["records"] += r["record_count_sum"] or 0
            p["bytes"] += r["batch_size_sum"] or 0
            p["producers"].update(x for x in r["producer_id_distinct"] if x != -1)
            p["commit"] += r["commit_sum"] or 0
            p["abort"] += r["abort_sum"] or 0
            p["crc_bad"] += r["crc_bad_sum"] or 0
            p["segments"].update(r["source_distinct"])

    def _conversation(self) -> None:
        """Requests and responses in time order: the conversation view of a capture."""
        import datetime as dt

        from rich.table import Table

        t = Table(title=f"frames ({_shown(len(self.frames), self.counts['frame'])})", title_justify="left")
        for c in ("time", "connection", "api", "v", "corr", "frames", "key fields", "errors", "ms"):
            t.add_column(c, overflow="fold", justify="right" if c in ("v", "corr", "ms") else "left")
        rows = sorted(self.frames, key=lambda f: (f["request_ts"] or f["response_ts"] or 0))
        for f in rows:
            ts = f["request_ts"] or f["response_ts"]
            when = dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%H:%M:%S.%f") if ts else ""
            keys = " ".join(f"{label}={f[k]}" if label else str(f[k]) for k, label in _FRAME_KEYS
                            if f.get(k) not in (None, ""))
            errors = f["error_names"] or ""
            if f["response_frame"] is None and f["request_frame"] is not None:
                errors = "acks=0" if f["acks"] == 0 and f["api_key"] == 0 else "[yellow]no response[/yellow]"
            if f["decode_error"]:
                errors = (errors + " " if errors else "") + f"[yellow]{f['decode_error']}[/yellow]"
            if f["complete"] is False:
                errors = (errors + " " if errors else "") + "[red]incomplete[/red]"
            frames = f"{f['request_frame'] or '-'}/{f['response_frame'] or '-'}"
            t.add_row(when, _short_connection(f["connection"]), f["api_name"] or "?", _cell("v", f["api_version"]),
                      _cell("c", f["correlation_id"]), frames, keys, errors, _cell("ms", f["latency_ms"]))
        self.console.print(t)

    def close(self, header: dict) -> None:
        from rich.table import Table

        if self.frames:
            self._conversation()
        if self.parts:
            t = Table(title="partitions", title_justify="left")
            for c in ("replica", "topic", "partition", "segments", "offsets", "batches", "records",
                      "bytes", "producers", "COMMIT", "ABORT", "crc failures"):
                t.add_column(c, justify="right" if c not in ("replica", "topic", "offsets") else "left")
            for key in sorted(self.parts, key=lambda k: tuple("" if v is None else str(v) for v in k)):
                p = self.parts[key]
                t.add_row(str(key[0]), str(key[1]), str(key[2]), str(len(p["segments"])),
                          f"{p['first']}..{p['last']}", str(p["batches"]), str(p["records"]),
                          str(p["bytes"]), str(len(p["producers"])), str(p["commit"]),
                          str(p["abort"]), ("[red]" if p["crc_bad"] else "") + str(p["crc_bad"]))
            self.console.print(t)
        for kind, rows in self.rows.items():
            if not rows:
                continue
            t = Table(title=f"{kind} ({_shown(len(rows), self.counts[kind])})", title_justify="left")
            for c in TABLE_COLUMNS[kind]:
                t.add_column(c, overflow="fold")
            for r in rows:
                t.add_row(*(_cell(c, r[c]) for c in TABLE_COLUMNS[kind]))
            self.console.print(t)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        self.console.print(f"[bold]kaudit {header.get('command')}[/bold]: {summary or 'no rows'}")


def _short_connection(conn: str | None) -> str:
    """'127.0.0.1:45362 -> 127.0.0.1:9094' -> '127.0.0.1:45362 → :9094' (same host shown once)."""
    if not conn or " -> " not in conn:
        return conn or ""
    client, server = conn.split(" -> ")
    chost, _, _ = client.rpartition(":")
    shost, _, sport = server.rpartition(":")
    return f"{client} → :{sport}" if chost == shost else f"{client} → {server}"


def _shown(kept: int, total: int) -> str:
    return f"{kept} of {total}" if total > kept else str(kept)


def _cell(column: str, value) -> str:
    if value is None:
        return ""
    if column == "source":  # shorter for people: relative to where kaudit runs, when below it
        rel = os.path.relpath(value)
        return value if rel.startswith("..") else rel
    return str(value)


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
