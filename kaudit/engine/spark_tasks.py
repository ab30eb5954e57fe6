"""The Spark engine's tasks (no pyspark import at module level): an audit plan (engine.plan)
executed in pieces. A read task decodes its splits (or one capture) and does with each chunk
what the local engine does - facts, tap, folds (`plan.Work`) - except that what must meet rows of
other tasks is shipped: the buffered folds' selections to the shuffle partition of their keys,
the streamed folds' rows of a partition cut into several splits to the partition's place, the
taps' rows and the task's facts to the driver. A shuffle partition (`reduce`) settles the facts
of every task and folds what it was sent, as the local engine folds it all.

Between stages every row is a *payload row* (SCHEMA): a tag, where it goes (`__part`: a value
Spark's hash partitioning sends to the wanted shuffle partition), its key (a streamed chunk's
partition, a tcp fragment's connection), its place in decode order (`__split`, `__row`) and an
Arrow IPC payload: a table in its own types, so a fold is given exactly the local engine's table.
"""

from __future__ import annotations

import json
import os
import pickle
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import Tap
from kaudit.audit.txn.txn_facts import int_column
from kaudit.engine.plan import STREAM, Audit, Work
from kaudit.model import FINDING, table_from_rows

PART, KEY, SPLIT, ROW, TAG, PAYLOAD = "__part", "__key", "__split", "__row", "__tag", "__payload"
SCHEMA = pa.schema([(PART, pa.int64()), (KEY, pa.string()), (SPLIT, pa.int32()), (ROW, pa.int64()),
                    (TAG, pa.string()), (PAYLOAD, pa.binary())])
META, FOUND, INTERNAL, FRAGMENT = "meta", "found", "internal", "frag"
STREAMED, BUFFERED, TAP = "s:", "b:", "tap:"   # + kind; + fold:kind; + tap list name
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


def to_ipc(table: pa.Table) -> bytes:
    """Arrow IPC bytes, LZ4-compressed: payloads cross the JVM several times (shuffle write,
    sort, the next worker), each copy costs by the byte."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def key_name(key) -> str:
    return json.dumps(list(key))


@dataclass
class Job:
    """What every task of one Spark job is given (pickled with its functions): the audit (its
    layout left out), the read tasks, the shuffle partitions' `__part` values, where each
    streamed key goes, and the tap the tasks copy."""

    audit: Audit
    tasks: list          # [(items, whole)]: disk Splits / wire (index, path, file_index, stitch, error)
    buckets: list = field(default_factory=lambda: [0])
    placement: dict = field(default_factory=dict)
    tap: Tap | None = None
    files: int = 0       # captures stitched together (the stitch tasks number their splits after them)


# Rows reach the JVM in Arrow batches of at most this many payload bytes (a payload bigger
# than that alone), and a tapped table travels in payloads of at most PAYLOAD_ROWS rows: what a
# task ships is bounded by its chunks, never by what a segment holds.
BATCH_BYTES = 16 << 20
PAYLOAD_ROWS = 1 << 16


class _Out(list):
    """Payload rows (tuples in SCHEMA's order), taken as record batches."""

    def add(self, *row) -> None:
        self.append(row)

    def take(self) -> Iterator[pa.RecordBatch]:
        start, size = 0, 0
        for i, row in enumerate(self):
            if size and size + len(row[5]) > BATCH_BYTES:
                yield self._batch(start, i)
                start, size = i, 0
            size += len(row[5])
        if start < len(self):
            yield self._batch(start, len(self))
        self.clear()

    def _batch(self, a: int, b: int) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(zip(*self[a:b]), SCHEMA)],
                                          schema=SCHEMA)


