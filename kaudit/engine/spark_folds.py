"""The folds on Spark's side (no pyspark import): what a task selects for each fold, and the fold
run over a sorted partition from `mapInArrow`. Both call the very functions the local engine calls
(`Fold.select`, `Fold.make(ctx).feed/finish`), so the findings are the same.

Within a key, rows reach a fold in the local engine's order: a streaming (per-partition) disk fold
in decode order, i.e. by its `order` then (split, row); a fold the local engine feeds through
`sorted_stream` (the wire folds, the buffered ones) one kind after another, each by its `order`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from kaudit.audit import DISK_FOLDS, WIRE_FOLDS
from kaudit.audit.folds import Context, Fold
from kaudit.engine import coverage
from kaudit.engine.spark_rows import KIND, ROW, SPLIT, envelope_schema, kind_runs, meta_batch, unwrap, wrap
from kaudit.model import FINDING, table_from_rows

FOLDS = {"disk": DISK_FOLDS, "wire": WIRE_FOLDS}


def fold_by_name(name: str) -> Fold:
    for f in DISK_FOLDS + WIRE_FOLDS:
        if f.name == name:
            return f
    raise KeyError(name)


def fold_schema(side: str) -> pa.Schema:
    """The fold envelope of one side (disk or wire): every fold's input columns."""
    cols: dict[str, list] = {}
    for f in FOLDS[side]:
        for kind, names in f.inputs.items():
            have = cols.setdefault(kind, [])
            have.extend(n for n in names if n not in have)
    return envelope_schema(cols, fold=True, columns={k: tuple(v) for k, v in cols.items()})


def streamed_by_local(fold: Fold, side: str) -> bool:
    """True: the local engine feeds this fold in decode order (a per-partition disk fold)."""
    return side == "disk" and not getattr(fold, "buffered", False)


def sort_columns(fold: Fold, side: str) -> list[str]:
    if streamed_by_local(fold, side):
        return list(fold.key) + list(fold.order) + [SPLIT, ROW]
    return list(fold.key) + [KIND] + list(fold.order) + [SPLIT, ROW]


class Selector:
    """Turns one task's decoded chunks into fold-envelope batches, counting coverage as it goes."""

    def __init__(self, side: str, split: int = 0):
        self.side = side
        self.folds = FOLDS[side]
        self.schema = fold_schema(side)
        self.cov = coverage.new_disk() if side == "disk" else coverage.new_wire()
        self.split = split
        self.rows = 0

    def select(self, kind: str, table: pa.Table) -> Iterator[pa.RecordBatch]:
        (coverage.add_disk if self.side == "disk" else coverage.add_wire)(self.cov, kind, table)
        n = table.num_rows
        if n == 0:
            return
        numbered = table.append_column(ROW, pa.array(np.arange(self.rows, self.rows + n, dtype=np.int64)))
        self.rows += n
        for f in self.folds:
            sel = f.select(kind, numbered, extra=(ROW,))
            if sel is not None:
                yield wrap(sel, self.schema, kind, self.split, sel.column(ROW), fold=f.name)

    def meta(self, extra: dict | None = None) -> pa.RecordBatch:
        return meta_batch(self.schema, self.split, dict(extra or {}, cov=self.cov))


def fold_input(table: pa.Table, fold: Fold) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks of a fold's envelope rows, in the fold's own columns and types."""
    for kind, part in kind_runs(table):
        yield kind, unwrap(part, kind, fold.inputs[kind])


def run_fold(fold: Fold, ctx: Context, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A fold over one sorted Spark partition (several keys, each contiguous): findings batches."""
    state = fold.make(ctx)
    for rb in batches:
        out = []
        for kind, t in fold_input(pa.Table.from_batches([rb]), fold):
            out.extend(state.feed(kind, t))
        if out:
            yield from findings_batches(out)
    out = state.finish()
    if out:
        yield from findings_batches(out)


def findings_batches(findings: list[dict]) -> list[pa.RecordBatch]:
    return table_from_rows("finding", findings).to_batches()


def findings_from_table(table: pa.Table) -> list[dict]:
    return table.cast(FINDING).to_pylist() if table.num_rows else []


def context_dict(ctx: Context) -> dict:
    return {k: v for k, v in vars(ctx).items()}


def context_from(d: dict) -> Context:
    ctx = Context()
    for k, v in d.items():
        setattr(ctx, k, v)
    return ctx


def meta_rows(table: pa.Table) -> list[dict]:
    from kaudit.engine.spark_rows import META, META_KIND

    if table.num_rows == 0:
        return []
    kinds = table.column(KIND).to_pylist()
    return [json.loads(m) for k, m in zip(kinds, table.column(META).to_pylist()) if k == META_KIND]
