"""`replica-divergence` and `checkpoint-mismatch`: the replicas of each partition against each other,
and each replica's offset checkpoints against its own segments.

The fold is cross-replica: keyed by (topic, partition), it needs every log dir's rows of the
partition and the log dirs' checkpoint files (whose entries name their partitions), so engines
buffer its selection and feed it sorted by key (its key is not a replica's). Its selection is lean
(replica_rows.py): a row per batch only for the partitions the inputs hold in several log dirs
(`ReplicaFold.bind`: the engines give it the plan's replicated partitions and each log dir's
cluster id), the two batches bounding each chunk otherwise.

How compaction is told apart from divergence: see `replica_divergence`'s docstring (`kaudit
explain replica-divergence`). Data above the high watermark (uncommitted, a follower not caught
up yet) and below a replica's log start (retention runs per broker) is not compared.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.consistency import replica_compare as C
from kaudit.audit.consistency import replica_epochs as E
from kaudit.audit.consistency import replica_rows as R
from kaudit.audit.folds import KeyedState
from kaudit.audit.consistency.log_chunks import LogFold, TablesByKind, log_batches
from kaudit.audit.registry import evidence, finding, rule
from kaudit.ranges import offsets as offset_span, verb

KEY = ("topic", "partition")
ORDER = ("replica", "base_offset")
CHECKPOINT_COLUMNS = ("replica", "topic", "partition", "source", "position", "checkpoint", "offset")
PRESENCE_COLUMNS = ("replica", "topic", "partition", "source", "position")
CHECKPOINTS = {"replication-offset-checkpoint": "hw", "recovery-point-offset-checkpoint": "recovery",
               "log-start-offset-checkpoint": "log_start_ckpt", "cleaner-offset-checkpoint": "cleaner"}
MAX_FINDINGS = 20   # per rule and partition


@rule("replica-divergence", "error", "disk",
      "replicas of a partition that hold different batches, or a replica missing committed offsets",
      "Find the replica consumers read (the leader) and whether it is the one that differs. A "
      "replica with a hole or different batches is never repaired by Kafka (followers only fetch "
      "past their log end): stop that broker, move its partition dir aside (keep a copy) and let it "
      "re-replicate from a good replica (or reassign the partition); keep "
      "unclean.leader.election.enable=false meanwhile. A lagging replica catches up by itself.")
def replica_divergence(m_or_d) -> str:
    """Invariant: below the high watermark (the offsets every in-sync replica has; each broker
    records its own in `replication-offset-checkpoint`, ReplicaManager.checkpointHighWatermarks)
    the replicas of a partition hold the same batches: a follower appends the leader's batches
    as they are (ReplicaFetcherThread, UnifiedLog.appendAsFollower) and truncates only above the
    high watermark, to the leader's epoch boundaries (KIP-101, KIP-279). Flagged: a replica
    lacking offsets other replicas hold below their high watermark (error for a hole - Kafka
    never refills one - or for records below its recovery point, which had been flushed;
    warning for a tail it lost unflushed or has not fetched yet, i.e. it was out of the ISR), and
    replicas holding different batches at an offset below both their high watermarks, or of the
    same leader epoch anywhere (two versions of one epoch: an unclean leader election, a disk
    or software fault). Different batches below the high watermark of every replica holding
    them are critical: each replica counted its version committed (acknowledged to acks=all
    producers), and whichever leads, the others' committed records are lost to consumers - the
    disk's trace of an unclean leader election whose deposed replicas were not yet truncated
    (they truncate to the new leader's epoch start when they follow it, KIP-279).
    Compaction is told apart from divergence: each broker runs its own log cleaner, so replicas
    of a compacted partition legitimately differ (batches one cleaner removed and another not
    yet, records dropped from a batch, a delete horizon set at different times: other CRCs). The
    cleaner keeps a v2 batch's base and last offset, producer id/epoch, base sequence, flags and
    leader epoch (MemoryRecords.filterTo), so those are compared everywhere; CRCs only where
    neither copy can have been rewritten, and a replica's missing offsets are excused only
    inside the part its own cleaner processed - below its `cleaner-offset-checkpoint` entry, up
    to its last batch carrying the delete-horizon flag that only the cleaner sets, or to the end
    of the last segment its cleaner visibly rewrote (offsets missing between its batches or
    before its first, a batch with fewer records than offsets, a segment read from a `.swap`;
    then a segment ending short of the next too): a round interrupted by a crash swaps groups
    in before the checkpoint is written.
    Benign causes: compaction (as above), retention (log starts differ: offsets below a
    replica's log start are not compared), uncommitted data above the high watermark (a deposed
    leader's tail, truncated when it rejoins)."""
    return getattr(m_or_d, "kind", "diverged")


@rule("checkpoint-mismatch", "warning", "disk",
      "a log dir's offset checkpoint points past its partition's log",
      "The broker trusts its checkpoints at start-up and clamps them to the log: the records "
      "between the log end and the checkpoint are gone. Compare with the other replicas "
      "(replica-divergence), re-replicate the partition on this broker from a healthy one, and "
      "check the disk (SMART, dmesg) and how the log dir was copied.")
def checkpoint_mismatch(name: str, offset: int, log_end: int) -> bool:
    """Invariant: a log dir's `replication-offset-checkpoint` (high watermarks),
    `recovery-point-offset-checkpoint` (offsets flushed to disk) and `log-start-offset-checkpoint`
    record, per partition, offsets within its log: a broker's high watermark never passes its
    own log end (a follower takes min(leader's, its own log end)), the recovery point is where
    the last flush ended, the log start offset cannot pass the high watermark (UnifiedLog).
    A high watermark past the log end means records this broker had as committed are gone
    (error: as leader it would serve consumers without them); a recovery point past it, that
    flushed records are gone (warning); a log start past it, that every record is logically
    deleted (warning: consumers get OFFSET_OUT_OF_RANGE). A high watermark checkpoint naming a
    partition whose other replicas the input holds, in a log dir that holds no directory of it:
    its records gone from that broker, or the directory left out of the copy (warning: the
    input cannot tell; a partition none of whose replicas is in the input is not told).
    Benign causes: a log dir copied while the broker ran (files copied at different moments);
    a partition whose newest segments were deleted by hand; a partition moved off the broker
    moments before the copy (named until its checkpoints are next written)."""
    return offset > log_end


@dataclass(frozen=True)
class ReplicaFold(LogFold):
    """Cross-replica fold (engines buffer it); `replicated`: the (topic, partition) pairs the inputs hold
    in several log dirs (None: treat every partition as replicated); `clusters`: (log dir,
    cluster id) pairs - each batch row is tagged with its cluster, and replicas of different
    clusters are never compared."""

    replicated: frozenset | None = None
    clusters: tuple = ()

    def bind(self, replicated, clusters: dict | None = None, layout=None) -> "ReplicaFold":
        return replace(self, replicated=frozenset(map(tuple, replicated)),
                       clusters=tuple(sorted((clusters or {}).items(), key=lambda kv: kv[0])))

    def select(self, kind: str, table: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table | None:
        sel = super().select(kind, table, extra)
        if sel is None or kind != "batch":
            return sel
        clusters = dict(self.clusters)
        parts = [R.lean(part, self.replicated is None or key in self.replicated, clusters)
                 for key, part in R.split_keys(sel)]
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


class ReplicaGroup(TablesByKind):
    def __init__(self, key: tuple):
        super().__init__()
        self.topic, self.partition = key

    def finish(self) -> list[dict]:
        reps = self._replicas()
        out = []
        for r in reps:
            out.extend(self._checkpoints(r))
        if reps:   # other replicas of it are in the input: one whose log dir names it lacks its directory
            for r in self.dirless:
                out.extend(self._no_dir(r))
        entries: dict[str, list[dict]] = {}
        for t in self.tables.get("leader_epoch_entry", []):
            for x in t.to_pylist():
                entries.setdefault(x["replica"], []).append(x)
        # a replica holding no batch still tells where its log began a leader epoch (a leader
        # elected with an empty log records (epoch, its log end) before it appends anything)
        empty = [r for r in reps if not r.has_batches and entries.get(r.name)]
        for group in _same_cluster([r for r in reps if r.has_batches and r.detail] + empty):
            sup = E.superseded(group, entries)
            group = [r for r in group if r.has_batches]
            if len(group) < 2:
                out.extend(self._superseded(sup, [], entries))
                continue
            divs = C.divergences(group)
            # offsets lacking where every holder's records are superseded (past a later epoch's
            # start) will never be fetched: told as the holders' (superseded), not as a lag
            out.extend(self._missing([m for m in C.missing(group) if not m.holders or not all(any(
                x.replica.name == h.name and x.first <= m.first and m.last <= x.last for x in sup)
                for h in m.holders)]))
            out.extend(self._diverged(divs, {r.name: r for r in group}))
            out.extend(self._superseded(sup, [[d.first, d.last] for d in divs], entries))
        return out

    def _replicas(self) -> list[R.Replica]:
        reps: dict[str, R.Replica] = {}
        for t in self.tables.get("partition_metadata", []):
            for name in t.column("replica").to_pylist():
                reps.setdefault(name, R.Replica(name)).present = True
        for t in self.tables.get("checkpoint_entry", []):
            for c in t.to_pylist():
                attr = CHECKPOINTS.get(c["checkpoint"])
                if attr:
                    r = reps.setdefault(c["replica"], R.Replica(c["replica"]))
                    setattr(r, attr, c["offset"])
                    r.checkpoint_ev[c["checkpoint"]] = (c["source"], c["position"])
        t = self.concat("batch")
        if t is not None:
            for name in pc.unique(t.column("replica")).to_pylist():
                rows = t.filter(pc.equal(t.column("replica"), name)).sort_by("base_offset")
                r = reps.setdefault(name, R.Replica(name))
                r.rows, r.present = rows, True
        out = [r for r in reps.values() if r.present]
        for r in out:
            if r.has_batches:
                r.arrays()
        self.dirless = sorted((r for r in reps.values() if not r.present), key=lambda r: r.name or "")
        return sorted(out, key=lambda r: r.name or "")

    def _where(self, replica: str) -> str:
        return f"{self.topic}-{self.partition} (replica {replica})"

    # -- checkpoint-mismatch ----------------------------------------------------------------------
    def _no_dir(self, r: R.Replica) -> list[dict]:
        """A log dir whose high watermark checkpoint names the partition at a positive offset, the
        partition's other replicas in the input, but no directory of it there: the records it
        held are gone from that broker - or the copy the input was made from left it out (a
        warning: the input cannot tell which)."""
        if not r.hw or not checkpoint_mismatch("replication-offset-checkpoint", r.hw, 0):
            return []
        lo = r.log_start_ckpt or 0
        src, pos = r.checkpoint_ev["replication-offset-checkpoint"]
        return [finding(
            "checkpoint-mismatch", f"{self._where(r.name)}: replication-offset-checkpoint records high watermark "
            f"{r.hw} but the input holds no {self.topic}-{self.partition} directory of that log dir, while it "
            f"holds the partition's other replicas: either {offset_span(lo, r.hw - 1)} it held as committed are "
            "gone from that broker (a deleted or lost partition directory: as a follower it fetches them again "
            "from the leader, as leader it would serve none of them), or the copy left that directory out (or "
            "the partition moved off the broker moments before it)",
            severity="warning", evidence=[evidence(src, pos, "checkpoint", "replication-offset-checkpoint")],
            topic=self.topic, partition=self.partition, replica=r.name, first_offset=lo, last_offset=r.hw - 1,
            details={"checkpoint": "replication-offset-checkpoint", "offset": r.hw, "log_end_offset": None})]

    def _checkpoints(self, r: R.Replica) -> list[dict]:
        if not r.has_batches:
            return []   # no log end to compare with (an empty or unreadable log)
        end, out = r.log_end, []
        for name, attr, sev, what in (
                ("replication-offset-checkpoint", "hw", "error", "high watermark"),
                ("recovery-point-offset-checkpoint", "recovery", "warning", "recovery point"),
                ("log-start-offset-checkpoint", "log_start_ckpt", "warning", "log start offset")):
            value = getattr(r, attr)
            if value is None or not checkpoint_mismatch(name, value, end):
                continue
            src, pos = r.checkpoint_ev[name]
            last = _last_batch(r)
            ev = [evidence(src, pos, "checkpoint")] + ([evidence(*last, "batch")] if last else [])
            out.append(finding(
                "checkpoint-mismatch", f"{self._where(r.name)}: {name} records {what} {value} but the log "
                f"ends at offset {end}: {offset_span(end, value - 1)} {verb(end, value - 1, 'is', 'are')} missing from its segments; "
                + _consequence(attr, end, value), severity=sev, evidence=ev, topic=self.topic,
                partition=self.partition, replica=r.name, first_offset=end, last_offset=value - 1,
                details={"checkpoint": name, "offset": value, "log_end_offset": end}))
        return out

    # -- replica-divergence -------------------------------------------------------------------------
    def _missing(self, found: list[C.Missing]) -> list[dict]:
        out = []
        for m in found[:MAX_FINDINGS]:
            r = m.replica
            holders = ", ".join(s.name for s in m.holders) or "other replicas"
            sev, why = _missing_words(m)
            ev = []
            near = _batch_near(r, m.first)
            if near:
                ev.append(evidence(*near, "batch", f"replica {r.name}"))
            for s in m.holders:
                at = _batch_near(s, m.first, after=True)
                if at:
                    ev.append(evidence(*at, "batch", f"replica {s.name} holds it"))
            bad = _crc_failed(r, m.first, m.last)
            note = f"; its copy there fails its CRC (crc-mismatch at byte {bad[1]})" if bad else ""
            if bad and m.kind == "hole":   # it holds them, corrupt: served as they are, not skipped
                why = ("it holds later offsets, so it will never fetch these again; if it leads, it serves the "
                       "corrupt bytes: consumers that check CRCs (the Java client's check.crcs, on by default) "
                       "fail there (CorruptRecordException) and stop")
            markers = _markers_only(m.holders[0], m.first, m.last) if m.holders and m.kind == "hole" else None
            if markers:   # consumers skip no record: the transactions' outcome there is what changes
                why = (f"{markers}: it holds later offsets, so it will never fetch them again; if it leads, "
                       "the data that marker ended there is ended by the next marker in its log (read_committed consumers "
                       "read it with that one's outcome)")
            out.append(finding(
                "replica-divergence", f"{self._where(r.name)}: lacks {'a readable copy of ' if bad else ''}"
                f"{offset_span(m.first, m.last)} that replica(s) "
                f"{holders} hold below their high watermark{note}: {why}", severity=sev, evidence=ev,
                topic=self.topic, partition=self.partition, replica=r.name, first_offset=m.first,
                last_offset=m.last, details={"kind": replica_divergence(m), "holders": [s.name for s in m.holders],
                                             "high_watermarks": {s.name: s.hw for s in m.holders + [r]}}))
        return out

    def _diverged(self, found: list[C.Divergence], by_name: dict) -> list[dict]:
        out = []
        for d in found[:MAX_FINDINGS]:
            parts, ev = [], []
            for name, (row, epoch, pid, crc) in d.versions.items():
                rep = by_name[name]
                src, pos = rep.rows.column("source")[row].as_py(), rep.rows.column("position")[row].as_py()
                b, e = int(rep.base[row]), int(rep.last[row])
                parts.append(f"replica {name}: batch {b}-{e}, leader epoch {epoch}, producer {pid}, crc {crc}")
                ev.append(evidence(src, pos, "batch", f"replica {name}"))
            hws = [by_name[n].hw for n in d.versions]
            committed = all(hw is not None and d.first < hw for hw in hws)
            tail = (f": below every one's high watermark (lowest {min(hws)}), so each counted its version "
                    "committed - whichever replica leads, the others' committed records are lost") if committed else ""
            out.append(finding(
                "replica-divergence", f"{self._where(d.replica)}: holds different batches than replica(s) "
                f"{', '.join(n for n in d.versions if n != d.replica)} at {offset_span(d.first, d.last)} "
                f"({'; '.join(parts)}): consumers read different records depending on which replica leads{tail}",
                severity="critical" if committed else None,
                evidence=ev, topic=self.topic, partition=self.partition, replica=d.replica,
                first_offset=d.first, last_offset=d.last,
                details={"kind": replica_divergence(d), "versions": {n: list(v) for n, v in d.versions.items()}}))
        return out


    def _superseded(self, found: list[E.Superseded], covered: list, entries: dict) -> list[dict]:
        """Records of an older leader epoch past another replica's start of a later one: below
        the holder's high watermark (less what a divergence finding already tells) critical,
        above it an uncommitted tail that Kafka truncates (info)."""
        out = []
        for x in found[:MAX_FINDINGS]:
            r = x.replica
            pieces = C._subtract([[x.first, x.last]], covered) if x.committed else [[x.first, x.last]]
            ev = [evidence(r.rows.column("source")[x.row].as_py(), r.rows.column("position")[x.row].as_py(),
                           "batch", f"replica {r.name}: leader epoch {x.epoch}")]
            ev += [evidence(e["source"], e["position"], "leader_epoch_entry",
                            f"replica {x.by} starts epoch {x.later} at {x.start}")
                   for e in entries.get(x.by, []) if e["leader_epoch"] == x.later and e["start_offset"] == x.start][:1]
            began = (f"past offset {x.start}, where replica {x.by}'s log began leader epoch {x.later}: the "
                     f"leader of epoch {x.later} never had them, and replica {r.name} truncates them when it "
                     "follows again (KIP-101/KIP-279)")
            for lo, hi in pieces:
                opened = E.open_on_leader(x, lo, hi) if x.committed else []
                if x.committed:
                    msg = (f"{self._where(r.name)}: holds offsets {lo}-{hi} in leader epoch {x.epoch}, below its high "
                           f"watermark {r.hw} (committed: acknowledged to acks=all producers), {began}: committed "
                           "records lost - an unclean leader election, or a log restored from an old copy"
                           + _open_words(opened, x.by))
                elif r.hw is None:
                    msg = (f"{self._where(r.name)}: holds offsets {lo}-{hi} in leader epoch {x.epoch}, {began}; "
                           "whether they were committed cannot be told (no replication-offset-checkpoint entry)")
                else:
                    msg = (f"{self._where(r.name)}: holds offsets {lo}-{hi} in leader epoch {x.epoch}, above its "
                           f"high watermark {r.hw}, {began}: a deposed leader's uncommitted tail - never "
                           "acknowledged to acks=all producers; writes acknowledged with acks=1 there are lost "
                           "(`kaudit audit` with a capture names them)")
                out.append(finding(
                    "replica-divergence", msg, severity="critical" if x.committed else "info", evidence=ev,
                    topic=self.topic, partition=self.partition, replica=r.name, first_offset=lo, last_offset=hi,
                    details={"kind": "superseded-committed" if x.committed else "deposed-tail",
                             "epoch": x.epoch, "later_epoch": x.later, "later_epoch_start": x.start,
                             "replica_of_later_epoch": x.by, "high_watermark": r.hw,
                             **({"open_on_leader": opened} if opened else {})}))
        return out


def _open_words(opened: list[dict], by: str) -> str:
    """What a lost transaction marker leaves on the replica that began the later epoch."""
    if not opened:
        return ""
    o = opened[0]
    more = f" (and {len(opened) - 1} more)" if len(opened) > 1 else ""
    return (f"; among them producer {o['producer_id']}'s transaction marker at offset {o['marker_offset']}{more}, "
            f"whose data at {o['data'][0]}-{o['data'][1]} replica {by} holds without it: an open transaction "
            f"there that no coordinator will end - its last stable offset stops at {o['data'][0]}, and "
            "read_committed consumers with it")


def _same_cluster(reps: list[R.Replica]) -> list[list[R.Replica]]:
    """The sets of replicas to compare: those of one cluster id, with those whose cluster is
    unknown (log dirs of different clusters hold different partitions that share a name)."""
    known = sorted({r.cluster for r in reps if r.cluster is not None})
    groups = [reps] if len(known) <= 1 else [[r for r in reps if r.cluster in (c, None)] for c in known]
    return [g for g in groups if len(g) >= 2]


def _markers_only(r: R.Replica, first: int, last: int) -> str | None:
    """What a replica holds at offsets [first, last] when it is only transaction markers
    ("producer 7's COMMIT marker"), else None."""
    i = np.flatnonzero((r.base >= first) & (r.last <= last))
    if not i.size:
        return None
    rows = r.rows.take(pa.array(i)).select(["is_control", "producer_id", "control_type"]).to_pylist()
    if not all(x["is_control"] and x["control_type"] in ("COMMIT", "ABORT") for x in rows):
        return None
    return "; ".join(f"producer {x['producer_id']}'s {x['control_type']} marker" for x in rows[:4]) + (
        f" and {len(rows) - 4} more" if len(rows) > 4 else "")


def _missing_words(m: C.Missing) -> tuple[str, str]:
    return {
        "hole": ("error", "it holds later offsets, so it will never fetch these again; if it leads, "
                          "consumers skip them"),
        "tail-flushed": ("error", f"they are below its recovery point {m.replica.recovery}: records it had "
                                  "flushed to disk are gone"),
        "tail-committed": ("warning", f"they are below its own high watermark {m.replica.hw} but past its "
                                      "recovery point: it lost records it had not flushed (a crash); as a "
                                      "follower it fetches them again"),
        "tail-lag": ("warning", "its log ends before them: it was behind the leader (out of the ISR) when "
                                "copied and fetches them when it runs; if elected leader uncleanly, they are lost"),
    }[m.kind]


def _consequence(attr: str, end: int, value: int) -> str:
    if attr == "hw":
        return (f"the broker restarts with high watermark {end} (UnifiedLog clamps it to the log end); as "
                f"leader it would serve consumers without {offset_span(end, value - 1)}, which were committed")
    if attr == "recovery":
        return "records it had flushed to disk are gone (log recovery starts from the log end)"
    return "every record is below the log start: consumers get OFFSET_OUT_OF_RANGE and reset"


def _last_batch(r: R.Replica):
    i = int(r.last.argmax())
    return r.rows.column("source")[i].as_py(), r.rows.column("position")[i].as_py()


def _batch_near(r: R.Replica, offset: int, after: bool = False):
    """(source, position) of r's batch holding `offset` or the last one before it (after: the
    first one at or after it)."""
    import numpy as np

    if after:
        i = int(np.searchsorted(r.last, offset, side="left"))
        if i >= r.base.size:
            return None
    else:
        i = int(np.searchsorted(r.base, offset, side="right")) - 1
        if i < 0:
            return None
    return r.rows.column("source")[i].as_py(), r.rows.column("position")[i].as_py()


def _crc_failed(r: R.Replica, first: int, last: int):
    bad = np.flatnonzero(~r.ok & (r.base <= last) & (r.last >= first))
    if not bad.size:
        return None
    i = int(bad[0])
    return r.rows.column("source")[i].as_py(), r.rows.column("position")[i].as_py()


FOLD = ReplicaFold("replicas", {"batch": R.DETAIL_COLUMNS + ("log_dir",), "checkpoint_entry": CHECKPOINT_COLUMNS,
                                "partition_metadata": PRESENCE_COLUMNS, "leader_epoch_entry": E.ENTRY_COLUMNS},
                   KEY, ORDER, lambda ctx: KeyedState(KEY, ReplicaGroup), where={"batch": log_batches})
