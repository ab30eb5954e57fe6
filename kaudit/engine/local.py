"""The local engine: streams sources in-process (optionally over worker processes, one file each)
and hands (kind, Arrow table) chunks on in plan order. Memory stays bounded by the chunks."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit import WIRE_FOLDS, Context, disk_folds, sort_findings
from kaudit.audit.folds import split_by_key
from kaudit.engine import coverage
from kaudit.sources.logdir import Plan, log_dir_clusters, plan, replicated_partitions
from kaudit.sources.segments import Options, decode_target
from kaudit.sources.splits import decode_split, split_plan
from kaudit.sources.topics import TopicNames


def decode_segments(paths: list[str], *, deep: bool = False, max_batch_bytes: int = 64 << 20,
                    jobs: int | None = None, progress: bool = False
                    ) -> tuple[Plan, Iterator[tuple[str, pa.Table]]]:
    """`jobs` None: one process (SEGMENT_JOBS)."""
    p = plan(paths)
    options = Options(deep=deep, max_batch_bytes=max_batch_bytes)
    if jobs is None:
        jobs = SEGMENT_JOBS
    chunks = _parallel(p, options, jobs) if jobs > 1 else _serial(p, options)
    if progress:
        chunks = _with_progress(p, chunks)
    return p, chunks


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


def readable_files(paths: list[str]) -> tuple[list[str], list[str]]:
    """(errors, readable) for input files named on the command line."""
    errors, readable = [], []
    for p in paths:
        if not os.path.isfile(p):
            errors.append(f"{p}: no such file")
        elif not os.access(p, os.R_OK):
            errors.append(f"{p}: permission denied")
        else:
            readable.append(p)
    return errors, readable


# -- decode + audit ----------------------------------------------------------------------------

@dataclass
class AuditRun:
    """What an audit produced: findings, coverage and the reference time, for the report."""

    findings: list[dict] = field(default_factory=list)
    coverage: dict = field(default_factory=dict)
    reference_time_ms: int | None = None
    errors: list[str] = field(default_factory=list)
    engine: str = "local"
    application_id: str | None = None   # the Spark application, when the Spark engine ran
    topic_names: dict = field(default_factory=dict)   # topic id -> name, from every input


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


def _keep(rules_selected, rules_ignored):
    def keep(f: dict) -> bool:
        if rules_selected and f["rule"] not in rules_selected:
            return False
        return f["rule"] not in rules_ignored
    return keep


def audit_segments(paths: list[str], *, now_ms: int | None = None, select=(), ignore=(),
                   max_batch_bytes: int = 64 << 20, jobs: int | None = None, progress: bool = False,
                   tap=None) -> AuditRun:
    """Decode log dirs and stream the rows through the disk folds. Rows arrive grouped by replica
    and partition in log order (the plan's order), which is the folds' (key, order): nothing is
    buffered beyond one chunk and each fold's state for the current partition."""
    p, chunks = decode_segments(paths, max_batch_bytes=max_batch_bytes, jobs=jobs, progress=progress)
    run = AuditRun(errors=list(p.errors))
    ctx = Context(reference_time_ms=now_ms)
    clusters = log_dir_clusters(p)
    folds = disk_folds(replicated_partitions(p, clusters), clusters)
    states = [(f, f.make(ctx)) for f in folds if not f.buffered]
    # cross-partition folds (transactions by producer id): their selection is buffered and
    # folded sorted at the end, like audit_pcaps does
    buffered = {f.name: (f, []) for f in folds if f.buffered}
    keep = _keep(set(select), set(ignore))
    cov = coverage.new_disk()
    cov["files"] = sum(1 for t in p.targets if t.kind != "skipped")
    cov["bytes"] = p.total_bytes

    def fold(kind, table):
        for f, state in states:
            sel = f.select(kind, table)
            if sel is not None:
                run.findings.extend(x for x in state.feed(kind, sel) if keep(x))
        for f, items in buffered.values():
            sel = f.select(kind, table)
            if sel is not None:
                items.append((kind, sel))

    with _Worker(fold) as worker:   # the folds run beside decoding, as Parquet encoding does
        for kind, table in chunks:
            coverage.add_disk(cov, kind, table)
            if tap is not None:   # audit_both: the join's rows, from the same decode pass
                tap(kind, table)
            worker.put(kind, table)
    latest = cov.pop(coverage.LATEST)
    ctx.reference_time_ms = now_ms if now_ms is not None else latest
    for f, state in states:
        run.findings.extend(x for x in state.finish() if keep(x))
    for name in list(buffered):
        f, items = buffered.pop(name)
        run.findings.extend(x for x in fold_selection(f, items, ctx) if keep(x))
    run.findings = sort_findings(run.findings)
    run.coverage = coverage.settle(cov)
    run.reference_time_ms = ctx.reference_time_ms
    return run


def audit_pcaps(paths: list[str], options, *, now_ms: int | None = None, select=(), ignore=(),
                tap=None, topic_names: dict | None = None) -> AuditRun:
    """Decode captures and run the wire folds. A fold's rows are selected (a few columns of the
    Produce batches, frames and connections: far smaller than the capture), sorted by the fold's
    (key, order) across all the captures given (rotated files make one timeline), then folded.
    `topic_names`: id -> name facts from elsewhere (the log dirs of `kaudit audit`)."""
    summaries: dict = {}
    errors, chunks = decode_pcaps(paths, options, summaries)
    run = AuditRun(errors=errors)
    picked: dict[str, list[tuple[str, pa.Table]]] = {f.name: [] for f in WIRE_FOLDS}
    cov = coverage.new_wire()
    names = TopicNames(topic_names)
    for kind, table in chunks:
        coverage.add_wire(cov, kind, table)
        names.learn(kind, table)
        if tap is not None:   # audit_both: the join's rows, from the same decode pass
            tap(kind, table)
        for fold in WIRE_FOLDS:
            sel = fold.select(kind, table)
            if sel is not None:
                picked[fold.name].append((kind, sel))
    last = [s.last_ts for s in summaries.values() if s.last_ts is not None]
    ref = now_ms if now_ms is not None else (int(max(last) * 1000) if last else None)
    ctx = Context(reference_time_ms=ref, topic_names=names.names)
    keep = _keep(set(select), set(ignore))
    for fold in WIRE_FOLDS:
        run.findings.extend(f for f in fold_selection(fold, picked.pop(fold.name), ctx) if keep(f))
    run.findings = sort_findings(names.name_findings(run.findings))
    run.topic_names = names.names
    coverage.note_names(cov, names.names)
    coverage.settle(cov)
    cov["packets"] = sum(s.packets for s in summaries.values())
    cov["captures"] = {p: {"packets": s.packets, "tcp_packets": s.tcp_packets,
                           "kafka_connections": s.kafka_connections} for p, s in summaries.items()}
    run.coverage = cov
    run.reference_time_ms = ref
    return run


def fold_selection(fold, items: list[tuple[str, pa.Table]], ctx: Context):
    """The findings of a fold over its whole selection (`items`: its (kind, table) chunks), as
    every engine runs a fold that sees all its rows at once: the fold's `prepare` first where it
    has one (txn_wire joins its rows, the transactions thin theirs), then the rows sorted by the
    fold's key. `items` is emptied once prepared: only the prepared rows stay for the sort."""
    if ctx.topic_names is not None:   # the wire's topics named before any key groups them
        names = TopicNames(ctx.topic_names)
        items[:] = [(kind, names.label(t)) for kind, t in items]
    if hasattr(fold, "prepare"):
        prepared = fold.prepare(items, ctx)
        if prepared is not items:
            items.clear()
        items = prepared
    return fold.run(sorted_stream(fold, items), ctx)


def sorted_stream(fold, items: list[tuple[str, pa.Table]]):
    """The (kind, table) chunks of a fold sorted by its key (then its order columns, where a kind
    has them); the kinds of one key come together."""
    by_kind: dict[str, list[pa.Table]] = {}
    for kind, t in items:
        by_kind.setdefault(kind, []).append(t)
    slices = []
    for rank, kind in enumerate(sorted(by_kind)):
        t = pa.concat_tables(by_kind[kind])
        cols = [c for c in fold.key + fold.order if c in t.column_names]
        t = t.sort_by([(c, "ascending") for c in cols])
        for k, part in split_by_key(t, fold.key):
            slices.append((tuple((v is None, v) for v in k), rank, kind, part))
    slices.sort(key=lambda s: (s[0], s[1]))
    for _, _, kind, part in slices:
        yield kind, part


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
