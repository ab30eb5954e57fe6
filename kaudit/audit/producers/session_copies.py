"""`duplicate-records` across producer sessions: records an application sent again under a new
producer id (or a bumped epoch) after its previous producer stopped.

Idempotence protects one producer session only: the broker deduplicates a retry by the
(producer id, epoch, sequence) it carries (ProducerStateManager, KIP-98). An application that
restarts - or closes and re-creates its producer - after a failed or timed-out send, and sends
the same records again, writes them under a new producer id (a new InitProducerId) or, for an
idempotent producer recovering from unresolved batches, a bumped epoch with sequences from 0
(KIP-360). The broker stores them a second time and consumers process them twice.

Evidence on disk: the first batches of a new session (producer id, epoch) - from its very first
batch in the partition on: a restarted application re-sends its unacknowledged records before
anything new - hold the same records
(record_content: keys, values, headers, offset and timestamp deltas) as batches of an earlier
session of the same partition that wrote nothing after the new one began - the old producer id
(or, for a bumped epoch, the old epoch) ended and its last writes came back - with create times at most RESTART_WINDOW_MS apart where
both have one. Transactional batches are left to the transaction rules (a new instance aborts
its predecessor's open transaction: a re-send there is the intended recovery).

Cost: a session's first HEAD batches are the only rows looked up; the window's fingerprints are
computed lazily, for the chunks a new session's first batches are compared with.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit.audit.producers.record_content import np_col
from kaudit.audit.registry import evidence, finding
from kaudit.audit.producers.repeated_records import content_fingerprints
from kaudit.audit.thresholds import RESTART_WINDOW_MS
from kaudit.ranges import offsets as offset_span

HEAD = 10                       # a session's first batches that may be re-sends
RECENT_ROWS = 100_000           # batches of the window the originals are looked for in
EPOCHS = 1 << 16


class _Run:
    """One chunk's rows of the fold; their fingerprints, and the rows sorted by them (equal ones
    in log order), computed when a new session's first batches are first compared with it."""

    __slots__ = ("t", "idx", "row", "code", "ts", "fp", "order", "s_fp", "s_row", "s_code", "s_ts", "max_row")

    def __init__(self, t, idx, row, code, ts):
        self.t, self.idx, self.row, self.code, self.ts = t, idx, row, code, ts
        self.fp = self.order = None
        self.max_row = int(row.max())

    def prints(self) -> np.ndarray:
        if self.fp is None:
            mask = np.zeros(self.t.num_rows, dtype=bool)
            mask[self.idx] = True
            self.fp = content_fingerprints(self.t, mask)
            o = self.order = np.argsort(self.fp, kind="stable")
            self.s_fp, self.s_row, self.s_code, self.s_ts = self.fp[o], self.row[o], self.code[o], self.ts[o]
        return self.fp

    def latest(self, fp: int, row: int, code: int, ts: int, steps: int = 64) -> int:
        """The index (in this run) of the latest row before `row` holding the same records, of
        another session, in the window; -1 if none within `steps` rows of the same records."""
        lo = int(np.searchsorted(self.s_fp, fp, "left"))
        hi = int(np.searchsorted(self.s_fp, fp, "right"))
        if hi == lo:
            return -1
        j = lo + int(np.searchsorted(self.s_row[lo:hi], row, "left")) - 1
        while j >= lo and steps:
            r = int(self.s_row[j])
            if r < row - RECENT_ROWS:
                return -1
            t = int(self.s_ts[j])
            if int(self.s_code[j]) != code and (t < 0 or ts < 0 or abs(ts - t) <= RESTART_WINDOW_MS):
                return int(self.order[j])
            j -= 1
            steps -= 1
        return -1


