"""The live executor: the wire audit plan (engine.plan.wire_audit) run over a capture that is still
arriving (sources.live_pcap), emitting each finding as soon as the rows it rests on are settled,
and the whole report at the end of the stream (or Ctrl-C), as for a file.

Nothing here judges: the folds are the file audit's, fed the same rows in the same order; what
changes is when each part of the input is known to be complete ("settled"), by capture time:
- a fold keyed and ordered like wire-produce (one row kind, no prepare, a KeyedState of per-key
  groups) is *streamed*: rows are fed, sorted by (key, order), once their order time
  is below the watermark - the send time of the oldest request still waiting for its response
  on any connection, less REORDER_S for bytes still in flight (TCP holes, frames in several
  segments) - and each group stays open across checkpoints. A row that arrives after the
  watermark passed its time is fed late and counted (coverage `live.late_rows`).
- a buffered fold settles the keys its own Settler (`Fold.live`, audit/folds.py) says nothing
  can change any more - wire-frames a closed connection, the transactions a producer idle past its
  timeout, wire-lso a run of one LSO that is over - and they are folded alone and dropped (the
  settler is told the context known so far first: Settler.learn); a fold without one keeps its selection to the
  end (its settler may still make it smaller, as the readers' does).
The groups of a streamed fold forget a producer idle for PRODUCER_IDLE_S (counted in
`live.producers_forgotten`). A finding is emitted once; the final report holds every finding.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Context, KeyedState, split_by_key
from kaudit.engine.plan import Audit, AuditRun, Work, fold_selection
from kaudit.sources.topics import TopicNames

# Bytes of a request can reach the decoder this long after its first packet (a TCP hole waiting
# for its retransmission, a large request in many segments): the watermark stays this far back.
REORDER_S = 30.0
# A producer's sequence state in a streamed fold is dropped after this long without a batch:
# the fold's own retry memory (wire_produce.RETRY_WINDOW_S) is as long.
PRODUCER_IDLE_S = 900.0
CHECK_EVERY_S = 0.5   # wall-clock seconds between checkpoints while bytes keep coming


class _Streamed:
    """One streamed fold: its rows waiting for the watermark, and its open groups by key."""

    def __init__(self, fold, ctx: Context):
        self.fold = fold
        self.kind = next(iter(fold.inputs))
        self.time_col = fold.order[0]
        self.factory = fold.make(ctx).factory
        self.waiting: list[pa.Table] = []
        self.groups: dict = {}
        self.last_seen: dict = {}   # (key, producer id) -> capture time of its last row
        self.fed_to: float | None = None
        self.late = 0
        self.forgotten = 0

    def feed(self, upto: float | None, names: TopicNames | None) -> list[dict]:
        """Feed the rows whose order time is below `upto` (None: all of them)."""
        if not self.waiting:
            return []
        t = pa.concat_tables(self.waiting)
        if names is not None:
            t = names.label(t)
        ts = pc.fill_null(t.column(self.time_col), 0.0)
        if upto is None:
            ready, self.waiting = t, []
        else:
            mask = pc.less(ts, upto)
            ready = t.filter(mask)
            rest = t.filter(pc.invert(mask))
            self.waiting = [rest] if rest.num_rows else []
        if ready.num_rows == 0:
            return []
        if self.fed_to is not None:
            self.late += pc.sum(pc.less(pc.fill_null(ready.column(self.time_col), 0.0), self.fed_to)).as_py() or 0
        cols = [c for c in self.fold.key + self.fold.order if c in ready.schema.names]
        ready = ready.sort_by([(c, "ascending") for c in cols])
        out = []
        has_pid = "producer_id" in ready.schema.names
        for k, part in split_by_key(ready, self.fold.key):
            group = self.groups.get(k)
            if group is None:
                group = self.groups[k] = self.factory(k)
            out.extend(group.feed(self.kind, part))
            if has_pid:
                last = pc.max(part.column(self.time_col)).as_py()
                for pid in pc.unique(part.column("producer_id")).to_pylist():
                    self.last_seen[(k, pid)] = last
        if upto is not None:
            self.fed_to = upto if self.fed_to is None else max(self.fed_to, upto)
        return out

    def forget(self, before: float) -> None:
        """Drop the state of producers with no row since `before` (capture time)."""
        for (k, pid), last in list(self.last_seen.items()):
            if last is not None and last < before:
                del self.last_seen[(k, pid)]
                pids = getattr(self.groups.get(k), "pids", None)
                if pids is not None and pids.pop(pid, None) is not None:
                    self.forgotten += 1

    def finish(self) -> list[dict]:
        out = self.feed(None, None)
        for group in self.groups.values():
            out.extend(group.finish())
        self.groups = {}
        return out


def _give_back() -> None:
    """Hand the memory freed since the last checkpoint back to the system (Arrow's pool, the C
    heap): a process that runs for hours keeps its RSS at what it holds, not at its high mark."""
    now = time.monotonic()
    if _TRIM and now - _TRIM[1] < GIVE_BACK_S:
        return
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    _TRIM[1] = now
    if trim is not None:
        trim(0)


_TRIM: list = []   # [glibc's malloc_trim or None, when it last ran]
GIVE_BACK_S = 10.0   # wall-clock seconds between two (a trim walks the heap: ~10 ms)


def _malloc_trim():
    if not _TRIM:
        try:
            import ctypes

            _TRIM.extend((ctypes.CDLL("libc.so.6").malloc_trim, 0.0))
        except (OSError, AttributeError):   # not glibc: nothing to trim
            _TRIM.extend((None, 0.0))
    return _TRIM[0]


def streamable(fold) -> bool:
    """Folds the live executor streams: one row kind, no prepare, per-key groups."""
    if len(fold.inputs) != 1 or fold.prepare is not None:
        return False
    return isinstance(fold.make(Context()), KeyedState)


class LiveAudit:
    """The audit of one live capture: `add` each decoded chunk, `checkpoint(now, in_flight)`
    as capture time moves on (findings settled so far go to `emit`), `finish()` the run."""

    def __init__(self, audit: Audit, emit: Callable[[dict], None] | None = None):
        self.audit = audit
        self.emit = emit
        self.work = Work(audit)
        self.streamed = {f.name: _Streamed(f, self.work.ctx) for f in audit.buffered if streamable(f)}
        # the buffered folds that say how their keys settle before the end (Fold.live)
        self.settlers = {f.name: (f, f.live(f)) for f in audit.buffered
                         if f.name not in self.streamed and f.live is not None}
        self.found: list[dict] = []      # findings settled before the end (emitted)
        self.checked_at = 0.0
        self.dirty = False   # rows added since the last checkpoint

    def add(self, kind: str, table: pa.Table) -> None:
        self.dirty = True
        self.work.note(kind, table)
        for f in self.audit.buffered:
            sel = f.select(kind, table)
            if sel is None:
                continue
            s = self.streamed.get(f.name)
            if s is not None:
                s.waiting.append(sel)
            else:
                self.work.selected[f.name].append((kind, sel))
                if f.name in self.settlers:
                    self.settlers[f.name][1].note(kind, sel)
            self.work.facts.kinds.setdefault(f.name, set()).add(kind)

    def due(self) -> bool:
        return self.dirty and time.monotonic() - self.checked_at >= CHECK_EVERY_S

    def checkpoint(self, now: float | None, in_flight: float | None) -> None:
        """Settle what capture time `now` (the last packet's) allows."""
        self.checked_at = time.monotonic()
        self.dirty = False
        if now is None:
            return
        upto = min(now, in_flight if in_flight is not None else now) - REORDER_S
        names = TopicNames(self.work.facts.names.names)
        self.audit.so_far(self.work.ctx, self.work.facts)   # what the streamed folds read of the facts
        out = []
        for s in self.streamed.values():
            # rows ordered by send time wait for the requests in flight; by response time, not
            out.extend(s.feed(upto if s.time_col == "request_ts" else now - REORDER_S, names))
            s.forget(now - PRODUCER_IDLE_S)
        known = dataclasses.replace(self.work.ctx, topic_names=names.names)
        for fold, settler in self.settlers.values():
            settler.learn(known)
            out.extend(self._settle(fold, settler, now, names))
        self._found(out)
        _give_back()

    def _settle(self, fold, settler, now: float, names: TopicNames) -> list[dict]:
        """The findings of the keys of one buffered fold that its settler says are complete."""
        items = self.work.selected.get(fold.name)
        if not items:
            return []
        settled = settler.settle(items, now)
        if not settled:
            return []
        ctx = self.audit.context(self.work.ctx, self.work.facts, fold)
        ctx.topic_names = names.names
        ctx = settler.context(ctx, now, self.audit.now_ms)
        return list(fold_selection(fold, settled, ctx, self.work.internal))

    def _found(self, findings: list[dict]) -> None:
        keep = self.audit.keep
        findings = self.work.facts.names.name_findings([f for f in findings if keep(f)])
        for f in findings:
            self.found.append(f)
            if self.emit is not None:
                self.emit(f)

    def finish(self, errors: list[str], captures: dict) -> AuditRun:
        """The run: the streamed folds fed their last rows, the buffered ones run over what they
        kept, with the context settled from all the facts (as a file's audit)."""
        work = self.work
        work.facts.captures = captures
        work.audit.settle(work.ctx, work.facts)
        names = TopicNames(work.ctx.topic_names)
        out = []
        for s in self.streamed.values():
            if s.waiting:
                s.waiting = [names.label(t) for t in s.waiting]
            out.extend(f for f in s.finish() if self.audit.keep(f))
        for fold, settler in self.settlers.values():
            settler.finish(work.selected[fold.name])
        out.extend(work.finish())
        run = self.audit.result(self.found + out, work.facts, errors, internal=work.internal)
        live = {"late_rows": sum(s.late for s in self.streamed.values()),
                "producers_forgotten": sum(s.forgotten for s in self.streamed.values()),
                "findings_before_end": len(self.found)}
        for _, settler in self.settlers.values():
            live.update(settler.counters())
        run.coverage["live"] = live
        return run


# -- reading a live capture -----------------------------------------------------------------------

READ_BYTES = 1 << 20   # at most this much read at once (stdin is read in bounded chunks, never mapped)
WINDOW_BYTES = 256 << 10  # at most this much gathered into one window (bigger ones: more memory held, measured)
POLL_S = 0.2           # --follow: how often a file that stopped growing is looked at again


def audit_live(source: str, reader, options, *, now_ms=None, select=(), ignore=(),
               emit: Callable[[dict], None] | None = None) -> AuditRun:
    """Audit the capture `reader` yields the bytes of (stdin, a followed file): each chunk
    decoded as it comes, findings to `emit` as they settle, the run at its end or at Ctrl-C.
    Raises DecodeError when the stream is no capture."""
    from kaudit.engine.plan import wire_audit
    from kaudit.protocol.errors import DecodeError
    from kaudit.sources.live_pcap import LiveDecode
    from kaudit.sources.pcap import PcapSummary

    audit = wire_audit([source], options, now_ms=now_ms, select=select, ignore=ignore)
    live = LiveAudit(audit, emit)
    summary = PcapSummary()
    decode = LiveDecode(source, options, summary)
    stop = _Interrupt()
    try:
        for data in reader:
            for kind, table in decode.feed(data):
                live.add(kind, table)
            if live.due():
                live.checkpoint(decode.last_ts, decode.session.in_flight_since())
            if stop.seen:
                break   # Ctrl-C: the report of what was read, as at the end of the stream
    except KeyboardInterrupt:
        pass   # Ctrl-C before the handler was in place
    except DecodeError:
        if not decode.started:
            raise
    finally:
        stop.restore()
    try:
        for kind, table in decode.finish():
            live.add(kind, table)
    except DecodeError:
        if not decode.live.received:
            raise DecodeError("empty input, not a capture") from None
        raise
    if not decode.started:
        raise DecodeError("not a pcap or pcapng stream" if decode.live.received else "empty input, not a capture")
    run = live.finish([], {source: summary})
    run.coverage["live"]["idle_connections_closed"] = decode.idle_closed
    return run


class _Interrupt:
    """Ctrl-C (SIGINT) noted, not raised: a window is never left half walked; the reading loop
    stops at its next chunk (the readers wake at least every CHECK_EVERY_S / POLL_S)."""

    def __init__(self):
        import signal
        import threading

        self.seen = False
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGINT, self._note)

    def _note(self, *_):
        self.seen = True

    def restore(self):
        import signal

        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
            self.old = None


