"""Transactional episodes: a transactional id running transactions (transaction version 0/1 or 2)
with one fault injected at transaction `at`, after its writes: fence (a new instance's
InitProducerId while it is open; the old instance, a zombie, then writes to a registered
partition, to an unregistered one, or races the fencing markers), admin_abort (kafka-transactions.sh
abort of a subset of its partitions), coord_failover (markers re-sent by a new coordinator),
timeout (the coordinator aborts it), late_endtxn (KAFKA-17754: a delayed EndTxn ends the next
transaction), two_pc (KIP-939, left prepared), exhaust (the epoch runs out: a new producer id;
unless `zombie_then` is "none", a stale instance of the old producer id then writes: a zombie of
the old id),
stuck_markers (KAFKA-19999: the markers of one partition refused again and again, the transaction
left prepared),
admin_abort_ended (kafka-transactions.sh abort of partitions whose transaction already ended: a
stray ABORT marker, nothing lost).
"""

from __future__ import annotations

from kaudit.audit.txn.txn_rules import LATE_SLACK_MS
from tests.sim import wire
from tests.sim.broker import NONE
from tests.sim.cluster import Client, Sim
from tests.sim.coordinator import MAX_EPOCH, TxnMeta
from tests.sim.episodes import values

TXN_FAULTS = ("none", "fence", "admin_abort", "admin_abort_ended", "coord_failover", "timeout", "late_endtxn",
              "two_pc", "exhaust", "stuck_markers")
ZOMBIES = ("registered", "unregistered", "race")


def txn(sim: Sim, i: int, ep: dict) -> None:
    fault, txns = ep["fault"], ep["txns"]
    at = ep["at"] % len(txns)
    topic = ep.get("topic") or f"e{i}"
    parts = [sim.partition(topic, p) for p in range(ep["parts"] + 1)]   # the last one: for zombies
    name, txn_id = f"txn-{i}", f"tx-{i}"
    if fault == "exhaust":            # __transaction_state compacted down to an id near the end of its epochs
        # (TV2: every end bumps the epoch; TV1: the application restarts after each transaction)
        m = sim.coord.txns[txn_id] = TxnMeta(txn_id, sim.new_pid(), MAX_EPOCH - (4 if ep["tv"] >= 2 else 3), ep["tv"])
        sim.coord.write_state(m, "Empty")
    c = Client(sim, name, txn_id=txn_id, tv=ep["tv"], two_pc=fault == "two_pc",
               timeout_ms=10_000 if fault == "two_pc" else 60_000)
    c.init()
    j, later = 0, []
    while j < len(txns):
        t = txns[j]
        begun = sim.clock
        written = write(c, [parts[k % ep["parts"]] for k in t["parts"]], t["batches"], i, j)
        if getattr(c, "late", None):
            later += [(p, a, b, begun) for p, a, b in written]
        if j == at and fault in FAULTS:
            c, stop = FAULTS[fault](sim, c, ep, t, written, parts, i, j)
            if stop:
                break
        elif fault == "two_pc" and j == len(txns) - 1:
            _two_pc_left_open(sim, c, ep, written, t["commit"])
        else:
            before = (c.pid, c.epoch)
            c.end(t["commit"])
            if fault == "exhaust" and c.tv < 2:
                c.reconnect()
                c.init()              # InitProducerId: epoch + 1, a new producer id once exhausted
            if fault == "exhaust" and c.pid != before[0] and ep.get("zombie_then", "commit") != "none":
                _old_id_zombie(sim, c, before, parts[-1], i, j)
        j += 1
        sim.wait(10)
    _judge_late(sim, c, getattr(c, "late", ()), later)


