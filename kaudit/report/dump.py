"""`kaudit decode ... --format table`: a readable view that streams.

Log segments are listed batch by batch as Kafka's DumpLogSegments lists them (one `baseOffset:
... lastOffset: ...` line per batch, and with --deep a `| offset: ...` line per record: key, value
and headers as text when they are UTF-8, else hex), with times in ISO-8601. Coordinator records
and producer snapshots follow as `key: value` lines; index entries are counted per file. A
capture is shown as its conversation (request by request). Lines are written whole: nothing is
cut when piped.
"""

from __future__ import annotations

import base64
import json
import os
from collections import Counter

import pyarrow as pa

from kaudit.timefmt import duration, iso_ms, iso_s

FRAME_ROW_LIMIT = 1000
TABLE_ROW_LIMIT = 200
MAX_SHOWN_BYTES = 256    # of a key, value or header value; longer ones end in "… (N bytes)"
TABLE_COLUMNS = {
    "connection": ["connection", "protocol", "syn_seen", "close_reason", "packets",
                   "bytes_to_server", "bytes_to_client", "gaps", "requests", "responses", "unanswered"],
    "decode_issue": ["source", "position", "issue", "length", "message"],
    "skipped": ["source", "reason"],
}
COUNTED = ("index_entry", "leader_epoch_entry", "checkpoint_entry")   # one line per file: their count
_PLACE = {"source", "position", "replica", "log_dir", "topic", "partition"}
# Frame fields worth a glance in the conversation view, in this order, when set.
_FRAME_KEYS = (("transactional_id", "txn"), ("producer_id", "pid"), ("producer_epoch", "epoch"),
               ("new_producer_epoch", "new epoch"), ("acks", "acks"), ("committed", "commit"),
               ("group_id", "group"), ("coordinator_key", "key"), ("isolation_level", ""),
               ("partitions", ""), ("sasl_mechanism", "sasl"))


def shown(data: bytes | None) -> str:
    """Bytes for people: the text when they are printable UTF-8, else hex."""
    if data is None:
        return "null"
    cut = data[:MAX_SHOWN_BYTES]
    try:
        text = cut.decode("utf-8")
        out = text if text.isprintable() else None
    except UnicodeDecodeError:
        out = None
    if out is None:
        out = "0x" + cut.hex()
    return out + (f"… ({len(data)} bytes)" if len(data) > MAX_SHOWN_BYTES else "")


def _headers(text: str | None) -> str:
    if not text:
        return "[]"
    try:
        pairs = json.loads(text)
    except ValueError:
        return text
    return "[" + ", ".join(f"{k}={shown(base64.b64decode(v) if v is not None else None)}" for k, v in pairs) + "]"


def batch_line(b: dict) -> str:
    """One batch as DumpLogSegments prints it (times in ISO-8601)."""
    ts_name = "LogAppendTime" if b["timestamp_type"] == "log_append" else "CreateTime"
    line = (f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['record_count']} "
            f"baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} producerId: {b['producer_id']} "
            f"producerEpoch: {b['producer_epoch']} partitionLeaderEpoch: {b['partition_leader_epoch']} "
            f"isTransactional: {str(bool(b['is_transactional'])).lower()} isControl: {str(bool(b['is_control'])).lower()} "
            f"deleteHorizon: {str(bool(b['has_delete_horizon'])).lower()} position: {b['position']} "
            f"{ts_name}: {iso_ms(b['max_timestamp_ms'])} size: {b['batch_size']} magic: {b['magic']} "
            f"compresscodec: {b['codec']} crc: {b['crc']} isvalid: {str(bool(b['crc_ok'])).lower()}")
    if b["is_control"] and b["control_type"]:
        line += f" | endTxnMarker: {b['control_type']} coordinatorEpoch: {b['coordinator_epoch']}"
    return line


def record_line(r: dict) -> str:
    if r.get("control_type"):
        return (f"| offset: {r['offset']} CreateTime: {iso_ms(r['timestamp_ms'])} keySize: {r['key_size']} "
                f"valueSize: {r['value_size']} sequence: {r['sequence']} "
                f"endTxnMarker: {r['control_type']} coordinatorEpoch: {r['coordinator_epoch']}")
    return (f"| offset: {r['offset']} CreateTime: {iso_ms(r['timestamp_ms'])} keySize: {r['key_size']} "
            f"valueSize: {r['value_size']} sequence: {r['sequence']} headers: {_headers(r['headers'])} "
            f"key: {shown(r['key'])} payload: {shown(r['value'])}")


def row_line(kind: str, r: dict, wire: bool = False) -> str:
    """Any other row kind as `key: value` pairs, times in ISO-8601: its place fields aside (the
    heading names them), but for a capture's rows, whose heading is the capture alone."""
    parts = []
    for k, v in r.items():
        if (k == "source" if wire else k in _PLACE) or v is None:
            continue
        if k.endswith("_ms") and isinstance(v, int) and not k.endswith("timeout_ms") and (
                v > 10**11 or (v == -1 and "timestamp" in k)):
            v = iso_ms(v)
        elif k.endswith("timeout_ms") and isinstance(v, int) and v >= 0:
            v = f"{v} ({duration(v)})"   # a duration: the value Kafka stores, and in words
        elif k in ("ts", "request_ts", "response_ts") and isinstance(v, float):
            v = iso_s(v)   # capture time
        elif isinstance(v, bytes):
            v = shown(v)
        parts.append(f"{'frame' if wire and k == 'position' else k}: {v}")   # a capture's position: a frame
    return f"{kind} " + " ".join(parts)


