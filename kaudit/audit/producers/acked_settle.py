"""How a live capture keeps the acknowledged-writes fold's selection small (wire_acked.FOLD's
Settler): the fold judges only at the end, but most of what the stream brings can already be
let go of without changing its findings.

A fetched batch is compared only with the writes of its own topic partition acknowledged
before it was requested (wire_acked._refetched), which the stream has already delivered: a
fetched batch overlapping none of them never matters, nor - as in the fold's own `_near` - an
exact copy of a write already known committed (acks=all, no transaction) outside offsets
acknowledged more than once. Nor, for an idempotent write, a copy fetched after the one that
showed it committed (`_note_read`: the first, in the fold's order, whose response had a high
watermark or a read_committed last stable offset past it - the fold reads no later one), outside
offsets acknowledged more than once. A Fetch response's partition row is only read for the
batches it returned (`_note_read`): it goes with them. COMMIT markers are all kept
(`_note_commits`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Settler, concat_by_kind, np_col, np_mask
from kaudit.audit.fetched_copies import IDENTITY, SAME_BYTES, fetched_data
from kaudit.audit.producers import acked_writes as A
from kaudit.audit.producers import stored_unanswered

RESPONSE = ("source", "connection", "position", "partition")   # a batch's Fetch response partition row

ANY = object()   # the topic of a write or fetch named by topic id only: it may be any topic


def disjoint(spans) -> tuple[np.ndarray, np.ndarray]:
    """Offset ranges [(lo, hi)] merged where they overlap (not where they only touch: an offset
    between two writes belongs to neither)."""
    lo, hi = [], []
    for a, b in sorted(spans):
        if lo and a <= hi[-1]:
            hi[-1] = max(hi[-1], b)
        else:
            lo.append(a)
            hi.append(b)
    return np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)


class AckedSettle(Settler):
    """A live capture keeps, of wire-acked's selection, the acknowledged writes, the COMMIT
    markers and only the fetched batches (with their response's partition row) that can meet a
    write (module docstring). Compacted every COMPACT_ROWS new rows; same findings."""

    COMPACT_ROWS = 4096

    def __init__(self, fold):
        self.fold = fold
        self.spans: dict = {}     # (topic or ANY, partition) -> [(lo, hi)] acknowledged
        self.settled: set = set()  # identities of acks=all non-transactional writes
        self.writes: dict = {}     # (topic, partition, identity) of an idempotent write -> (its answer's time, transactional)
        self.seen_at: dict = {}    # the same key -> the fold's order of the copy that showed it committed
        self.done = 0
        self.dropped = 0
        self.waiting = _Waiting()

    def note(self, kind: str, table: pa.Table) -> None:
        if kind != "batch" or not table.num_rows:
            return
        self.waiting.note(table)
        t = table.filter(pc.equal(table.column("source_kind"), "produce"))
        for w in A.acked_batches(t.to_pylist()) if t.num_rows else ():
            r = w.row
            topic = r.get("topic")
            self.spans.setdefault((ANY if topic is None else topic, r["partition"]), []).append((w.lo, w.hi))
            ident = A.identity(w.lo, w.hi, w.pid, w.epoch, w.seq, r.get("crc"))
            if r.get("acks") == -1 and not r.get("is_transactional"):
                self.settled.add(ident)
            elif w.idempotent and w.magic >= 2 and topic is not None:
                self.writes[(topic, r["partition"], ident)] = (r.get("response_ts"), bool(r.get("is_transactional")))

    def settle(self, items: list, now: float) -> list:
        new = items[self.done:]
        if sum(t.num_rows for _, t in new) < self.COMPACT_ROWS:
            return []
        ranges = _Ranges(self.spans)
        kept = concat_by_kind(new)   # one table a kind: each column converted once below
        alone = []
        for k, (kind, t) in enumerate(kept):
            if kind == "batch":
                t, copies = _keep_batches(t, ranges, self.settled)
                kept[k] = (kind, t)
                alone.append(copies)
        if self.writes:
            kept = _SeenCopies(self, ranges).drop(kept)
        responses = {k for kind, t in kept if kind == "batch" for k in zip(*(t.column(c).to_pylist() for c in RESPONSE))}
        self.waiting.add(alone, next((t for kind, t in kept if kind == "fetch_partition"), None))
        out = []
        for kind, t in kept:
            if kind == "fetch_partition":
                t = _of_responses(t, responses)
            if t.num_rows:
                out.append((kind, t))
        out.extend(self.waiting.take(now))
        self.dropped += sum(t.num_rows for _, t in new) - sum(t.num_rows for _, t in out)
        items[self.done:] = out
        self.done = len(items)
        return []

    def finish(self, items: list) -> None:
        items.extend(self.waiting.take(None))

    def counters(self) -> dict:
        return {"acked_rows_dropped": self.dropped}


class _SeenCopies:
    """The copies of idempotent writes fetched after the one that showed the write committed."""

    COLS = ("source", "connection", "position", "topic", "partition", "response_ts", "request_ts", "base_offset",
            "last_offset", "producer_id", "producer_epoch", "base_sequence", "crc", "is_control", "magic")

    def __init__(self, settle: AckedSettle, ranges: "_Ranges"):
        self.s, self.ranges = settle, ranges

    def drop(self, kept: list) -> list:
        resp = {}
        for kind, t in kept:
            if kind == "fetch_partition" and t.num_rows:
                for r in t.to_pylist():
                    resp[(r["source"], r["connection"], r["position"], r["topic"], r["partition"])] = r
        out = []
        for kind, t in kept:
            if kind == "batch" and t.num_rows:
                t = self._batches(t, resp)
            out.append((kind, t))
        return out

    def _batches(self, t: pa.Table, resp: dict) -> pa.Table:
        fetched = np.flatnonzero(pc.equal(t.column("source_kind"), "fetch").to_numpy(zero_copy_only=False))
        if not fetched.size:
            return t
        rows = t.take(pa.array(fetched)).select(list(self.COLS)).to_pylist()
        cand = []
        for i, r in zip(fetched.tolist(), rows):
            k = self._write_of(r)
            if k is not None:
                cand.append(((r["response_ts"], r["source"], r["position"]), i, k, r))
        drop = np.zeros(t.num_rows, dtype=bool)
        for order, i, k, r in sorted(cand, key=lambda c: c[0]):
            at = self.s.seen_at.get(k)
            if at is not None and order > at:
                drop[i] = True
                continue
            acked_ts, txn = self.s.writes[k]
            asked = r["request_ts"]
            if asked is None or acked_ts is None or asked <= acked_ts:
                continue
            p = resp.get((r["source"], r["connection"], r["position"], r["topic"], r["partition"]))
            if p is not None and A.read_committed_at(p, r["last_offset"], txn, "") is not None:
                self.s.seen_at[k] = order if at is None else min(at, order)
        return t if not drop.any() else t.filter(np_mask(~drop))

    def _write_of(self, r: dict):
        """The key of the idempotent write fetched row `r` is a copy of, where only that write's
        offsets hold it; None otherwise."""
        if r["is_control"] or r["topic"] is None or r["response_ts"] is None or r["source"] is None \
                or r["position"] is None or (r["magic"] is not None and r["magic"] < 2) \
                or r["base_offset"] is None or r["last_offset"] is None or r["producer_id"] is None:
            return None
        ident = A.identity(r["base_offset"], r["last_offset"], r["producer_id"], r["producer_epoch"],
                           r["base_sequence"], r["crc"])
        k = (r["topic"], r["partition"], ident)
        if k not in self.s.writes:
            return None
        s, e = self.ranges.twice(r["topic"], r["partition"])
        if A.overlap_mask(np.array([r["base_offset"]]), np.array([r["last_offset"]]), s, e)[0]:
            return None
        return k


class _Ranges:
    """The acknowledged offsets by (topic, partition), merged: a name's own with those of writes
    named by topic id only, and for a row without a name every topic's of its partition."""

    def __init__(self, spans: dict):
        self.spans = spans
        self.cache: dict = {}

    def _spans(self, topic, partition) -> list:
        if topic is None:
            return [s for (_, p), v in self.spans.items() if p == partition for s in v]
        return self.spans.get((topic, partition), []) + self.spans.get((ANY, partition), [])

    def of(self, topic, partition) -> tuple[np.ndarray, np.ndarray]:
        got = self.cache.get((topic, partition))
        if got is None:
            got = self.cache[(topic, partition)] = disjoint(self._spans(topic, partition))
        return got

    def twice(self, topic, partition) -> tuple[np.ndarray, np.ndarray]:
        """The offsets of those acknowledged to more than one write row (where two different
        writes would be contested: wire_acked._near keeps copies there)."""
        got = self.cache.get(("twice", topic, partition))
        if got is None:
            out, hi = [], None
            for a, b in sorted(self._spans(topic, partition)):
                if hi is not None and a <= hi:
                    out.append((a, min(b, hi)))
                hi = b if hi is None else max(hi, b)
            got = self.cache[("twice", topic, partition)] = disjoint(out)
        return got


def _keep_batches(t: pa.Table, ranges: _Ranges, settled: set) -> tuple[pa.Table, pa.Table]:
    """(The batch rows that can still matter: the Produce rows, the COMMIT markers, and the fetched
    batches overlapping an acknowledged write of their topic partition that are not exact copies
    of a settled write (outside offsets acknowledged twice, where they stay); the fetched data
    batches overlapping none: _Waiting's)."""
    keep = pc.equal(t.column("source_kind"), "produce").to_numpy(zero_copy_only=False)
    keep = keep | pc.fill_null(pc.equal(t.column("control_type"), "COMMIT"), False).to_numpy(zero_copy_only=False)
    fetched = np.flatnonzero(~keep)
    if not fetched.size:
        return t, t.slice(0, 0)
    lo, hi = np_col(t, "base_offset", -1, np.int64), np_col(t, "last_offset", -1, np.int64)
    f = t.take(pa.array(fetched)).select(["topic", "partition"])
    tcodes = f.column("topic").combine_chunks().dictionary_encode()
    topics = tcodes.dictionary.to_pylist()
    tc = np.asarray(tcodes.indices.fill_null(len(topics)), np.int64)   # a null topic: its own code
    pc_ = np_col(f, "partition", -1, np.int64)
    gkey = tc * (1 << 32) + (pc_ + (1 << 31))
    near = np.zeros(t.num_rows, dtype=bool)
    alone = np.zeros(t.num_rows, dtype=bool)
    copies = _copies(t, fetched, settled) if settled else None
    for g in np.unique(gkey).tolist():
        sel = fetched[gkey == g]
        code, p = divmod(g, 1 << 32)
        topic, p = (topics[code] if code < len(topics) else None), p - (1 << 31)
        m = A.overlap_mask(lo[sel], hi[sel], *ranges.of(topic, p))
        alone[sel] = ~m
        if copies is not None:
            m &= ~(copies[sel] & ~A.overlap_mask(lo[sel], hi[sel], *ranges.twice(topic, p)))
        near[sel] = m
    keep |= near
    alone &= np.asarray(fetched_data(t))
    return (t if keep.all() else t.filter(np_mask(keep))), t.filter(np_mask(alone))


class _Waiting:
    """The fetched data batches that copy no acknowledged write, with
    their responses' partition rows: a copy of a Produce the capture holds no answer to
    (stored_unanswered), whose row comes only once its connection ends. Kept COPY_WAIT_S of
    capture time (at most MAX_ROWS: the oldest go first); those of an unanswered write seen go
    back to the selection, at each compaction and at the end (a live capture's difference from
    the file's: a copy served longer before its write's connection ended is let go)."""

    COPY_WAIT_S = 300.0
    MAX_ROWS = 100_000

    def __init__(self):
        self.unanswered: set = set()
        self.parts: list[tuple[float, pa.Table, pa.Table]] = []   # (latest answer, batches, responses' rows)

    def note(self, t: pa.Table) -> None:
        u = t.filter(stored_unanswered.where(t))
        if u.num_rows:
            self.unanswered.update(_keys(u))

    def add(self, alone: list, responses: pa.Table | None) -> None:
        b = [t for t in alone if t.num_rows]
        if not b:
            return
        b = pa.concat_tables(b)
        keys = set(zip(*(b.column(c).to_pylist() for c in RESPONSE)))
        latest = pc.max(b.column("response_ts")).as_py()
        resp = _of_responses(responses, keys) if responses is not None else None
        self.parts.append((latest if latest is not None else float("-inf"), b, resp))
        while len(self.parts) > 1 and sum(p[1].num_rows for p in self.parts) > self.MAX_ROWS:
            self.parts.pop(0)

    def take(self, now: float | None) -> list[tuple[str, pa.Table]]:
        """The waiting copies of the unanswered writes seen, and their responses' rows; `now`
        None: the last time (nothing waits any more)."""
        out, left = [], []
        for latest, b, resp in self.parts:
            hit = np.fromiter((k in self.unanswered for k in _keys(b)), bool, b.num_rows) \
                if self.unanswered else np.zeros(b.num_rows, bool)
            if hit.any():
                got = b.filter(np_mask(hit))
                out.append(("batch", got))
                keys = set(zip(*(got.column(c).to_pylist() for c in RESPONSE)))
                if resp is not None:
                    out.append(("fetch_partition", _of_responses(resp, keys)))
                b = b.filter(np_mask(~hit))
            if now is not None and b.num_rows and latest >= now - self.COPY_WAIT_S:
                left.append((latest, b, resp))
        self.parts = left
        return [(k, t) for k, t in out if t.num_rows]


def _keys(t: pa.Table) -> list[tuple]:
    """What pairs a copy with its write (fetched_copies): an idempotent batch's identity, else its bytes."""
    ident = zip(*(t.column(c).to_pylist() for c in IDENTITY))
    same = zip(*(t.column(c).to_pylist() for c in SAME_BYTES))
    return [("id",) + i if i[0] is not None and i[0] >= 0 else ("bytes",) + b for i, b in zip(ident, same)]


def _copies(t: pa.Table, rows: np.ndarray, settled: set) -> np.ndarray:
    """Over all of `t`'s rows: which of `rows` are exact copies of a settled write."""
    cols = [t.column(c).take(pa.array(rows)).to_pylist()
            for c in ("base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence", "crc")]
    out = np.zeros(t.num_rows, dtype=bool)
    out[rows] = np.fromiter((A.identity(*x) in settled for x in zip(*cols)), bool, len(rows))
    return out


def _of_responses(t: pa.Table, responses: set) -> pa.Table:
    """The Fetch responses' partition rows whose batches were kept (the fold reads a response's
    row only for them)."""
    if not responses or not t.num_rows:
        return t.slice(0, 0)
    keys = zip(*(t.column(c).to_pylist() for c in RESPONSE))
    keep = np.array([k in responses for k in keys], dtype=bool)
    return t if keep.all() else t.filter(np_mask(keep))
