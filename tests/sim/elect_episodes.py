"""Partition-leader elections (issue 27, branch h-elect): one producer writes a topic of its own
(partition 0 replicated on nodes 2, 3, 1, led by node 2) and the partition changes leader as
replication.py says Kafka does it. The episode dict (strategies.elect_episode):

    {"kind": "elect", "fault": F, "parts": 1-2, "before": 1-4, "tail": 1-3, "fetched": 0-3,
     "after": 0-3, "sizes": [...], "acks": "all" | "1", "rejoin": bool, "alive": bool,
     "fetch_wire": bool}

and the history's `kraft` says whether the log dirs hold the `__cluster_metadata` log;
`fetch_wire`: a rejoining replica's Fetch to the new leader (replica id = its broker id) is in the
capture, as a capture of the brokers' port shows replication - what it is served at the offsets
it truncated is the wire's view of the loss (acknowledged-records-replaced).

| fault | what happens | the oracle |
|---|---|---|
| `clean` | node 2 dies with every follower in sync; node 3 (ISR) leads | nothing |
| `tail` | node 2 appended `tail` batches, nodes 3 and 1 fetched the first `fetched` of them (the high watermark did not move: the leader learns it from their next fetch), then node 2 died (or, `alive`, was deposed alive: the acks=all requests waiting for the ISR are answered NOT_LEADER_OR_FOLLOWER); node 3 (ISR) leads; node 2 rejoins and truncates the rest (KIP-279) | acks=all: nothing at warning or above (never acknowledged; the idempotent producer's retries: a batch node 3 fetched is a duplicate answered with its offset, the others stored anew); acks=1: `acked-leader-only-lost` (warning, the acknowledged batches nobody fetched) on audit, and on the wire where a later write was acknowledged at those offsets |
| `stale` | as `tail`, node 2's log dir read as it died (not truncated): its tail is above its high watermark, in the old epoch, where node 3 wrote the new one | as `tail` |
| `flap` | clean elections in a row (acks=all): each leader appends 0-2 batches nobody fetches and dies, a follower from the ISR leads, the producer retries there; the deposed leaders rejoin at once, or after the last election (KIP-279's loop across an epoch the new leader never had) | nothing; `replica-behind` for one left dead |
| `unclean` | node 1 stops fetching and leaves the ISR; node 2 acknowledges `tail` batches (acks=all, committed by the ISR {2, 3}); nodes 2 and 3 die; node 1 is elected uncleanly; a restarted producer writes `after` batches; nodes 2 and 3 rejoin and truncate (`rejoin`) or stay as they died | `committed-lost` (critical) on audit and on the wire where overlapping; with the metadata log `unclean-election` (critical when a replica in the inputs still holds the lost offsets, error - not countable - when all rejoined); without it, when nodes 2 and 3 are read as they died, `replica-diverged` (replica-divergence critical: they hold the committed offsets in epoch 0 past node 1's start of epoch 1 - its batches there or its leader-epoch-checkpoint entry) |
"""

from __future__ import annotations

from tests.sim import replication as R
from tests.sim.broker import NONE
from tests.sim.cluster import Client, Sim
from tests.sim.episodes import values
from tests.sim.wire import produce_response

NOT_LEADER_OR_FOLLOWER = 6

OLD, NEW, THIRD = 2, 3, 1       # partition 0: led by node 2, followed by 3 and 1


def elect(sim: Sim, i: int, ep: dict) -> None:
    topic = ep.get("topic") or f"e{i}"
    parts = [sim.partition(topic, p, leader=OLD if p == 0 else None) for p in range(ep["parts"])]
    p0 = parts[0]
    acks1 = ep["acks"] == "1" and ep["fault"] in ("clean", "tail", "stale")   # flap, unclean: acks=all
    # acks=1 turns idempotence off (the producer requires acks=all for it)
    c = Client(sim, f"elect-{i}", idempotent=not acks1, acks=1 if acks1 else -1)
    c.init()
    sizes = ep["sizes"]
    n = 0

    def vals(tag=""):
        nonlocal n
        n += 1
        return values(i, n, sizes[n % len(sizes)], tag)

    for j in range(ep["before"]):
        c.send(parts[j % len(parts)], vals())
    {"clean": _clean, "tail": _tail, "stale": _tail, "unclean": _unclean, "flap": _flap}[ep["fault"]](
        sim, c, p0, ep, vals)
    for p in parts[1:]:
        c.send(p, vals())