def read_tasks(job: Job, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over `spark.range(len(tasks))`: each id's read task."""
    for rb in batches:
        for number in rb.column(0).to_pylist():
            items, whole = job.tasks[number]
            work = Work(job.audit, stream=whole, tap=job.tap.fresh() if job.tap is not None else None)
            yield from _ship(job, work, whole, _decode(job.audit, items, work.facts))


def _decode(audit: Audit, items, facts) -> Iterator[tuple[int, Iterator]]:
    """(split, its chunks) for the items of one task."""
    if audit.side == "disk":
        from kaudit.sources.splits import decode_split

        for s in items:
            why = None if s.target.kind == "skipped" else unreadable(s.target.path)
            if why is not None:   # the driver saw the file, this executor cannot read it
                facts.errors.append((s.index, why))
                continue
            yield s.index, decode_split(s, audit.options)
        return
    from kaudit.sources.pcap import PcapSummary

    for index, path, file_index, stitch, error in items:
        facts.captures[path] = PcapSummary()
        if error is not None:
            facts.errors.append((index, error))
            continue
        yield index, _capture(audit.options, index, path, file_index, stitch, facts)


def _capture(options, index: int, path: str, file_index: int, stitch: bool, facts) -> Iterator:
    from kaudit.sources.pcap import DecodeError, decode_capture
    from kaudit.sources.pcap_stitch import failure, split_capture

    summary = facts.captures[path]
    try:
        yield from (split_capture(path, file_index, options, summary) if stitch
                    else decode_capture(path, options, summary))
    except DecodeError as e:
        facts.errors.append((index, failure(path, e)))
    except OSError as e:
        facts.errors.append((index, f"{path}: not readable on {executor()}: {e.strerror or e}"))


def executor() -> str:
    """The executor running this task, for messages: its id where the cluster manager tells it
    (Kubernetes sets SPARK_EXECUTOR_ID; a standalone executor works in `.../app-<id>/<executor
    id>`), and its host."""
    import socket

    ident = os.environ.get("SPARK_EXECUTOR_ID")
    cwd = os.getcwd()
    if not ident and os.path.basename(os.path.dirname(cwd)).startswith("app-"):
        ident = os.path.basename(cwd)
    host = socket.gethostname()
    return f"executor {ident} (host {host})" if ident else f"host {host} (pid {os.getpid()})"


def unreadable(path: str) -> str | None:
    """None, or "path: not readable on <executor>: reason" when this process cannot open it:
    every executor must see the inputs at the driver's paths (docs/spark.md, On a cluster)."""
    try:
        os.close(os.open(path, os.O_RDONLY))
        return None
    except OSError as e:
        return f"{path}: not readable on {executor()}: {e.strerror or e}"


def _ship(job: Job, work: Work, whole: bool, splits: Iterable[tuple[int, Iterator]]) -> Iterator[pa.RecordBatch]:
    """The payload rows of a task's chunks, then its findings (`whole`: it held its streamed
    keys whole and folded them) and its facts, sent to every shuffle partition."""
    out = _Out()
    first_split = None
    for split, chunks in splits:
        first_split = split if first_split is None else first_split
        row = 0
        for kind, table in chunks:
            if kind == "tcp_fragment":   # rotated captures: stitched after a shuffle by connection
                _fragments(out, split, table)
            else:
                work.note(kind, table)
                if work.tap is not None:
                    for name, t in work.tap.drain():
                        # the slices keep the chunk's place: the driver's sort is stable
                        for at in range(0, max(t.num_rows, 1), PAYLOAD_ROWS):
                            out.add(job.buckets[0], None, split, row, TAP + name, to_ipc(t.slice(at, PAYLOAD_ROWS)))
                if whole:
                    work.stream(kind, table)
                else:
                    _streamed(job, out, kind, table, split, row)
                work.select(kind, table)
                _buffered(job, work, out, split, row)
            row += table.num_rows
            yield from out.take()
    if whole:
        found = work.finish(buffered=False)
        if found:
            out.add(job.buckets[0], None, first_split, 0, FOUND, to_ipc(table_from_rows("finding", found)))
    if work.internal:
        out.add(job.buckets[0], None, first_split, 0, INTERNAL, json.dumps(work.internal).encode())
    if work.tap is not None:
        work.facts.tap.append(work.tap.facts())
    meta = pickle.dumps(work.facts)
    for j, part in enumerate(job.buckets):   # every shuffle partition settles every task's facts
        out.add(part, None, first_split, j, META, meta)
    yield from out.take()


def _fragments(out: _Out, split: int, table: pa.Table) -> None:
    """tcp_fragment rows, one payload per connection key, sorted later by (key, file, frame)."""
    from kaudit.audit.folds import split_by_key

    for (key,), part in split_by_key(table, ("key",)):
        out.add(None, key, part.column("file_index")[0].as_py(), part.column("frame")[0].as_py(), FRAGMENT,
                to_ipc(part))


def _streamed(job: Job, out: _Out, kind: str, table: pa.Table, split: int, first: int) -> None:
    """The rows the streamed folds select from a chunk, once: their columns' union, one flag
    column per fold (a streamed fold's select keeps rows and columns as they are), one payload
    per key (replica, topic, partition), sent where the key is folded (Job.placement)."""
    folds = [f for f in job.audit.streamed if kind in f.inputs]
    n = table.num_rows
    if not folds or not n:
        return
    numbered = table.append_column(ROW, pa.array(np.arange(first, first + n, dtype=np.int64)))
    sels = [(f, s) for f in folds if (s := f.select(kind, numbered, extra=(ROW,))) is not None]
    if not sels:
        return
    rows = np.unique(np.concatenate([s.column(ROW).to_numpy() for _, s in sels]))
    cols = list(dict.fromkeys(c for f, _ in sels for c in f.inputs[kind])) + [ROW]
    t = numbered.select(cols) if len(rows) == n else numbered.take(pa.array(rows - first)).select(cols)
    for f, s in sels:
        t = t.append_column("__f:" + f.name, pa.array(np.isin(rows, s.column(ROW).to_numpy())))
    from kaudit.audit.folds import split_by_key

    for key, part in split_by_key(t, STREAM[0]):
        name = key_name(key)
        out.add(job.placement.get(name, job.buckets[0]), name, split, part.column(ROW)[0].as_py(),
                STREAMED + kind, to_ipc(part.drop_columns([ROW])))


def _buffered(job: Job, work: Work, out: _Out, split: int, row: int) -> None:
    """A chunk's selections of the buffered folds, each row sent to the bucket of its key."""
    n = len(job.buckets)
    for f in job.audit.buffered:
        route = job.audit.route(f)
        for kind, sel in work.selected[f.name]:
            bucket = bucket_of(sel, route, n)
            for b in np.unique(bucket).tolist():
                part = sel if n == 1 or len(route) == 0 else sel.filter(pa.array(bucket == b))
                out.add(job.buckets[b], None, split, row, f"{BUFFERED}{f.name}:{kind}", to_ipc(part))
        work.selected[f.name] = []


def bucket_of(sel: pa.Table, route: tuple[str, ...], n: int) -> np.ndarray:
    """The bucket of each row of a buffered fold's selection: its route's value mod n for one
    integer column (a producer id; null: bucket 0), else a stable hash of the route's values (a
    chunk holds one or a few keys), bucket 0 for no route."""
    if n == 1 or not route:
        return np.zeros(sel.num_rows, np.int64)
    if len(route) == 1 and pa.types.is_integer(sel.schema.field(route[0]).type):
        return int_column(sel, route[0])[0] % n
    codes: dict = {}
    out = np.empty(sel.num_rows, np.int64)
    for i, values in enumerate(zip(*(sel.column(k).to_pylist() for k in route))):
        b = codes.get(values)
        if b is None:
            b = codes[values] = zlib.crc32(json.dumps(values, default=str).encode()) % n
        out[i] = b
    return out


def stitch_tasks(job: Job, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Rotated captures, stage 2 (sources.pcap_stitch): the fragment payloads of the keys of one
    sorted Spark partition -> the stitched connections' rows, shipped as a read task ships its
    rows, numbered after every file's own."""
    from pyspark import TaskContext

    from kaudit.sources.pcap_stitch import Stitcher

    stitcher = Stitcher(job.audit.options, contiguous=True)

    def chunks():
        for rb in batches:
            for payload in rb.column(PAYLOAD).to_pylist():
                yield from stitcher.feed(from_ipc(payload))
        yield from stitcher.finish(None)

    work = Work(job.audit, stream=False, tap=job.tap.fresh() if job.tap is not None else None)
    work.facts.stitched = stitcher.counts   # complete once the chunks are, before the facts ship
    yield from _ship(job, work, False, [(job.files + TaskContext.get().partitionId(), chunks())])


def reduce(job: Job, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One shuffle partition, sorted by (key, split, row): every task's facts, the streamed keys
    placed here fed in decode order, the buffered folds' buckets folded at the end. What is
    meant for the driver passes on (a task's facts once: the copy of row 0)."""
    work = Work(job.audit)
    out = _Out()
    for rb in batches:
        tags, rows, payloads = (rb.column(TAG).to_pylist(), rb.column(ROW).to_pylist(),
                                rb.column(PAYLOAD).to_pylist())
        passing = np.zeros(rb.num_rows, bool)
        for i, (tag, row, payload) in enumerate(zip(tags, rows, payloads)):
            if tag == META:
                work.facts.merge(pickle.loads(payload))
                passing[i] = row == 0
            elif tag.startswith(STREAMED):
                t = from_ipc(payload)
                kind = tag[len(STREAMED):]
                work.stream(kind, t, {f.name: _flagged(t, f, kind) for f in job.audit.streamed
                                      if "__f:" + f.name in t.column_names})
            elif tag.startswith(BUFFERED):
                name, kind = tag[len(BUFFERED):].split(":", 1)
                work.selected[name].append((kind, from_ipc(payload)))
                work.facts.kinds.setdefault(name, set()).add(kind)
            else:
                passing[i] = True
        if passing.any():
            yield rb.filter(pa.array(passing))
    found = work.finish()
    if found:
        out.add(job.buckets[0], None, 0, 0, FOUND, to_ipc(table_from_rows("finding", found)))
    if work.internal:
        out.add(job.buckets[0], None, 0, 0, INTERNAL, json.dumps(work.internal).encode())
    yield from out.take()


def _flagged(t: pa.Table, fold, kind: str) -> pa.Table | None:
    flag = t.column("__f:" + fold.name)
    if flag.null_count == 0 and not flag.to_numpy(zero_copy_only=False).any():
        return None
    mine = t if flag.to_numpy(zero_copy_only=False).all() else t.filter(flag)
    return mine.select(list(fold.inputs[kind]))


def collect(job: Job, table: pa.Table):
    """The driver's side: (findings, the facts of every task merged, internal errors); the taps'
    rows go to `job.tap` in decode order."""
    facts = job.audit.facts()
    findings: list[dict] = []
    internal: list[str] = []
    tapped = []
    cols = [table.column(c).to_pylist() for c in (TAG, SPLIT, ROW, PAYLOAD)]
    for tag, split, row, payload in zip(*cols):
        if tag == META:
            facts.merge(pickle.loads(payload))
        elif tag == FOUND:
            findings.extend(from_ipc(payload).cast(FINDING).to_pylist())
        elif tag == INTERNAL:
            internal.extend(json.loads(payload))
        elif tag.startswith(TAP):
            tapped.append((split, row, tag[len(TAP):], payload))
    if job.tap is not None:
        for _, _, name, payload in sorted(tapped, key=lambda x: (x[0], x[1])):
            job.tap.add(name, from_ipc(payload))
        for f in facts.tap:
            job.tap.merge(f)
    return findings, facts, internal
