"""The `record` rows of `--deep` built column by column: one builder per file, two
implementations behind one interface.

- `PyRecordColumns` (the reference): every record decoded by `record_batch.decode_entry`, its
  fields appended to one list per column.
- The compiled `_cbatch.RecordColumns`: walks a well-formed v2 batch's records in C, straight into
  column buffers; any other batch (legacy, control, malformed) it hands back, and the records
  come from `decode_entry` as in the reference (`append`).

`table(place, cols)` turns either builder's columns into the `record` table: the rows the dict
path (`table_from_rows`) gave, at a fraction of the cost.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit import native
from kaudit.model import SCHEMAS
from kaudit.sources.batch_table import _const  # one cache of a file's constant columns

_C = "kaudit.protocol._cbatch"
RECORD = SCHEMAS["record"]
_INTS = {"position": np.int64, "batch_base_offset": np.int64, "offset": np.int64,
         "timestamp_ms": np.int64, "sequence": np.int32, "key_size": np.int32, "value_size": np.int32}
_PLACE = ("source", "replica", "log_dir", "topic", "partition")


class PyRecordColumns:
    """The reference builder: lists per column."""

    _NAMES = ("position", "batch_base_offset", "offset", "timestamp_ms", "sequence", "key", "value",
              "header_keys", "headers", "control_type", "coordinator_epoch")

    def __init__(self):
        self._cols = {n: [] for n in self._NAMES}
        self.rows = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return self.rows

    def add_batch(self, buf, position: int, max_batch_bytes: int) -> bool:
        return False  # every batch goes through decode_entry and `append`

    def add_batches(self, buf, positions, i: int, max_batch_bytes: int, flush_bytes: int):
        return i, i < len(positions)  # declines the first: decode_entry and `append` take it

    def append(self, position, batch_base_offset, offset, timestamp_ms, sequence, key, value,
               header_keys, headers, control_type, coordinator_epoch) -> None:
        c = self._cols
        for name, v in zip(self._NAMES, (position, batch_base_offset, offset, timestamp_ms, sequence,
                                         key, value, header_keys, headers, control_type,
                                         coordinator_epoch)):
            c[name].append(v)
        self.rows += 1
        self.nbytes += 40 + (len(key) if key else 0) + (len(value) if value else 0)

    def take(self) -> dict:
        cols, self._cols = self._cols, {n: [] for n in self._NAMES}
        cols["rows"], self.rows, self.nbytes = self.rows, 0, 0
        return cols


def builder():
    """A new builder: the compiled one unless the pure path is in force."""
    c = native.module(_C)
    return c.RecordColumns() if c is not None else PyRecordColumns()


def _bitmap(valid: bytes, n: int):
    """(validity buffer or None, null count) from one byte per row."""
    flags = np.frombuffer(valid, dtype=np.uint8)[:n].astype(bool)
    nulls = int(n - flags.sum())
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(flags, bitorder="little").tobytes()), nulls


def _column(name: str, typ: pa.DataType, value, n: int) -> pa.Array:
    if isinstance(value, list):  # the reference builder
        return pa.array(value, type=typ)
    if name in _INTS:
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(value)])
    if name == "control_type":
        codes, names = value
        if not names:
            return pa.nulls(n, typ)
        dictionary = pa.array([None] + names, type=typ)
        return dictionary.take(pa.array(np.frombuffer(codes, dtype=np.uint8)[:n].astype(np.int32)))
    if name == "coordinator_epoch":
        data, valid = value
        bitmap, nulls = _bitmap(valid, n)
        return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(data)], null_count=nulls)
    offsets, data, valid = value
    bitmap, nulls = (None, 0) if valid is None else _bitmap(valid, n)
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def table(place: dict, cols: dict) -> pa.Table:
    """The `record` table of a builder's `take()`, the file's `place` in every row."""
    n = cols["rows"]
    sizes = {}
    if isinstance(cols["key"], list):  # the reference builder keeps the values themselves
        sizes = {"key_size": [-1 if k is None else len(k) for k in cols["key"]],
                 "value_size": [-1 if v is None else len(v) for v in cols["value"]]}
    arrays = []
    for f in RECORD:
        if f.name in _PLACE:
            arrays.append(_const(place.get(f.name), n, f.type))
        else:
            arrays.append(_column(f.name, f.type, sizes.get(f.name, cols.get(f.name)), n))
    return pa.Table.from_arrays(arrays, schema=RECORD)
