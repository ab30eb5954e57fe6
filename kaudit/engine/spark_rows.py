"""Row envelopes between the sources, Spark and the folds (no pyspark import: plain Arrow).

A Spark DataFrame has one schema, a decode yields rows of several kinds, so rows travel in an
*envelope*: `__kind` (the row kind), `__split` and `__row` (the split in plan order and the row's
number in it: sorting by them gives back the local engine's order wherever a fold's own order
ties), `__meta` (JSON, for a task's coverage rows) and the union of the kinds' columns, null where
a kind has no such column. Arrow types Spark lacks are widened (uint32 CRCs to int64, int16 to
int32 where kinds disagree) and narrowed back when a kind's table is taken out, so a fold sees
exactly the table the local engine would give it.

The *fold envelope* is the same for the rows each fold selects: `__fold` names the fold.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from kaudit.model import SCHEMAS

KIND, FOLD, SPLIT, ROW, META = "__kind", "__fold", "__split", "__row", "__meta"
META_KIND = "__meta"   # a task's coverage (JSON in __meta), one row per task
# Captures given together: the tcp_fragment rows of one connection key in one chunk, as an Arrow
# IPC payload, for the shuffle that stitches connections across rotated files.
FRAG_KIND = "__frag"
FRAG_KEY, FRAG_FILE, FRAG_FRAME, PAYLOAD = "__key", "__file_index", "__frame", "__payload"
FRAG_FIELDS = [pa.field(FRAG_KEY, pa.string()), pa.field(FRAG_FILE, pa.int32()),
               pa.field(FRAG_FRAME, pa.int64()), pa.field(PAYLOAD, pa.binary())]

DISK_KINDS = ("batch", "record", "txn_log", "offset_commit", "group_metadata", "snapshot_entry",
              "txnindex_entry", "index_entry", "leader_epoch_entry", "checkpoint_entry",
              "partition_metadata", "log_dir", "decode_issue", "skipped")
WIRE_KINDS = ("frame", "batch", "fetch_partition", "txn_event", "topic_name", "connection", "decode_issue")


def spark_type(t: pa.DataType) -> pa.DataType:
    """An Arrow type Spark can hold: unsigned integers widen to the next signed type."""
    if pa.types.is_uint32(t) or pa.types.is_uint64(t):
        return pa.int64()
    if pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_list(t):
        return pa.list_(spark_type(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, spark_type(f.type)) for f in t])
    return t


def spark_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, spark_type(f.type)) for f in schema])


def _wider(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if a == b:
        return a
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return a if a.bit_width >= b.bit_width else b
    raise TypeError(f"kinds disagree on a column's type: {a} vs {b}")


def union_fields(columns_by_kind: dict[str, tuple[str, ...] | None]) -> list[pa.Field]:
    """The union of the named columns of several kinds (None: all of a kind's columns), widened."""
    out: dict[str, pa.DataType] = {}
    for kind, cols in columns_by_kind.items():
        schema = spark_schema(SCHEMAS[kind])
        for name in (cols if cols is not None else schema.names):
            t = schema.field(name).type
            out[name] = _wider(out[name], t) if name in out else t
    return [pa.field(n, t) for n, t in out.items()]


def envelope_schema(kinds, *, fold: bool = False, columns: dict | None = None,
                    fragments: bool = False) -> pa.Schema:
    head = [pa.field(FOLD, pa.string())] if fold else []
    head += [pa.field(KIND, pa.string()), pa.field(SPLIT, pa.int32()), pa.field(ROW, pa.int64()),
             pa.field(META, pa.string())]
    body = union_fields(columns if columns is not None else {k: None for k in kinds})
    return pa.schema(head + body + (FRAG_FIELDS if fragments else []))


def wrap(table: pa.Table, schema: pa.Schema, kind: str, split: int, rows, fold: str | None = None
         ) -> pa.RecordBatch:
    """One envelope record batch of a kind's table; `rows`: its row numbers (array or start)."""
    n = table.num_rows
    if not isinstance(rows, (np.ndarray, pa.Array, pa.ChunkedArray)):
        rows = np.arange(rows, rows + n, dtype=np.int64)
    arrays = []
    for f in schema:
        name = f.name
        if name == FOLD:
            arrays.append(pa.array([fold] * n, pa.string()))
        elif name == KIND:
            arrays.append(pa.array([kind] * n, pa.string()))
        elif name == SPLIT:
            arrays.append(pa.array(np.full(n, split, dtype=np.int32)))
        elif name == ROW:
            arrays.append(rows if isinstance(rows, pa.ChunkedArray) else pa.array(rows, pa.int64()))
        elif name in table.column_names:
            arrays.append(table.column(name).cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def to_ipc(table: pa.Table) -> bytes:
    """A table as Arrow IPC bytes, LZ4-compressed: payloads cross the JVM several times
    (shuffle write, sort, Arrow to the next worker), each copy costs by the byte."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def in_decode_order(table: pa.Table) -> pa.Table:
    """Envelope rows back in the order the tasks decoded them: (split, row)."""
    return table.sort_by([(SPLIT, "ascending"), (ROW, "ascending")])


def one_row(schema: pa.Schema, values: dict) -> pa.RecordBatch:
    """A one-row envelope batch: `values` by column name, null elsewhere."""
    return pa.RecordBatch.from_arrays([pa.array([values.get(f.name)], f.type) for f in schema], schema=schema)


def meta_batch(schema: pa.Schema, split: int, meta: dict, fold: str | None = None) -> pa.RecordBatch:
    return one_row(schema, {FOLD: fold, KIND: META_KIND, SPLIT: split, ROW: 0, META: json.dumps(meta)})


def fragment_batches(schema: pa.Schema, split: int, table: pa.Table) -> list[pa.RecordBatch]:
    """tcp_fragment rows -> one envelope row per (chunk, connection key), payload as Arrow IPC."""
    from kaudit.audit.folds import split_by_key

    out = []
    for (key,), part in split_by_key(table, ("key",)):
        out.append(one_row(schema, {KIND: FRAG_KIND, SPLIT: split, ROW: 0, FRAG_KEY: key,
                                    FRAG_FILE: part.column("file_index")[0].as_py(),
                                    FRAG_FRAME: part.column("frame")[0].as_py(),
                                    PAYLOAD: to_ipc(part)}))
    return out


def unwrap(table: pa.Table, kind: str, columns: tuple[str, ...] | None = None) -> pa.Table:
    """A kind's table out of envelope rows (all of that kind), in the kind's own Arrow types."""
    schema = SCHEMAS[kind]
    names = list(columns) if columns is not None else schema.names
    return pa.table([table.column(n).cast(schema.field(n).type) for n in names],
                    schema=pa.schema([schema.field(n) for n in names]))


def kind_runs(table: pa.Table, column: str = KIND):
    """(value, slice) for each run of equal `column` values (folds.split_by_key on one column)."""
    from kaudit.audit.folds import split_by_key

    for (value,), part in split_by_key(table, (column,)):
        yield value, part