def _two_pc_left_open(sim, c, ep, written, commit: bool) -> None:
    """KIP-939: the last transaction prepared, waiting for its external coordinator past its
    timeout: not hanging. The coordinator's records hold Int.MaxValue as its timeout, so the log
    dirs tell it too - unless they leave `__transaction_state` out (`coord_log` False): then the
    log dirs alone judge its age against transaction.max.timeout.ms (15 min, passed here), and
    only the capture's InitProducerId Enable2Pc tells `kaudit audit` what it is. `recover`
    (transaction version 2): the application crashed; a new instance recovers the prepared
    transaction (_recover) and ends it - nothing to report."""
    state = ep.get("coord_log", True)
    sim.state_log = sim.state_log and state
    sim.wait(c.timeout_ms * 3 if state else 20 * 60_000)
    recover = ep.get("recover", "none") if c.tv >= 2 else "none"
    if recover != "none":
        _recover(sim, c, new_id=recover == "new_id", commit=commit)
        return
    for p, _, _ in written:
        sim.expect("prepared-2pc" if state else "prepared-2pc-disk", p, feeds=("segments",))
        sim.expect("prepared-2pc", p, feeds=("pcap", "audit"))


def _recover(sim, c, *, new_id: bool, commit: bool) -> None:
    """KIP-939 recovery of the prepared transaction by a new instance (another host): its
    InitProducerId v6 with KeepPreparedTxn and Enable2Pc is answered with its own producer id and
    epoch (a new producer id when `new_id`: the epoch ran out) beside the kept transaction's
    (OngoingTxnProducerId/Epoch); its EndTxn (v5, its own id and epoch) commits or aborts the
    kept transaction, whose markers carry the kept producer id at its epoch + 1."""
    r = Client(sim, f"{c.name}-recovered", txn_id=c.txn_id, tv=c.tv, two_pc=True, timeout_ms=c.timeout_ms)
    r.client_ip = "10.0.1.4"
    node = sim.coord.node
    ts = sim.tick()
    pid, epoch, kpid, kepoch = sim.coord.keep_prepared(c.txn_id, sim.new_pid, new_id=new_id)
    msgs = wire.init_producer_id_v6(r.corr(node), pid, epoch, txn_id=c.txn_id, enable_2pc=True, keep_prepared=True,
                                    timeout_ms=c.timeout_ms, client_id=r.name, ongoing=(kpid, kepoch))
    r.exchange(node, msgs[:1], ts)
    r.exchange(node, msgs[1:])
    sim.wait(100)
    ts = sim.tick()
    sim.coord.end_kept(sim.coord.txns[c.txn_id], committed=commit)
    m = sim.coord.txns[c.txn_id]
    m.epoch += 1                 # EndTxn v5 answers the session's next epoch (KIP-890)
    msgs = wire.end_txn_v5(r.corr(node), pid, epoch, committed=commit, new_epoch=m.epoch, new_pid=m.pid,
                           txn_id=c.txn_id, client_id=r.name)
    r.exchange(node, msgs[:1], ts)
    r.exchange(node, msgs[1:])


def _old_id_zombie(sim, c, old, u, i, j) -> None:
    """A stale instance still holding the producer id the transactional id left behind (its
    epoch ran out: the coordinator moved the id to a new producer id) writes to a partition it
    never registered. A 3.0 broker stores it (nothing verifies it; no marker will ever end it);
    a 4.1 broker's leader asks the coordinator (KIP-890), which refuses the old id."""
    sim.wait(1500)   # past the clocks' slack (EPOCH_SLACK_MS): the log dirs order it after the move
    z = Client(sim, f"{c.name}-old", txn_id=c.txn_id, tv=c.tv)
    z.client_ip = "10.0.1.3"
    z.pid, z.epoch = old
    err, off = z.send(u, values(i, j, 1, tag="-old-id-zombie"), register=False)
    if err != NONE:
        sim.expect("fenced-write-refused", u, pid=z.pid, feeds=("pcap", "audit"), note=f"refused with {err}")
    else:
        sim.expect("zombie-write-stored", u, off, off, z.pid, note=f"producer id {z.pid} after the move to {c.pid}")
        sim.expect("hanging-transaction", u, off, off, z.pid)
    sim.wait(10)


