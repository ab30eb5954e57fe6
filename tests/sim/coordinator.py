"""The simulated transaction coordinator (TransactionCoordinator / TransactionStateManager /
TransactionMarkerChannelManager): per transactional id its producer id, epoch, state and
partitions, each transition appended to `__transaction_state` (with its timestamps and, under
transaction version 2, the flexible value with ClientTransactionVersion), markers written to the
partition leaders with the coordinator epoch, over the capture from the coordinator's broker."""

from __future__ import annotations

from dataclasses import dataclass, field

from fixtures import kafka_encoder as ke
from tests.sim import wire

TXN_PARTITIONS = 5          # transaction.state.log.num.partitions of the simulated cluster
TWO_PC_TIMEOUT_MS = 2**31 - 1   # Int.MaxValue: a KIP-939 two-phase-commit transaction never times out
MAX_EPOCH = 32767           # Short.MAX_VALUE: an epoch that reaches it moves the id to a new producer id


@dataclass
class TxnMeta:
    txn_id: str
    pid: int
    epoch: int
    tv: int
    timeout_ms: int = 60000
    status: str = "Empty"
    partitions: list = field(default_factory=list)    # Partition objects, in registration order
    start_ms: int = -1
    two_pc: bool = False
    ending: tuple = (True, -1)
    session: tuple = (-1, -1)     # KIP-939: the recovering session's (producer id, epoch)


