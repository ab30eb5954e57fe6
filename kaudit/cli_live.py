"""`kaudit pcap -` (a capture on standard input) and `kaudit pcap --follow FILE` (a capture still
being written): the live executor (engine/live.py) behind the same report as a file's.

With `--format ndjson` each finding is written as soon as it is settled (one line, flushed), and
the end of the stream (or Ctrl-C) writes the findings not written yet: none twice. The other
formats are written once, at the end. Exit codes as for a file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from kaudit.cli_common import CAPTURE_EXPECTED, err, exit_unreadable, no_kafka_traffic


def run_live(files: list[Path], follow: bool, follow_idle: Optional[float], options, now_ms, rules, ign):
    """(source name, reader of its bytes)."""
    from kaudit.engine.live import follow_reader, stream_reader

    if len(files) != 1:
        err("[red]error:[/red] a live capture is one input: '-' (standard input) or --follow FILE")
        raise typer.Exit(2)
    name = str(files[0])
    if follow and name == "-":
        err("[red]error:[/red] --follow takes a file; standard input is read to its end anyway")
        raise typer.Exit(2)
    if follow:
        try:
            reader = follow_reader(name, follow_idle)
            next_chunk = next(reader, b"")   # opens it: an unreadable file fails here
        except OSError as e:
            exit_unreadable([f"{name}: {e.strerror or e}"], CAPTURE_EXPECTED)
        reader = _chain(next_chunk, reader)
        source = name
    else:
        reader, source = stream_reader(sys.stdin.fileno()), "-"
    return source, reader


def _chain(first, rest):
    yield first
    yield from rest


def live_report(files, follow, follow_idle, options, now_ms, rules, ign, format, output, fail_on, sel, report):
    """Run the live audit and write its report (`report`: the file commands' writer)."""
    from kaudit.cli_engine import lean_local

    lean_local()   # a live capture runs on the local engine (pandas alone: ~40 MB held for hours)
    from kaudit.engine.live import audit_live
    from kaudit.protocol.errors import DecodeError

    source, reader = run_live(files, follow, follow_idle, options, now_ms, rules, ign)
    written: set = set()
    emit = None
    if format.value == "ndjson" and output is None:
        def emit(f):
            if (sel or getattr(sel, "min_severity", None)) and not sel.finding(f):
                return   # outside the selection: not in the report either
            sys.stdout.write(json.dumps(_out(f), separators=(",", ":"), default=str) + "\n")
            sys.stdout.flush()
            written.add(f["id"])
    try:
        run = audit_live(source, reader, options, now_ms=now_ms, select=rules, ignore=ign, emit=emit)
    except DecodeError as e:
        exit_unreadable([f"{source}: {e}"], CAPTURE_EXPECTED)
    why = no_kafka_traffic(run.coverage.get("captures") or {}, options.kafka_ports)
    if why:
        exit_unreadable([why], CAPTURE_EXPECTED)
    report(run, written)


def _out(f: dict) -> dict:
    from kaudit.report.findings import _finding_out

    return _finding_out(f)