class TableWriter:
    def __init__(self, out, deep: bool = False):
        from kaudit.report.console import console_for

        self.out = out
        self.console = console_for(out)
        self.deep = deep
        self.source = None
        self.pending: list[dict] = []     # the current chunk of batches, waiting for its records
        self.records: dict[tuple, list[dict]] = {}
        self.counted: Counter = Counter()
        self.rows: dict[str, list[dict]] = {}
        self.counts = Counter()
        self.frames: list[dict] = []

    def write(self, kind: str, table: pa.Table) -> None:
        self.counts[kind] += table.num_rows
        if kind == "record":
            for r in table.to_pylist():
                self.records.setdefault((r["source"], r["batch_base_offset"]), []).append(r)
            return
        if kind == "batch" and table.num_rows and table.column("source_kind")[0].as_py() == "log":
            self._flush()
            self.pending = table.to_pylist()
            return
        self._flush()
        if kind == "frame":
            room = FRAME_ROW_LIMIT - len(self.frames)
            if room > 0:
                self.frames.extend(table.slice(0, room).to_pylist())
        elif kind in COUNTED:
            for s in table.column("source").to_pylist():
                self.counted[(kind, s)] += 1
        elif kind in TABLE_COLUMNS:
            kept = self.rows.setdefault(kind, [])
            room = TABLE_ROW_LIMIT - len(kept)
            if room > 0:
                kept.extend(table.slice(0, room).select(TABLE_COLUMNS[kind]).to_pylist())
        elif kind != "batch":
            for r in table.to_pylist():
                self._heading(r)
                self.out.write(row_line(kind, r, wire=r.get("connection") is not None) + "\n")

    def _heading(self, r: dict) -> None:
        if r.get("source") != self.source:
            self.source = r.get("source")
            if r.get("connection") is not None:   # a capture: each row names its own connection and topic
                self.out.write(f"\nDumping {_rel(self.source)}\n")
                return
            where = f"replica {r['replica']}, " if r.get("replica") else ""
            topic, partition = r.get("topic"), r.get("partition")
            tp = f"{topic}-{partition}" if topic is not None and partition is not None else topic or "no partition"
            self.out.write(f"\nDumping {_rel(self.source)} ({where}{tp})\n")

    def _flush(self) -> None:
        for b in self.pending:
            self._heading(b)
            self.out.write(batch_line(b) + "\n")
            for r in self.records.pop((b["source"], b["base_offset"]), ()):
                self.out.write(record_line(r) + "\n")
        self.pending = []
        self.records.clear()

    def close(self, header: dict) -> None:
        from rich.table import Table

        self._flush()
        for (kind, source), n in sorted(self.counted.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            self.out.write(f"{_rel(source)}: {n} {kind.replace('_', ' ')}(s)\n")
        self.out.flush()
        if self.frames:
            self._conversation()
        for kind, rows in self.rows.items():
            t = Table(title=f"{kind} ({_shown(len(rows), self.counts[kind])})", title_justify="left")
            for c in TABLE_COLUMNS[kind]:
                t.add_column(c, overflow="fold")
            for r in rows:
                t.add_row(*(_cell(c, r[c]) for c in TABLE_COLUMNS[kind]))
            self.console.print(t)
        summary = ", ".join(f"{n} {k}" for k, n in sorted(self.counts.items()))
        sel = f" (selection: {header['selection']})" if header.get("selection") else ""
        self.console.print(f"[bold]kaudit {header.get('command')}[/bold]{sel}: {summary or 'no rows'}")

    def _conversation(self) -> None:
        """Requests and responses in time order: the conversation view of a capture."""
        from rich.table import Table

        t = Table(title=f"frames ({_shown(len(self.frames), self.counts['frame'])})", title_justify="left")
        for c in ("time", "connection", "api", "v", "corr", "frames", "key fields", "errors", "latency"):
            t.add_column(c, overflow="fold", justify="right" if c in ("v", "corr", "latency") else "left")
        t.columns[0].no_wrap = True
        for f in sorted(self.frames, key=lambda f: (f["request_ts"] or f["response_ts"] or 0)):
            keys = " ".join(f"{label}={f[k]}" if label else str(f[k]) for k, label in _FRAME_KEYS
                            if f.get(k) not in (None, ""))
            errors = f["error_names"] or ""
            if f["response_frame"] is None and f["request_frame"] is not None:
                errors = "acks=0" if f["acks"] == 0 and f["api_key"] == 0 else "[yellow]no response[/yellow]"
            if f["decode_error"]:
                errors = (errors + " " if errors else "") + f"[yellow]{f['decode_error']}[/yellow]"
            if f["complete"] is False:
                errors = (errors + " " if errors else "") + "[red]incomplete[/red]"
            t.add_row(iso_s(f["request_ts"] or f["response_ts"]), _short_connection(f["connection"]),
                      f["api_name"] or "?", _cell("v", f["api_version"]), _cell("c", f["correlation_id"]),
                      f"{f['request_frame'] or '-'}/{f['response_frame'] or '-'}", keys, errors,
                      duration(f["latency_ms"]) if f["latency_ms"] is not None else "")
        self.console.print(t)


def _rel(path: str | None) -> str:
    if not path:
        return ""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


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
    if column == "source":
        return _rel(value)
    return str(value)
