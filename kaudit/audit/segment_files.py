"""A segment file's name as the rules read it: a `.swap` file the plan reads in place of the
files it replaces (sources.swap_recovery: Kafka's start-up renames it) counts as the file it
becomes - `<base>.log.swap` is that segment's `.log`, its `.index.swap` that segment's index."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc

SWAP = ".swap"


def renamed(path: str) -> str:
    return path[:-len(SWAP)] if path.endswith(SWAP) else path


def stem(path: str) -> str:
    """The segment's path without its extension (the key pairing a .log with its indexes)."""
    return os.path.splitext(renamed(path))[0]


def is_log(path: str) -> bool:
    return renamed(path).endswith(".log")


def log_sources(col) -> pa.Array:
    """Which rows' source is a segment's .log (or its swap)."""
    return pc.or_(pc.ends_with(col, ".log"), pc.ends_with(col, ".log" + SWAP))
