"""`leader-epoch-mismatch`: a replica's `leader-epoch-checkpoint` against the leader epochs its
batches carry, per replica of a partition, in log order (state_files.py's fold feeds it: both
read every batch of the log, once).

The batches are reduced as they come to runs of one leader epoch (a few per partition, however
long the log); the checkpoint file sorts after every segment of its partition dir, so its
entries arrive last and are judged in `finish` against the runs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit.audit.registry import evidence, finding, rule

ENTRY_COLUMNS = ("replica", "topic", "partition", "source", "position", "leader_epoch", "start_offset")
MAX_FINDINGS = 20   # per replica of a partition; the rest are counted in the last one


@rule("leader-epoch-mismatch", "warning", "disk",
      "a replica's leader-epoch-checkpoint disagrees with the leader epochs of its batches",
      "The broker answers OffsetsForLeaderEpoch from this file: followers (and KIP-320 consumers) "
      "truncate to the end offsets it gives, so a wrong file can make a follower keep records "
      "the leader does not have, or drop and re-fetch ones it has. Stop the broker, move the "
      "partition's leader-epoch-checkpoint aside (keep a copy) and let log recovery rebuild it, "
      "or re-replicate the partition from a healthy replica.")
def leader_epoch_mismatch(entries: list[tuple[int, int]], run: tuple[int, int, int]) -> str | None:
    """Invariant: a partition's leader epoch cache (kafka LeaderEpochFileCache, persisted as
    `leader-epoch-checkpoint`: `epoch start_offset` lines, KIP-101/KIP-279) holds entries strictly
    increasing in epoch and start offset, and assigns each batch the epoch of the last entry
    that starts at or before the batch: a leader appends (epoch, log end offset) when it takes
    over and stamps its epoch on every batch it appends, a follower assigns the epochs of the
    batches it copies. So every batch's partition_leader_epoch equals the epoch the file gives
    its offset, and the epochs of a log never go down.
    Benign causes: batches below the file's first entry (the log start moved: retention,
    DeleteRecords, and Kafka drops the entries before it); entries at or past the log end (a new
    leader that has written nothing yet, or an unflushed tail lost in a crash: Kafka truncates
    them on load); compaction removing batches (the remaining ones keep their epochs).
    `run` is (epoch, first offset, last offset) of consecutive batches of one epoch; returns why
    the file disagrees with it, or None."""
    epoch, first, last = run
    if not entries or last < entries[0][1]:
        return None
    first = max(first, entries[0][1])
    starts = [s for _, s in entries]
    i = int(np.searchsorted(starts, first, side="right")) - 1
    got, start = entries[i]
    if got != epoch:
        return (f"the checkpoint gives offset {first} epoch {got} (entry {got} {start}), "
                f"the batches at {first}-{last} carry epoch {epoch}")
    if i + 1 < len(entries) and entries[i + 1][1] <= last:
        nxt, nstart = entries[i + 1]
        return (f"the checkpoint starts epoch {nxt} at {nstart}, inside the batches of epoch {epoch} "
                f"at {first}-{last}: OffsetsForLeaderEpoch({epoch}) would end it at {nstart}")
    return None


class EpochRuns:
    """One replica of a partition: its batches as runs of one leader epoch, then the checkpoint."""

    def __init__(self, key: tuple):
        self.replica, self.topic, self.partition = key
        # [epoch, first offset, last offset, source, position] per run, in log order
        self.runs: list[list] = []
        self.entries: list[dict] = []

    def feed(self, t: pa.Table, epoch: np.ndarray, base: np.ndarray, last: np.ndarray, ok: np.ndarray) -> None:
        """One chunk's batches (log order) as arrays; `ok`: valid v2 batches."""
        keep = ok & (epoch >= 0)
        if keep.all() and epoch[0] == epoch[-1] and (epoch == epoch[0]).all():
            self._run(int(epoch[0]), int(base[0]), int(last.max()), t, 0)   # one epoch: the common case
            return
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            return
        e = epoch[idx]
        starts = np.flatnonzero(np.concatenate(([True], e[1:] != e[:-1])))
        ends = np.append(starts[1:], idx.size) - 1
        b, z = base[idx], last[idx]
        for s, end in zip(starts.tolist(), ends.tolist()):
            self._run(int(e[s]), int(b[s]), int(z[s:end + 1].max()), t, int(idx[s]))

    def _run(self, epoch: int, first: int, top: int, t: pa.Table, row: int) -> None:
        """Batches of one epoch from `first` to `top`, the first of them at `row` of `t`."""
        if self.runs and self.runs[-1][0] == epoch:
            self.runs[-1][2] = max(self.runs[-1][2], top)
            return
        self.runs.append([epoch, first, top, t.column("source")[row].as_py(), t.column("position")[row].as_py()])

    def finish(self) -> list[dict]:
        if not self.entries:   # no file, or an empty one: nothing to compare
            return []
        self.entries.sort(key=lambda r: (r["source"], r["position"]))
        out: list[dict] = []
        entries = self._monotonic(out)
        high = -1
        for ep, first, last, src, pos in self.runs:
            if ep < high:
                out.append(self._finding(
                    f"batches at {first}-{last} carry leader epoch {ep} after batches of epoch {high}: "
                    "a log's leader epochs never go down", first, last, [evidence(src, pos, "batch")]))
                continue
            high = ep
            why = leader_epoch_mismatch(entries, (ep, first, last))
            if why:
                out.append(self._finding(why, first, last, [evidence(src, pos, "batch"), self._entry_ev()],
                                         {"epoch": ep, "checkpoint": [list(x) for x in entries]}))
        if len(out) > MAX_FINDINGS:
            extra = len(out) - MAX_FINDINGS
            out = out[:MAX_FINDINGS]
            out[-1]["message"] += f" ({extra} more mismatches in this replica)"
        return out

    def _monotonic(self, out: list[dict]) -> list[tuple[int, int]]:
        """The entries as (epoch, start offset), reporting those that do not increase."""
        kept: list[tuple[int, int]] = []
        for r in self.entries:
            ep, start = r["leader_epoch"], r["start_offset"]
            if kept and (ep <= kept[-1][0] or start <= kept[-1][1]):
                out.append(self._finding(
                    f"entry {ep} {start} does not follow entry {kept[-1][0]} {kept[-1][1]}: epochs and "
                    "start offsets must both increase (Kafka's cache drops conflicting entries on load)",
                    start, start, [evidence(r["source"], r["position"], "leader-epoch-checkpoint")]))
                continue
            kept.append((ep, start))
        return kept

    def _entry_ev(self) -> dict:
        return evidence(self.entries[0]["source"], None, "leader-epoch-checkpoint")

    def _finding(self, why: str, first: int, last: int, ev: list[dict], details: dict | None = None) -> dict:
        return finding("leader-epoch-mismatch",
                       f"{self.topic}-{self.partition} (replica {self.replica}): leader-epoch-checkpoint: {why}",
                       evidence=ev, details=details, topic=self.topic, partition=self.partition,
                       replica=self.replica, first_offset=first, last_offset=last)
