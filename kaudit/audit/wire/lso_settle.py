"""A live capture's settling of wire-lso (`Fold.live`, folds.Settler): its selection - each
partition's read_committed Fetch responses and transactional data batches - kept small as the
capture goes on, and the stuck runs that are over told before the end.

wire-lso cuts a partition's responses, in response order, into runs of one last stable offset
below the high watermark, and judges a stuck run by whose transactional data starts at its LSO
(a KIP-939 two-phase-commit producer's: info). Every SWEEP_S capture seconds, of the rows older
than LATE_S (a row decoded later than that with an earlier time is a late row anyway: engine/live
holds its watermark REORDER_S back), per partition:
- the responses before the run still open (or all of them, none open) are over: the file's
  audit starts the open run afresh too. The stuck runs among them are folded with every
  response from the first one's to the one that closed the last (so that the fold cuts the
  runs there as in the whole capture) and the batches at their LSOs (a run's holder: the
  acknowledgement of a transaction's first batch comes before or with the first response
  showing the LSO there, and the InitProducerId before that), with the two-phase-commit
  InitProducerIds known so far; the others are dropped;
- the batches below the partition's LSO floor (the lowest LSO of the responses kept, else the
  last one) are dropped: an LSO is min(first unstable offset, high watermark), and a run's LSO
  (below the high watermark) is the first unstable offset, which does not go back on a log that
  is not truncated;
- the batches of producers whose InitProducerId in effect did not ask Enable2Pc are dropped: at
  a stuck LSO they tell what no batch tells (not a two-phase-commit holder);
- of several batches at one offset by one producer and epoch (a Produce and its Fetches) one is
  kept, with its transactional id where one has it.
What can differ from the file's audit: a log truncated (unclean leader election) below a stuck
LSO, or a follower (KIP-392) serving an LSO the leader has passed for over MIN_SPAN_S; a holder's
batch shown first by a read_uncommitted Fetch long after its run ended, its Produce not captured. A partition some
of whose rows name a topic by an id the capture has not yet named is left for a later sweep.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Context, Settler, np_mask
from kaudit.audit.txn.txn_model import two_pc_at
from kaudit.sources.topics import TopicNames

SWEEP_S = 30.0   # capture seconds between two sweeps
LATE_S = 60.0    # rows this much older than the last packet are settled (engine.live.REORDER_S: 30 s)

_Resp = namedtuple("_Resp", "response_ts")   # what lso_stuck reads of a response


class LsoSettle(Settler):
    """What the settling knows across sweeps: each partition's LSO floor, the context so far."""

    def __init__(self, fold, stuck, runs):
        self.fold = fold
        self.stuck = stuck   # the rule's predicate over a run's responses (wire_lso.lso_stuck)
        self.cut_runs = runs   # the fold's runs (wire_lso.lso_runs)
        self.ctx: Context | None = None
        self.floor: dict = {}   # (topic, partition) -> the lowest LSO a later response can show
        self.swept_at: float | None = None
        self.runs = 0
        self.dropped = 0

    def learn(self, ctx: Context) -> None:
        self.ctx = ctx

    def settle(self, items: list, now: float) -> list:
        if not items or (self.swept_at is not None and now - self.swept_at < SWEEP_S):
            return []
        self.swept_at = now
        ctx = self.ctx or Context()
        names = TopicNames(ctx.topic_names)
        fetch, data = _concat(items, "fetch_partition"), _concat(items, "batch")
        fkeys, fknown = _keys(fetch, names)
        bkeys, bknown = _keys(data, names)
        skip = {k[1] for k, ok in zip(fkeys + bkeys, fknown + bknown) if not ok}   # partitions of unnamed rows
        fkeep, fsettle, at = self._responses(fetch, fkeys, now - LATE_S, skip)
        bkeep, bsettle = self._batches(data, bkeys, bknown, now - LATE_S, at, ctx.two_pc_inits or {})
        kept, settled = [], []
        for kind, t, keep, out in (("fetch_partition", fetch, fkeep, fsettle), ("batch", data, bkeep, bsettle)):
            if t is None:
                continue
            if keep.any():   # one chunk kept: the sweep's concatenation left one a decoded chunk
                kept.append((kind, (t if keep.all() else t.filter(np_mask(keep))).combine_chunks()))
            if out.any():
                settled.append((kind, t.filter(np_mask(out))))
            self.dropped += int((~keep & ~out).sum())
        items[:] = kept
        return settled if fetch is not None and fsettle.any() else []

    def _responses(self, t, keys, horizon: float, skip: set):
        """(rows kept, rows settled, {partition: LSOs of the stuck runs settled}) of the responses."""
        if t is None:
            return None, None, {}
        n = t.num_rows
        keep, out = np.ones(n, bool), np.zeros(n, bool)
        ts, pos = t.column("response_ts").to_pylist(), t.column("position").to_pylist()
        lso, hw = t.column("last_stable_offset").to_pylist(), t.column("high_watermark").to_pylist()
        by_key: dict = {}
        for i, k in enumerate(keys):
            by_key.setdefault(k, []).append(i)
        at: dict = {}
        for k, idx in by_key.items():
            if k[1] in skip:
                continue
            # the fold's order (folds.sort_indices): response time, position, nulls last, stable
            idx.sort(key=lambda i: (ts[i] is None, ts[i] or 0.0, pos[i] is None, pos[i] or 0))
            cut, stuck, floor = _walk(idx, ts, lso, hw, horizon, self.stuck, self.cut_runs)
            for i in idx[:cut]:
                keep[i] = False
            if stuck:
                # the responses from the first stuck run to the response that closed the last,
                # all of them: the fold cuts runs there as in the whole capture (two runs of one
                # LSO, or a closer and a later run of its LSO, stay apart), and a run of one at
                # the end tells nothing
                where = {i: j for j, i in enumerate(idx)}
                out[idx[where[stuck[0][0][0]]:where[stuck[-1][1]] + 1]] = True
            for run, _ in stuck:
                at.setdefault(k, set()).add(lso[run[0]])
                self.runs += 1
            if floor is not None:
                self.floor[k] = floor
        return keep, out, at

    def _batches(self, t, keys, known, horizon: float, at: dict, inits: dict):
        """(rows kept, rows settled with the runs at their offset) of the transactional batches."""
        if t is None:
            return None, None
        n = t.num_rows
        off = pc.if_else(pc.equal(t.column("source_kind"), "produce"), t.column("response_base_offset"),
                         t.column("base_offset")).to_pylist()
        pid, epoch = t.column("producer_id").to_pylist(), t.column("producer_epoch").to_pylist()
        tid, ts = t.column("transactional_id").to_pylist(), t.column("response_ts").to_pylist()
        keep, out = np.zeros(n, bool), np.zeros(n, bool)
        one: dict = {}   # (key, offset, producer id, epoch) -> the row kept
        for i in range(n):
            if not known[i]:
                keep[i] = True
                continue
            o, p = off[i], pid[i]
            if o is None or o < 0 or p is None or p < 0:
                continue   # the fold notes none of these
            k = keys[i]
            if o in at.get(k, ()):
                out[i] = True
            if o < self.floor.get(k, -1):
                continue
            if ts[i] is not None and ts[i] < horizon and not two_pc_at(inits.get(p), epoch[i]):
                continue
            # the fold's holder at an offset does not depend on the rows' order (LsoPartition._note)
            j = one.get((k, o, p, epoch[i]))
            if j is None or (tid[j] is None and tid[i] is not None):
                if j is not None:
                    keep[j] = False
                keep[i] = True
                one[(k, o, p, epoch[i])] = i
        return keep, out

    def counters(self) -> dict:
        return {"lso_runs_settled": self.runs, "lso_rows_dropped": self.dropped}


