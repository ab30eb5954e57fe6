"""The comparisons behind `replica-divergence` (rule in replicas.py): the replicas of one partition,
each a replica_rows.Replica with its batches (one row per batch), against each other.

- Missing offsets: what other replicas hold below their own high watermark (committed) and a
  replica lacks - unless below its log start (retention runs per broker) or in the part its own
  log cleaner processed (compaction removes different batches on each broker).
- Different batches: batches at one offset, or batch boundaries, that disagree on the offsets,
  producer fields or leader epoch (which the cleaner keeps: MemoryRecords.filterTo), or on the
  CRC where neither copy can have been rewritten by its cleaner. They count below both replicas'
  high watermarks, and anywhere when both batches carry the same leader epoch (a leader writes
  one sequence of batches per epoch and followers copy it: two versions in one epoch are never
  uncommitted data awaiting truncation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kaudit.audit.folds import np_col
from kaudit.audit.consistency.replica_rows import Replica
from kaudit.ranges import merged

COMPARED = ("last_offset", "producer_id", "producer_epoch", "base_sequence", "is_transactional", "is_control",
            "partition_leader_epoch", "magic")


@dataclass
class Missing:
    replica: Replica
    first: int
    last: int
    holders: list[Replica]
    kind: str          # hole | tail-flushed | tail-committed | tail-lag


@dataclass
class Divergence:
    replica: str                     # the replica that differs from all the others, else the first
    first: int
    last: int
    versions: dict                   # replica -> (row index of its first batch, epoch, producer id)


# -- missing offsets ---------------------------------------------------------------------------

def _subtract(ranges: list[list[int]], cut: list[list[int]]) -> list[list[int]]:
    out = []
    for a, b in ranges:
        pieces = [[a, b]]
        for c, d in cut:
            nxt = []
            for x, y in pieces:
                if d < x or c > y:
                    nxt.append([x, y])
                    continue
                if x < c:
                    nxt.append([x, c - 1])
                if d < y:
                    nxt.append([d + 1, y])
            pieces = nxt
        out.extend(pieces)
    return out


def missing(reps: list[Replica]) -> list[Missing]:
    held = {r.name: r.held() for r in reps}
    out = []
    for r in reps:
        committed = []
        for s in reps:
            if s is not r and s.hw is not None:
                committed += [[a, min(b, s.hw - 1)] for a, b in held[s.name] if a < s.hw]
        floor = max(r.log_start, r.cleaned)
        gaps = _subtract(merged(committed), held[r.name] + ([[0, floor - 1]] if floor > 0 else []))
        top = int(r.last[r.ok].max()) if r.ok.any() else -1
        for a, b in gaps:
            holders = [s for s in reps if s is not r and s.hw is not None and a < s.hw
                       and any(x <= b and a <= y for x, y in held[s.name])]
            if top > b:
                kind = "hole"
            elif r.recovery is not None and a < r.recovery:
                kind = "tail-flushed"
            elif r.hw is not None and a < r.hw:
                kind = "tail-committed"
            else:
                kind = "tail-lag"
            out.append(Missing(r, a, b, holders, kind))
    return out


# -- different batches -------------------------------------------------------------------------

def _cols(r: Replica) -> dict:
    t = r.rows
    c = {name: np_col(t, name, -1, np.int64) for name in COMPARED + ("crc",)}
    c["rewritten"] = np_col(t, "has_delete_horizon", False, bool) | (r.last < r.cleaned)
    return c


def _committed(r: Replica, s: Replica, offsets: np.ndarray) -> np.ndarray:
    """Offsets both replicas record as committed (a replica without a high watermark - its
    replication-offset-checkpoint missing - may hold a deposed leader's uncommitted tail)."""
    if r.hw is None or s.hw is None:
        return np.zeros(offsets.size, bool)
    return offsets < min(r.hw, s.hw)


def pair_divergence(r: Replica, s: Replica) -> np.ndarray:
    """Row indices of r's valid batches that disagree with s (same start, or a batch of s that
    covers the start with another boundary), where the disagreement counts."""
    cr, cs = _cols(r), _cols(s)
    ri = np.flatnonzero(r.ok)
    si = np.flatnonzero(s.ok)
    if not ri.size or not si.size:
        return np.zeros(0, np.int64)
    sb = s.base[si]
    j = np.searchsorted(sb, r.base[ri], side="right") - 1
    inside = (j >= 0) & (s.last[si[np.maximum(j, 0)]] >= r.base[ri])
    ri, sj = ri[inside], si[j[inside]]
    same_start = s.base[sj] == r.base[ri]
    differ = ~same_start
    for name in COMPARED:
        differ |= same_start & (cr[name][ri] != cs[name][sj])
    legacy = (cr["magic"][ri] < 2) | (cs["magic"][sj] < 2)
    rewritten = cr["rewritten"][ri] | cs["rewritten"][sj]
    differ |= same_start & ~rewritten & (cr["crc"][ri] != cs["crc"][sj])
    differ &= ~(legacy & rewritten)   # the cleaner rebuilds legacy wrappers with new offsets
    epoch_r, epoch_s = cr["partition_leader_epoch"][ri], cs["partition_leader_epoch"][sj]
    counts = ((epoch_r == epoch_s) & (epoch_r >= 0)) | _committed(r, s, r.base[ri])
    return ri[differ & counts]


def divergences(reps: list[Replica]) -> list[Divergence]:
    """Disagreeing batches, one Divergence per run of consecutive batches of the replica
    reported: at each offset the replica that differs from all the others (the odd one out),
    else the first one in name order."""
    bad: dict[str, dict[int, set]] = {r.name: {} for r in reps}   # replica -> row -> other replicas
    for i, r in enumerate(reps):
        for s in reps[i + 1:]:
            for row in pair_divergence(r, s).tolist():
                bad[r.name].setdefault(row, set()).add(s.name)
            for row in pair_divergence(s, r).tolist():
                bad[s.name].setdefault(row, set()).add(r.name)
    by_name = {r.name: r for r in reps}
    at: dict[int, dict[str, int]] = {}    # offset -> replica -> its row there
    for r in reps:
        for row in bad[r.name]:
            at.setdefault(int(r.base[row]), {})[r.name] = row
    chosen: dict[str, list[int]] = {r.name: [] for r in reps}
    for o, rows in at.items():
        names = set(rows).union(*(bad[n][x] for n, x in rows.items()))
        odd = [n for n, x in rows.items() if bad[n][x] == names - {n} and len(names) > 2]
        pick = odd[0] if len(odd) == 1 else min(rows)
        chosen[pick].append(rows[pick])
    out = []
    for r in reps:
        for group in _runs(sorted(chosen[r.name])):
            lo, hi = int(r.base[group[0]]), int(r.last[group[-1]])
            versions = {r.name: _version(r, group[0])}
            for name in sorted(set().union(*(bad[r.name][x] for x in group))):
                s = by_name[name]
                k = int(np.searchsorted(s.base, lo, side="right")) - 1
                versions[name] = _version(s, max(k, 0))
            out.append(Divergence(r.name, lo, hi, versions))
    return out


def _runs(rows: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for x in rows:
        if out and x == out[-1][-1] + 1:
            out[-1].append(x)
        else:
            out.append([x])
    return out


def _version(r: Replica, row: int) -> tuple:
    t = r.rows
    return (row, t.column("partition_leader_epoch")[row].as_py(), t.column("producer_id")[row].as_py(),
            t.column("crc")[row].as_py())

