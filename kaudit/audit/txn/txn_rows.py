"""The transactions fold's rows on the Arrow side (transactions.py holds the fold itself): what a
chunk's selection keeps, what `prepare` hands to the sort, and one producer's rows as dicts.

Invariants:
- `runs` folds each run of a producer's non-transactional batches - consecutive among that
  producer's rows of a chunk (one file), same epoch, offsets increasing - into one row spanning
  them (`batches` counts them; every other row counts 1). The fold reads such batches only to
  list the stretches written inside an open transaction of their producer (assemble_replica
  joins a stretch's rows, so chunking changes nothing), and a run lies wholly inside or outside
  one: the transaction's data and marker are batches of the same producer on that partition,
  so they would have cut the run. (Where two files of one replica overlap
  in offsets - offset-overlap reports it - the fold's offset order interleaves two versions of
  the log, and a run may fall on the other side of a boundary than some of its batches would.)
  Since Kafka 3.0 every producer is idempotent by default: without runs, the fold would buffer a
  row per batch of the log.
- `lean` changes types, never values: string columns become dictionary-encoded (a chunk comes
  from one file: its `source` path, topic and replica are stored once instead of per row). An
  engine that needs plain types casts them back (Arrow casts a dictionary to its value type).
- `prepare` returns the rows the exact path (assemble + judge) must see, in their input order:
  the selection minus (1) the non-transactional batches of producer ids transactional nowhere
  (only non-transactional-write-in-transaction reads them, for transactional producers) and
  (2) every row of the producer ids txn_clean certifies finding-free. The key and order columns
  of what it returns are plain (Arrow cannot sort dictionary columns); the others may stay
  dictionary-encoded. Its only global fact, whether any `__transaction_state` row was selected,
  goes to `ctx.txn_state_seen` (from `ctx.selected_kinds` where the engine settled it):
  findings do not depend on how the engine chunks the rows, nor on how it shares the producer
  ids out.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.txn import txn_clean
from kaudit.audit.txn.txn_facts import bool_column, int_column
from kaudit.audit.folds import Context


BATCHES = "batches"   # the batches a row stands for (runs)


def runs(table: pa.Table) -> pa.Table:
    """The batch selection of one chunk with its runs of non-transactional batches folded (see
    the module docstring), and a `batches` column."""
    n = table.num_rows
    plain = ~(bool_column(table, "is_transactional") | bool_column(table, "is_control"))
    if n < 2 or plain.sum() < 2:
        return table.append_column(BATCHES, pa.array(np.ones(n, np.int32)))
    pid = _int(table, "producer_id")
    if (pid[1:] < pid[:-1]).any():   # producers interleave: each one's rows together, in order
        order = np.argsort(pid, kind="stable")
        table, pid, plain = table.take(pa.array(order)), pid[order], plain[order]
    epoch = _int(table, "producer_epoch")
    base, last = _int(table, "base_offset"), _int(table, "last_offset")
    same = plain[1:] & plain[:-1] & (pid[1:] == pid[:-1]) & (epoch[1:] == epoch[:-1]) & (base[1:] > last[:-1])
    for name in ("source", "replica", "topic", "partition"):   # one file: true in practice
        col = table.column(name)
        same &= pc.fill_null(pc.equal(col[1:], col[:-1]), False).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.append(True, ~same))
    if len(starts) == n:
        return table.append_column(BATCHES, pa.array(np.ones(n, np.int32)))
    ends = np.append(starts[1:], n) - 1
    out = table.take(pa.array(starts))
    out = out.set_column(out.schema.get_field_index("last_offset"), "last_offset",
                         table.column("last_offset").take(pa.array(ends)))
    low = np.iinfo(np.int64).min   # null
    top = np.maximum.reduceat(pc.fill_null(table.column("max_timestamp_ms"), low).to_numpy(
        zero_copy_only=False).astype(np.int64), starts)
    out = out.set_column(out.schema.get_field_index("max_timestamp_ms"), "max_timestamp_ms",
                         pa.array(top, mask=top == low).cast(table.schema.field("max_timestamp_ms").type))
    return out.append_column(BATCHES, pa.array((ends - starts + 1).astype(np.int32)))


def _int(table: pa.Table, name: str) -> np.ndarray:
    """An integer column as int64 (null: -1, never equal to a real offset, id or epoch run)."""
    return int_column(table, name, fill=-1)[0]


def lean(table: pa.Table) -> pa.Table:
    """The selection of one chunk with its string columns dictionary-encoded."""
    for i, f in enumerate(table.schema):
        if pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            table = table.set_column(i, f.name, pc.dictionary_encode(table.column(i)))
    return table


def _concat(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    if any(t.schema != tables[0].schema for t in tables):   # mixed plain / dictionary chunks
        tables = [_plain(t) for t in tables]
    return pa.concat_tables(tables)


def _plain(table: pa.Table, names=None) -> pa.Table:
    """`table` with its dictionary columns (of `names`, default all) decoded."""
    for i, f in enumerate(table.schema):
        if pa.types.is_dictionary(f.type) and (names is None or f.name in names):
            table = table.set_column(i, f.name, table.column(i).cast(f.type.value_type))
    return table


def _keep(table: pa.Table, mask: np.ndarray) -> pa.Table:
    return table if mask.all() else table.filter(pa.array(mask))


# The fast path on or off (off: the reference path, every transactional producer judged exactly;
# the transaction tests run both; KAUDIT_TXN_REFERENCE=1 turns it off for a run).
FAST_PATH = os.environ.get("KAUDIT_TXN_REFERENCE") != "1"


def prepare(items: list[tuple[str, pa.Table]], ctx: Context, sort_columns: tuple[str, ...],
            certify: bool | None = None, rules: tuple[str, ...] | None = None) -> list[tuple[str, pa.Table]]:
    """The rows the exact path needs (see the module docstring); `certify=False` keeps every
    transactional producer (the reference the certification is tested against), None: as
    FAST_PATH says. `rules`: the rule ids the fold runs, whose own predicates certify."""
    from kaudit.audit.registry import RULES

    if certify is None:
        certify = FAST_PATH
    if ctx.txn_state_seen is None:
        ctx.txn_state_seen = ("txn_log" in ctx.selected_kinds if ctx.selected_kinds is not None
                              else any(kind == "txn_log" and t.num_rows for kind, t in items))
    by_kind: dict[str, list[pa.Table]] = {}
    for kind, t in items:
        if t.num_rows:
            by_kind.setdefault(kind, []).append(t)
    tables = {kind: _concat(ts) for kind, ts in by_kind.items()}
    batches, txn_log = tables.get("batch"), tables.get("txn_log")
    if batches is not None:
        pid = batches.column("producer_id")
        txn = pc.fill_null(batches.column("is_transactional"), False)
        pids = pc.unique(pid.filter(txn))
        if txn_log is not None:
            pids = pc.unique(pa.chunked_array([pids, pc.unique(txn_log.column("producer_id"))]))
        keep = pc.or_(txn, pc.is_in(pid.cast(pa.int64()), value_set=pids.cast(pa.int64()).drop_null()))
        tables["batch"] = batches = _keep(batches, keep.to_numpy(zero_copy_only=False))
    if certify:
        clean = txn_clean.clean_producers(batches, txn_log, None if rules is None else [RULES[r] for r in rules])
        if ctx.producer_lineage:
            # a producer id its transactional id left behind: its epochs ended at the move, which
            # the certifier does not see (txn_lineage): judged exactly
            clean = clean[~np.isin(clean, np.fromiter(ctx.producer_lineage, np.int64))]
        clean = pa.array(clean, pa.int64())
        if len(clean):
            for kind in ("batch", "txn_log"):
                if kind in tables:
                    t = tables[kind]
                    drop = pc.is_in(t.column("producer_id").cast(pa.int64()), value_set=clean)
                    tables[kind] = _keep(t, ~drop.to_numpy(zero_copy_only=False))
    return [(kind, _plain(t, sort_columns)) for kind, t in tables.items() if t.num_rows]


def _pylist(col) -> list:
    """A column as Python values, faster than to_pylist for plain numbers and dictionaries."""
    if col.null_count == 0 and (pa.types.is_integer(col.type) or pa.types.is_boolean(col.type)):
        return col.to_numpy().tolist()
    if pa.types.is_dictionary(col.type):
        out: list = []
        for chunk in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
            values = chunk.dictionary.to_pylist()
            idx = chunk.indices
            if idx.null_count:
                out.extend(None if i is None else values[i] for i in idx.to_pylist())
            else:
                out.extend(values[i] for i in idx.to_numpy().tolist())
        return out
    return col.to_pylist()


def rows(tables: list[pa.Table]) -> list[dict]:
    """The rows of some tables of one kind (same columns) as dicts, in order."""
    out: list[dict] = []
    for t in tables:
        names = t.column_names
        out.extend(dict(zip(names, vals)) for vals in zip(*(_pylist(t.column(n)) for n in names)))
    return out
