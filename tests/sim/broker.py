"""The simulated brokers' partitions: a leader that validates and appends batches and markers the
way Kafka's ProducerStateManager / ProducerAppendInfo do, and followers that store the leader's
bytes as they are. One PartitionBuilder per replica (fixtures/builder) writes the files.

Error codes are Kafka's (org.apache.kafka.common.protocol.Errors)."""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

from fixtures import kafka_encoder as ke

NONE = 0
MESSAGE_TOO_LARGE = 10
OUT_OF_ORDER_SEQUENCE = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
CONCURRENT_TRANSACTIONS = 51
UNKNOWN_PRODUCER_ID = 59
PRODUCER_FENCED = 90
TXN_COORDINATOR_FENCED = 52
SEQ_MOD = 1 << 31


@dataclass
class PState:
    """ProducerStateEntry: the epoch, the last five batches (dedup), the open transaction."""

    epoch: int
    last_seq: int = -1
    recent: deque = field(default_factory=lambda: deque(maxlen=5))   # (first seq, last seq, base offset)
    txn_first: int = -1
    coordinator_epoch: int = -1


def with_leader_epoch(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """The batch as the leader stores it: its base offset and partition leader epoch (neither in
    the CRC)."""
    return struct.pack(">qi", base_offset, struct.unpack(">i", batch[8:12])[0]) + struct.pack(">i", leader_epoch) + batch[16:]


class Partition:
    """One partition replicated on `nodes`; `leader` appends, the others copy its bytes."""

    def __init__(self, sim, topic: str, partition: int, nodes, leader: int, *, start_offset: int = 0,
                 max_batch_bytes: int = 1 << 20):
        self.sim = sim
        self.topic, self.partition = topic, partition
        self.leader = leader
        self.leader_epoch = 0
        self.max_batch_bytes = max_batch_bytes
        self.pbs = {n: sim.logdirs[n].partition(topic, partition, start_offset=start_offset,
                                                 role="leader" if n == leader else "follower")
                    for n in nodes}
        self.state: dict[int, PState] = {}
        self.next_offset = start_offset
        self.log_start = start_offset
        self.ends: list[tuple[int, int]] = []   # (clock, log end) after each append: what followers knew when
        self.log: list[bytes] = []     # the leader's stored batches, in order (what a Fetch serves)
        self.markers: dict[int, str] = {}   # offset -> COMMIT | ABORT of each marker stored
        # replication (tests/sim/replication.py): each replica's stored batches, the replicas not
        # fetching now (down, or out of the ISR), the ISR, each replica's high watermark
        self.rlog: dict[int, list[bytes]] = {n: [] for n in nodes}
        self.behind: set[int] = set()
        self.isr: set[int] = set(nodes)
        self.rhw: dict[int, int] = {n: start_offset for n in nodes}
        self.start_offset = start_offset
        self.elections = 0            # > 0: the replicas' high watermarks are written as tracked

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _store(self, batch: bytes) -> int:
        off = self.next_offset
        data = with_leader_epoch(batch, off, self.leader_epoch)
        for n, pb in self.pbs.items():   # the leader, and the followers fetching now
            if n == self.leader or n not in self.behind:
                pb.set_leader_epoch(self.leader_epoch)
                pb.append_raw(data)
                self.rlog[n].append(data)
        self.log.append(data)
        n = struct.unpack(">i", batch[23:27])[0] + 1   # last offset delta + 1
        self.next_offset += n
        self.advance_hw()
        self.ends.append((self.sim.clock, self.next_offset))
        if getattr(self.sim, "replicate_on_wire", False):
            from tests.sim.replication import follower_fetches

            follower_fetches(self, off, data)
        return off

    def log_end(self, node: int) -> int:
        """A replica's log end offset."""
        return self.pbs[node].next_offset

    def advance_hw(self) -> None:
        """Partition.maybeIncrementLeaderHW: the leader's high watermark is the least log end of
        the ISR; a fetching follower learns it with its next fetch (min with its own log end);
        a replica not fetching keeps the one it had."""
        hw = min(self.log_end(n) for n in self.isr | {self.leader})
        self.rhw[self.leader] = max(self.rhw[self.leader], hw)
        for n in self.pbs:
            if n != self.leader and n not in self.behind:
                self.rhw[n] = max(self.rhw[n], min(hw, self.log_end(n)))

    def fail_over(self, new_leader: int) -> None:
        """A new leader from the ISR that held everything appended so far (replication.elect)."""
        from tests.sim.replication import elect

        elect(self, new_leader)

    # -- ProducerAppendInfo ------------------------------------------------------------------

    def append_data(self, batch: bytes, *, pid: int, epoch: int, seq: int, count: int,
                    transactional: bool) -> tuple[int, int]:
        """(error code, base offset) of a Produce of one batch, as the leader answers it."""
        if len(batch) > self.max_batch_bytes:
            return MESSAGE_TOO_LARGE, -1
        if pid < 0:
            return NONE, self._store(batch)
        st = self.state.get(pid)
        if st is not None:
            if epoch < st.epoch:
                return INVALID_PRODUCER_EPOCH, -1
            if epoch == st.epoch:
                last = (seq + count - 1) % SEQ_MOD
                for first_seq, last_seq, off in st.recent:
                    if (first_seq, last_seq) == (seq, last):
                        return NONE, off          # a duplicate: answered with the first copy's offset
                if st.last_seq >= 0 and seq != (st.last_seq + 1) % SEQ_MOD:
                    return OUT_OF_ORDER_SEQUENCE, -1
            elif seq != 0:
                return OUT_OF_ORDER_SEQUENCE, -1   # a new epoch starts at sequence 0
        off = self._store(batch)
        self._update(pid, epoch, seq, count, off, transactional)
        return NONE, off

    def _update(self, pid, epoch, seq, count, off, transactional) -> None:
        st = self.state.get(pid)
        if st is None:
            st = self.state[pid] = PState(epoch)
        if epoch != st.epoch:
            st.epoch, st.last_seq = epoch, -1
            st.recent.clear()
        st.last_seq = (seq + count - 1) % SEQ_MOD
        st.recent.append((seq, st.last_seq, off))
        if transactional and st.txn_first < 0:
            st.txn_first = off

    def append_marker(self, pid: int, epoch: int, committed: bool, coordinator_epoch: int,
                      ts: int) -> tuple[int, int]:
        """(error code, offset) of a WriteTxnMarkers entry for this partition."""
        st = self.state.get(pid)
        if st is not None:
            if epoch < st.epoch:
                return INVALID_PRODUCER_EPOCH, -1
            if coordinator_epoch < st.coordinator_epoch:
                return TXN_COORDINATOR_FENCED, -1
        data = ke.encode_control_batch(0, pid, epoch, "COMMIT" if committed else "ABORT", coordinator_epoch, ts)
        off = self._store(data)
        self.markers[off] = "COMMIT" if committed else "ABORT"
        if st is None:
            st = self.state[pid] = PState(epoch)
        if epoch != st.epoch:
            st.epoch, st.last_seq = epoch, -1
            st.recent.clear()
        st.coordinator_epoch = coordinator_epoch
        st.txn_first = -1
        return NONE, off

    def expire(self, pid: int) -> None:
        """Producer-state expiry (producer.id.expiration.ms) or retention of its last batches."""
        self.state.pop(pid, None)

    def delete_before(self, offset: int) -> None:
        """Retention: the segments below `offset` are deleted (roll first so one boundary is there)."""
        for pb in self.pbs.values():
            if pb.active.data:
                pb.roll_segment()
            for seg in list(pb.segments[:-1]):
                if seg.base_offset < offset:
                    pb.segments.remove(seg)
        self.log_start = max(self.log_start, offset)
