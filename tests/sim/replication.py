"""Partition-leader elections and follower truncation, as Kafka does them (issue 27, branch h-elect).

The facts the simulator follows (Kafka trunk, 2024-10, and the KIPs named):
- The leader stamps its leader epoch on every batch it appends (the batch header's
  partitionLeaderEpoch, LogValidator); a follower stores the leader's batches as they are
  (UnifiedLog.appendAsFollower) and its leader epoch cache takes the epochs of the batches it copies.
- Each replica persists its cache as `leader-epoch-checkpoint` (LeaderEpochCheckpointFile: a version
  line `0`, a count line, then `epoch startOffset` lines; fixtures/builder writes it from the
  batches' epochs). A new leader appends (its epoch, its log end offset) before it appends anything
  (Partition.makeLeader -> leaderLog.maybeAssignEpochStartOffset(leaderEpoch, logEndOffset)).
- The high watermark is the least log end offset of the ISR (Partition.maybeIncrementLeaderHW); a
  follower learns it with its next fetch (min with its own log end); each broker checkpoints its
  own in `replication-offset-checkpoint`.
- acks=all: the leader answers once the high watermark passed the batch and the ISR has at least
  min.insync.replicas members (Partition.checkEnoughReplicasReachOffset); acks=1: once it appended.
  So a crashed leader's unfetched tail was never acknowledged to acks=all producers (they retry: an
  idempotent retry is stored by the new leader at new offsets) but may have been to acks=1 ones
  (lost by a clean election: the producer's documented risk).
- A clean election picks the new leader from the ISR (or KIP-966's ELR), which holds every
  committed record. A follower (the old leader too, once it rejoins) truncates before fetching:
  OffsetsForLeaderEpoch with its latest epoch, the leader answers that epoch's end offset
  (LeaderEpochFileCache.endOffsetFor: the start of the next epoch in its own cache, or its log
  end), the follower truncates to min(that, its own end offset of the epoch, its log end), and
  again while the leader answered an epoch it does not know (KIP-101, KIP-279;
  AbstractFetcherThread.getOffsetTruncationState). Only data above the high watermark is cut.
- An unclean election (unclean.leader.election.enable, or kafka-leader-election UNCLEAN) makes a
  replica outside the ISR leader: since 3.2 the controller records LeaderRecoveryState RECOVERING
  (KIP-704). Its epoch starts at its own log end, and what the old ISR held past it - committed,
  acknowledged to acks=all producers - is truncated from every replica that follows it.
- A broker that died keeps its log as it was: it truncates only when it runs again and follows.
- LeaderEpochFileCache.endOffsetFor answers an epoch older than every entry it holds with (that
  epoch, the first entry's start offset): a replica following a leader elected with an empty log
  (its only entry (epoch, 0)) truncates to 0.

Under a transactional producer (elect_txn_episodes.py, branch h-elecxn):
- a truncation or a new leader rebuilds the producer state from the log (UnifiedLog.truncateTo ->
  ProducerStateManager.truncateAndReload; makeLeader loads its own log's): the ongoing
  transactions are each producer's transactional data past its last marker, the last stable
  offset the first offset of the earliest - so a transaction in flight goes on at a new leader
  that has its data (no new KIP-890 verification), and a deposed leader's unfetched
  transactional batches go with their open transaction when it truncates;
- the partition leader appends WriteTxnMarkers with acks=all (KafkaApis.
  handleWriteTxnMarkersRequest: requiredAcks -1, AppendOrigin.COORDINATOR); a leader deposed with
  the marker above its high watermark answers NOT_LEADER_OR_FOLLOWER, a dead one nothing;
  TransactionMarkerRequestCompletionHandler re-enqueues the marker (retriable
  NOT_LEADER_OR_FOLLOWER, or the disconnection) to the partition's current leader, same producer
  epoch and coordinator epoch;
- the coordinator appends its `__transaction_state` records with acks=all too
  (TransactionStateManager.appendTransactionToLog); a record its leader could not replicate before
  losing leadership fails NOT_LEADER_OR_FOLLOWER, answered NOT_COORDINATOR to the client, the
  transition undone; the new leader's coordinator loads the partition (coordinator epoch = its
  leader epoch) and sends the markers of every transaction it finds prepared
  (loadTransactionsForTxnTopicPartition), then writes CompleteX;
- an unclean election can lose a committed transaction's data or only its marker; a new leader
  that has the data and not the marker holds an ongoing transaction no coordinator will end (the
  coordinator completed it): its last stable offset stays there (KIP-664's hanging transaction).
"""

from __future__ import annotations

import struct

from tests.sim.broker import PState

KRAFT_EPOCH = 1