def unfetched_tail(sim, c, p, ep, vals, *, answered: bool) -> tuple[list, list, int]:
    """Node 2, the leader, appends ep["tail"] batches of which its followers fetch the first
    ep["fetched"]; node 3 is then elected from the ISR {2, 3}. (the batches sent, as (values,
    data, sequence, offset answered), their requests' correlation ids, the batches fetched)."""
    hw0 = p.rhw[OLD]
    fetched = min(ep.get("fetched", 0), ep["tail"])
    sent, corrs = [], []
    for k in range(ep["tail"]):
        if k == fetched:                        # in the ISR, not fetched yet
            p.behind |= {NEW, THIRD}
        v = vals("t")
        data, s = c.batch(p, v)
        err, off = c.send(p, v, data=data, seq=s, answered=answered)
        sent.append((v, data, s, off))
        corrs.append(sim.cap.corr[c._conn(OLD)])
    # the followers fetched the first `fetched` batches; the leader learns that from their next
    # fetch, which never came: the high watermark stayed (and acks=all stayed unanswered)
    for n in (OLD, NEW, THIRD):
        p.rhw[n] = hw0
    sim.wait(200)
    p.behind.discard(THIRD)
    R.fall_behind(p, OLD, leave_isr=False)
    R.elect(p, NEW, isr={NEW, THIRD})
    return sent, corrs, fetched


def unclean_election(sim, c, p) -> None:
    """Nodes 2 and 3 die; node 1, out of the ISR, is elected uncleanly; the application
    restarts (InitProducerId: epoch + 1)."""
    sim.wait(500)
    for node in (OLD, NEW):
        R.fall_behind(p, node, leave_isr=False)
    p.behind.discard(THIRD)
    R.elect(p, THIRD, unclean=True)
    c.reconnect()
    c.init()
    c.name += "-restarted"


def _deposed_after(sim, p, ep) -> None:
    """After an unclean election: nodes 2 and 3 come back and truncate (`rejoin`), or are read
    as they died."""
    sim.wait(1000)
    for node in (OLD, NEW):
        if ep["rejoin"]:
            R.rejoin(p, node, wire=bool(ep.get("fetch_wire")))
        else:
            R.crashed(p, node)
            _behind(sim, p, node)


def refuse_waiting(c, p, corrs: list) -> None:
    """Node 2 deposed alive (its controller session lost, not dead): the Produce requests waiting
    for the ISR complete NOT_LEADER_OR_FOLLOWER (checkEnoughReplicasReachOffset, no local leader)."""
    for corr in corrs:
        c.exchange(OLD, [(1, produce_response(corr, [(p.topic, p.partition, NOT_LEADER_OR_FOLLOWER, -1)]))])


def _clean(sim, c, p, ep, vals):
    """Node 2 dies in sync: node 3 leads (from the ISR), node 2 rejoins or stays as it died."""
    sim.wait(500)
    R.fall_behind(p, OLD, leave_isr=False)
    R.elect(p, NEW, isr=p.isr - {OLD})
    c.reconnect()
    for _ in range(ep["after"]):
        c.send(p, vals())
    _old_leader_after(sim, p, ep["rejoin"], ep)


def _tail(sim, c, p, ep, vals):
    """Node 2 appends batches its followers have not fetched, then dies; node 3 leads."""
    hw0 = p.rhw[OLD]
    # acks=all: the leader waits for the ISR, dies first (no answer); acks=1: answered
    sent, corrs, fetched = unfetched_tail(sim, c, p, ep, vals, answered=c.acks == 1)
    if ep.get("alive") and c.acks == -1 and ep["fault"] == "tail":
        refuse_waiting(c, p, corrs)
    c.reconnect()
    sim.wait(100)
    if c.acks == -1:        # the producer retries what was never answered: node 3 stores it anew,
        for k, (v, data, s, off) in enumerate(sent):   # or answers a batch it had fetched with its offset
            err, again = c.send(p, v, data=data, seq=s)
            assert err == NONE and (k >= fetched or again == off)
    for _ in range(ep["after"]):
        c.send(p, vals())
    if c.acks == 1 and fetched < len(sent):    # what the followers had fetched survives
        first, last = sent[fetched][3], sent[-1][3] + len(sent[-1][0]) - 1
        note = f"acks=1 writes at {first}-{last} the dead leader alone had"
        sim.expect("acked-leader-only-lost", p, first, last, None, feeds=("audit",), note=note)
        # the wire shows it where a later write was acknowledged (or served) at those offsets
        sim.at_end.append(lambda: p.next_offset > first and sim.expect(
            "acked-leader-only-lost", p, first, min(last, p.next_offset - 1), None, feeds=("pcap",), note=note))
    assert hw0 <= sent[0][3]
    _old_leader_after(sim, p, ep["fault"] == "tail", ep)


