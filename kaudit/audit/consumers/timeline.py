"""Consumer timelines from the wire: per group, member and partition, what was served, fetched
back, committed, and when and why ownership changed.

Inputs are the rows of one capture: `group_event` (protocol/wire/group_events.py), the consumers'
`fetch_partition` rows (replica id -1) with the `batch` rows of their responses, and the
transaction outcomes (`txn_event` END_TXN and WRITE_MARKERS). A consumer's Fetch connections are
not its coordinator connection: a Fetch is tied to a member by its client (host address and
client id) and the member's assignment at that time; a client id that several live members share
ties no Fetch (the served ranges stay the connection's own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from kaudit.audit.capture_holes import server_of
from kaudit.audit.consumers.serve_table import Serve, ServeTable, host  # noqa: F401  (Serve, host: read from here too)
from kaudit.audit.txn.txn_parts import marker_may_end


OK = 0
OFFSET_OUT_OF_RANGE = 1
# Heartbeat/ConsumerGroupHeartbeat answers that say the coordinator no longer knows the member
# as it thinks it is: it was removed (session or rebalance timeout) or fenced
FENCING = {25: "UNKNOWN_MEMBER_ID", 22: "ILLEGAL_GENERATION", 82: "FENCED_INSTANCE_ID",
           110: "FENCED_MEMBER_EPOCH", 111: "UNRELEASED_INSTANCE_ID"}
REBALANCE_IN_PROGRESS = 27
CONSUMER_OFFSETS = "__consumer_offsets"
# the fetched batch columns the rules read (rows given without one have it null)
BATCH_FIELDS = (("source", "string"), ("connection", "string"), ("position", "int64"), ("topic", "string"),
                ("partition", "int32"), ("base_offset", "int64"), ("last_offset", "int64"),
                ("producer_id", "int64"), ("producer_epoch", "int16"), ("is_transactional", "bool_"),
                ("is_control", "bool_"), ("control_type", "string"))


@dataclass
class Member:
    group: str
    member_id: str
    client: tuple | None = None         # (host, client id) of its coordinator connection
    client_id: str | None = None
    connection: str | None = None
    generation: int | None = None
    protocol: str | None = None         # "classic" (JoinGroup) or "consumer" (KIP-848 ConsumerGroupHeartbeat)
    first_ts: float | None = None
    left_ts: float | None = None
    cause: str | None = None            # why it left (LeaveGroup, fenced, ...)
    events: list = field(default_factory=list)        # (ts, text)
    assignments: list = field(default_factory=list)   # (ts, generation, frozenset of tps)
    commits: list = field(default_factory=list)       # Commit
    leaves: list = field(default_factory=list)        # (ts, cause) of each exit

    @property
    def label(self) -> str:
        return f"{self.member_id} (client {self.client_id}, {self.connection})"


@dataclass
class Commit:
    ts: float
    position: int
    source: str
    group: str
    member_id: str | None
    tp: tuple
    offset: int
    generation: int | None
    txn: tuple | None = None          # (transactional id, producer id, producer epoch)
    outcome: str | None = None        # COMMIT | ABORT | None (unknown) for TxnOffsetCommit
    outcome_ts: float | None = None
    client: tuple | None = None

    @property
    def effective(self) -> bool:
        """Whether the group's position became this offset."""
        return self.txn is None or self.outcome == "COMMIT"


@dataclass
class Stint:
    """A member's ownership of one partition: from its assignment to its revocation or exit."""
    member: Member
    tp: tuple
    start: float
    end: float | None = None
    cause: str | None = None
    serves: list = field(default_factory=list)


