"""Elections under a transactional producer, and of the coordinator's own partitions (branch
h-elecxn). A transactional id writes a topic of its own (partition 0 led by node 2, followed by 3
and 1, as elect_episodes.py) and partition 0 changes leader in the middle of a transaction, as
replication.py says Kafka does it; or the `__transaction_state` partitions change leader. The
episode dict (strategies.elect_txn_episode):

    {"kind": "elect_txn", "fault": F, "tv": 1 | 2, "parts": 1-2, "before": 0-2, "batches": 1-2,
     "tail": 1-3, "fetched": 0-3, "after": 0-2, "commit": bool, "rejoin": bool, "alive": bool,
     "fetch_wire": bool, "lose": "data" | "marker", "stage": ..., "sent": 0-2, "kraft": bool}

`before` committed transactions come first (every replica has them). The Kafka facts:

- a new leader rebuilds its producer state from its own log, the open transactions with it
  (UnifiedLog -> ProducerStateManager.truncateAndReload / loadProducerState: an ongoing
  transaction is a producer's transactional data past its last marker, and the last stable
  offset is the first offset of the earliest such); so a transaction in flight goes on at the new
  leader: the producer's next batches join it, no new verification (KIP-890 verifies only a
  producer without an ongoing transaction at its epoch);
- a follower that truncates (KIP-101/279) rebuilds its producer state the same way: a deposed
  leader's transactional batches nobody fetched are gone with their open transaction;
- WriteTxnMarkers is appended by the partition leader with acks=all (KafkaApis.
  handleWriteTxnMarkersRequest: requiredAcks -1, AppendOrigin.COORDINATOR): a leader deposed with
  the marker above its high watermark answers NOT_LEADER_OR_FOLLOWER (its delayed produce
  completes so), a dead one not at all; TransactionMarkerRequestCompletionHandler re-enqueues the
  marker on NOT_LEADER_OR_FOLLOWER (and on a disconnection) "with possibly new destination
  brokers", same producer epoch and coordinator epoch: the new leader appends it;
- the coordinator appends its records with acks=all too (TransactionStateManager.
  appendTransactionToLog, TransactionLog.EnforcedRequiredAcks); a record its leader could not
  replicate before it was deposed fails NOT_LEADER_OR_FOLLOWER, answered to the client as
  NOT_COORDINATOR, and the in-memory transition is undone; the client finds the new coordinator
  and retries. A new coordinator loads its partition and sends the markers of every transaction
  it finds in PrepareCommit/PrepareAbort again, under its coordinator epoch, then writes
  CompleteX (TransactionStateManager.loadTransactionsForTxnTopicPartition, TransactionCoordinator.
  onElection); a partition that already had the marker gets a second one (benign).

| fault | what happens | the oracle |
|---|---|---|
| `txn_clean` | the transaction writes partition 0 (replicated), node 2 dies, node 3 (ISR) leads epoch 1; the producer writes `after` more batches into the same transaction at node 3 and ends it; the markers go to node 3; node 2 rejoins (truncating nothing) or stays as it died | nothing (`replica-behind` for a dead one) |
| `txn_tail` | node 2 appends `tail` transactional batches, nodes 3 and 1 fetch the first `fetched`, node 2 dies (or, `alive`, answers the waiting Produces NOT_LEADER_OR_FOLLOWER); node 3 leads; the producer retries (a fetched batch is a duplicate answered with its offset; the rest stored anew, verified again when node 3 holds none of the transaction) and ends the transaction; node 2 rejoins and truncates its tail (`rejoin`), or is read as it died: its unfetched transactional batches sit above its high watermark in epoch 0 where node 3 wrote epoch 1 | nothing at warning or above (`replica-behind` for a dead one) |
| `txn_marker` | the transaction's markers meet the election: `stage` `before` - node 2 dies after the coordinator's PrepareX, the marker goes to node 3; `deposed` - node 2 appends the marker, its followers have not fetched it, node 2 is deposed (`alive`: answers NOT_LEADER_OR_FOLLOWER) or dies (no answer), the coordinator writes the marker again to node 3; node 2 rejoins and truncates its copy, or is read as it died (its marker in epoch 0 above its high watermark) | nothing (`replica-behind` for a dead one) |
| `txn_unclean` | node 1 falls out of the ISR before the transaction (`lose` data) or after its data, before its marker (`lose` marker); the ISR {2, 3} commits the data and the marker; nodes 2 and 3 die; node 1 leads uncleanly; the restarted application (InitProducerId: epoch + 1) runs `after` transactions on the other partition (and on partition 0 when the data was lost); nodes 2 and 3 rejoin or stay as they died | `data`: `committed-lost` as `elect:unclean` (the acks=all data of the committed transaction); `marker`: `marker-lost` - node 1's copy of the transaction has no marker and never will: its last stable offset is stuck there and read_committed consumers stop (`hanging-transaction` on the new leader; `replica-divergence` critical while a deposed replica still holds the marker in epoch 0 past node 1's start of epoch 1; `unclean-leader-election` with the metadata log) |
| `coordinator` | the `__transaction_state` partitions' leadership moves from node 1 (Coordinator.move_to) while the transaction is at `stage`: `ongoing` (the client's EndTxn to node 1 answered NOT_COORDINATOR, then sent to the new coordinator); `prepare` (PrepareX written and answered, the markers of the first `sent` partitions written, then the move: the new coordinator sends them all again under its epoch and writes CompleteX); `prepare_lost` (node 1 appends PrepareX, its followers have not fetched it, the move: EndTxn answered NOT_COORDINATOR, node 1 truncates the record when it follows, the client's retry goes to the new coordinator) | nothing |
"""

