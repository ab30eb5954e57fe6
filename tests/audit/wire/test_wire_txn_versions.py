"""Transaction versions on the wire (KIP-890): crafted captures of version 0/1 producers (the
client's AddPartitionsToTxn, EndTxn v3, markers at the data's epoch) and version 2 producers (no
client AddPartitionsToTxn: the leader's AddPartitionsToTxn v5 registers each partition; EndTxn
v5 bumps the epoch; markers at epoch + 1), positive and negative: torn transactions (an admin's
ABORT beside the coordinator's COMMIT), late writes taken in by the next commit, zombie writes
after a fencing (rejected, accepted), epoch exhaustion to a new producer id, both side by side."""

from __future__ import annotations

import pytest

from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions
from tests.audit.wire.wirecraft import (T0, add_partitions, batch, by_rule, details, end_txn, init_producer_id,
                                        send)
from tests.audit.wire.wirecraft_txn import (ADMIN, COORDINATOR, LEADER, describe_producers, end_txn_v5,
                                            leader_add, markers, write_ordered)
from tests.sources.pcap.craft import Conn

PID = 4303
T0_MS = int(T0 * 1000)
TXN = ("unregistered-partition", "late-transactional-write", "hanging-transaction", "dangling-transaction",
       "coordinator-abort", "torn-transaction", "stray-marker", "coordinator-epoch-regression")


def txn(fs):
    return [f for f in fs if f["rule"] in TXN]


class Story:
    """One producer's conversation (client -> broker), the leader's registrations (leader ->
    coordinator) and the coordinator's markers (coordinator -> leader), each on its connection."""

    def __init__(self, tv: int, pid: int = PID, txn_id: str = "tx-wire", n: int = 0):
        self.tv, self.pid, self.txn_id, self.n = tv, pid, txn_id, n
        self.epoch = 0
        self.events: list[tuple[str, list]] = []   # (connection, its messages) in time order
        self.corr = 1
        self.seq: dict[int, int] = {}
        self.open: list[int] = []
        self.on("client", init_producer_id(self._c(), pid, 0, txn_id=txn_id))

    def on(self, conn: str, messages: list) -> None:
        self.events.append((conn, messages))

    def _c(self) -> int:
        self.corr += 1
        return self.corr

    def send(self, partition: int, offset: int, *, epoch: int | None = None, error: int = 0, register: bool = True,
             seq: int | None = None):
        e = self.epoch if epoch is None else epoch
        seq = self.seq.get(partition, 0) if seq is None else seq
        if self.tv != 2 and register and partition not in self.open:
            self.on("client", add_partitions(self._c(), self.pid, e, partition=partition, txn_id=self.txn_id))
        msgs = send(self._c(), batch(self.pid, e, seq, 1, transactional=True), partition=partition,
                    offset=offset, error=error, txn_id=self.txn_id)
        if self.tv == 2 and register and partition not in self.open and error == 0:
            # the leader registers the partition while it handles the Produce (KIP-890)
            self.on("client", msgs[:1])
            self.on("leader", leader_add(self._c(), self.pid, e, partition=partition, txn_id=self.txn_id))
            self.on("client", msgs[1:])
        else:
            self.on("client", msgs)
        if error == 0:
            self.seq[partition] = seq + 1
        if register and partition not in self.open:
            self.open.append(partition)

    def end(self, committed: bool = True, *, write: tuple = (), new_pid: int | None = None):
        """EndTxn and the coordinator's markers on `write` (default: every open partition)."""
        e = self.epoch
        if self.tv == 2:
            self.on("client", end_txn_v5(self._c(), self.pid, e, committed=committed, new_pid=new_pid,
                                         new_epoch=0 if new_pid is not None else None, txn_id=self.txn_id))
            me = e + 1
        else:
            self.on("client", end_txn(self._c(), self.pid, e, committed=committed, txn_id=self.txn_id))
            me = e
        parts = write or tuple(self.open)
        if parts:
            self.on("coord", markers(self._c(), self.pid, me, committed=committed,
                                     parts=[("orders", p) for p in parts]))
        self.open = []
        if self.tv == 2:
            self.epoch, self.seq = e + 1, {}
            if new_pid is not None:
                self.pid, self.epoch = new_pid, 0

    ENDS = {"client": dict(client=("10.0.0.1", 40001), server=("10.0.0.2", 9092)),
            "client2": dict(client=("10.0.0.5", 40002), server=("10.0.0.2", 9092)),   # a new instance
            "client-b3": dict(client=("10.0.0.1", 40003), server=("10.0.0.3", 9092)),  # to another leader
            "leader": LEADER, "coord": COORDINATOR, "admin": ADMIN}


