"""Topic ids a transaction's markers name. A Kafka 4.x producer's Produce (v13+) names its
partitions by topic id; the coordinator's WriteTxnMarkers names the same partitions by topic name
(no version carries ids). Where no Metadata answer naming an id was captured (a capture on one
broker, lost packets), the transaction itself can: the coordinator writes a marker to each
partition the transaction registered and to no other (TransactionMarkerChannelManager sends the
transaction's partition set), so a partition a producer wrote by id in a transaction and the one
partition of that number its marker request names that no other data of the transaction and no
known id claims are the same partition.

A transaction's data epoch E is ended by markers at E (transaction versions 0/1) or E + 1
(version 2: every completion bumps the epoch; under 0/1 a fencing abort's): a vote is cast for a
name alone among one of the two epochs' markers of the partition's number and present in the
other's where it names any - for a producer whose data shows three consecutive epochs (every
transaction its own epoch: version 2), alone among E + 1's (E's end the transaction before). An
id named leaves its name out of the others' candidates (the next round: a transaction that
wrote two ids). An id is named where every vote says the same name and
no other id is voted that name (a zombie's write to a partition its transaction never registered
can meet a registered partition whose data the capture lost: then the votes of the producer's
other transactions disagree, and nothing is named). Bounded: at most MAX (producer id, epoch)
keys a side, the oldest let go first (a live capture runs for days)."""

from __future__ import annotations

from collections import OrderedDict

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.sources.topics import TOPIC_PARTITION


class MarkerNames:
    MAX = 1 << 16   # (producer id, epoch) keys a side: ~10-20 MB at most

    def __init__(self):
        self.markers: OrderedDict = OrderedDict()   # (pid, marker epoch) -> {(name, partition)}
        self.unnamed: OrderedDict = OrderedDict()   # (pid, data epoch) -> {(topic id, partition)}
        self.named: OrderedDict = OrderedDict()     # (pid, data epoch) -> {(name, partition)}

    def note(self, kind: str, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if kind == "txn_event" and {"event", "partitions"} <= set(table.schema.names):
            self._markers(table)
        elif kind == "batch" and {"source_kind", "topic_id", "is_transactional"} <= set(table.schema.names):
            self._data(table)

    def _markers(self, table: pa.Table) -> None:
        t = table.select(["producer_id", "producer_epoch", "partitions"]).filter(
            pc.fill_null(pc.equal(table.column("event"), "WRITE_MARKERS"), False))
        for pid, epoch, parts in zip(*(t.column(c).to_pylist() for c in ("producer_id", "producer_epoch", "partitions"))):
            if pid is None or pid < 0 or epoch is None or not parts:
                continue
            tps = {(m["topic"], int(m["partition"])) for m in map(TOPIC_PARTITION.match, parts.split(",")) if m}
            _add(self.markers, (pid, epoch), tps, self.MAX)

    def _data(self, table: pa.Table) -> None:
        mask = pc.and_(pc.equal(table.column("source_kind"), "produce"),
                       pc.equal(table.column("is_transactional"), True))
        t = table.select(["producer_id", "producer_epoch", "topic", "topic_id", "partition"]).filter(
            pc.fill_null(mask, False))
        if t.num_rows == 0:
            return
        # a transaction's partitions, not its batches (a set: no Acero group-by to load for it)
        for pid, epoch, topic, tid, p in set(zip(*(t.column(c).to_pylist() for c in t.schema.names))):
            if pid is None or pid < 0 or epoch is None or p is None:
                continue
            if topic is not None:
                _add(self.named, (pid, epoch), {(topic, p)}, self.MAX)
            elif tid is not None:
                _add(self.unnamed, (pid, epoch), {(tid, p)}, self.MAX)

    def merge(self, other: "MarkerNames") -> None:
        for side in ("markers", "unnamed", "named"):
            for key, tps in getattr(other, side).items():
                _add(getattr(self, side), key, tps, self.MAX)

    def names(self, known: dict[str, str], rounds: int = 8) -> dict[str, str]:
        """id -> name for the ids no name in `known` has that the transactions' markers name; an
        id named lets the next round leave its name out of the others' candidates."""
        if not self.unnamed or not self.markers:
            return {}
        out: dict[str, str] = {}
        bumping = self._bumping()
        for _ in range(rounds):
            more = self._round({**known, **out}, bumping)
            if not more:
                break
            out.update(more)
        return out

    def _bumping(self) -> set:
        """The producer ids whose data shows three consecutive epochs: every transaction its own
        epoch (version 2: each end bumps it; under 0/1 only a fencing does, a new instance's)."""
        epochs: dict[int, set] = {}
        for side in (self.unnamed, self.named):
            for pid, epoch in side:
                epochs.setdefault(pid, set()).add(epoch)
        return {pid for pid, es in epochs.items() if any(e + 1 in es and e + 2 in es for e in es)}

    def _round(self, known: dict[str, str], bumping: set = frozenset()) -> dict[str, str]:
        taken = set(known.values()) | set(known)
        votes: dict[str, set] = {}
        for (pid, epoch), ids in self.unnamed.items():
            # a producer whose every transaction has its own epoch: E + 1's markers end epoch E's
            # data, E's end the transaction before (which may name other partitions)
            sets = [self.markers.get((pid, e)) for e in ((epoch + 1,) if pid in bumping else (epoch, epoch + 1))]
            if not any(sets):
                continue
            named = self.named.get((pid, epoch), set())
            for tid, p in ids:
                if tid in known:
                    continue
                cands = [c for c in ({n for n, q in ms if q == p and n not in taken and (n, q) not in named}
                                     for ms in sets if ms) if c]
                # a name alone in one epoch's markers and among the other's too (version 2: E + 1
                # ends it, E the transaction before; 0/1: E ends it, E + 1 a fencing's bump)
                one = {next(iter(c)) for c in cands if len(c) == 1}
                if len(one) == 1 and all(one <= c for c in cands):
                    votes.setdefault(tid, set()).update(one)
        out = {tid: next(iter(ns)) for tid, ns in votes.items() if len(ns) == 1}
        claimed: dict[str, int] = {}
        for name in out.values():
            claimed[name] = claimed.get(name, 0) + 1
        return {tid: name for tid, name in out.items() if claimed[name] == 1}


def _add(side: OrderedDict, key: tuple, tps: set, most: int) -> None:
    have = side.get(key)
    if have is None:
        side[key] = set(tps)
        while len(side) > most:
            side.popitem(last=False)
    else:
        have |= tps