class Coordinator:
    def __init__(self, sim, node: int = 1):
        self.sim = sim
        self.node = node
        self.epoch = 0           # the coordinator epoch (its __transaction_state partition's leader epoch)
        self.txns: dict[str, TxnMeta] = {}

    def log_partition(self, txn_id: str):
        p = ke.coordinator_partition(txn_id, TXN_PARTITIONS)
        return self.sim.partition("__transaction_state", p, leader=self.node)

    def write_state(self, m: TxnMeta, status: str, *, epoch: int | None = None, pid: int | None = None,
                    next_pid: int = -1, prev_pid: int = -1) -> None:
        m.status = status
        ts = self.sim.tick()
        parts = None
        if status not in ("Empty",):
            parts = {}
            if not status.startswith("Complete"):
                for p in m.partitions:
                    parts.setdefault(p.topic, []).append(p.partition)
            parts = {t: sorted(ps) for t, ps in parts.items()}
        value = ke.encode_txn_log_value(
            m.pid if pid is None else pid, m.epoch if epoch is None else epoch, m.timeout_ms, status, parts,
            ts, m.start_ms if status != "Empty" else -1, version=1 if m.tv >= 2 else 0,
            client_transaction_version=m.tv if (m.tv >= 2 and status != "Empty") else 0,
            next_producer_id=next_pid, previous_producer_id=prev_pid)
        rec = ke.Record(key=ke.encode_txn_log_key(m.txn_id), value=value)
        self.log_partition(m.txn_id)._store(ke.encode_record_batch_v2(0, [rec], base_timestamp=ts))

    # -- requests ---------------------------------------------------------------------------

    def init_producer_id(self, txn_id: str, tv: int, timeout_ms: int, new_pid, *,
                         two_pc: bool = False) -> tuple[int, int, int]:
        """(error, pid, epoch) of an InitProducerId; an open transaction is aborted first (the
        coordinator fences its epoch: markers at epoch + 1) and CONCURRENT_TRANSACTIONS returned:
        the client retries and gets epoch + 2. `two_pc` (KIP-939 Enable2Pc): the coordinator
        keeps Int.MaxValue as the transaction timeout (TransactionCoordinator's
        resolvedTxnTimeoutMs; TransactionMetadata.isDistributedTwoPhaseCommitTxn), and so does
        every `__transaction_state` record of the id."""
        if two_pc:
            timeout_ms = TWO_PC_TIMEOUT_MS
        m = self.txns.get(txn_id)
        if m is None:
            m = self.txns[txn_id] = TxnMeta(txn_id, new_pid(), 0, tv, timeout_ms)
            self.write_state(m, "Empty")
            return 0, m.pid, m.epoch
        m.tv, m.timeout_ms = tv, timeout_ms
        if m.status == "Ongoing":
            self.end(m, committed=False, bump=True)
            return 51, -1, -1
        if m.epoch + 1 >= MAX_EPOCH:
            m.pid, m.epoch = new_pid(), 0
        else:
            m.epoch += 1
        m.partitions, m.start_ms = [], -1
        self.write_state(m, "Empty")
        return 0, m.pid, m.epoch

    def keep_prepared(self, txn_id: str, new_pid, *, new_id: bool) -> tuple[int, int, int, int]:
        """KIP-939 InitProducerId with KeepPreparedTxn and Enable2Pc while the id's transaction is
        open: the coordinator keeps it (no abort), rewrites its timeout to Int.MaxValue and bumps
        the epoch for the recovering session - on a new producer id when `new_id` (the epoch ran
        out). Returns (session pid, session epoch, kept pid, kept epoch); the Ongoing record keeps
        the kept transaction's producer id and epoch (the session's id in NextProducerId)."""
        m = self.txns[txn_id]
        kept = (m.pid, m.epoch)
        m.timeout_ms, m.two_pc = TWO_PC_TIMEOUT_MS, True
        m.session = (new_pid(), 0) if new_id else (m.pid, m.epoch + 1)
        self.write_state(m, "Ongoing", next_pid=m.session[0] if new_id else -1)
        return m.session + kept

    def end_kept(self, m: TxnMeta, *, committed: bool) -> int:
        """The recovering session's EndTxn of the kept transaction: PrepareX and the markers under
        the kept producer id at its epoch + 1 (KIP-939), CompleteX; the id then goes on with the
        session's producer id. Returns the markers' epoch."""
        new_id = m.session[0] != m.pid
        m.epoch += 1
        m.ending = (committed, m.session[0] if new_id else -1)
        self.write_state(m, "PrepareCommit" if committed else "PrepareAbort", next_pid=m.ending[1])
        epoch = self.finish_end(m)
        m.pid, m.epoch = m.session
        return epoch

    def add_partition(self, m: TxnMeta, part) -> None:
        if part in m.partitions:
            return
        if not m.partitions:
            m.start_ms = self.sim.clock
        m.partitions.append(part)
        self.write_state(m, "Ongoing")

    def end(self, m: TxnMeta, *, committed: bool, bump: bool) -> int:
        """EndTxn (bump under version 2) or the coordinator's own abort (bump: a fencing or a
        timeout): PrepareX, the markers on every registered partition, CompleteX. Returns the
        markers' epoch."""
        self.begin_end(m, committed=committed, bump=bump)
        return self.finish_end(m)

    def begin_end(self, m: TxnMeta, *, committed: bool, bump: bool) -> None:
        """PrepareCommit / PrepareAbort (at epoch + 1 when bumping; with NextProducerId when the
        epoch runs out under version 2)."""
        if bump:
            m.epoch += 1
        m.ending = (committed, self.sim.new_pid() if (m.tv >= 2 and bump and m.epoch >= MAX_EPOCH) else -1)
        self.write_state(m, "PrepareCommit" if committed else "PrepareAbort", next_pid=m.ending[1])

    def finish_end(self, m: TxnMeta, *, resend: bool = False) -> int:
        """The markers, then CompleteX; `resend`: a coordinator failover in between makes the new
        coordinator write the markers again (higher coordinator epoch)."""
        committed, next_pid = m.ending
        epoch = m.epoch
        self.send_markers(m.pid, epoch, committed, m.partitions)
        if resend:
            self.fail_over()
            self.sim.tick(50)
            self.send_markers(m.pid, epoch, committed, m.partitions)
        prev = -1
        if next_pid >= 0:
            prev, m.pid, m.epoch = m.pid, next_pid, 0      # epoch exhaustion: the id moves on (KIP-890)
        self.write_state(m, "CompleteCommit" if committed else "CompleteAbort", prev_pid=prev)
        m.partitions, m.start_ms = [], -1
        return epoch

    def send_markers(self, pid: int, epoch: int, committed: bool, parts, *, client_id: str | None = None,
                     coordinator_epoch: int | None = None) -> dict:
        """WriteTxnMarkers v1 to each partition's leader (one request per leader); {partition: offset}."""
        cepoch = self.epoch if coordinator_epoch is None else coordinator_epoch
        by_leader: dict[int, list] = {}
        for p in parts:
            by_leader.setdefault(p.leader, []).append(p)
        out = {}
        sender = client_id or f"broker-{self.node}-txn-marker-sender"
        src = wire.node_ip(self.node) if client_id is None else wire.ADMIN_HOST
        for leader, ps in sorted(by_leader.items()):
            ts = self.sim.tick()
            errors = {}
            for p in ps:
                err, off = p.append_marker(pid, epoch, committed, cepoch, ts)
                errors[p.name] = err
                out[p.name] = off
            name = f"{sender}->{leader}"
            corr = self.sim.cap.next_corr(name)
            err = max(errors.values())
            msgs = wire.markers(corr, pid, epoch, committed=committed, parts=[(p.topic, p.partition) for p in ps],
                                coordinator_epoch=cepoch, client_id=sender, version=1, error=err)
            self.sim.cap.exchange(name, msgs, ts, client_ip=src, server_ip=wire.node_ip(leader), server_port=9093)
        return out

    def refuse_markers(self, pid: int, epoch: int, committed: bool, part, error: int) -> None:
        """WriteTxnMarkers for `part` that its leader refuses with `error`: nothing is appended
        (KAFKA-19999: a version-2 marker re-sent at the epoch the leader already holds)."""
        ts = self.sim.tick()
        sender = f"broker-{self.node}-txn-marker-sender"
        name = f"{sender}->{part.leader}"
        msgs = wire.markers(self.sim.cap.next_corr(name), pid, epoch, committed=committed,
                            parts=[(part.topic, part.partition)], coordinator_epoch=self.epoch, client_id=sender,
                            version=1, error=error)
        self.sim.cap.exchange(name, msgs, ts, client_ip=wire.node_ip(self.node), server_ip=wire.node_ip(part.leader),
                              server_port=9093)

    def move_to(self, node: int) -> None:
        """The `__transaction_state` partitions' leadership moves to `node`, the old leader staying
        up (kafka-leader-election, a reassignment, a controlled shutdown of the old leader's
        listener): each partition elects `node` from its ISR at the next leader epoch
        (Partition.makeLeader), the new coordinator loads it (TransactionStateManager.
        loadTransactionsForTxnTopicPartition) under the coordinator epoch = that leader epoch
        (the simulator keeps one coordinator epoch for all, one more than before), and the old
        leader follows, truncating what it alone held (makeFollower, KIP-279). Requests still sent
        to the old node are answered NOT_COORDINATOR; what the new coordinator does with a
        loaded PrepareX (the markers sent again) is the caller's (elect_txn_episodes)."""
        from tests.sim import replication as R

        old = self.node
        self.epoch += 1
        self.node = node
        for name, part in list(self.sim.parts.items()):
            if not name.startswith("__transaction_state-") or part.leader == node:
                continue
            R.fall_behind(part, old, leave_isr=False)
            part.behind.discard(node)
            R.elect(part, node, isr=(part.isr | {node}) - {old})
            R.rejoin(part, old)

    def fail_over(self) -> None:
        """A new coordinator (the __transaction_state partition's leader changed): the coordinator
        epoch goes up; transactions in PrepareX have their markers written again (not an anomaly).
        Here the same broker is elected again: its partitions' leader epoch goes up with it."""
        self.epoch += 1
        for name, part in self.sim.parts.items():
            if name.startswith("__transaction_state-"):
                part.fail_over(part.leader)
