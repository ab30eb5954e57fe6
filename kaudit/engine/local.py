"""The local engine: an audit plan (engine.plan) executed in one process. Sources stream in plan
order (segments optionally decoded by worker processes, one range of a file each), the folds run
beside decoding on a second thread. Memory stays bounded by the chunks, the streamed folds' state
and the buffered folds' selections."""

from __future__ import annotations

import gc
import threading
from collections import deque
from contextlib import contextmanager
from itertools import chain
from typing import TYPE_CHECKING

from kaudit.engine.decoding import SEGMENT_JOBS, _decode, decode_pcaps, decode_segments  # noqa: F401  (the decodes, here too)
from kaudit.engine.forked_folds import run_forked, should_fork, should_fork_captures
from kaudit.sources.logdir import Plan, plan

if TYPE_CHECKING:
    from kaudit.engine.plan import Audit, AuditRun

# The plan, the folds and their rules load where they are used: a big capture's are made in the
# folds' child (engine.forked_folds), so this process starts its decode without them (~0.02 s
# of imports measured before the first packet).
_LATER = {"Context": "kaudit.audit.folds", "Rows": "kaudit.audit.folds",
          "sorted_stream": "kaudit.audit.folds"}   # (sorted_stream: the engines' sort)


def __getattr__(name: str):
    if name in _LATER:
        import importlib

        return getattr(importlib.import_module(_LATER[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_shared(work, folds) -> list[dict]:
    """engine.shared_folds.run_shared (loaded when the buffered folds run)."""
    from kaudit.engine import shared_folds

    return shared_folds.run_shared(work, folds)


def should_share(work, jobs: int | None) -> bool:
    from kaudit.engine import shared_folds

    return shared_folds.should_share(work, jobs)


# -- decode + audit ----------------------------------------------------------------------------

def execute(audit: Audit, chunks, errors: list[str], captures: dict | None = None,
            jobs: int | None = None) -> AuditRun:
    """The plan run in this process: the facts and the tap on the decoding thread, the folds on
    a second one, at most FOLDS_BEHIND chunks behind (numpy and Arrow release the GIL, so the
    folds overlap decoding, as Parquet encoding does) - or, for log dirs whose decode is mostly
    Python (internal topics) and big captures, in a forked child (engine.forked_folds); the buffered folds after the decode,
    shared with a forked child where that pays (engine.shared_folds; `jobs` 1: never).
    `captures` (wire): the capture summaries the decode fills."""
    from concurrent.futures import ThreadPoolExecutor

    from kaudit.engine.plan import Work

    if should_fork(audit, jobs):   # a decode that holds the GIL: the folds in a child, beside it
        return _execute_forked(lambda: audit, chunks, errors, captures, jobs)
    work = Work(audit, tap=audit.tap)
    if captures is not None:
        work.facts.captures = captures
    finish = _finisher(jobs)
    with _rare_full_collections():
        with ThreadPoolExecutor(1, thread_name_prefix="kaudit-folds") as folds:
            pending: deque = deque()
            for kind, table in chunks:
                work.note(kind, table)
                pending.append(folds.submit(work.fold, kind, table))
                if len(pending) > FOLDS_BEHIND:
                    pending.popleft().result()   # raises the folds' error, if any
            for done in pending:
                done.result()
        findings = finish(work)
        # the run's findings sorted and linked before the collector's thresholds come back: a
        # full collection then walked every fold's state again (15-40 ms after the bench capture)
        return audit.result(findings, work.facts, errors, internal=work.internal)


FOLDS_BEHIND = 4


def _finisher(jobs: int | None):
    """Work -> its findings: the buffered folds shared with a forked child where that pays."""
    return lambda w: w.finish(runner=run_shared if should_share(w, jobs) else None)


@contextmanager
def _rare_full_collections(threshold: int = 100):
    """The cyclic GC's full collections at most 1/10 as often while the audit runs: the folds'
    state (a partition's producers, their sequence runs and views) lives to the end, and each
    full collection walks all of it again (measured on the transaction bench: 7 full collections,
    ~0.2 s of CPU, against ~0.03 s for one). The young generations, where short-lived cycles
    die, are collected as usual."""
    old = gc.get_threshold()
    gc.set_threshold(old[0], old[1], max(old[2], threshold))
    try:
        yield
    finally:
        gc.set_threshold(*old)


def audit_segments(paths: list[str], *, now_ms: int | None = None, select=(), ignore=(),
                   max_batch_bytes: int = 64 << 20, jobs: int | None = None, progress: bool = False,
                   tap=None, folds=None, known: dict | None = None) -> AuditRun:
    """Decode log dirs and run the disk audit (engine.plan.disk_audit): the folds keyed by a
    log's partition stream in plan order, the others' selections are buffered. `known`: facts
    of the captures audited with them (`kaudit audit`)."""
    from kaudit.engine.plan import disk_audit
    from kaudit.sources.segments import Options

    layout = plan(paths)
    errors = list(layout.errors)
    chunks = _decode(layout, Options(max_batch_bytes=max_batch_bytes), jobs, progress)
    ahead: list = []
    if folds is None and (SEGMENT_JOBS if jobs is None else jobs) == 1:
        ahead = _decode_while_loading(chunks)
    audit = disk_audit(paths, now_ms=now_ms, select=select, ignore=ignore, tap=tap,
                       max_batch_bytes=max_batch_bytes, folds=folds, known=known, layout=layout)
    return execute(audit, chain(ahead, chunks), errors, jobs=jobs)


def _decode_while_loading(chunks, most: int = FOLDS_BEHIND) -> list:
    """The first chunks (at most `most`), decoded while another thread loads the disk audit's
    rule modules (kaudit.audit.DISK_FOLDS: ~0.03-0.05 s of imports, Python under the GIL that
    the batch walk leaves free). Only for a decode in this process: no worker is forked while
    that thread runs."""
    import kaudit.audit

    ahead: list = []
    loader = threading.Thread(target=lambda: kaudit.audit.DISK_FOLDS, name="kaudit-rules", daemon=True)
    loader.start()
    try:
        while loader.is_alive() and len(ahead) < most:
            nxt = next(chunks, None)
            if nxt is None:
                break
            ahead.append(nxt)
    finally:
        loader.join()
    return ahead


def audit_pcaps(paths: list[str], options, *, now_ms: int | None = None, select=(), ignore=(),
                tap=None, topic_names: dict | None = None, folds=None) -> AuditRun:
    """Decode captures and run the wire audit: each fold's selection (a few columns of the
    Produce batches, frames and connections: far smaller than the capture) is sorted by the
    fold's (key, order) across all the captures given (rotated files make one timeline), then
    folded. `topic_names`: id -> name facts from elsewhere (the log dirs of `kaudit audit`)."""
    def planned() -> Audit:
        from kaudit.engine.plan import wire_audit

        return wire_audit(paths, options, now_ms=now_ms, select=select, ignore=ignore, tap=tap,
                          names=topic_names, folds=folds)

    summaries: dict = {}
    errors, chunks = decode_pcaps(paths, options, summaries)
    if should_fork_captures(paths, options, tap, options.jobs):
        # the plan made in the folds' child: the rules' modules load there while this process
        # decodes (they cost the decode's start ~0.02 s otherwise)
        return _execute_forked(planned, chunks, errors, summaries, options.jobs)
    return execute(planned(), chunks, errors, summaries, jobs=options.jobs)


def _execute_forked(planned, chunks, errors: list[str], captures: dict | None, jobs: int | None) -> AuditRun:
    """execute's folds in a forked child (engine.forked_folds) beside the decode in this process;
    `planned()` makes the plan (untapped: a tap's rows are this process's) - in the child for
    its work, and here, for the result, once the last chunk is sent (the child is then folding
    it). `captures` (wire): the summaries the decode fills, sent to the child after the last chunk."""
    def work():
        from kaudit.engine.plan import Work

        w = Work(planned())
        if captures is not None:
            w.facts.captures = captures
        return w

    mine: list[Audit] = []

    def meanwhile():
        from kaudit.engine.shared_folds import warm

        mine.append(planned())   # and the report's modules, while the child folds the last chunks
        warm()

    ending = None if captures is None else (lambda: {"captures": captures})
    with _rare_full_collections():
        findings, facts, internal = run_forked(work, chunks, _finisher(jobs), FOLDS_BEHIND, ending, share=True,
                                               jobs=jobs, meanwhile=meanwhile)
        audit = mine[0] if mine else planned()
        return audit.result(findings, facts, errors, internal=internal)   # (as in execute)


def list_transactions(paths: list[str], *, transactional_id: str | None = None,
                      producer_id: int | None = None, selected=None) -> tuple[Plan, list[dict]]:
    """(plan, transactions) for `kaudit txn` (transactions.listed) from the log dirs; `selected`:
    the transactions fold's selection, when another engine decoded it."""
    from kaudit.audit.txn import transactions
    from kaudit.sources.cluster_metadata import transaction_version

    if selected is None:
        p, chunks = decode_segments(paths)
        chunks = ((k, transactions.FOLD.select(k, t)) for k, t in chunks)
    else:
        p, chunks = plan(paths), selected
    return p, transactions.listed(chunks, transactional_id, producer_id, transaction_version(p))


def wire_transactions(pcaps: list[str], options, *, transactional_id: str | None = None,
                      producer_id: int | None = None, topic_names: dict | None = None) -> tuple[list[str], list[dict]]:
    """(unreadable inputs, transactions) of captures for `kaudit txn`: each producer's
    transactions as its requests show them (txn_wire.listed)."""
    from kaudit.audit.folds import Context, Rows
    from kaudit.audit.txn import txn_wire
    from kaudit.engine.plan import wire_audit
    from kaudit.sources.topics import TopicNames

    audit = wire_audit(pcaps, options, tap=Rows(txn_wire.FOLD), names=topic_names, folds=())
    summaries: dict = {}
    errors, chunks = decode_pcaps(pcaps, options, summaries)
    run = execute(audit, chunks, errors, summaries)
    names = TopicNames(run.topic_names)
    items = [(kind, names.label(t)) for kind, t in audit.tap.out]
    ctx = Context(reference_time_ms=run.reference_time_ms, topic_names=run.topic_names)
    return errors, txn_wire.listed(items, ctx, producer_id, transactional_id)