def _judge_late(sim, c, late, later) -> None:
    """The late data of a delayed EndTxn: hanging, unless a later transaction of the producer
    wrote to (so registered) its partition: then that transaction's marker ended it, after the
    marker of the transaction it belonged to (a late write)."""
    for q, first, last in late:
        regs = [ts for p, _, _, ts in later if p is q]
        if not regs:
            sim.expect("hanging-transaction", q, first, last, c.pid)
            continue
        # the log dirs order the late data (the client's create time) before the registration of
        # the transaction that ended it (the coordinator's record) only beyond the clocks' slack
        gap = regs[0] - c.late_ts
        # ... and only when that transaction is the producer's very next (the disk rule's guard:
        # the real 3.0.2 corpus); the capture's request times show it past transactions elsewhere
        very_next = regs[0] == min(ts for _, _, _, ts in later)
        feeds = ("segments", "pcap", "audit") if gap > LATE_SLACK_MS and very_next else ("pcap", "audit")
        sim.expect("late-write", q, first, last, c.pid, feeds=feeds, note=f"registered again {gap} ms later")


def write(c: Client, ps, n: int, i: int, j: int) -> list:
    """[(partition, first offset, last offset)] of this transaction's writes."""
    out = {}
    for p in ps:
        for k in range(n):
            vals = values(i, j, 2, tag=f"-{p.partition}-{k}")
            err, off = c.send(p, vals)
            if err == NONE:
                first = out.get(p.name, (p, off, off))[1]
                out[p.name] = (p, first, off + len(vals) - 1)
    return list(out.values())


# ---- faults: each ends transaction j and returns (the client that goes on, whether it stops) ---

def _fence(sim, c, ep, t, written, parts, i, j):
    z = ep.get("zombie", "registered")
    new = Client(sim, f"{c.name}-b", txn_id=c.txn_id, tv=c.tv)
    new.client_ip = "10.0.1.2"
    if z == "race":
        _fence_race(sim, c, new, written)
    else:
        new.init()
    sim.wait(5)
    if z == "registered":
        p = written[0][0]
        err, _ = c.send(p, values(i, j, 1, tag="-zombie"))
        sim.expect("fenced-write-refused", p, pid=c.pid, feeds=("pcap", "audit"), note=f"refused with {err}")
    elif z == "unregistered":
        u = parts[-1]
        err, off = c.send(u, values(i, j, 1, tag="-zombie"), register=False)
        if err != NONE:
            sim.expect("fenced-write-refused", u, pid=c.pid, feeds=("pcap", "audit"), note=f"refused with {err}")
        else:
            then = ep.get("zombie_then", "commit")
            if then == "none":
                # the log dirs date the batch by the zombie's clock, 5 ms after the coordinator's
                # fencing record: within the clocks' slack (EPOCH_SLACK_MS) nothing on disk orders
                # them; the capture's one clock does. On disk its hanging part tells the damage.
                sim.expect("zombie-write-stored", u, off, off, c.pid, feeds=("pcap", "audit"))
                sim.expect("hanging-transaction", u, off, off, c.pid)
            else:
                new_write = write(new, [u], 1, i, j + 100)
                sim.wait(5)
                new.end(then == "commit")
                inv = "zombie-write-committed" if then == "commit" else "zombie-write-stored"
                sim.expect(inv, u, off, off, c.pid, note=f"then {then} by epoch {new_write and new.epoch}")
                # the part u's marker ended holds the zombie's epoch and the new instance's
                last = new_write[0][2] if new_write else off
                sim.expect("mixed-epoch-part", u, off, last, c.pid)
    c.end(t["commit"])                    # the zombie's own EndTxn: fenced
    return new, False


