"""The transactional batches a read_committed consumer delivers of a Fetch response
(audit/read_committed.py: its filtering, replayed), for wire_readers.py and reader_join.py, and
how the transaction of a fetched batch ended (`Outcomes`: markers at known offsets,
WriteTxnMarkers requests in time, bounded by the producer's EndTxns)."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np
import pyarrow as pa

from kaudit.audit import read_committed
from kaudit.audit.folds import np_col, np_mask, unique_ints
from kaudit.audit.registry import evidence
from kaudit.audit.txn.txn_parts import marker_may_end


def delivered(batches: list[dict], aborted: list[tuple[int, int]]) -> list[dict]:
    """The transactional data batches of one read_committed response (its transactional and
    control batches, any order) the consumer delivers (read_committed.delivered)."""
    return [b for b in read_committed.delivered(batches, aborted) if b["is_transactional"]]


def delivered_aborted(batches: list[dict], aborted: list[tuple[int, int]], outcomes: "Outcomes"):
    """(end, batches) for each aborted transaction whose batches the consumer delivers."""
    groups: dict = {}
    for b in delivered(batches, aborted):
        end = outcomes.outcome(b)
        if end is not None and end["result"] == "ABORT":
            groups.setdefault((b["producer_id"], end["key"]), (end, []))[1].append(b)
    return [groups[k] for k in sorted(groups, key=lambda k: groups[k][1][0]["base_offset"])]


class Outcomes:
    """How the transactions of one topic partition ended, as far as the wire tells."""

    def __init__(self, fetched: pa.Table, produced: pa.Table | None, requests: pa.Table | None,
                 ends: dict | None = None):
        """`ends`: the EndTxns the captures show answered without error (folds.Context.txn_ends)."""
        self._coverage(fetched)
        self.ends = ends or {}
        self._end_times: dict[tuple, list] = {}   # (producer id, epoch) -> its EndTxns' times (_later_end)
        self.markers: dict[int, list[tuple]] = {}   # pid -> [(offset, result, source, position)]
        names = ["control_type", "producer_id", "base_offset", "source", "position"]
        ctrl = fetched.select(names).filter(np_mask(np_col(fetched, "is_control", False, bool)))
        seen: dict[int, tuple] = {}
        cols = (ctrl.column(c).to_pylist() for c in names)
        for ctype, pid, base, src, pos in zip(*cols):
            if ctype not in ("COMMIT", "ABORT"):
                continue
            v = (pid, ctype)
            if seen.setdefault(base, v) != v:
                seen[base] = None   # two versions of one offset: trust neither
            else:
                self.markers.setdefault(pid, []).append((base, ctype, src, pos))
        for pid, ms in self.markers.items():
            self.markers[pid] = sorted({m[0]: m for m in ms if seen.get(m[0])}.values())
        self._produced_rows = produced
        self._produced: dict[tuple, list[dict]] | None = None   # built when a request needs it
        self.requests: dict[int, list[dict]] = {}
        for r in (requests.to_pylist() if requests is not None else ()):
            self.requests.setdefault(r["producer_id"], []).append(r)
        for rs in self.requests.values():
            rs.sort(key=lambda r: (r["response_ts"] or 0, r["position"]))

    @property
    def produced(self) -> dict[tuple, list[dict]]:
        """(producer id, epoch, base sequence) -> its Produce rows."""
        if self._produced is None:
            self._produced = {}
            for r in (self._produced_rows.to_pylist() if self._produced_rows is not None else ()):
                self._produced.setdefault((r["producer_id"], r["producer_epoch"], r["base_sequence"]), []).append(r)
        return self._produced

    def suspects(self, txn: pa.Table) -> np.ndarray:
        """Which rows of `txn` (fetched transactional and control batches) might `outcome` find
        ended in ABORT - a superset, decided with numpy: a transactional data batch whose
        producer has a WriteTxnMarkers request, or whose next marker (as `outcome` looks it up)
        is an ABORT, or whose producer id or last offset is unknown. Any other batch's outcome
        is its next marker's COMMIT or none (`_by_time` needs a request), never ABORT."""
        data = np_col(txn, "is_transactional", False, bool) & ~np_col(txn, "is_control", False, bool)
        known = ~np.asarray(txn.column("producer_id").is_null()) & ~np.asarray(txn.column("last_offset").is_null())
        out = data & ~known
        pids = np_col(txn, "producer_id", 0, np.int64)
        last = np_col(txn, "last_offset", 0, np.int64)
        data &= known
        for pid in unique_ints(pids[data]).tolist():
            sel = data & (pids == pid)
            ms = self.markers.get(pid, ())
            offsets = [m[0] for m in ms]
            if pid in self.requests or None in offsets:
                out |= sel
            elif ms and any(m[1] == "ABORT" for m in ms):
                abort = np.array([m[1] == "ABORT" for m in ms] + [False])
                out[sel] = abort[np.searchsorted(np.array(offsets, dtype=np.int64), last[sel], side="right")]
        return out

    def _coverage(self, fetched: pa.Table) -> None:
        """The offset ranges some Fetch response returned, merged."""
        base = np_col(fetched, "base_offset", -1, np.int64)
        last = np_col(fetched, "last_offset", -1, np.int64)
        order = np.lexsort((last, base))
        base, last = base[order], last[order]
        reach = np.maximum.accumulate(last) if last.size else last
        starts = np.flatnonzero(np.concatenate(([True], base[1:] > reach[:-1] + 1))) if base.size else base
        self.cov_start = base[starts] if base.size else base
        self.cov_end = np.append(reach[starts[1:] - 1], reach[-1]) if base.size else base

    def contiguous(self, lo: int, hi: int) -> bool:
        """Whether every offset from lo to hi was seen in some Fetch response."""
        i = int(np.searchsorted(self.cov_start, lo, side="right")) - 1
        return i >= 0 and int(self.cov_end[i]) >= hi

    def outcome(self, b: dict) -> dict | None:
        ms = self.markers.get(b["producer_id"], [])
        i = bisect_right([m[0] for m in ms], b["last_offset"])
        if i < len(ms) and self.contiguous(b["last_offset"], ms[i][0]):
            off, result, src, pos = ms[i]
            return {"result": result, "key": ("offset", off), "how": f"{result} marker at offset {off}",
                    "evidence": [evidence(src, pos, "marker", f"{result} at offset {off}")]}
        return self._by_time(b)

    def _by_time(self, b: dict) -> dict | None:
        """The first WriteTxnMarkers for the producer after its Produce of this batch was answered."""
        if not self.requests.get(b["producer_id"]):
            return None   # no marker request of the producer to date it by
        sent = [p for p in self.produced.get((b["producer_id"], b["producer_epoch"], b["base_sequence"]), ())
                if p["response_ts"] is not None and p["response_error"] in (0, None)]
        if not sent:
            return None
        t_req = min(p["request_ts"] for p in sent if p["request_ts"] is not None) if any(
            p["request_ts"] is not None for p in sent) else None
        t_resp = min(p["response_ts"] for p in sent)
        later = self._later_end(b["producer_id"], b["producer_epoch"], t_req if t_req is not None else t_resp)
        for r in self.requests.get(b["producer_id"], ()):
            ts = r["response_ts"]
            if ts is None or ts <= t_resp:
                if ts is not None and t_req is not None and ts >= t_req:
                    return None   # a marker went out while the Produce was in flight: either order
                continue
            if later is not None and ts > later:
                return None   # a later transaction's marker: this one's were lost from the capture
            if (r["producer_epoch"] or 0) < (b["producer_epoch"] or 0):
                continue   # an older epoch's marker cannot end this batch's transaction
            if None not in (r["producer_epoch"], b["producer_epoch"]) \
                    and not marker_may_end(r["producer_epoch"], b["producer_epoch"]):
                return None   # a later transaction's marker: this one's end is one the capture lacks
            if r["ok"] is None:
                return None   # unanswered: written or not, unknown
            if not r["ok"]:
                continue      # refused: the coordinator sends it again
            return {"result": r["result"], "key": ("request", r["source"], r["position"]),
                    "how": f"WriteTxnMarkers {r['result']} (frame {r['position']}, epoch {r['producer_epoch']})",
                    "evidence": [evidence(r["source"], r["position"], "write-txn-markers", r["result"])]}
        return None

    def _later_end(self, pid, epoch, after: float) -> float | None:
        """When a transaction after the one the producer's data sent at `after` belongs to was
        ended: the second EndTxn of its producer id and epoch answered without error after it
        (the first ends this one). Its markers were all written by then: the coordinator answers
        an AddPartitionsToTxn (or a version-2 leader's) CONCURRENT_TRANSACTIONS until they are,
        so the next transaction - and its EndTxn - only begins after them; a retried EndTxn is
        answered without error only once they are written (CompleteCommit). A marker request
        past it ends a later transaction of the same epoch (versions 0/1 keep the epoch)."""
        times = self._end_times.get((pid, epoch))
        if times is None:
            times = self._end_times[(pid, epoch)] = [ts for ts, _ in self.ends.get((pid, epoch), ())]
        i = bisect_right(times, after)
        return times[i + 1] if i + 1 < len(times) else None