class Timelines:
    def __init__(self, group_rows: list[dict], serves: list[Serve], txn_rows: list[dict],
                 topic_names: dict | None = None):
        self.names = topic_names or {}
        self.members: dict[tuple, Member] = {}
        self.commits: list[Commit] = []
        self.positions: list[dict] = []   # OFFSET_FETCH and LIST_OFFSETS answers
        self.lookups: list[tuple] = []    # (client, tp, ts) of every look-up

        # the served ranges as columns (serve_table.py): a Serve object is made when a rule reads it
        self.table = serves if isinstance(serves, ServeTable) else ServeTable.of_serves(serves)
        self.table.rename(self._tp)
        self.stints: dict[tuple, list[Stint]] = {}   # (group, tp) -> stints in time order
        self._outcomes = _outcomes(txn_rows)
        self.batch_table = None          # the fetched transactional and control batches (set by the fold)
        self._batches: list[dict] | None = None
        self.attributed: list[Serve] = []   # the serves tied to a member, in time order
        self.holes = None   # where the captures lost bytes (audit.capture_holes), set by the fold
        self.group_clients: set[tuple] = set()   # clients with a request to their group coordinator seen
        self.seekers: set[tuple] = set()   # clients that asked FindCoordinator for a group: members
        self.brokers: set[str] = set()     # the node ids its Metadata answers list and its replicas fetch as
        self.lookup_conns: set[str] = set()   # connections of FindCoordinator and Metadata exchanges
        self.unnamed: set[str] = set()     # topic ids Fetch requests name that no input names
        self.client_conns: dict[tuple, set] = {}   # client -> its group and look-up connections
        for r in sorted(group_rows, key=lambda r: (r["ts"] or 0, r["position"] or 0)):
            self._event(r)
        self._build_stints()
        self._attribute()

    def conns_of(self, clients) -> set[str]:
        """The connections whose lost bytes may hold a request of `clients` ((host, client id)):
        their group and look-up connections, and any connection from their hosts that lost bytes
        (a Fetch lost whole on a connection whose other requests are Metadata names no client)."""
        conns = set().union(*(self.client_conns.get(c, ()) for c in clients))
        if self.holes:
            conns |= self.holes.from_hosts(c[0] for c in clients if c)
        return conns

    @property
    def serves(self) -> list[Serve]:
        """Every served partition in time order (all made into objects: the reports read them)."""
        return self.table.all()

    @property
    def batches(self) -> list[dict]:
        """The fetched transactional and control batches as rows."""
        if self._batches is None:
            self._batches = [] if self.batch_table is None else self.batch_table.to_pylist()
        return self._batches

    @batches.setter
    def batches(self, rows) -> None:
        if rows is self._batches:
            return
        import pyarrow as pa

        self._batches = None
        schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in BATCH_FIELDS])
        self.batch_table = rows if isinstance(rows, pa.Table) or rows is None else (
            pa.Table.from_pylist(list(rows), schema=schema) if rows else None)

    @cached_property
    def by_client_tp(self) -> dict[tuple, list[Serve]]:
        return {k: self.table.objs(rows) for k, rows in self.table.rows_by("client", "tp").items()}

    @cached_property
    def by_tp(self) -> dict[tuple, list[Serve]]:
        return {k[0]: self.table.objs(rows) for k, rows in self.table.rows_by("tp").items()}

    def tp_serves(self, tp) -> list[Serve]:
        """tp's responses in time order."""
        rows = self.table.rows_by("tp").get((tp,))
        return [] if rows is None else self.table.objs(rows)

    def client_serves(self, client, tp, after: float = float("-inf"), until: float = float("inf"),
                      open_start: bool = False) -> list[Serve]:
        """The client's responses for tp with after <= ts <= until (after < ts with open_start)."""
        rows = self.table.rows_by("client", "tp").get((client, tp))
        if rows is None:
            return []
        times = self.table.ts[rows]
        lo = np.searchsorted(times, after, side="right" if open_start else "left")
        return self.table.objs(rows[lo:np.searchsorted(times, until, side="right")])

    def note_finders(self, frames) -> None:
        """The clients of a table of FindCoordinator requests for a group (`seekers`)."""
        if frames is None or frames.num_rows == 0:
            return
        for conn, cid in zip(frames.column("connection").to_pylist(), frames.column("client_id").to_pylist()):
            self.seekers.add((host(conn), cid))
            self.lookup_conns.add(conn)

    def note_brokers(self, answers) -> None:
        """The brokers a table of Metadata answers lists (topic_name rows' `brokers`)."""
        if answers is None or answers.num_rows == 0 or "brokers" not in answers.schema.names:
            return
        for conn, listed in zip(answers.column("connection").to_pylist(), answers.column("brokers").to_pylist()):
            if listed:
                self.brokers.update(b.split("@", 1)[0] for b in listed.split(","))
                self.lookup_conns.add(conn)

    def note_replicas(self, ids) -> None:
        """Brokers whose replicas' Fetches the capture holds (fold.replica_brokers)."""
        self.brokers.update(str(i) for i in ids)

    @cached_property
    def brokers_reached(self) -> int:
        """How many broker addresses the clients' connections the capture holds reach (Fetch,
        group, offset, FindCoordinator and Metadata exchanges): a broker only replicas or the
        transaction coordinator's markers reach counts as not reached."""
        conns = set(getattr(self.table, "conns", ())) | self.lookup_conns | set().union(*self.client_conns.values())
        return len({server_of(c) for c in conns} - {None})

    def note_unnamed(self, fetch) -> None:
        """The topic ids of a fetch_partition table (Fetch v13+) that no Metadata answer in the
        inputs named (`unnamed`): a look-up by name may be of the same partition."""
        if fetch is None or "topic_id" not in fetch.schema.names or "topic" not in fetch.schema.names:
            return
        import pyarrow.compute as pc

        tid = fetch.column("topic_id").cast("string")
        topic = fetch.column("topic")
        # the engines label a topic id they cannot name with the id itself (sources.topics)
        same = pc.or_(pc.is_null(topic), pc.fill_null(pc.equal(topic.cast("string"), tid), False))
        ids = pc.filter(tid, pc.and_(same, pc.is_valid(tid)))
        self.unnamed = {str(i) for i in pc.unique(ids).to_pylist()} - set(self.names)

    def maybe_same(self, tp) -> list[tuple]:
        """The partitions a look-up may have named for `tp`: itself; for a topic id no input
        names, the same partition of every topic looked up by name (a Metadata answer lost, or
        the id of a topic re-created since the log dirs named it)."""
        if tp[0] not in self.unnamed:
            return [tp]
        return [tp] + sorted({t for _, t, _ in self.lookups if t[1] == tp[1] and t != tp}, key=str)

    def coordinator_unseen(self, client) -> str | None:
        """Why `client`'s group coordinator may have moved it unseen, or None: it is a group member
        (it asked FindCoordinator for a group), or a client with no group request in a capture
        whose clients reach fewer brokers than it names - its Metadata answers list, its
        replicas fetch as (a capture of some brokers only) - and the capture holds none of its
        requests to its group coordinator."""
        if client in self.group_clients:
            return None
        if client in self.seekers:
            return ("the capture holds none of this client's requests to its group coordinator (a capture "
                    "of some brokers only?)")
        if len(self.brokers) > self.brokers_reached:
            return (f"the capture holds no group request of this client, and its clients reach {self.brokers_reached} "
                    f"of the {len(self.brokers)} brokers it names (Metadata answers, replicas' Fetches), so a "
                    "group member's coordinator may be outside it")
        return None

    # ---- membership --------------------------------------------------------------------------
    def _member(self, r: dict) -> Member | None:
        if not r.get("group_id") or not r.get("member_id"):
            return None
        key = (r["group_id"], r["member_id"])
        m = self.members.get(key)
        if m is None:
            m = self.members[key] = Member(r["group_id"], r["member_id"], first_ts=r["ts"])
        if r["event"] != "TXN_OFFSET_COMMIT" and m.client is None:
            m.client = (host(r["connection"]), r.get("client_id"))
            m.client_id, m.connection = r.get("client_id"), r["connection"]
        return m

    def _tp(self, topic, partition) -> tuple:
        return (self.names.get(topic, topic), partition)

    def _event(self, r: dict) -> None:
        ev, err, ts = r["event"], r.get("error_code"), r.get("response_ts") or r["ts"]
        client = (host(r["connection"]), r.get("client_id"))
        if ev != "TXN_OFFSET_COMMIT":   # a producer's
            self.client_conns.setdefault(client, set()).add(r["connection"])
        if ev not in ("TXN_OFFSET_COMMIT", "LIST_OFFSETS"):   # a leader's look-up
            self.group_clients.add(client)
        if ev in ("OFFSET_FETCH", "LIST_OFFSETS"):
            # any look-up, answered or not, may precede a seek: a position change is allowed there
            self.lookups.append(((host(r["connection"]), r.get("client_id")),
                                 self._tp(r.get("topic") or r.get("topic_id"), r["partition"]), r["ts"]))
            if err in (None, OK) and r.get("offset") is not None and r["offset"] >= 0:
                self.positions.append(dict(r, tp=self._tp(r.get("topic") or r.get("topic_id"), r["partition"]),
                                           client=(host(r["connection"]), r.get("client_id"))))
            return
        m = self._member(r)
        if ev in ("OFFSET_COMMIT", "TXN_OFFSET_COMMIT"):
            return self._commit(r, m)
        if m is None:
            return
        gen = r.get("generation")
        if ev in ("JOIN", "CG_HEARTBEAT", "CG_LEAVE"):
            m.protocol = "classic" if ev == "JOIN" else "consumer"
        if ev == "JOIN" and err == OK:
            m.generation = gen
            m.events.append((ts, f"joined, generation {gen}"))
        elif ev == "SYNC" and err == OK and r.get("partitions") is not None:
            self._assign(m, ts, gen, r["partitions"])
        elif ev == "CG_HEARTBEAT" and err == OK:
            if m.generation != gen:
                m.events.append((ts, f"member epoch {gen}"))
            m.generation = gen
            if r.get("partitions") is not None:
                self._assign(m, ts, gen, r["partitions"])
        elif ev in ("HEARTBEAT", "CG_HEARTBEAT", "SYNC", "JOIN") and err in FENCING:
            self._leave(m, r["ts"], f"fenced: the coordinator answered {FENCING[err]} (the member was removed: "
                                    "session or rebalance timeout, or a newer member took its place)")
        elif ev == "HEARTBEAT" and err == REBALANCE_IN_PROGRESS:
            text = "rebalance announced (heartbeat REBALANCE_IN_PROGRESS)"
            if not m.events or m.events[-1][1] != text:   # one per rebalance, not per heartbeat
                m.events.append((ts, text))
        elif ev in ("HEARTBEAT", "CG_HEARTBEAT", "JOIN", "SYNC") and err not in (None, OK, 79):
            text = f"{ev.lower().replace('_', ' ')} answered {error_label(err)}"
            if not m.events or m.events[-1][1] != text:   # 79: MEMBER_ID_REQUIRED, the first join's step
                m.events.append((ts, text))
        elif ev in ("LEAVE", "CG_LEAVE"):
            why = f"LeaveGroup{' (' + r['reason'] + ')' if r.get('reason') else ''}" if ev == "LEAVE" \
                else "left (ConsumerGroupHeartbeat, member epoch -1)"
            self._leave(m, r["ts"], why)

    def _assign(self, m: Member, ts, gen, parts: str) -> None:
        tps = frozenset(self._tp(*_split_tp(s)) for s in parts.split(",") if s and _split_tp(s)[0])
        m.assignments.append((ts, gen, tps))
        m.events.append((ts, f"assigned {', '.join(f'{t}-{p}' for t, p in sorted(tps)) or 'nothing'}"
                             f" (generation {gen})"))

    def _leave(self, m: Member, ts, cause: str) -> None:
        """Each exit closes the member's stints; a KIP-848 member fenced rejoins with its id."""
        if m.left_ts is not None and not any(a[0] > m.left_ts for a in m.assignments):
            return   # already out: its later errors say the same
        m.left_ts, m.cause = ts, cause
        m.leaves.append((ts, cause))
        m.events.append((ts, cause))

    def _commit(self, r: dict, m: Member | None) -> None:
        if r.get("error_code") not in (OK, None) or r.get("offset") is None or r["partition"] is None:
            return
        txn = None
        outcome = outcome_ts = None
        if r["event"] == "TXN_OFFSET_COMMIT":
            txn = (r.get("transactional_id"), r.get("producer_id"), r.get("producer_epoch"))
            outcome, outcome_ts = self._outcome(r)
        c = Commit(r["ts"], r["position"], r["source"], r["group_id"], r.get("member_id"),
                   self._tp(r.get("topic") or r.get("topic_id"), r["partition"]), r["offset"],
                   r.get("generation"), txn, outcome, outcome_ts, (host(r["connection"]), r.get("client_id")))
        self.commits.append(c)
        if m is not None:
            m.commits.append(c)

    def _outcome(self, r: dict):
        """The transaction's end: the first successful EndTxn of its producer id and epoch after the
        commit, or the first WriteTxnMarkers of that producer to __consumer_offsets after it at
        its epoch or the one above (version 2 and a fencing abort bump it; a marker further on
        ends a later transaction)."""
        best = None
        e = r.get("producer_epoch") or 0
        for ts, pid, epoch, result, offsets_marker in self._outcomes.get(r.get("producer_id"), ()):
            if ts < r["ts"]:
                continue
            if (offsets_marker and marker_may_end(epoch, e)) or epoch == r.get("producer_epoch"):
                best = (result, ts)
                break
        return best or (None, None)

    # ---- ownership ---------------------------------------------------------------------------
    def _build_stints(self) -> None:
        for m in self.members.values():
            open_: dict[tuple, Stint] = {}
            steps = [(ts, 0, tps, None) for ts, _, tps in m.assignments] + [(ts, 1, None, c) for ts, c in m.leaves]
            for ts, _, tps, cause in sorted(steps, key=lambda e: (e[0], e[1])):
                for tp in list(open_):
                    if tps is None or tp not in tps:
                        s = open_.pop(tp)
                        s.end, s.cause = ts, cause or "revoked by a rebalance"
                for tp in tps or ():
                    if tp not in open_:
                        open_[tp] = Stint(m, tp, ts)
                        self.stints.setdefault((m.group, tp), []).append(open_[tp])
        for key, stints in self.stints.items():
            stints.sort(key=lambda s: s.start)
            for a, b in zip(stints, stints[1:]):
                if a.end is None or a.end > b.start:
                    a.end = b.start
                    a.cause = a.cause or ("no LeaveGroup seen: the partition went to another member (session "
                                          "timeout, lost process, or a rebalance the capture does not show)")

    def _attribute(self) -> None:
        """Each Fetch to the member of its client that owned the partition then."""
        by_client: dict[tuple, list[Member]] = {}
        for m in self.members.values():
            if m.client is not None:
                by_client.setdefault(m.client, []).append(m)
        if not by_client:
            return
        t = self.table
        mine = np.isin(t.client, [i for i, c in enumerate(t.clients) if c in by_client])
        for s in t.objs(np.flatnonzero(mine)):
            for m in by_client[s.client]:
                st = self.stint_of(m, s.tp, s.ts)
                if st is not None:
                    s.member = m
                    st.serves.append(s)
                    self.attributed.append(s)
                    break

    def stint_of(self, m: Member, tp: tuple, ts: float) -> Stint | None:
        for st in self.stints.get((m.group, tp), ()):
            if st.member is m and st.start <= ts and (st.end is None or ts <= st.end + 1e-6):
                return st
        return None

    def groups(self) -> dict[str, list[Member]]:
        out: dict[str, list[Member]] = {}
        for m in self.members.values():
            out.setdefault(m.group, []).append(m)
        for c in self.commits:
            out.setdefault(c.group, [])
        return out