def run(tmp_path, *stories, now_ms=None):
    """Findings of the stories' capture, their messages in story order."""
    conns, index, order = [], {}, []
    for n, st in enumerate(stories):
        for name, msgs in st.events:
            key = (n, name)
            if key not in index:
                ends = type(st).ENDS[name]
                index[key] = len(conns)
                conns.append(Conn([], **dict(ends, client=(ends["client"][0], ends["client"][1] + 100 * n))))
            c = conns[index[key]]
            for m in msgs:
                order.append((index[key], len(c.messages)))
                c.messages.append(m)
    path = tmp_path / "story.pcap"
    write_ordered(path, conns, order)
    run_ = audit_pcaps([str(path)], PcapOptions(), now_ms=now_ms)
    assert not run_.errors, run_.errors
    return run_.findings


@pytest.mark.parametrize("tv", [1, 2])
def test_commits_and_aborts_are_clean(tmp_path, tv):
    s = Story(tv)
    off = {0: 0, 1: 0}
    for committed in (True, False, True):
        for p in (0, 1):
            s.send(p, off[p])
            off[p] += 2
        s.end(committed)
    assert txn(run(tmp_path, s, now_ms=T0_MS + 600_000)) == []


def test_versions_side_by_side(tmp_path):
    a, b = Story(2, pid=4401, txn_id="java"), Story(1, pid=4402, txn_id="rdkafka", n=1)
    a.send(0, 0); b.send(1, 0); a.end(True); b.end(False)
    a.send(0, 3); b.send(1, 2); a.end(False); b.end(True)
    assert txn(run(tmp_path, a, b, now_ms=T0_MS + 600_000)) == []


@pytest.mark.parametrize("tv", [1, 2])
def test_client_abort_is_not_a_coordinator_abort(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0)
    s.end(False)
    fs = run(tmp_path, s)
    assert by_rule(fs, "coordinator-abort") == [] and txn(fs) == []


@pytest.mark.parametrize("tv", [1, 2])
def test_admin_abort_beside_coordinator_commit_is_torn(tmp_path, tv):
    """kafka-transactions.sh abort (DescribeProducers, then WriteTxnMarkers ABORT at the epoch the
    partition saw, from adminclient-1) on orders-0 while the transaction goes on; the client then
    commits and the coordinator writes COMMIT to orders-0 and orders-1."""
    s = Story(tv)
    s.send(0, 0)
    s.send(1, 0)
    s.on("admin", describe_producers(90, partition=0, pid=PID, epoch=0, start_offset=0))
    s.on("admin", markers(91, PID, 0, committed=False, parts=[("orders", 0)], client_id="adminclient-1"))
    s.end(True)
    fs = txn(run(tmp_path, s, now_ms=T0_MS + 5_000))
    (t,) = by_rule(fs, "torn-transaction")
    d = details(t)
    assert d["results"]["orders-0"] == "ABORT" and d["results"]["orders-1"] == "COMMIT"
    assert d["writers"]["orders-0"] == "admin"
    assert "admin" in t["message"] or d.get("ended_by", "").startswith("admin")


@pytest.mark.parametrize("tv", [1, 2])
def test_coordinator_abort_everywhere_is_not_torn(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0); s.send(1, 0)
    s.end(False)
    assert by_rule(txn(run(tmp_path, s)), "torn-transaction") == []


def test_late_write_after_abort_taken_in_by_next_commit_tv1(tmp_path):
    """Version 0/1: the late Produce of transaction 1 (same epoch) is sent after its ABORT marker
    was answered, before transaction 2 registered the partition; transaction 2's COMMIT ends it."""
    s = Story(1)
    s.send(0, 0)
    s.end(False)
    s.send(0, 2, register=False)          # late: no AddPartitionsToTxn before it
    s.open = []
    s.send(0, 3)                          # transaction 2 registers orders-0, then writes
    s.end(True)
    (f,) = by_rule(txn(run(tmp_path, s)), "late-transactional-write")
    assert (f["partition"], f["first_offset"]) == (0, 2) and "COMMIT" in f["message"]


