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
from kaudit.audit.folds import Context, Fold, constant
from kaudit.audit.txn_clean import int_column
from kaudit.engine import coverage
from kaudit.engine.spark_rows import (
    KIND, META_KIND, PAYLOAD, ROW, SPLIT, envelope_schema, from_ipc, kind_runs, meta_batch, one_row, to_ipc, unwrap,
    wrap,
)
from kaudit.model import FINDING, table_from_rows
from kaudit.sources.topics import TopicNames

FOLDS = {"disk": DISK_FOLDS, "wire": WIRE_FOLDS}


def fold_by_name(name: str) -> Fold:
    for f in DISK_FOLDS + WIRE_FOLDS:
        if f.name == name:
            return f
    raise KeyError(name)


def selected_folds(side: str) -> tuple[Fold, ...]:
    """The folds a task selects rows for: the rules', and on the wire the join's taps."""
    from kaudit.engine.joint import WIRE_TAPS

    return FOLDS[side] + (WIRE_TAPS if side == "wire" else ())


def fold_schema(side: str) -> pa.Schema:
    """The fold envelope of one side (disk or wire): every fold's input columns."""
    cols: dict[str, list] = {}
    for f in selected_folds(side):
        for kind, names in f.inputs.items():
            have = cols.setdefault(kind, [])
            have.extend(n for n in names if n not in have)
    return envelope_schema(cols, fold=True, columns={k: tuple(v) for k, v in cols.items()},
                           fragments=side == "wire")


def streamed_by_local(fold: Fold, side: str) -> bool:
    """True: the local engine feeds this fold in decode order (a per-partition disk fold)."""
    return side == "disk" and not fold.buffered


def sort_columns(fold: Fold, side: str) -> list[str]:
    if streamed_by_local(fold, side):
        return list(fold.key) + list(fold.order) + [SPLIT, ROW]
    return list(fold.key) + [KIND] + list(fold.order) + [SPLIT, ROW]


class Selector:
    """Turns one task's decoded chunks into fold-envelope batches, counting coverage as it goes."""

    def __init__(self, side: str, split: int = 0):
        self.side = side
        self.folds = selected_folds(side)
        self.schema = fold_schema(side)
        self.cov = coverage.new_disk() if side == "disk" else coverage.new_wire()
        self.split = split
        self.rows = 0
        self.names = TopicNames()   # the id -> name facts this task saw (the driver unites them)

    def select(self, kind: str, table: pa.Table) -> Iterator[pa.RecordBatch]:
        (coverage.add_disk if self.side == "disk" else coverage.add_wire)(self.cov, kind, table)
        self.names.learn(kind, table)
        self.names.unnamed(kind, table)   # notes the ids this task's rows name topics by
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
        return meta_batch(self.schema, self.split, dict(extra or {}, cov=self.cov, topic_names=self.names.names,
                                                          topic_ids=sorted(self.names.seen_ids)))


def fold_input(table: pa.Table, fold: Fold) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks of a fold's envelope rows (in decode order, or sorted by the fold's
    key), in the fold's own columns and types."""
    for kind, part in kind_runs(table):
        yield kind, unwrap(part, kind, fold.inputs[kind])


