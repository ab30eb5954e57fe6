"""The wire source: a capture file -> TCP streams -> Kafka conversations -> rows.

Rows: `frame` (one per request/response pair), `batch` (every record batch of Produce requests
and Fetch responses, with their context), `fetch_partition`, `txn_event`, `connection`,
`decode_issue`. The file is mapped read-only; memory is bounded by the open connections'
unacknowledged bytes and the rows of one chunk. Big captures can be decoded by several processes
(`pcap_parallel`; `auto_jobs` says when), with the same rows in the same order and chunks.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import pyarrow as pa

from kaudit import native
from kaudit.capture import CaptureStreams, ConnOpen, Diverted, StreamData
from kaudit.protocol.errors import DecodeError
from kaudit.sources import cores
from kaudit.sources.pcap_session import (  # noqa: F401  (the capture's options: this module's API too)
    DEFAULT_KAFKA_PORTS, FLUSH_ROWS, PcapOptions, PcapSummary, Session, capture_issues)
from kaudit.sources.wire_rows import WireRows

MIN_PARALLEL_BYTES = cores.MIN_PARALLEL_BYTES  # smaller captures: one process (jobs=None)


def decode_capture(path: str, options: PcapOptions | None = None, summary: PcapSummary | None = None,
                   fragments=None) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks for one capture file. Raises DecodeError if it is no capture.

    `fragments` (pcap_stitch.Fragments, for rotated captures): the connections the file does not
    hold whole are not decoded but handed to it as TCP segments, and its chunks come out among
    the rows'."""
    options = options or PcapOptions()
    summary = summary if summary is not None else PcapSummary()
    with open(path, "rb") as f:  # read-only: kaudit never writes to what it audits
        if os.fstat(f.fileno()).st_size == 0:
            raise DecodeError(f"{path}: empty file, not a capture")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        if fragments is not None:
            fragments.prepare(mm)
        jobs = options.jobs if options.jobs is not None else auto_jobs(len(mm), options.deep)
        if jobs > 1:
            from kaudit.sources.pcap_parallel import decode_parallel

            yield from decode_parallel(mm, path, options, summary, jobs, fragments)
        else:
            yield from _decode(mm, path, options, summary, fragments)
    finally:
        try:
            mm.close()
        except BufferError:  # views still held by rows being written: the GC unmaps it
            pass


def auto_jobs(size: int, deep: bool = False) -> int:
    """Processes for a capture of `size` bytes when the options do not say: KAUDIT_PCAP_JOBS
    (or KAUDIT_JOBS) if set; for `--deep` with the compiled core `cores.auto_jobs` (one per CPU
    from MIN_PARALLEL_BYTES on); else one.

    Measured (issue 19; 2 cores, shared): one process spends ~0.9 s of CPU on the bench capture
    (500,813 packets, 395 MB) after start-up - ~0.6 s decoding, the capture walk ~0.14 s of it,
    and ~0.28 s encoding Parquet on the writer's thread beside it - so it already keeps ~1.35
    cores busy and two cores could save it at most ~0.2 s. Two processes (pcap_parallel) cost
    ~0.6 s of CPU more - every process walks the whole capture, the worker's rows (~50 MB) cross
    a pipe and the merge interleaves them (Arrow take) - and took 0.75x the speed of one on the
    bench capture, 0.63x on 2M packets. On the pure path they cost ~30% more CPU (0.73-0.93x).
    With `--deep` the decode is ~10 s of CPU and two processes add ~6%: 1.34x on 100k packets
    (best of three), but 0.9-0.96x on 500k while the machine was busy: kaudit's processes share
    one scheduling group with the machine's other users (autogroup), so on a loaded machine more
    processes gain nothing."""
    env = os.environ.get("KAUDIT_PCAP_JOBS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if os.environ.get("KAUDIT_JOBS", "").strip() or (deep and native.module("kaudit.sources._cpcap") is not None):
        return cores.auto_jobs(size)
    return 1


def _decode(mm, path, options, summary, fragments=None):
    streams = CaptureStreams(mm, divert=fragments.divert if fragments is not None else None)
    rows = WireRows(path)
    session = Session(path, options, rows)
    session.attach(streams)
    c = native.module("kaudit.sources._cpcap")
    if c is not None and streams.compiled:  # the compiled twin of the loop below
        yield from c.events_loop(streams, session, rows, fragments, summary, FLUSH_ROWS)
    else:
        yield from _events_loop(streams, session, rows, fragments, summary)
    if fragments is not None:
        fragments.end(streams.packets, streams.last_ts)
        yield from fragments.tables()
    session.finish()
    capture_issues(rows, path, streams)
    summary.kafka_connections = session.kafka_connections
    summary.tls = dict(session.tls_status)
    summary.packets, summary.tcp_packets = streams.packets, streams.tcp_packets
    summary.last_ts, summary.dropped = streams.last_ts, dict(streams.dropped)
    yield from rows.tables()


def _events_loop(streams, session, rows, fragments, summary):
    """The capture events into the session's conversations (chunks of rows come out)."""
    convs = session.convs
    for ev in streams.events():
        if type(ev) is StreamData:
            convs[ev.conn_id].data(ev)
        elif type(ev) is Diverted:
            if fragments.add(ev):
                yield from fragments.tables()
        else:
            session.event(ev)
            summary.connections += type(ev) is ConnOpen
        if rows.count >= FLUSH_ROWS:
            yield from rows.tables()
