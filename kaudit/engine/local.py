"""The local engine: an audit plan (engine.plan) executed in one process. Sources stream in plan
order (segments optionally decoded by worker processes, one range of a file each), the folds run
beside decoding on a second thread. Memory stays bounded by the chunks, the streamed folds' state
and the buffered folds' selections."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Context
from kaudit.engine.plan import (  # noqa: F401  (fold_selection, sorted_stream, AuditRun: the engine's API)
    Audit, AuditRun, Work, disk_audit, fold_selection, readable_files, sorted_stream, wire_audit,
)
from kaudit.sources.logdir import Plan, plan
from kaudit.sources.segments import Options, decode_target
from kaudit.sources.splits import decode_split, split_plan
from kaudit.sources.topics import TopicNames


def decode_segments(paths: list[str], *, deep: bool = False, max_batch_bytes: int = 64 << 20,
                    jobs: int | None = None, progress: bool = False
                    ) -> tuple[Plan, Iterator[tuple[str, pa.Table]]]:
    """`jobs` None: one process (SEGMENT_JOBS)."""
    p = plan(paths)
    return p, _decode(p, Options(deep=deep, max_batch_bytes=max_batch_bytes), jobs, progress)


def _decode(p: Plan, options: Options, jobs: int | None, progress: bool):
    jobs = SEGMENT_JOBS if jobs is None else jobs
    chunks = _parallel(p, options, jobs) if jobs > 1 else _serial(p, options)
    return _with_progress(p, chunks) if progress else chunks


# Segments decode in one process unless --jobs says otherwise. Measured on 1.07 GB of segments
# (this 2-core machine, Parquet output): 16 KiB batches 0.55 s in one process, 1.12 s in two;
# one-record batches 4.1 s against 13.2 s. The decoded rows cost more to pickle through a
# pipe than to decode (the compiled core walks 2 GB/s), and the main process, which writes or
# audits every row, is the limit either way. Captures are different: a connection's decoding
# costs far more than its rows (sources/pcap.py: one process per core from 64 MiB).
SEGMENT_JOBS = 1


def _serial(p: Plan, options: Options):
    for t in p.targets:
        yield from decode_target(t, options)


def _decode_task(args):
    splits, options = args
    return [c for s in splits for c in decode_split(s, options)]


# A task is a range of a segment (or small files packed together) of about this many bytes:
# small enough that the decoded rows of the tasks in flight stay well inside the memory bound
# (a range of one-record batches gives ~1.5 rows per 100 bytes), big enough to amortise the pipe.
PARALLEL_SPLIT_BYTES = 16 << 20


def _parallel(p: Plan, options: Options, jobs: int):
    """The rows of `_serial`, in its order, decoded by `jobs` worker processes: big segments are
    cut at their own index positions (sources.splits), every range decodes alone and the
    results are taken in plan order, at most 2 x jobs tasks ahead of the one being handed on."""
    import multiprocessing as mp
    from collections import deque

    tasks = split_plan(p, PARALLEL_SPLIT_BYTES, options.max_batch_bytes)
    ctx = mp.get_context("spawn")
    with ctx.Pool(jobs) as pool:
        pending: deque = deque()
        queued = iter(tasks)
        for task in queued:
            pending.append(pool.apply_async(_decode_task, ((task, options),)))
            if len(pending) >= 2 * jobs:
                break
        while pending:
            chunks = pending.popleft().get()
            task = next(queued, None)
            if task is not None:
                pending.append(pool.apply_async(_decode_task, ((task, options),)))
            yield from chunks


def _with_progress(p: Plan, chunks):
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    total = max(p.total_bytes, 1)
    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), transient=True) as bar:
        task = bar.add_task("decoding", total=total)
        for kind, table in chunks:
            if kind == "batch" and table.num_rows:
                bar.update(task, advance=int(pc.sum(table.column("batch_size")).as_py() or 0))
            yield kind, table


def decode_pcaps(paths: list[str], options, summaries: dict) -> tuple[list[str], Iterator[tuple[str, pa.Table]]]:
    """(unreadable inputs, chunks) for capture files; `summaries[path]` is filled as each is read.
    Several files are decoded as one capture (rotated files: connections that span them are
    stitched, sources.pcap_stitch)."""
    from kaudit.sources.pcap_stitch import decode_captures

    errors, readable = readable_files(paths)

    def chunks():
        yield from decode_captures(readable, options, summaries, errors)

    return errors, chunks()


# -- decode + audit ----------------------------------------------------------------------------

class _Worker:
    """Runs `fn(kind, table)` for each chunk put, in order, on a second thread; a small queue
    bounds the chunks in flight. numpy and Arrow release the GIL, so the folds overlap decoding.
    An error in `fn` is raised again in the caller."""

    def __init__(self, fn, depth: int = 4):
        self.fn = fn
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="kaudit-folds", daemon=True)

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if self.error is None:
                try:
                    self.fn(*item)
                except BaseException as e:
                    self.error = e

    def put(self, kind: str, table) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put((kind, table))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None and exc[0] is None:
            raise self.error


def execute(audit: Audit, chunks, errors: list[str], captures: dict | None = None) -> AuditRun:
    """The plan run in this process: the facts and the tap on the decoding thread, the folds
    beside it on a second one (as Parquet encoding does); `captures` (wire): the capture
    summaries the decode fills."""
    work = Work(audit, tap=audit.tap)
    if captures is not None:
        work.facts.captures = captures
    with _Worker(work.fold) as worker:
        for kind, table in chunks:
            work.note(kind, table)
            worker.put(kind, table)
    findings = work.finish()
    return audit.result(findings, work.facts, errors, internal=work.internal)


def audit_segments(paths: list[str], *, now_ms: int | None = None, select=(), ignore=(),
                   max_batch_bytes: int = 64 << 20, jobs: int | None = None, progress: bool = False,
                   tap=None, folds=None) -> AuditRun:
    """Decode log dirs and run the disk audit (engine.plan.disk_audit): the folds keyed by a
    log's partition stream in plan order, the others' selections are buffered."""
    audit = disk_audit(paths, now_ms=now_ms, select=select, ignore=ignore, tap=tap,
                       max_batch_bytes=max_batch_bytes, folds=folds)
    chunks = _decode(audit.layout, audit.options, jobs, progress)
    return execute(audit, chunks, list(audit.layout.errors))


def audit_pcaps(paths: list[str], options, *, now_ms: int | None = None, select=(), ignore=(),
                tap=None, topic_names: dict | None = None, folds=None) -> AuditRun:
    """Decode captures and run the wire audit: each fold's selection (a few columns of the
    Produce batches, frames and connections: far smaller than the capture) is sorted by the
    fold's (key, order) across all the captures given (rotated files make one timeline), then
    folded. `topic_names`: id -> name facts from elsewhere (the log dirs of `kaudit audit`)."""
    audit = wire_audit(paths, options, now_ms=now_ms, select=select, ignore=ignore, tap=tap,
                       names=topic_names, folds=folds)
    summaries: dict = {}
    errors, chunks = decode_pcaps(paths, options, summaries)
    return execute(audit, chunks, errors, summaries)


def list_transactions(paths: list[str], *, transactional_id: str | None = None,
                      producer_id: int | None = None, selected=None) -> tuple[Plan, list[dict]]:
    """(plan, transactions) for `kaudit txn`: each producer's transactions assembled from the
    transactional batches, markers and `__transaction_state` records of the log dirs.
    `selected`: the transactions fold's selection, when another engine decoded it."""
    from collections import defaultdict

    from kaudit.audit import transactions

    if selected is None:
        p, chunks = decode_segments(paths)
        chunks = ((k, transactions.FOLD.select(k, t)) for k, t in chunks)
    else:
        p, chunks = plan(paths), selected
    batches: dict = defaultdict(list)
    states: dict = defaultdict(list)
    by_txn_id: set = set()
    for kind, sel in chunks:
        if sel is None:
            continue
        for r in sel.to_pylist():
            if kind == "batch":
                batches[r["producer_id"]].append(r)
            else:
                states[r["producer_id"]].append(r)
                if r["transactional_id"] == transactional_id:
                    by_txn_id.add(r["producer_id"])
    pids = {pid for pid, rows in batches.items() if any(b["is_transactional"] for b in rows)}
    pids |= set(states)
    if transactional_id is not None:
        pids = by_txn_id
    if producer_id is not None:
        pids &= {producer_id}
    known = bool(states)
    out = []
    for pid in sorted(q for q in pids if q is not None):
        pt = transactions.assemble(pid, batches.get(pid, []), states.get(pid, []), coordinator_known=known)
        out.extend(t for t in transactions.describe(pt)
                   if transactional_id is None or t["transactional_id"] in (transactional_id, None))
    return p, out