def _old_leader_after(sim, p, rejoin: bool, ep=None) -> None:
    if rejoin:
        sim.wait(1000)
        R.rejoin(p, OLD, wire=bool(ep and ep.get("fetch_wire")))
    else:
        R.crashed(p, OLD)
        _behind(sim, p, OLD)


def _behind(sim, p, node: int) -> None:
    """A replica read as it died lacks what the others committed after: a replica out of the ISR
    (`replica-behind`, a warning: it fetches them when it runs) - judged once the history ended."""
    def check():
        end, top = p.log_end(node), max(p.rhw[n] for n in p.pbs if n != node)
        if top > end:
            sim.expect("replica-behind", p, end, top - 1, None, feeds=("segments", "audit"),
                       note=f"replica {node} read as it died")
    sim.at_end.append(check)


def _unclean(sim, c, p, ep, vals):
    """Node 1 leaves the ISR; the ISR {2, 3} commits the tail; both die; node 1 leads uncleanly."""
    R.fall_behind(p, THIRD, leave_isr=True)
    start = p.log_end(THIRD)
    for _ in range(ep["tail"]):
        c.send(p, vals("t"))                    # acks=all, acknowledged: the ISR {2, 3} has it
    lost_last = p.next_offset - 1
    # the application restarts (its producer's sequences no longer match the new leader's log)
    unclean_election(sim, c, p)
    for _ in range(ep["after"]):
        c.send(p, vals("a"))
    _deposed_after(sim, p, ep)
    _unclean_oracle(sim, p, ep, start, lost_last)


def _unclean_oracle(sim, p, ep, start: int, lost_last: int) -> None:
    note = f"committed offsets {start}-{lost_last} the ISR had, lost to the unclean election"
    sim.expect("committed-lost", p, start, lost_last, None, feeds=("audit",), note=note)
    if sim.kraft is not None:
        sim.expect("unclean-election" if not ep["rejoin"] else "unclean-election-uncounted", p, start, lost_last,
                   None, feeds=("segments", "audit"), note=note)

    def check():        # what later writes put at the lost offsets, once the history ended
        if p.next_offset > start:
            sim.expect("committed-lost", p, start, min(lost_last, p.next_offset - 1), None, feeds=("pcap",),
                       note=note)
        if sim.kraft is not None or ep["rejoin"]:
            return
        # the dead replicas hold the committed tail in epoch 0 past node 1's start of epoch 1 (its
        # batches there, or its leader-epoch-checkpoint entry when it wrote nothing yet)
        sim.expect("replica-diverged", p, start, lost_last, None, feeds=("segments", "audit"), note=note)
    sim.at_end.append(check)


def _flap(sim, c, p, ep, vals):
    """Clean elections one after another (acks=all, idempotent): each leader appends 0-2 batches
    its followers never fetch and dies; a follower from the ISR leads; the producer retries what
    was never answered there. The deposed leaders rejoin at once (`rejoin`), or only after the
    last election - a replica then holds a tail of an epoch the new leader never had, and KIP-279's
    loop (an epoch the leader does not know: truncate to its own end of the largest epoch below,
    ask again) cuts it. Expected: nothing at warning or above (`replica-behind` for a dead one)."""
    between = ep["rejoin"]
    flaps = 3 if between else 2
    dead = []
    for k in range(flaps):
        lead = p.leader
        followers = [n for n in (OLD, NEW, THIRD) if n != lead and n not in dead]
        p.behind |= set(followers)
        pending = []
        for _ in range((ep["tail"] + k) % 3):
            v = vals("t")
            data, s = c.batch(p, v)
            c.send(p, v, data=data, seq=s, answered=False)
            pending.append((v, data, s))
        sim.wait(300)
        R.fall_behind(p, lead, leave_isr=False)
        for n in followers:
            p.behind.discard(n)
        R.elect(p, followers[k % len(followers)], isr=set(followers))
        c.reconnect()
        for v, data, s in pending:
            err, _ = c.send(p, v, data=data, seq=s)
            assert err == NONE
        for _ in range(ep["after"]):
            c.send(p, vals())
        if between:
            sim.wait(1000)
            R.rejoin(p, lead, wire=bool(ep.get("fetch_wire")))
        else:
            dead.append(lead)
    sim.wait(1000)
    for n in dead:      # the first deposed leader rejoins; the last one too, or stays as it died
        if n == dead[0] or ep.get("fetched", 0) % 2:
            R.rejoin(p, n, wire=bool(ep.get("fetch_wire")))
        else:
            R.crashed(p, n)
            _behind(sim, p, n)
