"""`.index` / `.timeindex` entries as Arrow columns in one vectorised pass.

An index for a 1 GiB segment holds ~250k entries: building them one dict at a time would cost
more than decoding the segment. Same semantics as `protocol.logfiles.decode_offset_index` /
`decode_time_index` (entries end at the first relative offset 0 after the first entry, as
Kafka's DumpLogSegments reads them); the tests hold the two to the same output.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit.model import INDEX_ENTRY
from kaudit.protocol.logfiles import IndexTail

_OFFSET = np.dtype([("relative_offset", ">i4"), ("file_position", ">i4")])
_TIME = np.dtype([("timestamp_ms", ">i8"), ("relative_offset", ">i4")])


CHUNK_ROWS = 16384  # tables are built per chunk: repeated path strings stay small


def index_table(data, base_offset: int, index_type: str, place: dict) -> tuple[pa.Table, IndexTail]:
    """All entries as one table (tests, small files); `index_chunks` for the streaming path."""
    chunks, tail = index_chunks(data, base_offset, index_type, place)
    tables = list(chunks)
    table = pa.concat_tables(tables) if tables else INDEX_ENTRY.empty_table()
    return table, tail


def index_chunks(data, base_offset: int, index_type: str, place: dict):
    """-> (iterator of tables of at most CHUNK_ROWS entries, IndexTail)."""
    dt = _OFFSET if index_type == "offset" else _TIME
    size = dt.itemsize
    whole_end = len(data) - len(data) % size
    entries = np.frombuffer(data, dtype=dt, count=whole_end // size)
    rel = entries["relative_offset"].astype(np.int32)
    stops = np.flatnonzero(rel[1:] == 0)
    n = int(stops[0]) + 1 if len(stops) else len(rel)
    entries, rel = entries[:n], rel[:n]
    end = n * size
    raw = np.frombuffer(data, dtype=np.uint8, count=whole_end)[end:]
    nonzero = np.flatnonzero(raw)
    zero_run = int(nonzero[0]) if len(nonzero) else len(raw)
    zero_fill = zero_run - zero_run % size
    tail = IndexTail(entry_size=size, entries=n, end_position=end, zero_fill_bytes=zero_fill,
                     unexpected_bytes=whole_end - end - zero_fill, partial_bytes=len(data) - whole_end)
    columns = {
        "relative_offset": rel,
        "offset": rel.astype(np.int64) + base_offset,
        "position": np.arange(n, dtype=np.int64) * size,
    }
    if index_type == "offset":
        columns["file_position"] = entries["file_position"].astype(np.int32)
    else:
        columns["timestamp_ms"] = entries["timestamp_ms"].astype(np.int64)
    chunks = (_table(columns, lo, min(n, lo + CHUNK_ROWS), base_offset, index_type, place)
              for lo in range(0, n, CHUNK_ROWS))
    return chunks, tail


def _table(columns: dict, lo: int, hi: int, base_offset: int, index_type: str, place: dict) -> pa.Table:
    n = hi - lo
    cols = {
        "position": pa.array(columns["position"][lo:hi]),
        "index_type": pa.repeat(pa.scalar(index_type), n),
        "segment_base_offset": pa.repeat(pa.scalar(base_offset, pa.int64()), n),
        "relative_offset": pa.array(columns["relative_offset"][lo:hi]),
        "offset": pa.array(columns["offset"][lo:hi]),
        "file_position": pa.array(columns["file_position"][lo:hi]) if index_type == "offset"
        else pa.nulls(n, pa.int32()),
        "timestamp_ms": pa.array(columns["timestamp_ms"][lo:hi]) if index_type == "time"
        else pa.nulls(n, pa.int64()),
    }
    for k in ("source", "replica", "log_dir", "topic"):
        cols[k] = pa.repeat(pa.scalar(place.get(k), pa.string()), n)
    cols["partition"] = pa.repeat(pa.scalar(place.get("partition"), pa.int32()), n)
    return pa.Table.from_arrays([cols[f.name] for f in INDEX_ENTRY], schema=INDEX_ENTRY)