from __future__ import annotations

from tests.sim import replication as R
from tests.sim import wire
from tests.sim.broker import NONE
from tests.sim.cluster import Client, Sim
from tests.sim.elect_episodes import NEW, OLD, THIRD, NOT_LEADER_OR_FOLLOWER, _old_leader_after, \
    _deposed_after, _unclean_oracle, refuse_waiting, unclean_election, unfetched_tail
from tests.sim.episodes import values

NOT_COORDINATOR = 16


def elect_txn(sim: Sim, i: int, ep: dict) -> None:
    topic = ep.get("topic") or f"e{i}"
    parts = [sim.partition(topic, p, leader=OLD if p == 0 else None) for p in range(ep["parts"])]
    c = Client(sim, f"etxn-{i}", txn_id=f"etx-{i}", tv=ep["tv"])
    c.init()
    run = _Run(sim, c, parts, ep, i)
    for _ in range(ep["before"]):
        run.txn(parts)
        c.end(True)
    FAULTS[ep["fault"]](run)


class _Run:
    """One episode's producer and its values."""

    def __init__(self, sim, c, parts, ep, i):
        self.sim, self.c, self.parts, self.ep, self.i = sim, c, parts, ep, i
        self.j = 0

    def vals(self, tag=""):
        self.j += 1
        return values(self.i, self.j, 1 + self.j % 2, tag)

    def txn(self, ps, n=None) -> dict:
        """Writes `n` (default `batches`) batches to each of `ps`: {partition name: (first, last)}."""
        out = {}
        for p in ps:
            for _ in range(self.ep["batches"] if n is None else n):
                v = self.vals()
                err, off = self.c.send(p, v)
                assert err == NONE
                first = out.get(p.name, (off, off))[0]
                out[p.name] = (first, off + len(v) - 1)
        return out


# ---- a data partition's election in the middle of a transaction ------------------------------------

def _txn_clean(run: _Run) -> None:
    sim, c, p = run.sim, run.c, run.parts[0]
    run.txn(run.parts)
    sim.wait(300)
    R.fall_behind(p, OLD, leave_isr=False)
    R.elect(p, NEW, isr=p.isr - {OLD})
    c.reconnect()
    run.txn([p], run.ep["after"])            # the same transaction, at the new leader
    c.end(run.ep["commit"])                  # the markers go to node 3
    _old_leader_after(sim, p, run.ep["rejoin"], run.ep)


def _txn_tail(run: _Run) -> None:
    sim, c, p, ep = run.sim, run.c, run.parts[0], run.ep
    run.txn(run.parts[1:])
    sent, corrs, _ = unfetched_tail(sim, c, p, ep, run.vals, answered=False)   # acks=all: waits for the ISR
    if ep["alive"]:
        refuse_waiting(c, p, corrs)
    c.reconnect()
    sim.wait(100)
    for v, data, s, _ in sent:       # the producer retries: node 3 answers what it fetched, stores the rest
        err, _ = c.send(p, v, data=data, seq=s)
        assert err == NONE
    run.txn([p], ep["after"])
    c.end(ep["commit"])
    _old_leader_after(sim, p, ep["rejoin"], ep)