def fields(data: bytes) -> dict:
    """The v2 batch header fields the simulator needs (DefaultRecordBatch layout)."""
    base, = struct.unpack(">q", data[0:8])
    attrs, delta = struct.unpack(">hi", data[21:27])
    pid, pepoch, seq, count = struct.unpack(">qhii", data[43:61])
    return {"base": base, "last": base + delta, "epoch": struct.unpack(">i", data[12:16])[0], "pid": pid,
            "pepoch": pepoch, "seq": seq, "count": count, "txn": bool(attrs & 0x10), "control": bool(attrs & 0x20)}


def producer_state(batches: list[bytes]) -> dict[int, PState]:
    """ProducerStateManager rebuilt from a log (a new leader loads it from its own log)."""
    out: dict[int, PState] = {}
    for data in batches:
        f = fields(data)
        if f["pid"] < 0:
            continue
        st = out.get(f["pid"])
        if st is None or st.epoch != f["pepoch"]:
            st = out[f["pid"]] = PState(f["pepoch"])
        if f["control"]:
            st.txn_first = -1
            continue
        st.last_seq = (f["seq"] + f["count"] - 1) % (1 << 31)
        st.recent.append((f["seq"], st.last_seq, f["base"]))
        if f["txn"] and st.txn_first < 0:
            st.txn_first = f["base"]
    return out


def elect(part, new: int, *, isr=None, unclean: bool = False) -> None:
    """`new` becomes leader at the next leader epoch, its log as the partition's (makeLeader):
    its cache gets (epoch, its log end); the producer state is its log's. `isr`: the ISR after the
    election (default: the ISR less nothing)."""
    part.leader = new
    part.leader_epoch += 1
    part.elections += 1
    keep = part.rlog[new]
    part.log = list(keep)
    part.next_offset = part.log_end(new)
    part.markers = {o: m for o, m in part.markers.items() if o < part.next_offset}
    part.state = producer_state(keep)
    part.pbs[new].assign_epoch(part.leader_epoch, part.next_offset)
    part.isr = set(isr) if isr is not None else ({new} if unclean else set(part.isr) | {new})
    part.behind.discard(new)
    kraft = getattr(part.sim, "kraft", None)
    if kraft is not None:
        kraft.change(part, leader=new, isr=sorted(part.isr), recovery_state=1 if unclean and kraft.kip704 else -1)
    part.advance_hw()


def end_offset_for(cache: list[tuple[int, int]], log_end: int, epoch: int) -> tuple[int, int]:
    """LeaderEpochFileCache.endOffsetFor: (the largest epoch <= `epoch` the cache knows, its end
    offset: the start of the next epoch, or the log end for the latest); for an epoch below every
    entry (`epoch`, the first entry's start offset); (-1, -1) for an empty cache."""
    below = [i for i, (e, _) in enumerate(cache) if e <= epoch]
    if not below:
        # an epoch older than any the cache knows: (that epoch, the first known epoch's start) -
        # the follower truncates there (a leader elected with an empty log: its log end)
        return (epoch, cache[0][1]) if cache else (-1, -1)
    i = below[-1]
    return cache[i][0], cache[i + 1][1] if i + 1 < len(cache) else log_end


def truncation_offset(part, node: int) -> int:
    """Where a follower truncates to before it fetches from the leader (KIP-279's loop)."""
    lead = part.pbs[part.leader]
    cache = list(part.pbs[node].epochs)
    end = part.log_end(node)
    while cache:
        le, lend = end_offset_for(lead.epochs, lead.next_offset, cache[-1][0])
        if lend < 0:
            return min(part.rhw[node], end)          # no common epoch: the high watermark
        fe, fend = end_offset_for(cache, end, le)
        if fe < 0:
            return min(lend, end)
        if fe == le:
            return min(lend, fend, end)
        end = min(fend, end)                          # an epoch it does not know: cut, ask again
        cache = [x for x in cache if x[1] < end]
    return min(part.rhw[node], end)


def rebuild(part, node: int, cut: int) -> None:
    """The replica truncated to `cut` (UnifiedLog.truncateTo): its partition dir holding the
    batches below it only (the builder re-appends them)."""
    keep = [d for d in part.rlog[node] if fields(d)["base"] < cut]
    ld = part.sim.logdirs[node]
    old = part.pbs[node]
    del ld.partitions[old.dirname]
    pb = ld.partition(part.topic, part.partition, start_offset=part.start_offset, role=old.role)
    for data in keep:
        pb.append_raw(data)
    # truncateFromEnd: the cache keeps its entries below the cut (a leader's entry without batches too)
    pb.epochs = [(e, o) for e, o in old.epochs if o < cut]
    part.pbs[node] = pb
    part.rlog[node] = list(keep)