@pytest.mark.parametrize("late", [True, False])
def test_late_write_ended_by_a_later_transaction_past_one_on_another_partition_tv1(tmp_path, late):
    """Version 0/1 (KAFKA-17754's shape): the late Produce on orders-0 after its transaction's
    ABORT; the producer's next transaction writes only orders-1; the one after registers
    orders-0 and its COMMIT ends the late data: still late (the transaction between never
    registered orders-0). Without the late Produce: nothing."""
    s = Story(1)
    s.send(0, 0)
    s.end(False)
    if late:
        s.send(0, 2, register=False)
    s.open = []
    s.send(1, 0)
    s.end(True)
    s.send(0, 3 if late else 2)
    s.end(True)
    fs = by_rule(txn(run(tmp_path, s)), "late-transactional-write")
    assert [(f["partition"], f["first_offset"]) for f in fs] == ([(0, 2)] if late else [])


def test_late_write_of_an_older_epoch_tv2(tmp_path):
    """Version 2: transaction 1's late Produce (epoch 0) accepted after its ABORT marker (epoch 1)
    - a broker that did not check the epoch; transaction 2's COMMIT (epoch 2) takes it in."""
    s = Story(2)
    s.send(0, 0)
    s.end(False)
    s.send(0, 2, epoch=0, seq=1, register=False)
    s.send(0, 3)
    s.end(True)
    fs = txn(run(tmp_path, s))
    (f,) = by_rule(fs, "late-transactional-write")
    assert f["first_offset"] == 2 and "epoch 0 is older than the marker's 1" in f["message"]


@pytest.mark.parametrize("tv", [1, 2])
def test_next_transaction_early_data_is_not_late(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0); s.end(False)
    s.send(0, 2); s.end(True)
    assert txn(run(tmp_path, s)) == []


@pytest.mark.parametrize("tv", [1, 2])
@pytest.mark.parametrize("accepted", [False, True])
def test_zombie_write_after_fencing(tmp_path, tv, accepted):
    """A new instance fences epoch 0 (the coordinator's ABORT at epoch 1; the new instance gets
    epoch 2); the zombie's Produce at epoch 0 is rejected (INVALID_PRODUCER_EPOCH: nothing
    stored, only fenced-epoch) or accepted (a late write no marker will end)."""
    s = Story(tv)
    s.send(0, 0)
    s.on("client", init_producer_id(40, PID, 2, txn_id="tx-wire", client_id="wire-producer-2"))
    s.on("coord", markers(41, PID, 1, committed=False, parts=[("orders", 0)]))
    s.on("client", send(42, batch(PID, 0, 1, 1, transactional=True), partition=0,
                        offset=2 if accepted else -1, error=0 if accepted else 47, txn_id="tx-wire"))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (ab,) = by_rule(fs, "coordinator-abort")
    assert details(ab)["cause"] == "fencing"
    if accepted:   # the data of an ended transaction: no marker will end it
        (late,) = by_rule(fs, "late-transactional-write")
        assert late["first_offset"] == 2 and "epoch 0 is older than the marker's 1" in late["message"]
    else:
        (z,) = by_rule(fs, "fenced-epoch")
        assert "INVALID_PRODUCER_EPOCH" in z["message"]
        assert by_rule(fs, "late-transactional-write") == [] and by_rule(fs, "hanging-transaction") == []


def test_epoch_exhaustion_moves_to_a_new_producer_id(tmp_path):
    """Version 2 at epoch 32766: EndTxn answers a new producer id at epoch 0; the markers carry
    the old id at 32767; the transactional id goes on under the new one. Nothing to report."""
    s = Story(2)
    s.epoch = 32766
    s.on("client", init_producer_id(30, PID, 32766, txn_id="tx-wire"))
    s.send(0, 0)
    s.end(True, new_pid=PID + 1)
    s.send(0, 2)
    s.end(True)
    fs = run(tmp_path, s, now_ms=T0_MS + 600_000)
    assert txn(fs) == []
