"""Consumer episodes: a consumer group (classic eager or cooperative, or KIP-848) of 1-3 members
reading the partitions an earlier producer episode wrote, with one fault, and the oracle's
expectations it implies; and exactly-once consume-transform-produce applications.

Group faults: none (optionally a member leaves or joins mid-way: nothing to report), die (a
member is served records, dies before committing them, and after the session timeout the next
owner is served them again: redelivery; with commit-before-processing nothing is redelivered on
the wire), static_restart (the same under static membership, KIP-345: the process is back within
the session timeout with the same host, client id and group.instance.id, a new member id and
the old one's partitions, no rebalance; served them again from the commit: redelivery), fenced (the same, the member stalled: the coordinator removed it, its late commit is
refused, its heartbeat answered UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH), reset (a new group with
auto.offset.reset=latest starts at the log end: info), reset_range (the committed offset fell below
the log start by retention, OFFSET_OUT_OF_RANGE, reset to latest jumps over the records since:
error), start_beyond (a member starts past the committed offset: a seek), commit_beyond (a commit
past what was served), uncommitted_read (read_uncommitted members served aborted data: info),
seek_back (the group starts at a committed offset before the last batch, reads to the end, and its members
seek back to the beginning - seekToBeginning: ListOffsets -2 - and read their partitions again,
so the capture shows old transactions' markers after newer ones: nothing to report).
EOS faults: eos (a transaction aborted, the application seeks back and the next transaction
commits the same inputs: normal), eos_double (two instances with their own transactional ids,
pre-KIP-447 TxnOffsetCommit: both commit the same inputs: critical)."""

from __future__ import annotations

from fixtures import kafka_encoder as ke
from tests.sim import wire_group as wg
from tests.sim.offsets_log import OFFSETS_PARTITIONS
from tests.sim.cluster import Client, Sim
from tests.sim import static_members
from tests.sim.consumer_group import FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, Group, Member, serve, stored
from tests.sim.static_members import FENCED_INSTANCE_ID

GROUP_FAULTS = ("none", "die", "fenced", "static_restart", "reset", "reset_range", "start_beyond", "commit_beyond",
                "uncommitted_read", "seek_back", "eos", "eos_double")
SESSION_MS = 10_000
MAX_ROUNDS = 40


def inputs(sim: Sim, ep: dict) -> list:
    """The partitions of one topic an earlier producer episode wrote (ep['input'] picks it);
    `compacted_input`: a compacted topic's (log:compacted_consumers) when the history has one."""
    kinds = ("c",) if ep.get("compacted_input") and any(p.topic[:1] == "c" for p in sim.parts.values()) \
        else ("e", "s")
    topics = sorted({p.topic for p in sim.parts.values() if p.topic[:1] in kinds})
    if not topics:
        return []
    t = topics[ep.get("input", 0) % len(topics)]
    return [p for _, p in sorted((p.partition, p) for p in sim.parts.values() if p.topic == t)]


