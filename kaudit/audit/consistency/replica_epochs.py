"""The replicas of a partition against each other's leader epochs (part of `replica-divergence`,
replicas.py): records a replica holds past the offset where another replica's log began a later
leader epoch.

A log reaches leader epoch E at offset S when it holds a batch of epoch E at S, or when its
`leader-epoch-checkpoint` has the entry (E, S): a new leader records its epoch at its log end
before it appends anything (Partition.makeLeader -> maybeAssignEpochStartOffset), a follower
when it copies the first batch of that epoch. The leader of epoch E began it at or below S, and
from there its log holds only epochs >= E. So a replica holding a batch of an older epoch at an
offset >= S holds records that leader never had: when it follows again it truncates them
(OffsetsForLeaderEpoch, KIP-101/KIP-279) - above its high watermark a deposed leader's
uncommitted tail (never acknowledged to acks=all producers; acks=1 writes there were
acknowledged by that leader alone and are lost), below it committed records the later leader
lacked (an unclean leader election, or a disk restored from an old copy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kaudit.audit.folds import np_col
from kaudit.audit.consistency.replica_rows import Replica

ENTRY_COLUMNS = ("replica", "topic", "partition", "source", "position", "leader_epoch", "start_offset")


@dataclass
class Superseded:
    replica: Replica          # the replica holding the older epoch's records
    first: int
    last: int
    epoch: int                # the newest epoch among them
    by: str                   # the replica whose log began the later epoch
    later: int                # that epoch
    start: int                # where that replica's log reached it
    row: int                  # the replica's first batch of them
    committed: bool           # below its own high watermark


def starts(r: Replica, entries: list[dict]) -> dict[int, int]:
    """epoch -> the lowest offset the replica's log reached it (batches, leader-epoch-checkpoint)."""
    out: dict[int, int] = {}
    if r.has_batches:
        epoch = np_col(r.rows, "partition_leader_epoch", -1, np.int64)
        for e, b in zip(epoch[r.ok].tolist(), r.base[r.ok].tolist()):
            if e >= 0:
                out[e] = min(b, out.get(e, b))
    for x in entries:
        e, s = x.get("leader_epoch"), x.get("start_offset")
        if e is not None and s is not None and e >= 0 and s >= 0:
            out[e] = min(s, out.get(e, s))
    return out


def superseded(reps: list[Replica], entries: dict[str, list[dict]]) -> list[Superseded]:
    """Per replica, its records of an older epoch past another replica's start of a later one,
    cut at its high watermark (a committed and an uncommitted part)."""
    reached = {r.name: starts(r, entries.get(r.name, [])) for r in reps}
    out = []
    for r in reps:
        if not r.has_batches:         # it holds nothing: it only tells where it reached an epoch
            continue
        epoch = np_col(r.rows, "partition_leader_epoch", -1, np.int64)
        best = None      # (first offset, row, epoch, by, later, start)
        for s in reps:
            if s is r:
                continue
            for later, at in reached[s.name].items():
                hit = np.flatnonzero(r.ok & (epoch >= 0) & (epoch < later) & (r.last >= at))
                if hit.size:
                    first = max(int(r.base[hit[0]]), at)
                    if best is None or first < best[0]:
                        best = (first, int(hit[0]), int(epoch[hit].max()), s.name, later, at)
        if best is None:
            continue
        first, row, old, by, later, at = best
        last = int(r.last[r.ok].max())
        hw = r.hw
        for lo, hi, committed in ((first, last if hw is None else min(last, hw - 1), True),
                                  (first if hw is None else max(first, hw), last, False)):
            if lo <= hi and (committed is False or hw is not None):
                out.append(Superseded(r, lo, hi, old, by, later, at, row, committed))
    return out


def open_on_leader(x: Superseded, lo: int, hi: int) -> list[dict]:
    """The transaction markers among a replica's superseded records [lo, hi] whose transaction's
    data lies below the later epoch's start (x.start): the replica that began that epoch holds
    the data without the marker - an ongoing transaction there that no coordinator will end (it
    completed it): its producer state keeps it open and the partition's last stable offset stops
    at its first offset (ProducerStateManager; KIP-664's hanging transaction). Per marker:
    producer id, marker offset, the data's first and last offset."""
    r = x.replica
    pid = np_col(r.rows, "producer_id", -1, np.int64)
    control = np_col(r.rows, "is_control", False, bool)
    txn = np_col(r.rows, "is_transactional", False, bool)
    out = []
    for i in np.flatnonzero(r.ok & control & (r.base >= lo) & (r.base <= hi)).tolist():
        p = int(pid[i])
        if p < 0:
            continue
        mine = r.ok & (pid == p) & (r.base < int(r.base[i]))
        ends = np.flatnonzero(mine & control)
        after = int(r.base[ends[-1]]) if ends.size else -1     # the producer's previous marker
        data = np.flatnonzero(mine & txn & ~control & (r.base > after))
        if data.size and int(r.last[data].max()) < x.start:
            out.append({"producer_id": p, "marker_offset": int(r.base[i]),
                        "data": [int(r.base[data].min()), int(r.last[data].max())]})
    return out