def _split_tp(s: str) -> tuple:
    t, _, p = s.rpartition("-")
    return (t, int(p)) if t and p.lstrip("-").isdigit() else (None, None)


def _outcomes(rows: list[dict]) -> dict:
    out: dict[int, list] = {}
    for r in rows:
        if r.get("producer_id") is None:
            continue
        ok = r.get("error_codes") in ("", "0", None) or set((r.get("error_codes") or "0").split(",")) <= {"0"}
        if r["event"] == "END_TXN" and ok and r.get("error_codes") is not None:
            out.setdefault(r["producer_id"], []).append(
                (r["ts"], r["producer_id"], r.get("producer_epoch"), r.get("result"), False))
        elif r["event"] == "WRITE_MARKERS" and CONSUMER_OFFSETS in (r.get("partitions") or ""):
            out.setdefault(r["producer_id"], []).append(
                (r["ts"], r["producer_id"], r.get("producer_epoch") or 0, r.get("result"), True))
    for v in out.values():
        v.sort(key=lambda e: e[0])
    return out


def error_label(code) -> str:
    # imported on first use: the wire protocol's package is ~0.05 s of every audit's start-up,
    # a log-dir audit's included, and only a consumer group's errors need the names
    from kaudit.protocol.wire.summary import error_name

    return error_name(int(code)) if code is not None else "?"
