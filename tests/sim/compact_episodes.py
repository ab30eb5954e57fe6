"""A compacted topic (cleanup.policy=compact, its own topic `c<i>`): keyed records from an
idempotent producer (tombstones among them) and a transactional one (commits and aborts,
transaction version 1 or 2), with the log cleaner (compaction.clean) run between rounds on
the closed segments of some replicas - each broker's cleaner on its own schedule, sometimes while
a transaction is open (the cleaner stops below the last stable offset), sometimes past a
marker's delete horizon, sometimes after a day without writes (the producers' state expired: the cleaner
keeps no batch for them).

Fault-free: compaction removes superseded records, aborted transactions' data and, past their
delete horizon, markers - offset gaps, sequence gaps between a producer's kept batches, empty
batches kept for a producer's sequence state, markers with no data before them, replicas whose
files differ. None of it is an anomaly: the oracle expects nothing at warning or above on any
feed (compaction is a benign cause every rule must allow).

`codec` (log:compacted_compressed): both producers compress their batches; the cleaner
decompresses a batch to filter it and writes the rebuilt batch with the same codec
(MemoryRecords.buildRetainedRecordsInto). `interrupt` (log:clean_interrupted): after the rounds,
one partition's cleaner on one node is interrupted mid-round (clean_crash.py) - `.cleaned`,
`.swap`, `.deleted` files left in its dir, the node's log dir read as it is then (`crash`: the
broker died, its active segment not closed)."""

from __future__ import annotations

from tests.sim.clean_crash import interrupted_clean
from tests.sim.cluster import Client, Sim
from tests.sim.compaction import SEGMENT_BYTES, clean
from tests.sim.episodes import values


def compact(sim: Sim, i: int, ep: dict) -> None:
    topic = ep.get("topic") or f"c{i}"
    parts = [sim.partition(topic, p) for p in range(ep["parts"])]
    cut = ep.get("interrupt")
    for p in parts:
        p.cleaned = True            # a consumer is served the leader's cleaned segments
        for pb in p.pbs.values():
            # an interrupted round needs closed dirty segments: smaller ones
            pb.segment_bytes = SEGMENT_BYTES // 2 if cut else SEGMENT_BYTES
    idem = Client(sim, f"cidem-{i}")
    idem.init()
    tx = Client(sim, f"ctxn-{i}", txn_id=f"ctx-{i}", tv=ep["tv"])
    idem.codec = tx.codec = ep.get("codec") or "none"
    cleaned = list(parts)
    if ep.get("coord_compact"):
        # __transaction_state is compacted too (cleanup.policy=compact, Kafka's own): its
        # partition rolls and is cleaned with the topic's (only this id's records are on it
        # unless another episode's id hashes there: a history without other faults draws this)
        coord = sim.coord.log_partition(tx.txn_id)
        for pb in coord.pbs.values():
            pb.segment_bytes = SEGMENT_BYTES
        cleaned.append(coord)
    tx.init()
    nkeys = ep["keys"]
    for r, rnd in enumerate(ep["rounds"]):
        for j in range(rnd["idem"]):
            p = parts[(r + j) % len(parts)]
            n = rnd["size"]
            keys = [f"key-{(r * 3 + j * 2 + k) % nkeys}".encode() for k in range(n)]
            vals = values(i, r * 10 + j, n, tag="-c")
            if rnd.get("tombstone") and j == 0:
                vals[0] = None             # a delete of its key
            idem.send(p, vals, keys=keys)
        if rnd["txn"] is not None:
            for k, p in enumerate(parts):
                keys = [f"key-{(r + k + m) % nkeys}".encode() for m in range(2)]
                tx.send(p, values(i, r, 2, tag=f"-ct{k}"), keys=keys)
            if rnd.get("mid"):
                _clean(sim, cleaned, rnd["clean"])    # below the open transaction only
            tx.end(rnd["txn"])
        sim.wait(rnd["wait"])
        if rnd.get("expire"):
            _expire(sim, parts, (idem.pid, tx.pid))
        # the interrupted node's cleaner is `behind` rounds late: its dirty range is not empty
        late = cut is not None and r >= len(ep["rounds"]) - cut["behind"]
        _clean(sim, cleaned, [n for n in rnd["clean"] if not (late and n == cut["node"])])
    if cut:
        _interrupt(sim, parts, cut)


def _expire(sim: Sim, parts, pids) -> None:
    """A day without writes: every broker expires both producers' state on each partition
    (producer.id.expiration.ms, ProducerStateManager.removeExpiredProducers - no transaction is
    open between rounds); the cleaner then no longer keeps their last batches
    (lastRecordsOfActiveProducers), and their next writes are an unknown producer's (accepted at
    any sequence)."""
    sim.wait(86_400_000)
    for p in parts:
        for pid in pids:
            p.expire(pid)
            for pb in p.pbs.values():
                pb.producers.pop(pid, None)


def _interrupt(sim: Sim, parts, cut: dict) -> None:
    """One partition's cleaner on node `cut["node"]` stopped mid-round (one cleaner thread: one
    partition at a time) - the first, from `cut["part"]` on, with something to clean."""
    for k in range(len(parts)):
        pb = parts[(cut["part"] + k) % len(parts)].pbs[cut["node"]]
        if interrupted_clean(pb, sim.clock, cut) is not None:
            if cut["crash"]:
                pb.unclean_shutdown()
            return


def _clean(sim: Sim, parts, nodes) -> None:
    for n in nodes:
        for p in parts:
            pb = p.pbs[n]
            clean(pb, sim.clock, max_bytes=pb.segment_bytes)

