"""A live capture's settling of the wire transaction fold (txn_wire, keyed by producer id): a
producer's rows are judged alone, and dropped, once nothing can change its verdict any more.

txn_wire needs a producer's rows together (its prepare joins the transaction events to their
frames and gives a failed InitProducerId the producer id its transactional id has elsewhere),
and judges open transactions against the reference time. A producer is settled when it had no
row for its transaction timeout (its InitProducerId's, else transaction.max.timeout.ms, 15 min)
plus TXN_MARGIN_S: by then the coordinator has aborted a transaction left open (it looks every
10 s and writes the markers at once), so a transaction still open is hanging at the settling
time as at any later one. Its rows - events (the producer id resolved as prepare resolves it:
the first producer id of the transactional id, in decode order), batches, and the frames of
those events - are folded alone with the reference time at the settling, then dropped. The
administration frames (DescribeProducers ...), which every producer's judgement reads, are kept.

A producer whose last transaction the capture shows no end of (data or a registration after its
last EndTxn, WriteTxnMarkers, InitProducerId or fetched marker) is held MARKER_FETCH_WAIT_S
longer: a capture of client traffic shows the coordinator's timeout abort only as the markers a
consumer fetches, which a lagging consumer reads minutes later - settled before, the producer
would be told hanging where the file's audit sees the marker. A hanging transaction is then told
that much later on a live capture.

A producer whose InitProducerId asked Enable2Pc (KIP-939) has no timeout: it is never settled
by age, only at the end. A KeepPreparedTxn recovery links the producer id of the transaction it
kept (its answer's OngoingTxnProducerId) to the recovering session's: the two are settled together
(txn_wire.prepare replays the recovery under both), the kept one without a timeout when the
recovery asked Enable2Pc.

Rows of a producer that come after it was settled start it over (coverage
`live.txn_producers_back`): the file's audit would have judged them with the earlier ones.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Context, Settler, concat_by_kind, np_mask
from kaudit.audit.thresholds import DEFAULT_TIMEOUT_S, MARKER_FETCH_WAIT_S, TXN_MARGIN_S
from kaudit.audit.fetched_copies import fetched_data, useful_copies

SWEEP_S = 30.0        # capture seconds between two looks
FRAME_KEEP_S = 60.0   # a frame no event of the selection names is dropped once this old


class TxnSettle(Settler):
    """What the settling knows across checkpoints: each transactional id's first producer id
    (txn_wire.prepare's pid_of, in decode order), the producers settled and those that came back."""

    def __init__(self, fold, admin_apis: tuple = ()):
        self.fold = fold
        self.admin_apis = admin_apis   # the frames every producer's judgement reads (txn_wire)
        self.tid_pid: dict[str, int] = {}
        self.settled: set = set()
        self.back: set = set()
        self.swept_at: float | None = None
        self.count = 0

    def note(self, kind: str, t: pa.Table) -> None:
        """A chunk of the fold's selection, in decode order."""
        if kind == "txn_event":
            for tid, pid in zip(t.column("transactional_id").to_pylist(), t.column("producer_id").to_pylist()):
                if tid and pid is not None and pid >= 0:
                    self.tid_pid.setdefault(tid, pid)
                    if pid in self.settled:
                        self.back.add(pid)
        elif kind == "batch" and self.settled:
            for pid in pc.unique(t.column("producer_id").filter(pc.invert(fetched_data(t)))).to_pylist():
                if pid in self.settled:
                    self.back.add(pid)

    def settle(self, items: list, now: float) -> list:
        if not items or not self.due(now):
            return []
        settled, kept = self.split(items, now)
        # the kept rows in one table per kind: a live capture's thousands of small chunks held
        # for minutes fragment the heap
        items[:] = concat_by_kind(kept)
        return settled

    def context(self, ctx: Context, now: float, now_ms: int | None) -> Context:
        # a producer settled at `now` is judged as the file's audit would judge it then
        ctx.reference_time_ms = now_ms if now_ms is not None else int(now * 1000)
        return ctx

    def counters(self) -> dict:
        return {"txn_producers_settled": self.count, "txn_producers_back": len(self.back)}

    def due(self, now: float) -> bool:
        if self.swept_at is not None and now - self.swept_at < SWEEP_S:
            return False
        self.swept_at = now
        return True

    def split(self, items: list, now: float) -> tuple[list, list]:
        """(the rows of the producers settled at capture time `now`, the rows kept)."""
        pids_of, last, timeout, unended, partners = self._producers(items)
        done = {p for p, ts in last.items()
                if ts < now - (timeout.get(p) or DEFAULT_TIMEOUT_S) - TXN_MARGIN_S
                - (MARKER_FETCH_WAIT_S if p in unended else 0.0)}
        while True:   # a kept transaction's producer id and its recovering session's go together
            held = {p for p in done if not partners.get(p, set()) <= done}
            if not held:
                break
            done -= held
        if not done:
            return [], _drop_stray_copies(items, now)
        self.settled |= done
        self.count += len(done)
        done_arr = pa.array(sorted(done), pa.int64())
        settled, kept, named = [], [], set()
        for (kind, t), pids in zip(items, pids_of):
            if kind == "frame":
                continue
            mask = pc.fill_null(pc.is_in(pids, done_arr), False)
            a, b = t.filter(mask), t.filter(pc.invert(mask))
            if kind == "txn_event" and a.num_rows:
                named.update(zip(a.column("source").to_pylist(), a.column("connection").to_pylist(),
                                 a.column("position").to_pylist()))
            if a.num_rows:
                settled.append((kind, a))
            if b.num_rows:
                kept.append((kind, b))
        still = set()
        for kind, t in kept:
            if kind == "txn_event":
                still.update(zip(t.column("source").to_pylist(), t.column("connection").to_pylist(),
                                 t.column("position").to_pylist()))
        for kind, t in items:
            if kind == "frame":
                self._frames(t, named, still, now, settled, kept)
        return settled, _drop_stray_copies(kept, now)

    def _frames(self, t, named, still, now, settled, kept) -> None:
        """A frame goes with the settled producers' events that name it; an admin frame with every
        settling and kept; a frame no kept event names is dropped once FRAME_KEEP_S old."""
        keys = list(zip(t.column("source").to_pylist(), t.column("connection").to_pylist(),
                        t.column("request_frame").to_pylist()))
        admin = pc.fill_null(pc.is_in(t.column("api_key"), pa.array(self.admin_apis, t.column("api_key").type)),
                             False).to_pylist()
        ts = t.column("response_ts").to_pylist()
        to_settled = [a or k in named for k, a in zip(keys, admin)]
        to_kept = [a or k in still or k not in named and (r is None or r >= now - FRAME_KEEP_S)
                   for k, a, r in zip(keys, admin, ts)]
        if any(to_settled):
            settled.append(("frame", t.filter(pa.array(to_settled))))
        if any(to_kept):
            kept.append(("frame", t.filter(pa.array(to_kept))))

    def _producers(self, items):
        """Per chunk, its rows' producer ids (as prepare resolves them); each producer's newest
        row time, its transaction timeout (s), and the producers whose last transaction shows no
        end (a write or registration after every end the capture holds of it)."""
        pids_of, last, timeout, partners = [], {}, {}, {}
        began, ended = {}, {}
        for kind, t in items:
            if kind == "txn_event":
                pids = [p if p is not None and p >= 0 else self.tid_pid.get(tid)
                        for p, tid in zip(t.column("producer_id").to_pylist(),
                                          t.column("transactional_id").to_pylist())]
                times = t.column("ts").to_pylist()
                _timeouts(t, pids, timeout, partners)
                pids_of.append(pa.array(pids, pa.int64()))
                ev = t.column("event")
                _mark(ended, pids_of[-1], t.column("ts"), pc.is_in(ev, ENDS))
                _mark(began, pids_of[-1], t.column("ts"), pc.is_in(ev, BEGINS))
            elif kind == "batch":
                pids_of.append(pa.array(t.column("producer_id").to_pylist(), pa.int64()))
                # a fetched copy of a write says nothing of the producer's activity: it goes with it
                own, fetch = pc.invert(fetched_data(t)), pc.equal(t.column("source_kind"), "fetch")
                _mark(ended, pids_of[-1], t.column("request_ts"), pc.and_(fetch, own))   # a fetched marker
                _mark(began, pids_of[-1], t.column("request_ts"), pc.invert(fetch))   # a write
                times = t.column("request_ts").filter(own).to_pylist()
                pids = t.column("producer_id").filter(own).to_pylist()
            else:
                pids_of.append(None)
                continue
            for p, ts in zip(pids, times):
                if p is not None and p >= 0 and ts is not None and ts > last.get(p, float("-inf")):
                    last[p] = ts
        unended = {p for p, ts in began.items() if ts > ended.get(p, float("-inf"))}
        return pids_of, last, timeout, unended, partners


def _timeouts(t: pa.Table, pids: list, timeout: dict, partners: dict) -> None:
    """Each producer's transaction timeout (s) from its InitProducerIds in row order: none (never
    settled by age) once one asked Enable2Pc, as KIP-939's coordinator never times it out - and
    for the transaction a KeepPreparedTxn recovery kept (OngoingTxnProducerId), whose producer
    id is settled with the recovering session's (`partners`)."""
    cols = t.column_names
    get = lambda c: t.column(c).to_pylist() if c in cols else [None] * t.num_rows   # noqa: E731
    for p, ms, on, keep, kept in zip(pids, get("timeout_ms"), get("enable_2pc"), get("keep_prepared_txn"),
                                     get("ongoing_txn_producer_id")):
        if p is None:
            continue
        if on:
            timeout[p] = float("inf")
        elif ms:
            timeout[p] = ms / 1000.0
        if keep and kept is not None and kept >= 0 and kept != p:
            partners.setdefault(p, set()).add(kept)
            partners.setdefault(kept, set()).add(p)
            if on:
                timeout[kept] = float("inf")


def _drop_stray_copies(items: list, now: float) -> list:
    """`items` without the fetched copies of writes (txn_fetched.stored_copy) that are FRAME_KEEP_S
    old and copy no write the kept rows hold no answer to (fetched_copies.useful_copies: all the
    file's audit reads of them; a write's row may come after a consumer's copy of it, within the
    client's request timeout): a consumer reading its producers' data keeps no memory."""
    out = []
    for kind, t in items:
        if kind == "batch" and t.num_rows:
            data = fetched_data(t)
            if pc.any(data).as_py():
                old = np.asarray(pc.fill_null(pc.less(pc.coalesce(t.column("response_ts"), t.column("request_ts")),
                                                      now - FRAME_KEEP_S), True))
                stray = np.asarray(data) & old & ~useful_copies(t, data)
                if stray.any():
                    t = t.filter(np_mask(~stray))
                    if not t.num_rows:
                        continue
        out.append((kind, t))
    return out


BEGINS = pa.array(["ADD_PARTITIONS", "ADD_OFFSETS", "TXN_OFFSET_COMMIT"])
ENDS = pa.array(["END_TXN", "WRITE_MARKERS", "INIT_PRODUCER_ID"])


def _mark(into: dict, pids: pa.Array, times, mask) -> None:
    """Each producer's newest time among the rows `mask` selects, into `into` (vectorised: the
    sweep looks at every row kept)."""
    t = pa.table({"p": pids, "t": times}).filter(pc.fill_null(mask, False))
    if not t.num_rows:
        return
    g = t.group_by("p").aggregate([("t", "max")])
    for p, ts in zip(g.column("p").to_pylist(), g.column("t_max").to_pylist()):
        if p is not None and p >= 0 and ts is not None and ts > into.get(p, float("-inf")):
            into[p] = ts