def group(sim: Sim, i: int, ep: dict) -> None:
    fault = ep["fault"]
    if fault in ("eos", "eos_double"):
        return eos(sim, i, ep)
    if fault == "offsets_compacted":
        fault = "none"          # a fault-free group whose __consumer_offsets log is compacted
    parts = _own_topic(sim, i) if fault == "reset_range" else inputs(sim, ep)
    if not parts:
        return
    g = Group(sim, i, ep["protocol"], parts)
    if ep.get("offsets"):
        from tests.sim.offsets_log import OffsetsLog

        g.offsets_log = OffsetsLog(sim, g.name, g.node)
    iso = "read_uncommitted" if fault == "uncommitted_read" else ep["isolation"]
    n = ep["members"]
    if fault == "start_beyond":
        for tp, p in g.parts.items():   # a previous run of the group committed past the first batch
            g.committed[tp] = _boundaries(p)[1] if len(_boundaries(p)) > 1 else p.log_start
    elif fault == "seek_back":
        for tp, p in g.parts.items():   # a previous run committed up to the last batch
            b = _boundaries(p)
            g.committed[tp] = b[-1] if b else p.log_start
    members = [_new(g, k, iso, ep, reset="latest" if fault == "reset" else "earliest") for k in range(n)]
    if fault == "static_restart":
        for m in members:   # KIP-345: every member has a group.instance.id
            m.instance = f"{g.name}-instance-{m.k}"
    if fault == "start_beyond":
        members[ep["victim"] % n].seek = ep["at"] + 1
    g.rebalance(joining=members)
    victim = members[ep["victim"] % n]
    at, live = ep["at"], _live(sim, i, g, ep)
    for rnd in range(MAX_ROUNDS):
        if rnd < ep.get("live", 0) and live:
            live(rnd)
        if rnd == at and fault in FAULTS:
            FAULTS[fault](sim, g, victim, ep)
        elif rnd == at and fault == "none" and ep["change"] != "none":
            _change(g, victim, ep, iso)
        else:
            _round(g, ep["commit"])
        if rnd >= max(at, ep.get("live", 0)) and _done(g):
            break
        sim.wait(100)
    if fault == "reset_range":
        _reset_range(sim, g, ep, iso)
    for m in g.alive():
        g.leave(m)
    if g.offsets_log is not None:
        from tests.sim.offsets_log import finish

        # a KIP-848 group's own records are not GroupMetadata: only its offsets' tombstones here
        finish(sim, g.offsets_log, g.generation if g.protocol != "848" else 0, ep["offsets"])
    g.expect()


def _live(sim: Sim, i: int, g: Group, ep: dict):
    """A producer still writing to the group's input while it reads (one batch a round): new
    records for partitions the members had caught up on (a fetch session answers them unasked)."""
    if not ep.get("live") or ep["fault"] == "reset_range":
        return None
    c = Client(sim, f"live-{i}")
    c.init()
    parts = sorted(g.parts.values(), key=lambda p: p.partition)

    def write(rnd: int) -> None:
        c.send(parts[rnd % len(parts)], [f"live{i}-{rnd}-{k}".encode() for k in range(2)])
    return write


def _new(g: Group, k: int, iso: str, ep: dict, **kw) -> Member:
    m = g.member(k, iso, max_batches=ep["fetch"], sessions={} if ep.get("session") else None, **kw)
    m.rack = bool(ep.get("rack"))
    if g.protocol == "848":   # topic ids: the member's metadata (its assignments name topics by id)
        m.hello(list(g.sim.nodes)[0])
    return m


def _boundaries(p) -> list:
    """The offsets at which the partition's data batches start (a consumer's possible positions)."""
    return [b.base for b in stored(p) if not b.control]


def _round(g: Group, mode: str, skip=None) -> None:
    for m in g.alive():
        if m is skip:
            continue
        m.poll()
        if mode == "before":          # commit the positions first, then process
            m.commit_all()
        g.sim.wait(5)                 # processing
        if mode == "after":
            m.commit_all()
        m.heartbeat()


def _done(g: Group) -> bool:
    for m in g.alive():
        for tp in m.owned:
            s, f = serve(g.parts[tp], m.position[tp], m.isolation, 1)
            if s.batches:
                return False
    return True


def _change(g: Group, victim: Member, ep: dict, iso: str) -> None:
    """A member leaves gracefully (committing first) or a new one joins: no record is redelivered."""
    _round(g, ep["commit"])
    if ep["change"] == "leave":
        g.leave(victim)
        if not g.alive():
            g.rebalance(joining=[_new(g, len(g.members), iso, ep)])
            return
        g.rebalance()
    else:
        g.rebalance(joining=[_new(g, len(g.members), iso, ep)])