def _txn_marker(run: _Run) -> None:
    sim, c, p, ep = run.sim, run.c, run.parts[0], run.ep
    run.txn(run.parts)
    coord = sim.coord
    deposed = ep["stage"] == "deposed"

    def finish(m, *, resend=False):
        committed = m.ending[0]
        if not deposed:                 # node 2 died before the markers: metadata names node 3
            _elect_new(sim, p)
        others = [q for q in m.partitions if q is not p]
        coord.send_markers(m.pid, m.epoch, committed, others)
        if deposed:
            _marker_on_deposed(sim, p, m, committed, alive=ep["alive"])
        coord.send_markers(m.pid, m.epoch, committed, [p])       # re-enqueued to the new leader
        return _complete(coord, m)

    _end_with(c, coord, finish, ep["commit"])
    c.reconnect()
    run.txn([p], ep["after"])
    if ep["after"]:
        c.end(True)
    _old_leader_after(sim, p, ep["rejoin"], ep)


def _end_with(c, coord, finish, commit: bool) -> None:
    """The client's EndTxn, the coordinator writing the markers as `finish` says (in place of
    Coordinator.finish_end for this one end)."""
    coord.finish_end = finish
    try:
        c.end(commit)
    finally:
        del coord.finish_end


def _elect_new(sim, p) -> None:
    sim.wait(200)
    R.fall_behind(p, OLD, leave_isr=False)
    p.behind.discard(NEW)
    p.behind.discard(THIRD)
    R.elect(p, NEW, isr=(p.isr | {NEW, THIRD}) - {OLD})


def _marker_on_deposed(sim, p, m, committed: bool, *, alive: bool) -> None:
    """Node 2 appends the marker, its followers have not fetched it (acks=all waits), node 2 is
    deposed: answers NOT_LEADER_OR_FOLLOWER (`alive`) or nothing (it died)."""
    coord = sim.coord
    hw = {n: p.rhw[n] for n in p.pbs}
    p.behind |= {NEW, THIRD}
    ts = sim.tick()
    err, _ = p.append_marker(m.pid, m.epoch, committed, coord.epoch, ts)
    assert err == NONE
    p.rhw.update(hw)
    sender = f"broker-{coord.node}-txn-marker-sender"
    name = f"{sender}->{OLD}"
    msgs = wire.markers(sim.cap.next_corr(name), m.pid, m.epoch, committed=committed,
                        parts=[(p.topic, p.partition)], coordinator_epoch=coord.epoch, client_id=sender, version=1,
                        error=NOT_LEADER_OR_FOLLOWER)
    sim.cap.exchange(name, msgs[:1], ts, client_ip=wire.node_ip(coord.node), server_ip=wire.node_ip(OLD),
                     server_port=9093)
    _elect_new(sim, p)
    if alive:
        sim.cap.exchange(name, msgs[1:], sim.tick(), client_ip=wire.node_ip(coord.node),
                         server_ip=wire.node_ip(OLD), server_port=9093)
    else:
        sim.cap.close(name, sim.clock)
    sim.wait(50)


def _complete(coord, m) -> int:
    """Coordinator.finish_end's end: CompleteX (the id moves on when its epoch ran out)."""
    committed, next_pid = m.ending
    epoch, prev = m.epoch, -1
    if next_pid >= 0:
        prev, m.pid, m.epoch = m.pid, next_pid, 0
    coord.write_state(m, "CompleteCommit" if committed else "CompleteAbort", prev_pid=prev)
    m.partitions, m.start_ms = [], -1
    return epoch


# ---- an unclean election that loses a committed transaction's data or its marker ---------------------