def stream_reader(fd: int):
    """The bytes of a pipe or a terminal, in bounded reads, until its end (b"" while it is
    quiet, so that the audit can settle what it holds)."""
    import os
    import select

    while True:
        ready, _, _ = select.select([fd], [], [], CHECK_EVERY_S)
        if not ready:
            yield b""
            continue
        data = os.read(fd, READ_BYTES)
        if not data:
            return
        # a pipe hands out 64 KiB at a time: what is there already goes into one window (each
        # window costs a walk set-up and a chunk of rows)
        parts = [data]
        size = len(data)
        while size < WINDOW_BYTES and select.select([fd], [], [], 0)[0]:
            more = os.read(fd, READ_BYTES)
            if not more:
                break
            parts.append(more)
            size += len(more)
        yield b"".join(parts) if len(parts) > 1 else data


def follow_reader(path: str, idle_s: float | None = None):
    """The bytes of a file that is still being written (tail -f): polled every POLL_S once at
    its end; over after `idle_s` seconds without growth (None: only Ctrl-C ends it), or when
    the file is truncated (a new capture started over it)."""
    import os

    with open(path, "rb") as f:   # read-only
        quiet_since = time.monotonic()
        pos = 0
        while True:
            data = f.read(WINDOW_BYTES)
            if data:
                pos += len(data)
                quiet_since = time.monotonic()
                yield data
                continue
            if os.fstat(f.fileno()).st_size < pos:
                return
            if idle_s is not None and time.monotonic() - quiet_since >= idle_s:
                return
            yield b""   # lets the audit check its clock while the file is quiet
            time.sleep(POLL_S)