def _die(sim: Sim, g: Group, victim: Member, ep: dict, *, stall: bool = False) -> None:
    """The victim is served its partitions' next records and dies (or stalls) before committing
    them (committing first under commit-before-processing); after the session timeout the group
    gives its partitions to the others (or to a restarted instance)."""
    _round(g, ep["commit"], skip=victim)
    victim.poll()
    if ep["commit"] == "before":
        victim.commit_all()
    late = dict(victim.position)
    g.drop(victim)
    sim.wait(SESSION_MS + 500)
    if g.alive():
        g.rebalance()
    else:
        g.rebalance(joining=[_new(g, len(g.members), victim.isolation, ep)])
    _round(g, ep["commit"])
    if stall:   # it wakes up: its commit is refused, its heartbeat says it was removed
        for tp, off in sorted(late.items()):
            victim.position[tp] = off
            victim.commit(tp, error=UNKNOWN_MEMBER_ID)
        victim.heartbeat(error=FENCED_MEMBER_EPOCH if g.protocol == "848" else UNKNOWN_MEMBER_ID)
        if ep.get("rejoin"):   # it joins again: KIP-848 with its member id at epoch 0, classic with a new id
            victim.alive, victim.generation = True, 0
            if g.protocol != "848":
                victim.member_id += "-r"
            g.rebalance(joining=[victim])


