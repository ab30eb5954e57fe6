"""The simulated cluster: brokers' log dirs (fixtures/builder), partitions with leaders and
followers (broker.py), the transaction coordinator (coordinator.py), one capture of every
exchange (wire.py), a clock, and the oracle: the anomalies the history's faults put there.

Clients (`Client`) are producer instances: idempotent or transactional (transaction version 0/1:
AddPartitionsToTxn from the client; 2: the partition leader registers the partition, KIP-890),
each with its connections, producer id, epoch and per-partition sequences."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fixtures import kafka_encoder as ke
from fixtures.builder import LogDirBuilder
from tests.sim import wire
from tests.sim.broker import (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, NONE, PRODUCER_FENCED, SEQ_MOD,
                              Partition)
from tests.sim.coordinator import Coordinator

T0_MS = 1_795_234_917_000
CLUSTER_ID = "c2ltdWxhdGVkLWNsdXN0ZXI"


@dataclass(frozen=True)
class Expect:
    """One injected anomaly: the invariant it breaks (oracle.INVARIANTS), where, and the feeds
    whose evidence shows it (segments: the log dirs; pcap: the capture; audit: both)."""

    invariant: str
    topic: str
    partition: int
    first: int | None = None
    last: int | None = None
    producer_id: int | None = None
    feeds: tuple = ("segments", "pcap", "audit")
    note: str = ""


class Sim:
    def __init__(self, root, *, nodes=(1, 2, 3), broker: str = "3.0", start_ms: int = T0_MS, kraft: bool = False):
        self.root = Path(root)
        self.nodes = tuple(nodes)
        self.clock = start_ms
        self.logdirs = {n: LogDirBuilder(self.root / f"node{n}", node_id=n, cluster_id=CLUSTER_ID,
                                         start_time_ms=start_ms, tick_ms=0) for n in self.nodes}
        self.parts: dict[str, Partition] = {}
        self.cap = wire.Capture()
        self.coord = Coordinator(self, node=self.nodes[0])
        self.verify = broker != "3.0"       # KIP-890 part 1: leaders verify transactional writes (3.6+)
        self._pid = 1000
        self.oracle: list[Expect] = []
        self.state_log = True     # False: the log dirs given leave `__transaction_state` out
        self.kraft = None         # replication.Kraft: the `__cluster_metadata` log in the log dirs
        self.at_end: list = []    # expectations that depend on what later episodes did (called by write)
        if kraft:
            from tests.sim.replication import Kraft
            self.kraft = Kraft(self, kip704=broker != "3.0")

    def tick(self, ms: int = 1) -> int:
        now = self.clock
        self.clock += ms
        for ld in self.logdirs.values():
            ld.clock = self.clock
        return now

    def wait(self, ms: int) -> None:
        self.tick(ms)

    def new_pid(self) -> int:
        self._pid += 1
        return self._pid

    def partition(self, topic: str, p: int, *, leader: int | None = None, start_offset: int = 0) -> Partition:
        name = f"{topic}-{p}"
        part = self.parts.get(name)
        if part is None:
            lead = self.nodes[p % len(self.nodes)] if leader is None else leader
            part = self.parts[name] = Partition(self, topic, p, self.nodes, lead, start_offset=start_offset)
            if self.kraft is not None:
                self.kraft.created(part)
        return part

    def expect(self, invariant: str, part, first=None, last=None, pid=None, *, feeds=("segments", "pcap", "audit"),
               note: str = "") -> None:
        topic, partition = (None, None) if part is None else (part.topic, part.partition)
        self.oracle.append(Expect(invariant, topic, partition, first, last, pid, tuple(feeds), note))

    def write(self) -> tuple[list[Path], Path, int]:
        """(log dirs, capture, the time the history ended in ms)."""
        for f in self.at_end:
            f()
        end = self.tick()
        if not self.state_log:
            for ld in self.logdirs.values():
                for name in [n for n in ld.partitions if n.startswith("__transaction_state-")]:
                    del ld.partitions[name]
        for part in self.parts.values():
            if part.elections:   # the high watermarks each replica had (replication-offset-checkpoint)
                for n, pb in part.pbs.items():
                    pb.high_watermark = part.rhw[n]
        dirs = [ld.write() for ld in self.logdirs.values()]
        pcap = self.root / "capture.pcap"
        self.cap.write(pcap, end)
        return dirs, pcap, end


class Client:
    """One producer instance (an application process)."""

    def __init__(self, sim: Sim, name: str, *, txn_id: str | None = None, tv: int = 1, timeout_ms: int = 60000,
                 idempotent: bool = True, two_pc: bool = False, acks: int = -1):
        self.sim, self.name = sim, name
        self.acks = acks                          # -1 (all) or 1 (the leader alone)
        self.txn_id, self.tv, self.timeout_ms = txn_id, tv, timeout_ms
        self.idempotent = idempotent or txn_id is not None
        self.two_pc = two_pc
        self.pid, self.epoch = -1, -1
        self.seq: dict[str, int] = {}
        self.txn_parts: list[Partition] = []     # this instance's view of its open transaction
        self.client_ip = wire.CLIENT_HOST
        self.generation = 0                       # a new connection set after a reconnect
        self.codec = "none"                       # compression.type (the batches' codec)

    # -- connections ------------------------------------------------------------------------

    def _conn(self, node: int) -> str:
        return f"{self.name}#{self.generation}->{node}"

    def exchange(self, node: int, msgs, ts: int | None = None) -> None:
        ts = self.sim.tick() if ts is None else ts
        self.sim.cap.exchange(self._conn(node), msgs, ts, client_ip=self.client_ip, server_ip=wire.node_ip(node))

    def corr(self, node: int) -> int:
        return self.sim.cap.next_corr(self._conn(node))

    def reconnect(self) -> None:
        for name in [n for n in self.sim.cap.conns if n.startswith(f"{self.name}#{self.generation}->")]:
            self.sim.cap.close(name, self.sim.clock)
        self.generation += 1

    # -- producer id ------------------------------------------------------------------------

    def init(self) -> int:
        """InitProducerId; retried after CONCURRENT_TRANSACTIONS (the coordinator fenced an open
        transaction first). Returns the number of attempts."""
        node = self.sim.coord.node
        attempts = 0
        while True:
            attempts += 1
            ts_req = self.sim.tick()
            if self.txn_id is None:
                err, pid, epoch = 0, self.sim.new_pid(), 0
            else:
                err, pid, epoch = self.sim.coord.init_producer_id(self.txn_id, self.tv, self.timeout_ms, self.sim.new_pid,
                                                                  two_pc=self.two_pc)
            if self.two_pc:
                msgs = wire.init_producer_id_v6(self.corr(node), pid, epoch, txn_id=self.txn_id, enable_2pc=True,
                                                timeout_ms=self.timeout_ms, error=err, client_id=self.name)
            else:
                msgs = wire.init_producer_id(self.corr(node), pid, epoch, txn_id=self.txn_id, error=err,
                                             client_id=self.name)
            self.exchange(node, msgs[:1], ts_req)
            self.exchange(node, msgs[1:])
            if err == 0:
                break
            self.sim.wait(20)
        self.pid, self.epoch = pid, epoch
        self.seq.clear()
        self.txn_parts = []
        return attempts

    # -- produce ----------------------------------------------------------------------------

    def batch(self, part: Partition, values, *, seq: int | None = None, ts: int | None = None,
              keys=None) -> tuple[bytes, int]:
        """The batch this client would send next to `part` (bytes at base offset 0, base sequence);
        `keys`: the records' keys (default k0, k1, ...)."""
        s = self.seq.get(part.name, 0) if seq is None else seq
        keys = keys or [f"k{i}".encode() for i in range(len(values))]
        recs = [{"key": k, "value": v, "timestamp_delta": i} for i, (k, v) in enumerate(zip(keys, values))]
        data = ke.encode_record_batch_v2(
            0, recs, producer_id=self.pid if self.idempotent else -1,
            producer_epoch=self.epoch if self.idempotent else -1,
            base_sequence=s if self.idempotent else -1, is_transactional=self.txn_id is not None,
            base_timestamp=self.sim.clock if ts is None else ts, codec=self.codec)
        return data, s

    def register(self, part: Partition) -> None:
        """Transaction version 0/1: AddPartitionsToTxn before the first write to `part`."""
        if self.txn_id is None or part in self.txn_parts:
            return
        self.txn_parts.append(part)
        if self.tv >= 2:
            return
        m = self.sim.coord.txns[self.txn_id]
        err = 0
        if m.pid != self.pid or m.epoch != self.epoch:
            err = PRODUCER_FENCED if self.tv >= 2 else INVALID_PRODUCER_EPOCH
        else:
            self.sim.coord.add_partition(m, part)
        node = self.sim.coord.node
        self.exchange(node, wire.add_partitions(self.corr(node), self.pid, self.epoch, error=err, topic=part.topic,
                                                partition=part.partition, txn_id=self.txn_id, client_id=self.name))

    def send(self, part: Partition, values, *, answered: bool = True, stored: bool = True, data=None,
             seq: int | None = None, advance: bool = True, register: bool = True,
             keys=None) -> tuple[int | None, int]:
        """A Produce of one batch to `part`'s leader: (error or None when unanswered, base offset).
        `stored=False`: the request was lost before the leader (nothing appended)."""
        if data is None:
            data, s = self.batch(part, values, seq=seq, keys=keys)
        else:
            s = seq if seq is not None else self.seq.get(part.name, 0)
        if register:
            self.register(part)
        count = len(values)
        err, off = None, -1
        ts_req = self.sim.tick()
        if stored:
            err = self._verify(part, s)
            if err == NONE:
                err, off = part.append_data(data, pid=self.pid if self.idempotent else -1, epoch=self.epoch, seq=s,
                                            count=count, transactional=self.txn_id is not None)
        msgs = wire.produce_exchange(self.corr(part.leader), part.topic, part.partition, data, txn_id=self.txn_id,
                                     error=err if answered else None, offset=off, acks=self.acks,
                                     client_id=self.name)
        self.exchange(part.leader, msgs[:1], ts_req)
        if msgs[1:]:
            self.exchange(part.leader, msgs[1:])
        if advance and (err == NONE or not answered) and self.idempotent:
            self.seq[part.name] = (s + count) % SEQ_MOD
        return (err if answered else None), off

    def _verify(self, part: Partition, seq: int) -> int:
        """KIP-890: the leader checks a transactional write that starts a transaction on the
        partition with the coordinator (verifyOnly under version 0/1; under version 2 the same
        request registers the partition)."""
        if self.txn_id is None or not (self.sim.verify or self.tv >= 2):
            return NONE
        st = part.state.get(self.pid)
        if st is not None and st.txn_first >= 0 and st.epoch == self.epoch:
            return NONE
        m = self.sim.coord.txns[self.txn_id]
        err = NONE
        if m.pid != self.pid or m.epoch != self.epoch:
            err = PRODUCER_FENCED if self.tv >= 2 else INVALID_PRODUCER_EPOCH
        elif self.tv >= 2:
            self.sim.coord.add_partition(m, part)
        elif part not in m.partitions:
            err = INVALID_TXN_STATE
        node = self.sim.coord.node
        name = f"AddPartitionsManager-client-{part.leader}"
        corr = self.sim.cap.next_corr(name)
        msgs = wire.leader_add(corr, self.pid, self.epoch, topic=part.topic, partition=part.partition,
                               verify_only=self.tv < 2, error=err, txn_id=self.txn_id, node=part.leader)
        self.sim.cap.exchange(name, msgs, self.sim.tick(), client_ip=wire.node_ip(part.leader),
                              server_ip=wire.node_ip(node))
        if err in (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH):
            self.sim.expect("fenced-request-refused", None, pid=self.pid, feeds=("pcap", "audit"),
                            note="the leader's verification of a zombie's Produce")
        return err

    # -- end --------------------------------------------------------------------------------

    def end(self, committed: bool, *, answered: bool = True, resend: bool = False) -> int:
        """EndTxn; returns its error code."""
        m = self.sim.coord.txns[self.txn_id]
        node = self.sim.coord.node
        ts_req = self.sim.tick()
        err = self._end_error(m, committed)
        pid, epoch = self.pid, self.epoch
        if err == NONE and m.status == "Ongoing":
            self.sim.coord.begin_end(m, committed=committed, bump=self.tv >= 2)
            self.sim.coord.finish_end(m, resend=resend)
            if self.tv >= 2:              # EndTxn v5 answers the bumped epoch (or a new producer id)
                self.pid, self.epoch = m.pid, m.epoch
                self.seq.clear()
        corr = self.corr(node)
        if self.tv >= 2:
            msgs = wire.end_txn_v5(corr, pid, epoch, committed=committed, new_epoch=self.epoch, new_pid=self.pid,
                                   error=err, txn_id=self.txn_id, client_id=self.name)
        else:
            msgs = wire.end_txn(corr, pid, epoch, committed=committed, error=err, txn_id=self.txn_id,
                                client_id=self.name)
        self.exchange(node, msgs[:1], ts_req)
        if answered:
            self.exchange(node, msgs[1:])
        self.txn_parts = []
        return err

    def _end_error(self, m, committed: bool) -> int:
        """TransactionCoordinator.handleEndTransaction's answer before it acts."""
        if m.pid != self.pid or m.epoch != self.epoch:
            self.sim.expect("fenced-request-refused", None, pid=self.pid, feeds=("pcap", "audit"),
                            note="a fenced instance's EndTxn")
            return PRODUCER_FENCED if self.tv >= 2 else INVALID_PRODUCER_EPOCH
        if m.status != "Ongoing":
            # the same end again is a retry (version 0/1 cannot tell it from a new one, KAFKA-17754);
            # anything else is an invalid state
            retried = self.tv < 2 and m.status == ("CompleteCommit" if committed else "CompleteAbort")
            return NONE if retried else INVALID_TXN_STATE
        return NONE