def _walk(idx: list, ts: list, lso: list, hw: list, horizon: float, lso_stuck, lso_runs):
    """Over one partition's responses in the fold's order (LsoPartition.stuck_runs), those older than
    `horizon`: (how many come before the run still open, the stuck runs among them with the
    response that closed each, the lowest LSO a later run can have or None); `lso_stuck`,
    `lso_runs`: the rule's predicate and the fold's runs."""
    end = next((j for j, i in enumerate(idx) if ts[i] is None or ts[i] >= horizon), len(idx))
    rows = idx[:end]
    lo = np.array([-1 if lso[i] is None else lso[i] for i in rows], dtype=np.int64)
    hi = np.array([-1 if hw[i] is None else hw[i] for i in rows], dtype=np.int64)
    valid, starts, ends = lso_runs(lo, hi)
    is_open = bool(starts.size) and int(ends[-1]) == len(valid)   # no later response ended it yet
    cut = int(valid[starts[-1]]) if is_open else end
    closed = zip(starts[:-1] if is_open else starts, ends[:-1] if is_open else ends)
    stuck = []
    for s, e in closed:
        run = [rows[j] for j in valid[s:e].tolist()]
        if lso_stuck([_Resp(ts[i]) for i in run]):
            stuck.append((run, rows[int(valid[e])]))
    later = [lso[i] for i in idx[cut:] if lso[i] is not None and lso[i] >= 0 and hw[i] is not None and hw[i] >= 0]
    last = int(lo[valid[-1]]) if valid.size else None
    return cut, stuck, min(later) if later else last


def _concat(items: list, kind: str) -> pa.Table | None:
    tables = [t for k, t in items if k == kind and t.num_rows]
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _keys(t, names: TopicNames) -> tuple[list, list]:
    """Each row's (topic, partition) as the fold will key it, and whether its topic is known: a
    row naming its topic by an id not yet named would key apart now and with its name later."""
    if t is None:
        return [], []
    topic, tid = t.column("topic"), t.column("topic_id")
    named = names.label(t).column("topic").to_pylist()
    unknown = pc.and_(pc.is_null(topic), pc.invert(pc.is_in(tid, pa.array(list(names.names or {}), tid.type))))
    unknown = pc.fill_null(unknown, False).to_pylist()
    return list(zip(named, t.column("partition").to_pylist())), [not u for u in unknown]