def _static_restart(sim: Sim, g: Group, victim: Member, ep: dict) -> None:
    """A static member (classic protocol) is served its partitions' next records and its process
    dies before committing them (committing first under commit-before-processing); it is back
    within the session timeout (static_members.restart): no rebalance, and the new process is
    served the records past the commit again (redelivery, as after `die`). With `rejoin` the old
    process had only stalled: it wakes, and its commit and heartbeat are refused
    FENCED_INSTANCE_ID. KIP-848: the new process is refused UNRELEASED_INSTANCE_ID until the
    crashed one's session expires, then joins as a new static member (static_members.restart_848);
    with `rejoin` the restart was graceful: a commit, a static leave (epoch -2), and the new
    process takes the partitions over with no new group epoch (static_members.rejoin_848)."""
    _round(g, ep["commit"], skip=victim)
    victim.poll()
    if ep["commit"] == "before" or (g.protocol == "848" and ep.get("rejoin")):
        victim.commit_all()
    late = dict(victim.position)
    if g.protocol == "848":
        if ep.get("rejoin"):
            static_members.rejoin_848(g, victim)
        else:
            sim.wait(SESSION_MS // 4)
            static_members.restart_848(g, victim)
        _round(g, ep["commit"])
        return
    sim.wait(SESSION_MS // 4)
    static_members.restart(g, victim)
    _round(g, ep["commit"])
    if ep.get("rejoin"):
        for tp, off in sorted(late.items()):
            victim.position[tp] = off
            victim.commit(tp, error=FENCED_INSTANCE_ID)
        victim.heartbeat(error=FENCED_INSTANCE_ID)


def _commit_beyond(sim: Sim, g: Group, victim: Member, ep: dict) -> None:
    _round(g, ep["commit"])
    # a partition the group was served records of (an unread one proves nothing about positions)
    tp = min((tp for tp in victim.owned if victim.delivered.get(tp)), default=None)
    if tp is None:
        return
    known = victim.position[tp]
    off = known + 1 + ep["at"] % 3
    victim.commit(tp, off)
    sim.expect("commit-beyond-served", g.parts[tp], known, off - 1, feeds=("pcap", "audit"),
               note=f"group {g.name} member {victim.k} committed {off} after being served to {known}")


def _seek_back(sim: Sim, g: Group, victim: Member, ep: dict) -> None:
    """The members, having read on from the committed offset to the end, seek to the beginning
    of their partitions (KafkaConsumer.seekToBeginning, a replay: ListOffsets -2 on the wire)
    and read them again: the older transactions' markers come after the newer ones in the
    capture. Re-reading one's own partitions is no redelivery (one ownership), and no position
    goes back unseen (the look-up shows it)."""
    for _ in range(MAX_ROUNDS):
        _round(g, ep["commit"])
        if _done(g):
            break
    for m in g.alive():
        for tp in sorted(m.owned):
            m.position[tp] = m.look_up(tp, -2)


FAULTS = {"die": _die, "fenced": lambda *a: _die(*a, stall=True), "static_restart": _static_restart,
          "commit_beyond": _commit_beyond,
          "seek_back": _seek_back}


def _own_topic(sim: Sim, i: int) -> list:
    """reset_range: a topic of its own, written by an idempotent producer (retention runs on it)."""
    p = sim.partition(f"c{i}", 0)
    c = Client(sim, f"cprod-{i}")
    c.init()
    for j in range(2):
        c.send(p, [f"c{i}-b{j}-r{k}".encode() for k in range(2)])
    sim.own_producer = c
    return [p]


def _reset_range(sim: Sim, g: Group, ep: dict, iso: str) -> None:
    """The group stops; records it never reads are written, retention deletes them (the log start
    passes the committed offset); more records come; the group restarts with
    auto.offset.reset=latest: OFFSET_OUT_OF_RANGE, a reset to the log end skipping the records since
    the log start."""
    for m in g.alive():
        g.leave(m)
    c, (tp, p) = sim.own_producer, next(iter(g.parts.items()))
    c.send(p, [b"unread-0", b"unread-1"])
    sim.wait(7 * 86_400_000)
    p.delete_before(p.next_offset)
    for j in range(ep["at"] % 2 + 1):
        c.send(p, [f"after-b{j}-r{k}".encode() for k in range(2)])
    m = _new(g, len(g.members), iso, ep, reset="latest")
    g.rebalance(joining=[m])
    start, end = p.log_start, p.next_offset
    m.poll()      # OFFSET_OUT_OF_RANGE, then the reset to the log end
    if m.position[tp] == end and end > start:
        sim.expect("reset-skip", p, start, end - 1, feeds=("pcap", "audit"),
                   note=f"group {g.name}: committed {g.committed.get(tp)} below the log start {start}")
    _round(g, ep["commit"])


# ---- exactly-once consume-transform-produce --------------------------------------------------------

class App:
    """A consume-transform-produce instance: a group member (read_committed) and a transactional
    producer on the same host."""

    def __init__(self, g: Group, k: int, ep: dict, out):
        self.g, self.out = g, out
        self.m = _new(g, k, "read_committed", ep)
        # eos_tv 2 (a 4.x broker): KIP-890's transaction version 2 - the epoch bumps at every EndTxn,
        # no AddOffsetsToTxn, TxnOffsetCommit v5
        self.tv = ep.get("eos_tv", 1)
        self.c = Client(g.sim, f"producer-eos-{g.index}-{k}", txn_id=f"eos-{g.index}-{k}", tv=self.tv)
        self.c.client_ip = self.m.host
        self.c.init()
        self.v3 = ep["fault"] == "eos"    # KIP-447 TxnOffsetCommit (member id, generation) or the old API
        # the group's __consumer_offsets partition (its coordinator's): the transaction registers it,
        # its TxnOffsetCommits are transactional batches there and the coordinator's markers end them
        self.offsets = g.sim.partition("__consumer_offsets", ke.coordinator_partition(g.name, OFFSETS_PARTITIONS),
                                       leader=g.node)

    def step(self, *, commit: bool = True, end: bool = True) -> dict:
        """One transaction: poll each owned partition once, produce the outputs, commit the input
        positions in the transaction. Returns {tp: (delivered offsets, position)} (empty: nothing read)."""
        read = {tp: (s.delivered, self.m.position[tp]) for tp, s in sorted(self.m.poll().items()) if s.delivered}
        if not read:
            return read
        for tp, (offs, _) in read.items():
            self.c.send(self.out, [f"out-{tp[0]}-{tp[1]}-{o}".encode() for o in offs])
        g, c, node = self.g, self.c, self.g.sim.coord.node
        if self.tv < 2:
            c.exchange(node, wg.add_offsets(c.corr(node), c.name, c.txn_id, c.pid, c.epoch, g.name))
            g.sim.coord.add_partition(g.sim.coord.txns[c.txn_id], self.offsets)
        else:   # KIP-890: the group coordinator registers it, as a leader its partition (Client._verify)
            c._verify(self.offsets, 0)
        for tp, (_, pos) in read.items():
            p = g.parts[tp]
            member = self.m.member_id if self.v3 else None
            c.exchange(g.node, wg.txn_offset_commit(c.corr(g.node), c.name, c.txn_id, g.name, c.pid, c.epoch,
                                                     p.topic, p.partition, pos, member=member,
                                                     generation=self.m.generation, version=5 if self.tv >= 2 else 3))
            self._store_offset(tp, pos)
        if end:
            self.end(commit, read)
        return read

    def _store_offset(self, tp, pos: int) -> None:
        """GroupMetadataManager.storeOffsets of a TxnOffsetCommit: a transactional batch of the
        producer (base sequence 0: a coordinator's append, its sequences not checked)."""
        c = self.c
        rec = {"key": ke.encode_offset_commit_key(self.g.name, tp[0], tp[1]),
               "value": ke.encode_offset_commit_value(pos, commit_timestamp=self.g.sim.clock), "timestamp_delta": 0}
        off = self.offsets._store(ke.encode_record_batch_v2(0, [rec], producer_id=c.pid, producer_epoch=c.epoch,
                                                            base_sequence=0, is_transactional=True,
                                                            base_timestamp=self.g.sim.tick()))
        self.offsets._update(c.pid, c.epoch, 0, 1, off, True)

    def end(self, commit: bool, read: dict) -> None:
        self.c.end(commit)
        for tp, (_, pos) in read.items():
            if commit:
                self.g.committed[tp] = pos
            else:   # abort: seek back to the committed offsets (OffsetFetch)
                self.m.position.pop(tp, None)
                self.m.start(tp)


def eos(sim: Sim, i: int, ep: dict) -> None:
    parts = inputs(sim, ep)
    if ep["fault"] == "eos_double":   # one input partition, the one with the most records
        parts = sorted(parts, key=lambda p: (-(p.next_offset - p.log_start), p.partition))[:1]
    if not parts:
        return
    g = Group(sim, i, ep["protocol"], parts)
    out = sim.partition(f"o{i}", 0)
    apps = [App(g, k, ep, out) for k in range(2 if ep["fault"] == "eos_double" else 1)]
    g.rebalance(joining=[a.m for a in apps])
    if ep["fault"] == "eos_double":
        _eos_double(sim, g, apps, out)
        apps = apps[1:]
    for j in range(MAX_ROUNDS):
        read = apps[0].step(end=False)
        if not read:
            break
        apps[0].end(j != ep["at"], read)
        sim.wait(50)
    for a in apps:   # the application stops: its offsets are in its transactions, no OffsetCommit
        a.c.reconnect()
        g.leave(a.m, commit=False)
    g.expect()


def _eos_double(sim: Sim, g: Group, apps: list, out) -> None:
    """Instance A reads, produces and commits its inputs' offsets in a transaction, then stalls
    before EndTxn; the group gives its partition to B, which reads the same inputs from the
    committed offset and commits them in its own transaction; A wakes and commits too."""
    a, b = apps
    first = a.step(end=False)
    if not first:
        return
    sim.wait(SESSION_MS + 500)
    g.drop(a.m)
    g.rebalance()
    second = b.step()
    a.end(True, first)
    a.m.heartbeat(error=FENCED_MEMBER_EPOCH if g.protocol == "848" else UNKNOWN_MEMBER_ID)
    for tp, (offs, _) in first.items():
        again = set(offs) & set(second.get(tp, ((), 0))[0])
        if again:
            sim.expect("eos-double-commit", g.parts[tp], min(again), max(again), feeds=("pcap", "audit"),
                       note=f"group {g.name}: inputs committed by {a.c.txn_id} and {b.c.txn_id}")
            sim.expect("eos-duplicate-output", out, feeds=("pcap", "audit", "segments"),
                       note="the outputs of the same inputs, committed twice")