def _fence_race(sim, zombie, new, written):
    """The zombie's Produce reaches a registered partition after the coordinator began fencing
    (PrepareAbort at epoch + 1 written) and before the fencing marker: stored, acknowledged, then
    aborted by the marker."""
    node = sim.coord.node
    corr = new.corr(node)
    msgs = wire.init_producer_id(corr, -1, -1, txn_id=new.txn_id, error=51, client_id=new.name)
    new.exchange(node, msgs[:1])
    m = sim.coord.txns[new.txn_id]
    sim.coord.begin_end(m, committed=False, bump=True)
    p = written[0][0]
    err, off = zombie.send(p, [b"zombie-race"])
    if err == NONE:
        sim.expect("acked-after-fencing", p, off, off, zombie.pid, feeds=("pcap", "audit"))
    sim.coord.finish_end(m)
    new.exchange(node, msgs[1:])
    sim.wait(20)
    new.init()


def _admin_abort(sim, c, ep, t, written, parts, i, j):
    """kafka-transactions.sh abort on a subset of the open transaction's partitions: DescribeProducers
    gives the epoch and coordinator epoch, WriteTxnMarkers ABORT goes to each leader."""
    chosen = sorted({k % len(written) for k in ep.get("admin", [0])})
    aborted = [written[k] for k in chosen]
    for p, first, last in aborted:
        st = p.state[c.pid]
        sim.coord.send_markers(c.pid, st.epoch, False, [p], client_id="adminclient-1",
                               coordinator_epoch=st.coordinator_epoch)
        sim.wait(5)
    if ep.get("admin_then_write"):
        write(c, [aborted[0][0]], 1, i, j + 200)
    c.end(t["commit"])
    if t["commit"]:
        for p, first, last in aborted:
            sim.expect("torn-transaction", p, first, last, c.pid if c.tv < 2 else None,
                       note="aborted by an admin, committed by the coordinator")
    return c, False


def _admin_abort_ended(sim, c, ep, t, written, parts, i, j):
    """`kafka-transactions.sh abort --topic T --partition P --producer-id ID --producer-epoch E
    --coordinator-epoch C` on partitions of a transaction that already ended (committed or
    aborted). Facts (apache/kafka 1eb7644): TransactionsCommand.AbortTransactionCommand with
    explicit ids sends the marker as given (with --start-offset it first asks DescribeProducers
    for an open transaction starting there, finds none and writes nothing); Admin.abortTransaction
    sends WriteTxnMarkers ABORT to the partition leader; ProducerAppendInfo.appendEndTxnMarker
    checks only that the epoch is not below the producer's (the TV0/1 comparison, which 3.0 and
    4.1 apply to every marker: the strict TV2 one came with KAFKA-19446, apache/kafka#20882, Nov
    2025, for markers whose WriteTxnMarkers carries transaction version 2)
    and that the coordinator epoch is not below its last marker's - the values DescribeProducers
    shows - so the ABORT is appended; with no open transaction it completes nothing (no
    CompletedTxn: no .txnindex entry, the last stable offset unchanged) and the coordinator never
    hears of it. Nothing is lost or exposed: a stray marker, told at info, nothing louder."""
    pid = c.pid
    c.end(t["commit"])
    sim.wait(1000)
    for k in sorted({k % len(written) for k in ep.get("admin", [0])} if written else ()):
        p = written[k][0]
        st = p.state[pid]
        offs = sim.coord.send_markers(pid, st.epoch, False, [p], client_id="adminclient-1",
                                      coordinator_epoch=st.coordinator_epoch)
        off = offs[p.name]
        # after an ABORT the log dirs cannot tell it from the coordinator's marker written again
        # (same result, same epochs); the capture shows its sender
        feeds = ("segments", "pcap", "audit") if t["commit"] else ("pcap", "audit")
        sim.expect("stray-admin-marker", p, off, off, pid, feeds=feeds,
                   note="an admin's ABORT after the transaction ended")
        sim.wait(5)
    return c, False