def rejoin(part, node: int, *, wire: bool = False) -> int:
    """A replica follows the leader again: truncates (truncation_offset), fetches the rest, is in
    the ISR once caught up. Returns the offset it truncated to."""
    cut = truncation_offset(part, node)
    if cut < part.log_end(node):
        rebuild(part, node, cut)
        part.rhw[node] = min(part.rhw[node], cut)
    catch_up(part, node, wire=wire)
    return cut


def catch_up(part, node: int, *, wire: bool = False) -> None:
    """The follower fetches what the leader has past its log end (`wire`: its Fetch is in the
    capture, replica id = its broker id, as the capture of a broker port shows replication)."""
    pb = part.pbs[node]
    start, got = pb.next_offset, []
    for data in part.rlog[part.leader]:
        if fields(data)["base"] >= pb.next_offset:
            pb.append_raw(data)
            part.rlog[node].append(data)
            got.append(data)
    if wire:
        _replica_fetch(part, node, start, b"".join(got))
    part.behind.discard(node)
    if node not in part.isr:
        part.isr.add(node)
        kraft = getattr(part.sim, "kraft", None)
        if kraft is not None:
            kraft.change(part, isr=sorted(part.isr))
    part.advance_hw()


def follower_fetches(part, offset: int, data: bytes) -> None:
    """Steady replication on the wire (a history's `replicate_on_wire`): each follower fetching
    now copies the batch the leader just stored at `offset` with one Fetch of its own."""
    for node in sorted(part.pbs):
        if node != part.leader and node not in part.behind:
            _replica_fetch(part, node, offset, data)


def _replica_fetch(part, node: int, offset: int, records: bytes) -> None:
    """ReplicaFetcherThread's Fetch to the leader and its answer (the leader's high watermark
    once the follower has it all: the ISR's least log end): v5 on a 3.0 cluster, v18 on 4.1 -
    by topic id, its replica id in the tagged ReplicaState (KIP-903), as Kafka 4.1's followers."""
    from tests.sim import wire
    from tests.sim.wire_group import fetch

    sim = part.sim
    name = f"replica-fetcher-{node}->{part.leader}"
    hw = min(part.log_end(n) for n in (part.isr | {node, part.leader}))
    msgs = fetch(sim.cap.next_corr(name), f"broker-{node}-fetcher-0", 18 if sim.verify else 5, "read_uncommitted",
                 [(part.topic, part.partition, offset)],
                 [(part.topic, part.partition, 0, hw, hw, part.log_start, [], records)], replica_id=node)
    sim.cap.exchange(name, msgs[:1], sim.tick(), client_ip=wire.node_ip(node), server_ip=wire.node_ip(part.leader))
    sim.cap.exchange(name, msgs[1:], sim.tick(), client_ip=wire.node_ip(node), server_ip=wire.node_ip(part.leader))


def fall_behind(part, node: int, *, leave_isr: bool) -> None:
    """A replica stops fetching (it died, or lags); `leave_isr`: the leader shrank the ISR
    (replica.lag.time.max.ms), recorded by the controller."""
    part.behind.add(node)
    if leave_isr and node in part.isr:
        part.isr.discard(node)
        kraft = getattr(part.sim, "kraft", None)
        if kraft is not None:
            kraft.change(part, isr=sorted(part.isr))


def crashed(part, node: int) -> None:
    """The broker died and its log dir is read as it was: the active segment not closed."""
    part.pbs[node].unclean_shutdown()


class Kraft:
    """The KRaft `__cluster_metadata` log on every node (a combined-mode quorum of the three): the
    topics and partitions the simulator creates, the ISR changes and elections of its partitions,
    as the controller writes them (TopicRecord, PartitionRecord, PartitionChangeRecord)."""

    def __init__(self, sim, *, kip704: bool = True):
        from fixtures.builder.metadata import MetadataLog

        self.logs = [MetadataLog(ld, kraft_epoch=KRAFT_EPOCH, voters=sim.nodes) for ld in sim.logdirs.values()]
        self.kip704 = kip704            # 3.2+: an unclean election records LeaderRecoveryState RECOVERING
        self.topics: set[str] = set()
        for md in self.logs:
            md.feature("metadata.version", 7)

    def created(self, part) -> None:
        from fixtures.encoder import metadata as me

        tid = part.pbs[part.leader].topic_id
        replicas = [part.leader] + [n for n in sorted(part.pbs) if n != part.leader]
        values = [] if part.topic in self.topics else [me.topic_record(part.topic, tid)]
        values.append(me.partition_record(tid, part.partition, replicas, replicas, part.leader, 0, 0))
        self.topics.add(part.topic)
        for md in self.logs:
            md.ids[part.topic] = tid
            md.append(*values)

    def change(self, part, **kw) -> None:
        for md in self.logs:
            md.change(part.topic, part.partition, **kw)