def run_fold(fold: Fold, ctx: Context, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A fold over one sorted Spark partition (several keys, each contiguous): findings batches."""
    state = fold.make(ctx)
    names = TopicNames(ctx.topic_names) if ctx.topic_names else None
    for rb in batches:
        out = []
        for kind, t in fold_input(pa.Table.from_batches([rb]), fold):
            if names is not None:   # frames named here (their keys hold no topic); the rest before the shuffle
                t = names.label(t)
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


# -- the disk side in one shuffle ---------------------------------------------------------------
# A task that reads each of its partitions whole runs their per-partition folds itself
# (TaskFolds) and sends only their findings. For the others (a partition cut into splits):
# The per-partition disk folds share their key (replica, topic, partition) and are fed, as in the
# local engine, in decode order. So one shuffle serves them all, and what it moves is a decoded
# *chunk* (the rows of one file: one key), not a row: a Spark row carries the chunk's key, its
# place in decode order (split, first row) and the rows the folds select as an Arrow IPC payload,
# with a flag per fold (the folds' `where` filters read columns the folds do not keep, so they run
# before the shuffle). `repartition(key).sortWithinPartitions(key, split, row).mapInArrow` then
# feeds each fold its rows chunk by chunk, exactly the local engine's stream.
# The buffered (cross-partition) folds ride the same shuffle, keyed by producer id instead: a task
# cuts their selection into buckets (producer id mod partitions), every bucket lands whole on one
# partition, which buffers it and runs `prepare` + the fold at its end, as the local engine does
# with the whole selection (their state is per producer id). What they read besides their rows -
# the reference time (the latest timestamp of all inputs) and whether any coordinator record was
# selected - comes from the tasks' meta rows, which go to every partition: a reduce task starts
# only once every map task has finished, so each one sees them all.

DISK_KEY = ("replica", "topic", "partition")
TAP_KIND = "__tap"
FINDINGS_KIND = "__findings"   # a read task's own findings (TaskFolds)
BUF_KIND = "__buf"   # a buffered fold's chunk: kind "__buf:<fold>:<row kind>"
TYPE = "__type"
RESULT_SCHEMA = pa.schema([pa.field(TYPE, pa.string()), pa.field(PAYLOAD, pa.binary())])
PART = "__part"   # the shuffle partition a key goes to (engine.spark.placement), by value
CHUNK_SCHEMA = pa.schema([pa.field(KIND, pa.string()), pa.field(SPLIT, pa.int32()), pa.field(ROW, pa.int64()),
                          pa.field("replica", pa.string()), pa.field("topic", pa.string()),
                          pa.field("partition", pa.int32()), pa.field(PART, pa.int64()),
                          pa.field(PAYLOAD, pa.binary())])


def key_name(key) -> str:
    return json.dumps(list(key))


def flag(i: int) -> str:
    return f"__f{i}"


def _disk_columns(kind: str) -> list[str]:
    cols: list[str] = []
    for f in DISK_FOLDS:
        cols.extend(n for n in f.inputs.get(kind, ()) if n not in cols)
    return cols


_CONSTANTS = "__constants"   # schema metadata: the columns left out of a payload, with their value


def _drop_constants(t: pa.Table) -> pa.Table:
    """A chunk is one file of one partition: its place columns hold one value each, which the
    payload carries once (in its schema's metadata) instead of once per row."""
    const = {}
    for name in ("replica", "topic", "partition", "source"):
        if name in t.column_names:
            ok, value = constant(t.column(name))
            if ok:
                const[name] = value
    if not const:
        return t
    kept = t.drop_columns(list(const))
    types = {n: str(t.schema.field(n).type) for n in const}
    meta = {_CONSTANTS: json.dumps({"values": const, "types": types})}
    return kept.replace_schema_metadata(meta)


def restore_constants(t: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    meta = t.schema.metadata or {}
    raw = meta.get(_CONSTANTS.encode())
    if raw is None:
        return t
    info = json.loads(raw)
    n = t.num_rows
    for name, value in info["values"].items():
        typ = {"string": pa.string(), "int32": pa.int32()}[info["types"][name]]
        t = t.append_column(pa.field(name, typ), pc.fill_null(pa.nulls(n, typ), pa.scalar(value, typ)))
    return t.replace_schema_metadata(None)


def _chunk_row(kind: str, split: int, row: int, key: tuple, payload: bytes, part: int | None = None
               ) -> pa.RecordBatch:
    return one_row(CHUNK_SCHEMA, dict(zip(CHUNK_SCHEMA.names, (kind, split, row, *key, part, payload))))


class TaskFolds:
    """The per-partition folds run in a read task that holds each of its partitions whole
    (sources.splits.keyed_split_plan): fed as the local engine feeds them - the same selection,
    in decode order - so their findings are the local engine's, with no shuffle of their rows.
    The findings leave as one chunk row (`__findings`) that the reduce side passes on."""

    def __init__(self):
        self.states = [(f, f.make(Context())) for f in DISK_FOLDS if not f.buffered]
        self.found: list[dict] = []

    def feed(self, kind: str, table: pa.Table) -> None:
        for f, state in self.states:
            sel = f.select(kind, table)
            if sel is not None:
                self.found.extend(state.feed(kind, sel))

    def finish(self, split: int, buckets: list) -> Iterator[pa.RecordBatch]:
        for _, state in self.states:
            self.found.extend(state.finish())
        if self.found:
            payload = to_ipc(table_from_rows("finding", self.found))
            yield _chunk_row(FINDINGS_KIND, split, 0, (None, None, None), payload, buckets[split % len(buckets)])


class DiskChunker:
    """One task's decoded chunks -> one Spark row per (chunk, key): the folds' rows, flagged."""

    schema = CHUNK_SCHEMA

    def __init__(self, split: int = 0, join: dict | None = None, placement: dict | None = None,
                 buckets: list | None = None, folds: TaskFolds | None = None, replicated: list | None = None,
                 clusters: dict | None = None):
        from kaudit.audit import disk_folds
        from kaudit.engine.joint import _DiskTap

        # the buffered folds, the replicas fold bound to the partitions held in several log dirs
        self.buffered = [f for f in disk_folds(replicated, clusters) if f.buffered]
        self.folds = folds   # the task's own per-partition folds (it holds its partitions whole)
        self.placement = placement or {}
        self.buckets = buckets or [None]   # the `__part` value of each shuffle partition
        self.selected: dict[str, list[str]] = {}   # buffered fold -> the kinds it selected rows of
        self.cov = coverage.new_disk()
        self.split = split
        self.rows = 0
        self.tap = None if join is None else _DiskTap(sets=join)   # `kaudit audit`: the join's rows

    def select(self, kind: str, table: pa.Table) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        from kaudit.audit.folds import split_by_key

        coverage.add_disk(self.cov, kind, table)
        n = table.num_rows
        first = self.rows
        self.rows += n
        if self.tap is not None:
            self.tap(kind, table)
            for name, rows in (("", self.tap.rows), ("reader", self.tap.reader_rows), ("txnindex", self.tap.txnindex)):
                for t in rows:
                    yield _chunk_row(f"{TAP_KIND}:{name}" if name else TAP_KIND, self.split, first,
                                     (None, None, None), to_ipc(t))
                rows.clear()
        for f in self.buffered:
            yield from self._buffered(f, kind, first, table)
        if self.folds is not None:
            self.folds.feed(kind, table)
            return
        cols = _disk_columns(kind)
        if n == 0 or not cols:
            return
        t = table.select(cols)
        anyone = None
        for i, f in enumerate(DISK_FOLDS):
            if kind not in f.inputs or f.buffered:
                m = pa.array(np.zeros(n, dtype=bool))
            else:
                w = f.where.get(kind)
                m = pa.array(np.ones(n, dtype=bool)) if w is None else pc.fill_null(w(table), False)
            t = t.append_column(flag(i), m)
            anyone = m if anyone is None else pc.or_(anyone, m)
        t = t.append_column(ROW, pa.array(np.arange(first, first + n, dtype=np.int64)))
        kept = pc.sum(anyone).as_py() or 0
        if kept == 0:
            return
        if kept < n:
            t = t.filter(anyone)
        for key, part in split_by_key(t, DISK_KEY):
            yield _chunk_row(kind, self.split, part.column(ROW)[0].as_py(), key, to_ipc(_drop_constants(part)),
                             self.placement.get(key_name(key)))

    def _buffered(self, f: Fold, kind: str, first: int, table: pa.Table) -> Iterator[pa.RecordBatch]:
        sel = f.select(kind, table)
        if sel is None:
            return
        kinds = self.selected.setdefault(f.name, [])
        if kind not in kinds:
            kinds.append(kind)
        bucket = bucket_of(sel, f.key, len(self.buckets))
        for b in np.unique(bucket).tolist():
            part = sel if len(self.buckets) == 1 else sel.filter(pa.array(bucket == b))
            yield _chunk_row(f"{BUF_KIND}:{f.name}:{kind}", self.split, first, (None, None, None), to_ipc(part),
                             self.buckets[b])

    def meta(self, extra: dict | None = None) -> pa.RecordBatch:
        """The task's meta row, once per shuffle partition (`row` = its number; the driver keeps
        row 0): the buffered folds read every task's coverage and selection."""
        extra = dict(extra or {}, cov=self.cov, selected=self.selected)
        if self.tap is not None:
            extra["ranges"] = [[*k, lo, hi] for k, (lo, hi) in self.tap.ranges.items()]
            extra["cleaned"] = [[*k, off] for k, off in self.tap.cleaned.items()]
        meta = json.dumps(extra).encode()
        n = len(self.buckets)
        values = [[META_KIND] * n, [self.split] * n, list(range(n)), [None] * n, [None] * n, [None] * n,
                  self.buckets, [meta] * n]
        return pa.RecordBatch.from_arrays([pa.array(v, f.type) for v, f in zip(values, CHUNK_SCHEMA)],
                                          schema=CHUNK_SCHEMA)


def bucket_of(sel: pa.Table, key: tuple[str, ...], n: int) -> np.ndarray:
    """The bucket (shuffle partition number) of each row of a buffered fold's selection: its
    key's value mod n for one integer column (the producer id; a null one: bucket 0), else a
    stable hash of the key's values (a chunk holds one or a few keys)."""
    if len(key) == 1 and pa.types.is_integer(sel.schema.field(key[0]).type):
        return int_column(sel, key[0])[0] % n
    import zlib

    cols = [sel.column(k).to_pylist() for k in key]
    codes: dict = {}
    out = np.empty(sel.num_rows, np.int64)
    for i, values in enumerate(zip(*cols)):
        b = codes.get(values)
        if b is None:
            b = codes[values] = zlib.crc32(json.dumps(values, default=str).encode()) % n
        out[i] = b
    return out


def _result(kind: str, payload: bytes) -> pa.RecordBatch:
    return one_row(RESULT_SCHEMA, {TYPE: kind, PAYLOAD: payload})


def run_disk(ctx: Context, batches: Iterator[pa.RecordBatch], collect: bool = False) -> Iterator[pa.RecordBatch]:
    """The disk folds over one sorted Spark partition of chunks: the per-partition folds as the
    chunks come, the buffered folds over their buckets at the end. The findings go back as one
    IPC payload, the taps and the coverage as they came. `collect`: the buffered folds' rows go
    back instead of being folded (`kaudit txn` lists them on the driver)."""
    streamed = [(i, f, f.make(ctx)) for i, f in enumerate(DISK_FOLDS) if not f.buffered]
    buffered: dict[str, list[tuple[str, pa.Table]]] = {f.name: [] for f in DISK_FOLDS if f.buffered}
    metas: list[dict] = []
    findings: list[dict] = []
    for rb in batches:
        cols = (rb.column(0).to_pylist(), rb.column(1).to_pylist(), rb.column(2).to_pylist(),
                rb.column(PAYLOAD_INDEX).to_pylist())
        for kind, split, row, payload in zip(*cols):
            if kind == META_KIND:
                metas.append(json.loads(payload))
                if row == 0:
                    yield _result("meta", payload)
                continue
            if kind == TAP_KIND:
                yield _result(f"tap:{split}:{row}", payload)
                continue
            if kind.startswith(TAP_KIND + ":"):   # the readers' join: "tap-<list>:split:row"
                yield _result(f"tap-{kind.split(':', 1)[1]}:{split}:{row}", payload)
                continue
            if kind == FINDINGS_KIND:
                yield _result("findings", payload)
                continue
            if kind.startswith(BUF_KIND):
                _, name, row_kind = kind.split(":")
                if collect:
                    yield _result(f"rows:{name}:{row_kind}:{split}:{row}", payload)
                else:
                    buffered[name].append((row_kind, from_ipc(payload)))
                continue
            t = restore_constants(from_ipc(payload))
            for i, f, state in streamed:
                if kind in f.inputs:
                    mine = t.filter(t.column(flag(i)))
                    if mine.num_rows:
                        findings.extend(state.feed(kind, mine.select(list(f.inputs[kind]))))
    for _, _, state in streamed:
        findings.extend(state.finish())
    if any(buffered.values()):
        findings.extend(_run_buffered(ctx, buffered, metas))
    if findings:
        yield _result("findings", to_ipc(table_from_rows("finding", findings)))


PAYLOAD_INDEX = CHUNK_SCHEMA.get_field_index(PAYLOAD)


def _run_buffered(ctx: Context, buffered: dict, metas: list[dict]) -> list[dict]:
    """The buffered folds over one partition's producer ids (their chunks in decode order), with
    the context settled from every task's meta row as the driver settles it."""
    from kaudit.engine.local import fold_selection

    cov = coverage.new_disk()
    for m in metas:
        coverage.merge(cov, m["cov"])
    if ctx.reference_time_ms is None:
        ctx.reference_time_ms = cov[coverage.LATEST]
    ctx.txn_state_seen = any("txn_log" in m.get("selected", {}).get("transactions", ()) for m in metas)
    out: list[dict] = []
    for name, items in buffered.items():
        out.extend(fold_selection(fold_by_name(name), items, ctx))
    return out


def stitch_rows(mode: str, opts: dict, files: int, schema: pa.Schema,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 2 of rotated captures on an executor: the fragment chunks of the keys of one sorted
    Spark partition -> the stitched connections' rows, in the envelope they came in (`mode`:
    the folds' selection, or every row), then one meta row (their coverage and connection counts)."""
    from pyspark import TaskContext

    from kaudit.engine.spark_sources import pcap_options
    from kaudit.sources.pcap_stitch import Stitcher

    split = files + TaskContext.get().partitionId()   # after every file's own rows
    stitcher = Stitcher(pcap_options(opts), contiguous=True)
    selector = Selector("wire", split) if mode == "audit" else None
    count = [0]

    def emit(kind, table):
        if selector is not None:
            yield from selector.select(kind, table)
        elif table.num_rows:
            yield wrap(table, schema, kind, split, count[0])
            count[0] += table.num_rows

    def tables():
        for rb in batches:
            for payload in rb.column(rb.schema.get_field_index(PAYLOAD)).to_pylist():
                yield from_ipc(payload)

    for t in tables():
        for kind, table in stitcher.feed(t):
            yield from emit(kind, table)
    for kind, table in stitcher.finish(None):
        yield from emit(kind, table)
    meta = {"split": split, "stitched": {s: list(c) for s, c in stitcher.counts.items()}}
    if selector is not None:
        yield selector.meta(meta)
    else:
        yield meta_batch(schema, split, meta)