def _coord_failover(sim, c, ep, t, written, parts, i, j):
    c.end(t["commit"], resend=True)
    return c, False


def _timeout(sim, c, ep, t, written, parts, i, j):
    sim.wait(c.timeout_ms + 5000)
    m = sim.coord.txns[c.txn_id]
    sim.coord.end(m, committed=False, bump=True)     # abortTimedOutTransactions: fenced epoch + 1
    c.end(t["commit"])                               # fenced: the application starts a new producer
    new = Client(sim, f"{c.name}-r", txn_id=c.txn_id, tv=c.tv)
    new.init()
    return new, False


def _late_endtxn(sim, c, ep, t, written, parts, i, j):
    """KAFKA-17754 (version 0/1 only): EndTxn(commit) is delayed in the broker; the client retries on
    a new connection and commits; its next transaction starts on partition p; the delayed request
    is then processed: it commits the NEXT transaction's first write. The client's later write to
    p opens a transaction no coordinator knows, which its EndTxn (taken for a retry) never ends."""
    if c.tv >= 2 or sim.verify:
        c.end(t["commit"])
        return c, False
    node = sim.coord.node
    from tests.sim.wire import end_txn
    delayed = end_txn(c.corr(node), c.pid, c.epoch, committed=True, txn_id=c.txn_id, client_id=c.name)
    c.exchange(node, delayed[:1])
    sim.expect("delayed-request", None, pid=c.pid, feeds=("pcap", "audit"))
    sim.wait(30_000)
    c.reconnect()
    c.end(True)
    p = written[0][0]
    sim.wait(5)
    write(c, [p], 1, i, j + 300)
    m = sim.coord.txns[c.txn_id]
    sim.coord.end(m, committed=True, bump=False)     # the delayed EndTxn, processed now
    sim.wait(5)
    c.late_ts = sim.clock
    late = write(c, [p], 1, i, j + 301)
    c.end(True)                                      # CompleteCommit already: answered as a retry
    c.late = late                                    # judged when the episode ends (txn below)
    return c, False


def _stuck_markers(sim, c, ep, t, written, parts, i, j):
    """KAFKA-19999's livelock: the client's EndTxn is accepted (PrepareX), the markers land on
    every partition but the last written one, whose leader refuses them INVALID_PRODUCER_EPOCH -
    and again after a coordinator reload re-sends them; no CompleteX ever: the transaction stays
    prepared, the restarted application's InitProducerId is answered CONCURRENT_TRANSACTIONS, and
    read_committed consumers of that partition stop at its data."""
    from tests.sim.broker import CONCURRENT_TRANSACTIONS, INVALID_PRODUCER_EPOCH

    coord = sim.coord
    bad, first, last = written[-1]

    def stuck(m, *, resend=False):
        committed = m.ending[0]
        coord.send_markers(m.pid, m.epoch, committed, [p for p in m.partitions if p is not bad])
        for _ in range(2):
            coord.refuse_markers(m.pid, m.epoch, committed, bad, INVALID_PRODUCER_EPOCH)
            coord.fail_over()
            sim.tick(50)
        return m.epoch

    coord.finish_end = stuck
    try:
        c.end(t["commit"])
    finally:
        del coord.finish_end
    sim.wait(1_000)
    c.reconnect()
    node = coord.node
    c.exchange(node, wire.init_producer_id(c.corr(node), -1, -1, txn_id=c.txn_id, error=CONCURRENT_TRANSACTIONS,
                                           client_id=c.name))
    sim.wait(120_000)
    sim.expect("markers-refused", bad, first, last, c.pid if c.tv < 2 else None,
               note="its markers refused twice, the transaction left prepared")
    return c, True


FAULTS = {"fence": _fence, "admin_abort": _admin_abort, "admin_abort_ended": _admin_abort_ended,
          "coord_failover": _coord_failover, "timeout": _timeout,
          "late_endtxn": _late_endtxn, "stuck_markers": _stuck_markers}