def _txn_unclean(run: _Run) -> None:
    sim, c, p, ep = run.sim, run.c, run.parts[0], run.ep
    lose_data = ep["lose"] == "data"
    if lose_data:
        R.fall_behind(p, THIRD, leave_isr=True)
    start = p.log_end(THIRD) if lose_data else None
    written = run.txn(run.parts)
    if not lose_data:
        sim.wait(500)                     # replica.lag.time.max.ms: node 1 stalls, leaves the ISR
        R.fall_behind(p, THIRD, leave_isr=True)
    marker_at = p.next_offset
    c.end(True)                            # a committed transaction
    lost_last = p.next_offset - 1
    unclean_election(sim, c, p)            # the application restarts: epoch + 1
    targets = run.parts if lose_data else run.parts[1:]
    for _ in range(ep["after"] if targets else 0):
        run.txn(targets, 1)
        c.end(True)
    _deposed_after(sim, p, ep)
    if lose_data:
        # the data was acknowledged (acks=all, the ISR {2, 3} had it): lost as `elect:unclean`'s
        _unclean_oracle(sim, p, ep, start, written[p.name][1])
        return
    first = written[p.name][0]
    note = f"the COMMIT at {marker_at} lost to the unclean election: " \
           f"node {THIRD}'s transaction at {first} stays open"
    sim.expect("marker-lost", p, first, marker_at, None, feeds=("segments", "audit"), note=note)
    sim.expect("marker-lost-read", p, first, marker_at, None, feeds=("pcap",), note=note)
    if sim.kraft is not None:
        sim.expect("unclean-election" if not ep["rejoin"] else "unclean-election-uncounted", p, marker_at, lost_last,
                   None, feeds=("segments", "audit"), note=note)


# ---- the coordinator's partitions change leader ---------------------------------------------------

def _coordinator(run: _Run) -> None:
    sim, c, ep = run.sim, run.c, run.ep
    coord = sim.coord
    run.txn(run.parts)
    old = coord.node
    new = next(n for n in sim.nodes if n != old)
    stage = ep["stage"]
    if stage == "ongoing":
        sim.wait(100)
        coord.move_to(new)
        msgs = _end_refused(c, old, ep["commit"])
        c.exchange(old, msgs[:1])
        c.exchange(old, msgs[1:])
        sim.wait(20)
        c.end(ep["commit"])
    elif stage == "prepare":
        sent = ep["sent"]

        def finish(m, *, resend=False):
            committed = m.ending[0]
            coord.send_markers(m.pid, m.epoch, committed, m.partitions[:sent])
            sim.wait(50)
            coord.move_to(new)          # the new coordinator loads PrepareX: every marker again
            sim.wait(50)
            coord.send_markers(m.pid, m.epoch, committed, m.partitions)
            return _complete(coord, m)

        _end_with(c, coord, finish, ep["commit"])
    else:
        _prepare_lost(sim, c, old, new, ep["commit"])
    sim.wait(100)
    c.reconnect()
    run.txn(run.parts, 1)
    c.end(True)


def _end_refused(c, node: int, committed: bool):
    """The client's EndTxn to the old coordinator, answered NOT_COORDINATOR."""
    if c.tv >= 2:
        return wire.end_txn_v5(c.corr(node), c.pid, c.epoch, committed=committed, error=NOT_COORDINATOR,
                               txn_id=c.txn_id, client_id=c.name)
    return wire.end_txn(c.corr(node), c.pid, c.epoch, committed=committed, error=NOT_COORDINATOR,
                        txn_id=c.txn_id, client_id=c.name)


def _prepare_lost(sim, c, old: int, new: int, committed: bool) -> None:
    """Node 1 appends PrepareX to its `__transaction_state` partition, its followers have not
    fetched it, the leadership moves: the append fails (NOT_LEADER_OR_FOLLOWER -> the EndTxn's
    NOT_COORDINATOR), the coordinator's transition is undone, node 1 truncates the record when it
    follows; the client retries at the new coordinator."""
    coord = sim.coord
    m = coord.txns[c.txn_id]
    tp = coord.log_partition(c.txn_id)
    saved = (m.status, m.epoch, m.ending)
    followers = {n for n in tp.pbs if n != old} - tp.behind
    hw = dict(tp.rhw)
    msgs = _end_refused(c, old, committed)
    c.exchange(old, msgs[:1])
    tp.behind |= followers
    coord.begin_end(m, committed=committed, bump=c.tv >= 2)
    tp.rhw.update(hw)
    tp.behind -= followers              # alive, they just had not fetched it yet
    m.status, m.epoch, m.ending = saved
    sim.wait(100)
    coord.move_to(new)
    c.exchange(old, msgs[1:])
    sim.wait(20)
    c.end(committed)


FAULTS = {"txn_clean": _txn_clean, "txn_tail": _txn_tail, "txn_marker": _txn_marker, "txn_unclean": _txn_unclean,
          "coordinator": _coordinator}
ELECT_TXN_FAULTS = tuple(FAULTS)