def wire_transactions(pcaps: list[str], options, *, transactional_id: str | None = None,
                      producer_id: int | None = None, topic_names: dict | None = None) -> tuple[list[str], list[dict]]:
    """(unreadable inputs, transactions) of captures for `kaudit txn`: each producer's
    transactions as its requests show them (txn_wire's facts, txn_view's rows)."""
    from collections import defaultdict

    from kaudit.audit import txn_view, txn_wire

    summaries: dict = {}
    errors, chunks = decode_pcaps(pcaps, options, summaries)
    names = TopicNames(topic_names)
    items = []
    for kind, table in chunks:
        names.learn(kind, table)
        sel = txn_wire.FOLD.select(kind, table)
        if sel is not None:
            items.append((kind, sel))
    last = [s.last_ts for s in summaries.values() if s.last_ts is not None]
    ctx = Context(reference_time_ms=int(max(last) * 1000) if last else None, topic_names=names.names)
    items = [(kind, names.label(t)) for kind, t in items]
    rows: dict = defaultdict(list)
    for kind, t in txn_wire.FOLD.prepare(items, ctx):
        for r in t.to_pylist():
            if r["producer_id"] is not None and r["producer_id"] >= 0:
                ts = r["ts"] if kind == "txn_event" else r["request_ts"]
                rows[r["producer_id"]].append((ts or 0.0, r["position"] or 0, kind, r))
    out = []
    for pid in sorted(rows):
        if producer_id is not None and pid != producer_id:
            continue
        out.extend(txn_view.describe(txn_wire.producer_facts(pid, rows[pid], ctx)))
    return errors, txn_view.follow(out, transactional_id)
