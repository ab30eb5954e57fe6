"""The local engine's decoding: inputs -> (kind, Arrow table) chunks in plan order, with no
audit - what `kaudit decode` runs, and what engine.local's audits fold. Kept apart from the
audit so a decode imports no audit module (start-up: ~0.03 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kaudit.sources.inputs import readable_files
from kaudit.sources.logdir import Plan, plan
from kaudit.sources.segments import Options, decode_target
from kaudit.sources.splits import decode_parallel


def decode_segments(paths: list[str], *, deep: bool = False, max_batch_bytes: int = 64 << 20,
                    jobs: int | None = None, progress: bool = False
                    ) -> tuple[Plan, Iterator[tuple[str, pa.Table]]]:
    """`jobs` None: one process (SEGMENT_JOBS)."""
    p = plan(paths)
    return p, _decode(p, Options(deep=deep, max_batch_bytes=max_batch_bytes), jobs, progress)


def _decode(p: Plan, options: Options, jobs: int | None, progress: bool):
    jobs = SEGMENT_JOBS if jobs is None else jobs
    chunks = decode_parallel(p, options, jobs, PARALLEL_SPLIT_BYTES) if jobs > 1 else _serial(p, options)
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


# A task is a range of a segment (or small files packed together) of about this many bytes:
# small enough that the decoded rows of the tasks in flight stay well inside the memory bound
# (a range of one-record batches gives ~1.5 rows per 100 bytes), big enough to amortise the pipe.
PARALLEL_SPLIT_BYTES = 16 << 20


def _with_progress(p: Plan, chunks):
    import pyarrow.compute as pc
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
