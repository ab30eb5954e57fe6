"""A read_committed consumer's filtering, replayed (wire_readers.py, reader_join.py), and how the
transaction of a fetched batch ended (`Outcomes`: markers at known offsets, WriteTxnMarkers
requests in time)."""

from __future__ import annotations

from bisect import bisect_right

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import np_col
from kaudit.audit.registry import evidence


def parse_aborted(text: str | None) -> list[tuple[int, int]]:
    """`aborted_transactions` ("pid@first,...") as (producer id, first offset), by first offset."""
    out = []
    for item in (text or "").split(","):
        pid, _, first = item.partition("@")
        try:
            out.append((int(pid), int(first)))
        except ValueError:
            continue
    return sorted(out, key=lambda x: (x[1], x[0]))


def delivered(batches: list[dict], aborted: list[tuple[int, int]]) -> list[dict]:
    """The transactional data batches of one read_committed response (its transactional and
    control batches, any order) the consumer delivers: Kafka's CompletedFetch (a producer enters
    the aborted set once a batch reaches its first offset, leaves it at its ABORT marker; a
    transactional batch of a producer in the set is skipped), as librdkafka does too."""
    entries = list(aborted)
    active: set[int] = set()
    out = []
    for b in sorted(batches, key=lambda b: b["base_offset"]):
        while entries and entries[0][1] <= b["last_offset"]:
            active.add(entries.pop(0)[0])
        pid = b["producer_id"]
        if b["is_control"]:
            if b["control_type"] == "ABORT":
                active.discard(pid)
            continue
        if b["is_transactional"] and pid not in active:
            out.append(b)
    return out


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

    def __init__(self, fetched: pa.Table, produced: pa.Table | None, requests: pa.Table | None):
        self._coverage(fetched)
        self.markers: dict[int, list[tuple]] = {}   # pid -> [(offset, result, source, position)]
        ctrl = fetched.filter(pa.array(np_col(fetched, "is_control", False, bool)))
        seen: dict[int, tuple] = {}
        for r in ctrl.to_pylist():
            if r["control_type"] not in ("COMMIT", "ABORT"):
                continue
            v = (r["producer_id"], r["control_type"])
            if seen.setdefault(r["base_offset"], v) != v:
                seen[r["base_offset"]] = None   # two versions of one offset: trust neither
            else:
                self.markers.setdefault(r["producer_id"], []).append(
                    (r["base_offset"], r["control_type"], r["source"], r["position"]))
        for pid, ms in self.markers.items():
            self.markers[pid] = sorted({m[0]: m for m in ms if seen.get(m[0])}.values())
        self.produced: dict[tuple, list[dict]] = {}
        for r in (produced.to_pylist() if produced is not None else ()):
            self.produced.setdefault((r["producer_id"], r["producer_epoch"], r["base_sequence"]), []).append(r)
        self.requests: dict[int, list[dict]] = {}
        for r in (requests.to_pylist() if requests is not None else ()):
            self.requests.setdefault(r["producer_id"], []).append(r)
        for rs in self.requests.values():
            rs.sort(key=lambda r: (r["response_ts"] or 0, r["position"]))

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
        sent = [p for p in self.produced.get((b["producer_id"], b["producer_epoch"], b["base_sequence"]), ())
                if p["response_ts"] is not None and p["response_error"] in (0, None)]
        if not sent:
            return None
        t_req = min(p["request_ts"] for p in sent if p["request_ts"] is not None) if any(
            p["request_ts"] is not None for p in sent) else None
        t_resp = min(p["response_ts"] for p in sent)
        for r in self.requests.get(b["producer_id"], ()):
            ts = r["response_ts"]
            if ts is None or ts <= t_resp:
                if ts is not None and t_req is not None and ts >= t_req:
                    return None   # a marker went out while the Produce was in flight: either order
                continue
            if (r["producer_epoch"] or 0) < (b["producer_epoch"] or 0):
                continue   # an older epoch's marker cannot end this batch's transaction
            if r["ok"] is None:
                return None   # unanswered: written or not, unknown
            if not r["ok"]:
                continue      # refused: the coordinator sends it again
            return {"result": r["result"], "key": ("request", r["source"], r["position"]),
                    "how": f"WriteTxnMarkers {r['result']} (frame {r['position']}, epoch {r['producer_epoch']})",
                    "evidence": [evidence(r["source"], r["position"], "write-txn-markers", r["result"])]}
        return None
