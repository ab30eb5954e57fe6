"""The simulator's consumers: a partition leader answering consumer Fetches (read_uncommitted up
to the high watermark, read_committed up to the last stable offset with the aborted transactions
listed, as Kafka's `Partition.fetchRecords` / `collectAbortedTransactions` do), a group coordinator
(classic eager and cooperative rebalances, KIP-848 ConsumerGroupHeartbeat reconciliation, committed
offsets), and consumer processes (members) with their positions.

The oracle's bookkeeping is here too: the records each member was delivered (what its
application processed) per ownership of a partition, so that a partition's next owner served the
previous owner's records past the group's commit is an expected redelivery, with its range."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tests.sim import wire_group as wg
from tests.sim.rack_reads import caught_up, follower_hw
from tests.sim.wire import node_ip

UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
FENCED_MEMBER_EPOCH = 110
OFFSET_OUT_OF_RANGE = 1


@dataclass(frozen=True)
class Stored:
    base: int
    last: int
    pid: int
    txn: bool
    control: str | None     # COMMIT | ABORT for a marker
    data: bytes
    offsets: tuple | None = None    # the records' offsets where a cleaner removed some (None: all)
    is_control: bool = False        # a control batch (an emptied one has no COMMIT/ABORT left)

    def records(self, offset: int) -> list:
        """The offsets of the records it delivers to a consumer at `offset`."""
        if self.offsets is None:
            return list(range(max(self.base, offset), self.last + 1))
        return [o for o in self.offsets if o >= offset]


def stored(part) -> list[Stored]:
    return log_view(part)[0]


def log_view(part) -> tuple[list, list, dict]:
    """(the batches a Fetch serves, [(pid, first, marker offset)] of the aborted transactions,
    {pid: first offset} of the open ones); a compacted partition's from its leader's cleaned
    segments (compacted_fetch.py)."""
    if getattr(part, "cleaned", False):
        from tests.sim.compacted_fetch import view

        return view(part, Stored)
    batches = _as_written(part)
    ended, open_ = txn_ranges(batches)
    return batches, [(pid, first, m) for pid, first, m, kind in ended if kind == "ABORT"], open_


def _as_written(part) -> list[Stored]:
    out = []
    for data in part.log:
        base = struct.unpack(">q", data[:8])[0]
        last = base + struct.unpack(">i", data[23:27])[0]
        attrs = struct.unpack(">h", data[21:23])[0]
        if base >= part.log_start:
            out.append(Stored(base, last, struct.unpack(">q", data[43:51])[0], bool(attrs & 0x10),
                              part.markers.get(base) if attrs & 0x20 else None, data))
    return out


def txn_ranges(batches: list[Stored]) -> tuple[list, dict]:
    """([(pid, first offset, marker offset, COMMIT|ABORT)] of the ended transactions, {pid: first
    offset} of the open ones), from the log (ProducerStateManager's view)."""
    ended, open_ = [], {}
    for b in batches:
        if b.control:
            if b.pid in open_:
                ended.append((b.pid, open_.pop(b.pid), b.base, b.control))
        elif b.txn and b.pid not in open_:
            open_[b.pid] = b.base
    return ended, open_


@dataclass
class Served:
    """One Fetch response's answer: what the client's position became and what it delivered."""
    batches: list
    position: int
    delivered: list           # data record offsets the application gets
    aborted_read: list        # [(pid, marker offset, first, last)] of read_uncommitted reads of aborted data


def serve(part, offset: int, isolation: str, max_batches: int, *, hw: int | None = None) -> tuple[Served, dict]:
    """The leader's answer to a consumer Fetch at `offset` (and the response's fields); with `hw`,
    a follower's that knows that high watermark (KIP-392): it serves below it, its stable offset
    counts a transaction whose marker is not below it as open (ProducerStateManager's unreplicated
    transactions), and an offset past it but within the log is answered with nothing, no error."""
    batches, aborts, open_ = log_view(part)
    if hw is None:
        hw = part.next_offset
    else:
        batches = [b for b in batches if b.base < hw]
        ended, open_ = txn_ranges(batches)
        aborts = [(pid, first, m) for pid, first, m, kind in ended if kind == "ABORT"]
    lso = min(open_.values(), default=hw)
    upper = lso if isolation == "read_committed" else hw
    if hw < offset <= part.next_offset:
        return Served([], offset, [], []), dict(hw=hw, lso=lso, log_start=part.log_start, error=0, aborted=())
    if offset < part.log_start or offset > hw:
        # ReplicaManager.createLogReadResult(e): the error's watermarks and log start are -1
        return Served([], offset, [], []), dict(hw=-1, lso=-1, log_start=-1, error=OFFSET_OUT_OF_RANGE, aborted=())
    out = [b for b in batches if b.last >= offset and b.base < upper][:max_batches]
    end = out[-1].last + 1 if out else offset
    listed = [(pid, first) for pid, first, m in aborts if m >= offset and first < end] \
        if isolation == "read_committed" else []
    delivered, aread = [], []
    for b in out:
        if b.control or b.is_control:
            continue
        ab = next(((pid, m) for pid, first, m in aborts if pid == b.pid and b.txn and first <= b.base < m), None)
        if ab is not None and isolation == "read_committed":
            continue
        got = b.records(offset)
        if ab is not None and got:
            aread.append((b.pid, ab[1], got[0], got[-1]))
        delivered.extend(got)
    return Served(out, end, delivered, aread), dict(hw=hw, lso=lso, log_start=part.log_start, error=0,
                                                   aborted=tuple(listed))


@dataclass(eq=False)
class Member:
    """One consumer process (and its group membership)."""
    group: "Group"
    k: int
    isolation: str
    client_id: str = ""
    host: str = ""
    member_id: str = ""
    generation: int = 0
    owned: set = field(default_factory=set)
    position: dict = field(default_factory=dict)
    alive: bool = True
    reset: str = "earliest"          # auto.offset.reset
    max_batches: int = 1
    # node -> (fetch session id, next epoch, {tp: offset last sent}, {tp: (high watermark, log start) last
    # answered}); None: Fetch v5
    sessions: dict | None = None
    seek: int = 0                    # start_beyond: the application seeks this many batches past the commit
    delivered: dict = field(default_factory=dict)   # tp -> offsets delivered in this ownership
    greeted: set = field(default_factory=set)       # the brokers it has sent a Metadata request
    instance: str | None = None      # group.instance.id (KIP-345 static membership)
    rack: bool = False               # client.rack: its leaders send it to a replica in its rack (KIP-392)
    reader: dict = field(default_factory=dict)      # tp -> the follower it fetches from (KIP-392)
    incarnation: int = 0             # its process: a restarted one (same host and client id) on new connections

    def __post_init__(self):
        self.client_id = f"consumer-{self.group.name}-{self.k}"
        self.host = f"10.0.2.{self.k + 1 + 10 * (self.group.index % 20)}"
        self.member_id = f"{self.client_id}-{self.group.index}{self.k:02d}"

    # -- the wire ----------------------------------------------------------------------------
    def exchange(self, node: int, msgs, conn: str) -> None:
        sim = self.group.sim
        name = self._conn(conn)
        sim.cap.exchange(name, msgs[:1], sim.tick(), client_ip=self.host, server_ip=node_ip(node))
        if msgs[1:]:
            sim.cap.exchange(name, msgs[1:], sim.tick(), client_ip=self.host, server_ip=node_ip(node))

    def _conn(self, conn: str) -> str:
        return f"{self.client_id}@{self.host}{f'#{self.incarnation}' if self.incarnation else ''}->{conn}"

    def hello(self, node: int) -> None:
        """A Metadata exchange on the member's first request to `node` (not its coordinator
        connection): the client's bootstrap, then its refreshes (metadata.max.age.ms) go to the
        brokers it is connected to. The answer lists every broker and names each topic's id."""
        if node in self.greeted:
            return
        self.greeted.add(node)
        nodes, parts = list(self.group.sim.nodes), {}
        for p in self.group.parts.values():
            parts.setdefault(p.topic, {})[p.partition] = p.leader
        self.exchange(node, wg.metadata(self.corr(f"n{node}"), self.client_id, parts, nodes), f"n{node}")

    def corr(self, conn: str) -> int:
        return self.group.sim.cap.next_corr(self._conn(conn))

    def coord(self, build) -> None:
        """One exchange with the group coordinator: build(corr) -> msgs."""
        self.exchange(self.group.node, build(self.corr("coord")), "coord")

    def leader(self, part, build) -> None:
        self.hello(part.leader)
        self.exchange(part.leader, build(self.corr(f"n{part.leader}")), f"n{part.leader}")

    # -- positions ---------------------------------------------------------------------------
    def start(self, tp) -> None:
        """A partition assigned: its committed offset (OffsetFetch), or auto.offset.reset."""
        g, part = self.group, self.group.parts[tp]
        committed = g.committed.get(tp, -1)
        self.coord(lambda c: wg.offset_fetch(c, self.client_id, g.name, part.topic, part.partition, committed))
        self.delivered[tp] = []
        if committed >= 0:
            self.position[tp] = committed
            if self.seek:
                self._seek(tp, committed)
            return
        self.position[tp] = self.look_up(tp, -1 if self.reset == "latest" else -2)
        if self.reset == "latest" and self.position[tp] > part.log_start:
            g.sim.expect("reset-new-group", part, part.log_start, self.position[tp] - 1, feeds=("pcap", "audit"),
                         note=f"group {g.name} had no committed offset: auto.offset.reset=latest")

    def _seek(self, tp, committed: int) -> None:
        """The application seeks past the committed offset (a custom offset store): its first
        Fetch starts `seek` data batches further (nothing on the wire says so)."""
        part = self.group.parts[tp]
        ahead = [b.base for b in stored(part) if not b.control and b.base > committed][:self.seek]
        if ahead:
            self.position[tp] = ahead[-1]
            self.group.sim.expect("start-beyond-commit", part, committed, ahead[-1] - 1, feeds=("pcap", "audit"),
                                  note=f"group {self.group.name} member {self.k} sought past the commit")
        self.seek = 0

    def look_up(self, tp, timestamp: int) -> int:
        part = self.group.parts[tp]
        _, f = serve(part, part.next_offset, self.isolation, 0)
        off = part.log_start if timestamp == -2 else (f["lso"] if self.isolation == "read_committed" else f["hw"])
        self.leader(part, lambda c: wg.list_offsets(c, self.client_id, part.topic, part.partition, timestamp, off,
                                                    self.isolation))
        return off

    def poll(self, tps=None) -> dict:
        """One Fetch per leader of the owned partitions (or `tps`), as a consumer sends them:
        {tp: Served} of the partitions the responses answered."""
        tps = sorted(self.owned if tps is None else tps)
        by_node: dict = {}
        for tp in tps:
            part = self.group.parts[tp]
            if self.reader.get(tp) is not None and self.reader[tp] not in caught_up(part):
                del self.reader[tp]   # the follower fell behind or is gone: back to the leader
            by_node.setdefault(self.reader.get(tp, part.leader), []).append(tp)
        out = {}
        for node, group in sorted(by_node.items()):
            out.update(self._fetch(node, group))
        return out

    def _fetch(self, node: int, tps: list) -> dict:
        g = self.group
        # a follower (KIP-392) knows the high watermark of a fetch ago (rack_reads.follower_hw)
        hw = {tp: follower_hw(g.parts[tp]) for tp in tps if node != g.parts[tp].leader}
        answers = {tp: serve(g.parts[tp], self.position[tp], self.isolation, self.max_batches, hw=hw.get(tp))
                   for tp in tps}
        asked, answered, session, answer_session = list(tps), list(tps), (0, -1), 0
        # KIP-848 era clients fetch by topic id (Fetch v13+, named by the members' Metadata): 4.1's
        # v18, whose replica id is in the tagged ReplicaState (KIP-903), absent for a consumer
        version = 18 if g.protocol == "848" else (12 if self.sessions is not None else 5)
        # KIP-392: a leader that prefers a caught-up follower in the client's rack answers the
        # partition with no records and that replica's id; the client fetches from it from then on
        preferred = {tp: caught_up(g.parts[tp])[0] for tp in tps if self.rack and version >= 11
                     and node == g.parts[tp].leader and tp not in self.reader and caught_up(g.parts[tp])}
        for tp in preferred:
            answers[tp] = serve(g.parts[tp], self.position[tp], self.isolation, 0)
        if self.sessions is not None:   # KIP-227: only what changed goes in either direction
            sid, epoch, sent, cached = self.sessions.get(node, (0, 0, {}, {}))
            if set(sent) - set(tps):    # a partition given up: a new full session
                sid, epoch, sent, cached = 0, 0, {}, {}
            full = epoch == 0
            asked = [tp for tp in tps if full or sent.get(tp) != self.position[tp]]
            # FetchSession's CachedPartition.maybeUpdateResponseData: records, an error, or a high watermark
            # or log start other than the session last answered (an error answer leaves -1 cached: the
            # partition is answered again once the error is gone; a partition new to the session too)
            answered = [tp for tp in tps if full or answers[tp][0].batches or answers[tp][1]["error"]
                        or cached.get(tp) != (answers[tp][1]["hw"], answers[tp][1]["log_start"])]
            cached = {**cached, **{tp: (-1 if answers[tp][1]["error"] else answers[tp][1]["hw"],
                                        answers[tp][1]["log_start"]) for tp in answered}}
            session, answer_session = (sid, epoch), (sid or 1000 + g.index * 10 + self.k)
            self.sessions[node] = (answer_session, epoch + 1, {**sent, **{tp: self.position[tp] for tp in asked}},
                                   cached)
        rows_q = [(tp[0], tp[1], self.position[tp]) for tp in asked]
        rows_a = []
        for tp in answered:
            s, f = answers[tp]
            rows_a.append((tp[0], tp[1], f["error"], f["hw"], f["lso"], f["log_start"], f["aborted"],
                           b"".join(b.data for b in s.batches)))
        self.hello(node)
        self.exchange(node, wg.fetch(self.corr(f"n{node}"), self.client_id, version, self.isolation, rows_q, rows_a,
                                     session=session, answer_session=answer_session,
                                     preferred={tp: n for tp, n in preferred.items() if tp in answered}), f"n{node}")
        self.reader.update({tp: n for tp, n in preferred.items() if tp in answered})
        out = {}
        for tp in answered:
            s, f = answers[tp]
            out[tp] = s
            if f["error"] == OFFSET_OUT_OF_RANGE:   # auto.offset.reset
                self.position[tp] = self.look_up(tp, -1 if self.reset == "latest" else -2)
                continue
            self.position[tp] = s.position
            self.delivered.setdefault(tp, []).extend(s.delivered)
            g.note_served(self, tp, s)
        return out

    def commit(self, tp, offset: int | None = None, *, error: int = 0) -> None:
        g, part = self.group, self.group.parts[tp]
        off = self.position[tp] if offset is None else offset
        self.coord(lambda c: wg.commit(c, self.client_id, g.name, self.member_id, self.generation, part.topic,
                                       part.partition, off, error=error))
        if not error:
            g.committed[tp] = off
            if g.offsets_log is not None:
                g.offsets_log.commit(tp, off)

    def commit_all(self) -> None:
        for tp in sorted(self.owned):
            if tp in self.position:
                self.commit(tp)

    def heartbeat(self, *, error: int = 0) -> None:
        g = self.group
        if g.protocol == "848":
            self.coord(lambda c: wg.cg_heartbeat(c, self.client_id, g.name, self.member_id, self.generation,
                                                 self.generation, None, topics=g.topics, error=error,
                                                 instance=self.instance))
        else:
            self.coord(lambda c: wg.heartbeat(c, self.client_id, g.name, self.member_id, self.generation, error=error,
                                              instance=self.instance))


class Group:
    """A consumer group and its coordinator: members, assignments, committed offsets."""

    def __init__(self, sim, index: int, protocol: str, parts: list, *, node: int | None = None):
        self.sim, self.index, self.protocol = sim, index, protocol
        self.name = f"g{index}"
        self.parts = {(p.topic, p.partition): p for p in parts}
        self.topics = sorted({p.topic for p in parts})
        self.node = sim.nodes[1 % len(sim.nodes)] if node is None else node
        self.members: list[Member] = []
        self.committed: dict = {}
        self.generation = 0
        self.owner: dict = {}           # tp -> the member owning it (the oracle's view)
        # tp -> {previous owner: offsets it was delivered past the commit when it gave tp up}: every
        # owner since, not only the last (one given tp back before it was served anything hides none)
        self.pending: dict = {}
        self.redelivered: dict = {}     # (tp, previous owner k, next owner k) -> offsets served again
        self.aborted_reads: dict = {}   # (member k, tp, pid, marker) -> [first, last]
        self.markers_served: set = set()   # (tp, offset) of the markers some Fetch returned
        self.offsets_log = None            # its coordinator's __consumer_offsets log (offsets_log.py)

    def member(self, k: int, isolation: str, **kw) -> Member:
        m = Member(self, k, isolation, **kw)
        self.members.append(m)
        return m

    def alive(self) -> list[Member]:
        return [m for m in self.members if m.alive]

    # -- the oracle's bookkeeping --------------------------------------------------------------
    def note_served(self, m: Member, tp, s: Served) -> None:
        # a member given tp back after it gave it up is in a new ownership (fenced, then rejoined):
        # what it was served before is served again to it too
        for prev, offs in self.pending.get(tp, {}).items():
            again = set(s.delivered) & offs
            if again:
                self.redelivered.setdefault((tp, prev.k, m.k), set()).update(again)
        self.markers_served.update((tp, b.base) for b in s.batches if b.control)
        for pid, marker, first, last in s.aborted_read:
            r = self.aborted_reads.setdefault((m.k, tp, pid, marker), [first, last])
            r[0], r[1] = min(r[0], first), max(r[1], last)

    def released(self, m: Member, tp) -> None:
        """`m` stops owning `tp`: what it was delivered past the group's commit may be served again."""
        c = self.committed.get(tp, -1)
        self.pending.setdefault(tp, {}).setdefault(m, set()).update(o for o in m.delivered.get(tp, ()) if o >= c)
        m.owned.discard(tp)
        m.position.pop(tp, None)
        m.reader.pop(tp, None)   # its preferred read replica goes with the partition's state
        if self.owner.get(tp) is m:
            del self.owner[tp]

    def expect(self) -> None:
        """The group's expectations, once it is done."""
        for (tp, a, b), offs in sorted(self.redelivered.items()):
            self.sim.expect("redelivered", self.parts[tp], min(offs), max(offs), feeds=("pcap", "audit"),
                            note=f"group {self.name}: member {a}'s records served again to member {b}")
        for (k, tp, pid, marker), (first, last) in sorted(self.aborted_reads.items()):
            if (tp, marker) not in self.markers_served:
                continue   # the abort is not in the capture: the read cannot be told aborted
            self.sim.expect("uncommitted-aborted-read", self.parts[tp], first, last, pid, feeds=("pcap", "audit"),
                            note=f"read_uncommitted member {k}: a transaction aborted at offset {marker}")

    # -- assignment ----------------------------------------------------------------------------
    def target(self) -> dict:
        """{member: set of tps}: sticky (a live owner keeps its partitions; the rest go to the least
        loaded; eager recomputes round-robin)."""
        live = self.alive()
        tps = sorted(self.parts)
        if self.protocol == "eager":
            return {m: {tp for j, tp in enumerate(tps) if live[j % len(live)] is m} for m in live}
        out = {m: {tp for tp in m.owned if tp in self.parts} for m in live}
        free = [tp for tp in tps if not any(tp in v for v in out.values())]
        quota = -(-len(tps) // len(live))
        for m in live:   # balance: the most loaded give up partitions above their share
            while len(out[m]) > quota:
                tp = max(out[m])
                out[m].discard(tp)
                free.append(tp)
        for tp in sorted(free):
            out[min(live, key=lambda m: (len(out[m]), m.k))].add(tp)
        return out

    def rebalance(self, *, joining=(), commit_first: bool = True) -> None:
        """Every live member ends up with the target assignment (the protocol's steps on the wire);
        `joining`: members that are new (their first join)."""
        if self.protocol == "848":
            return self._reconcile(joining, commit_first)
        self.generation += 1
        for m in self.alive():
            if m not in joining:
                m.heartbeat(error=REBALANCE_IN_PROGRESS)
        target = self.target()
        if self.protocol == "eager":
            for m in self.alive():
                if commit_first and m not in joining:
                    m.commit_all()        # onPartitionsRevoked: everything is given up first
                for tp in sorted(m.owned):
                    if tp not in target[m]:
                        self.released(m, tp)
            self._sync(target)
            return
        moving = {tp for m, tps in target.items() for tp in tps if self.owner.get(tp) not in (None, m)}
        if moving:   # cooperative: revoke in one generation, assign in the next
            first = {m: {tp for tp in tps if tp not in moving} for m, tps in target.items()}
            for m in self.alive():
                for tp in sorted(m.owned & moving):
                    if commit_first and tp in m.position:
                        m.commit(tp)
                    self.released(m, tp)
            self._sync(first)
            self.generation += 1
            for m in self.alive():
                m.heartbeat(error=REBALANCE_IN_PROGRESS)
        self._sync(target)

    def _sync(self, target: dict) -> None:
        leader = min(self.alive(), key=lambda m: m.k).member_id
        for m in self.alive():
            m.generation = self.generation
            m.coord(lambda c: wg.join(c, m.client_id, self.name, m.member_id, self.generation, leader,
                                      instance=m.instance))
        for m in self.alive():
            m.coord(lambda c: wg.sync(c, m.client_id, self.name, m.member_id, self.generation, sorted(target[m]),
                                      instance=m.instance))
            self.take(m, target[m])

    def take(self, m: Member, tps) -> None:
        for tp in sorted(tps - m.owned):
            m.owned.add(tp)
            self.owner[tp] = m
            m.start(tp)

    def _reconcile(self, joining, commit_first: bool) -> None:
        """KIP-848: the group epoch goes up; members giving partitions up are told first (their
        heartbeat's answer without them), then the others get them with the new epoch."""
        self.generation += 1
        target = self.target()
        for m in self.alive():
            lost = m.owned - target[m]
            if m in joining or not lost:
                continue
            for tp in sorted(lost):
                if commit_first and tp in m.position:
                    m.commit(tp)
                self.released(m, tp)
            keep = sorted(m.owned)
            m.coord(lambda c: wg.cg_heartbeat(c, m.client_id, self.name, m.member_id, m.generation, m.generation,
                                              keep, topics=self.topics, instance=m.instance))
        for m in self.alive():
            epoch = 0 if m in joining else m.generation
            m.generation = self.generation
            m.coord(lambda c: wg.cg_heartbeat(c, m.client_id, self.name, m.member_id, epoch, self.generation,
                                              sorted(target[m]), topics=self.topics, instance=m.instance))
            self.take(m, target[m])

    def leave(self, m: Member, *, commit: bool = True) -> None:
        """A member leaves (LeaveGroup / heartbeat epoch -1), after committing its positions."""
        if commit:
            m.commit_all()
        if self.protocol == "848":
            m.coord(lambda c: wg.cg_heartbeat(c, m.client_id, self.name, m.member_id, -1, -1, None,
                                              topics=self.topics, instance=m.instance))
        else:
            m.coord(lambda c: wg.leave(c, m.client_id, self.name, m.member_id))
        self.drop(m)

    def drop(self, m: Member) -> None:
        for tp in sorted(m.owned):
            self.released(m, tp)
        m.alive = False