class SessionCopies:
    """One replica of one partition: its non-transactional batches of producer ids >= 0."""

    def __init__(self, key: tuple, sources_of):
        self.replica, self.topic, self.partition = key
        self.sources_of = sources_of        # (table, mask) -> source ids (duplicate_records)
        self.sources = None
        self.runs: list[_Run] = []
        self.rows = 0
        self.first: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.count: dict[int, int] = {}
        self.last_pid: dict[int, int] = {}
        self.pairs: list[tuple] = []        # (copy, original) facts, confirmed at finish

    def feed(self, t: pa.Table, mask: np.ndarray) -> None:
        idx = np.flatnonzero(mask)
        if not idx.size:
            return
        row = self.rows + np.arange(idx.size, dtype=np.int64)
        self.rows += idx.size
        pid = np_col(t, "producer_id", -1, np.int64)[idx]
        code = pid * EPOCHS + (np_col(t, "producer_epoch", 0, np.int64)[idx] & (EPOCHS - 1))
        # the last write of each producer id, whatever its epoch: a producer that bumped its
        # epoch and wrote on did not stop
        up, pl = np.unique(pid[::-1], return_index=True)
        for q, z in zip(up.tolist(), (pid.size - 1 - pl).tolist()):
            self.last_pid[q] = int(row[z])
        ts = np_col(t, "max_timestamp_ms", -1, np.int64)[idx]
        uniq, fi, cnt = np.unique(code, return_index=True, return_counts=True)
        li = code.size - 1 - np.unique(code[::-1], return_index=True)[1]
        young = []   # (index of the session in uniq, how many of its rows are heads)
        for u, (c, a, z, k) in enumerate(zip(uniq.tolist(), fi.tolist(), li.tolist(), cnt.tolist())):
            seen = self.count.get(c, 0)
            if seen == 0:
                self.first[c] = int(row[a])
            if seen < HEAD:
                young.append((u, min(HEAD - seen, k)))
            self.last[c] = int(row[z])
            self.count[c] = seen + k
        run = _Run(t, idx, row, code, ts)
        self.runs.append(run)
        if young:
            # each session's rows in log order are one slice of a stable sort by session
            order = np.argsort(code, kind="stable")
            starts = np.r_[0, np.cumsum(cnt)[:-1]]
            heads = np.concatenate([order[starts[u]:starts[u] + k] for u, k in young])
            self._match(run, np.sort(heads))
        self.runs = [r for r in self.runs if r.max_row >= self.rows - RECENT_ROWS]

    def _match(self, run: _Run, heads: np.ndarray) -> None:
        """Pairs each head row with the latest earlier batch of another session holding the same
        records within the window (newest run first)."""
        fp = run.prints()[heads]
        for r in self.runs:
            r.prints()
        for k, h in enumerate(heads.tolist()):
            for r in reversed(self.runs):
                if r.max_row < run.row[h] - RECENT_ROWS:
                    break
                j = r.latest(int(fp[k]), int(run.row[h]), int(run.code[h]), int(run.ts[h]))
                if j >= 0:
                    self.pairs.append((self._facts(run, h), self._facts(r, j)))
                    break

    def _facts(self, r: _Run, j: int) -> dict:
        i = int(r.idx[j])
        t = r.t
        src = int(self.sources_of(t, _one(t.num_rows, i))[0])
        return {"row": int(r.row[j]), "code": int(r.code[j]), "source": src,
                "position": t.column("position")[i].as_py(), "base": t.column("base_offset")[i].as_py(),
                "last": t.column("last_offset")[i].as_py(), "ts": int(r.ts[j])}

    def finish(self, sources: list[str]) -> list[dict]:
        """duplicate-records findings for the pairs whose original session ended before the
        copy's began: one per (old session, new session), its consecutive copies together."""
        groups: dict[tuple, list] = {}
        for b, a in self.pairs:
            ended = (self.last[a["code"]] if a["code"] // EPOCHS == b["code"] // EPOCHS
                     else self.last_pid[a["code"] // EPOCHS])
            if ended < self.first[b["code"]]:
                groups.setdefault((a["code"], b["code"]), []).append((b, a))
        # a restarted application sends its unacknowledged records first: the copies of one old
        # session begin with the new session's first batch here (two producers that merely wrote
        # alike records - constant payloads - meet later in a session)
        groups = {k: v for k, v in groups.items() if min(b["row"] for b, _ in v) == self.first[k[1]]}
        out = [self._finding(k, v, sources) for k, v in sorted(groups.items(), key=lambda kv: kv[1][0][0]["row"])]
        self.pairs, self.runs = [], []
        return out

    def _finding(self, key, pairs, sources) -> dict:
        (ca, cb), (b0, _), (b1, _) = key, pairs[0], pairs[-1]
        pa_, ea, pb, eb = ca // EPOCHS, ca % EPOCHS, cb // EPOCHS, cb % EPOCHS
        where = f"{self.topic}-{self.partition} (replica {self.replica})"
        new = (f"a new producer id {pb} (epoch {eb})" if pb != pa_ else
               f"producer {pb}'s bumped epoch {eb} (sequences from 0: KIP-360 recovery after unresolved batches)")
        lo, hi = min(a["base"] for _, a in pairs), max(a["last"] for _, a in pairs)
        ev = [evidence(sources[b["source"]], b["position"], "batch") for b, _ in pairs[:4]]
        ev += [evidence(sources[a["source"]], a["position"], "batch", "original") for _, a in pairs[:4]]
        return finding(
            "duplicate-records", f"{where}: records at {offset_span(b0['base'], b1['last'])}, the first batches of "
            f"{new}, are the same records (keys, values, headers, offset and timestamp deltas) as offsets "
            f"{lo}-{hi} of producer {pa_} epoch {ea}, which wrote nothing here after them: its last writes "
            f"were sent again by a new producer session - an application that restarted or re-created its "
            f"producer after a failed or timed-out send. Idempotence protects one producer session only: "
            f"consumers process these records twice",
            evidence=ev, details={"original_first_offset": lo, "original_last_offset": hi, "batches": len(pairs),
                                  "original_producer_id": pa_, "original_producer_epoch": ea,
                                  "cause": "re-sent by a new producer session"},
            topic=self.topic, partition=self.partition, replica=self.replica, producer_id=pb,
            producer_epoch=eb, first_offset=b0["base"], last_offset=b1["last"],
            first_ts_ms=b0["ts"], last_ts_ms=b1["ts"])


def _one(n: int, i: int) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[i] = True
    return m
