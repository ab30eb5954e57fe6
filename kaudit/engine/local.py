"""The local engine: streams sources in-process (optionally over worker processes, one file each)
and hands (kind, Arrow table) chunks on in plan order. Memory stays bounded by the chunks."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.sources.logdir import Plan, plan
# DecodeError comes through the source: the engine does not import protocol/ (DESIGN.md §1)
from kaudit.sources.pcap import DecodeError, PcapSummary, decode_capture
from kaudit.sources.segments import Options, decode_target


def decode_segments(paths: list[str], *, deep: bool = False, max_batch_bytes: int = 64 << 20,
                    jobs: int = 1, progress: bool = False) -> tuple[Plan, Iterator[tuple[str, pa.Table]]]:
    p = plan(paths)
    options = Options(deep=deep, max_batch_bytes=max_batch_bytes)
    chunks = _parallel(p, options, jobs) if jobs > 1 else _serial(p, options)
    if progress:
        chunks = _with_progress(p, chunks)
    return p, chunks


def _serial(p: Plan, options: Options):
    for t in p.targets:
        yield from decode_target(t, options)


def _decode_one(args):
    target, options = args
    return list(decode_target(target, options))


def _parallel(p: Plan, options: Options, jobs: int):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(jobs) as pool:
        # imap keeps plan order; each worker holds one file's chunks at a time.
        for chunks in pool.imap(_decode_one, [(t, options) for t in p.targets], chunksize=1):
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
    """(unreadable inputs, chunks) for capture files; `summaries[path]` is filled as each is read."""
    errors = []
    readable = []
    for p in paths:
        if not os.path.isfile(p):
            errors.append(f"{p}: no such file")
        elif not os.access(p, os.R_OK):
            errors.append(f"{p}: permission denied")
        else:
            readable.append(p)

    def chunks():
        for p in readable:
            summaries[p] = PcapSummary()
            try:
                yield from decode_capture(p, options, summaries[p])
            except DecodeError as e:
                errors.append(f"{p}: {e.message}")
            except OSError as e:
                errors.append(f"{p}: {e.strerror or e}")

    return errors, chunks()
