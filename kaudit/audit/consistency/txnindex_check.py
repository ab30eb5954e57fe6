"""The `.txnindex` entries of one replica of a partition against its replayed log
(producer_replay.Replay): the comparisons behind `txnindex-mismatch` (rule in state_files.py)."""

from __future__ import annotations

import numpy as np

from kaudit.audit.producers.producer_replay import Replay
from kaudit.audit.registry import evidence

DELIVERS = "read_committed consumers deliver its records as if committed (the broker lists aborted " \
           "transactions from this file)"


def check_txnindex(replay: Replay, entries: list[dict]) -> list[tuple]:
    """[(severity, message, finding fields, evidence, details)] for one replica's log."""
    pids, offs, aborts, firsts = replay.marker_table()
    by_key: dict[tuple, list[dict]] = {}
    for e in sorted(entries, key=lambda e: (e["source"], e["position"])):
        by_key.setdefault((e["producer_id"], e["last_offset"]), []).append(e)
    out: list[tuple] = []
    matched: list[tuple] = []
    for pid, first, marker, src, pos in replay.abort_rows():
        found = by_key.get((pid, marker))
        fields = {"producer_id": pid, "first_offset": first, "last_offset": marker}
        if not found:
            out.append(("error", f"the .txnindex lacks producer {pid}'s aborted transaction at offsets "
                        f"{first}-{marker} (ABORT marker at {marker}): {DELIVERS}", fields,
                        [evidence(src, pos, "marker")], {"expected": [pid, first, marker]}))
            continue
        e = found.pop(0)
        matched.append((e, fields, src, pos))
        if e["first_offset"] == first:
            continue
        ev = [evidence(src, pos, "marker"), evidence(e["source"], e["position"], "txnindex")]
        if e["first_offset"] > first:
            out.append(("error", f"the .txnindex entry of producer {pid}'s aborted transaction (ABORT at {marker}) "
                        f"starts at {e['first_offset']}, after its first batch at {first}: read_committed consumers "
                        f"deliver its records at {first}-{e['first_offset'] - 1}", fields, ev, _entry(e)))
        elif not replay.gap_between(_previous_marker(pids, offs, pid, marker), first):
            out.append(("warning", f"the .txnindex entry of producer {pid}'s aborted transaction (ABORT at {marker}) "
                        f"starts at {e['first_offset']}, before its first batch at {first} (no batch of it is missing "
                        "there)", fields, ev, _entry(e)))
    out += _too_high(replay, firsts, offs, matched)
    for rest in by_key.values():
        for e in rest:
            out.extend(_extra(replay, pids, offs, aborts, e))
    return out


def _too_high(replay: Replay, firsts, offs, matched: list[tuple]) -> list[tuple]:
    if not matched:
        return []
    lso = np.array([e["last_stable_offset"] for e, *_ in matched], np.int64)
    marker = np.array([f["last_offset"] for _, f, *_ in matched], np.int64)
    bound = _Intervals(replay, firsts, offs).bounds(lso, marker)
    out = []
    for i in np.flatnonzero(lso > bound).tolist():
        e, fields, src, pos = matched[i]
        out.append(("warning", f"the .txnindex entry of producer {fields['producer_id']}'s aborted transaction "
                    f"(ABORT at {fields['last_offset']}) records last stable offset {e['last_stable_offset']}, above "
                    f"{int(bound[i])}: the broker stops looking for aborted transactions in later segments too early "
                    "(read_committed consumers can then deliver aborted records)", fields,
                    [evidence(src, pos, "marker"), evidence(e["source"], e["position"], "txnindex")], _entry(e)))
    return out


def _entry(e: dict) -> dict:
    return {"entry": [e["producer_id"], e["first_offset"], e["last_offset"], e["last_stable_offset"]]}


def _previous_marker(pids, offs, pid: int, before: int) -> int:
    lo, hi = np.searchsorted(pids, pid, "left"), np.searchsorted(pids, pid, "right")
    j = int(np.searchsorted(offs[lo:hi], before, "left")) - 1
    return int(offs[lo + j]) if j >= 0 else -1


def _marker_at(pids, offs, aborts, pid: int, offset: int):
    lo, hi = np.searchsorted(pids, pid, "left"), np.searchsorted(pids, pid, "right")
    j = int(np.searchsorted(offs[lo:hi], offset, "left"))
    if j < hi - lo and int(offs[lo + j]) == offset:
        return "ABORT" if aborts[lo + j] else "COMMIT"
    return None


def _extra(replay: Replay, pids, offs, aborts, e: dict) -> list[tuple]:
    """An entry that matches no ABORT ending a transaction with data."""
    pid, first, last = e["producer_id"], e["first_offset"], e["last_offset"]
    fields = {"producer_id": pid, "first_offset": first, "last_offset": last}
    ev = [evidence(e["source"], e["position"], "txnindex")]
    kind = _marker_at(pids, offs, aborts, pid, last)
    if kind == "ABORT":
        if replay.gap_between(_previous_marker(pids, offs, pid, last), last):
            return []   # compaction removed the transaction's data; the cleaner kept its entry
        return [("warning", f"the .txnindex lists producer {pid} at {first}-{last}, but the transaction its ABORT "
                 f"at {last} ends has no data (Kafka indexes only transactions with data)", fields, ev, _entry(e))]
    if kind == "COMMIT":
        return [("error", f"the .txnindex lists producer {pid} at {first}-{last} as aborted, but offset {last} is "
                 f"its COMMIT marker: read_committed consumers skip its committed records", fields, ev, _entry(e))]
    if last > replay.prev_last:
        return [("warning", f"the .txnindex lists producer {pid} at {first}-{last}, past the log's last offset "
                 f"{replay.prev_last}: the log lost records the index still describes", fields, ev, _entry(e))]
    if replay.missing(last):
        return []   # the offset is not in the log (compacted or unreadable): nothing to compare
    return [("error", f"the .txnindex lists producer {pid} at {first}-{last} as aborted, but offset {last} holds "
             f"no ABORT marker of producer {pid}: read_committed consumers skip its records there",
             fields, ev, _entry(e))]


class _Intervals:
    """The transactions of the log as [first offset, marker offset), open ones to the end: the
    last stable offset after an ABORT at m is at most the first offset of any other transaction
    open at m (ProducerStateManager.lastStableOffset). Offsets compaction removed only make the
    first offsets seen later, so a bound from them never accuses a correct entry."""

    def __init__(self, replay: Replay, firsts, offs):
        has = firsts >= 0
        opens = replay.state.open_firsts()
        f = np.concatenate([firsts[has], opens])
        end = np.concatenate([offs[has], np.full(opens.size, np.iinfo(np.int64).max, np.int64)])
        order = np.argsort(f, kind="stable")
        self.first = f[order]
        self.max_end = np.maximum.accumulate(end[order]) if end.size else end

    def bounds(self, lso: np.ndarray, marker: np.ndarray) -> np.ndarray:
        """The highest correct last stable offset of each entry: its marker + 1, or the first
        offset of the oldest other transaction open at its marker (one starting below `lso`)."""
        bound = marker + 1
        if not self.first.size:
            return bound
        k = np.searchsorted(self.first, np.minimum(lso, marker + 1), side="left")
        hit = (k > 0) & (self.max_end[np.maximum(k - 1, 0)] > marker)
        for i in np.flatnonzero(hit).tolist():
            j = int(np.flatnonzero(self.max_end[: k[i]] > marker[i])[0])
            bound[i] = min(bound[i], int(self.first[j]))
        return bound
