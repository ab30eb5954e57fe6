"""Transactions on the wire (audit/wire_txn.py) on crafted captures."""

from __future__ import annotations

from tests.audit.wire.wirecraft import (add_partitions, audit, batch, by_rule, details, end_txn,
                                        init_producer_id, metadata, send)
from tests.sources.pcap.craft import Conn

PID = 4101
TXN = ("unregistered-partition", "late-transactional-write", "hanging-transaction", "dangling-transaction",
       "coordinator-abort")


def _txn(fs):
    return [f for f in fs if f["rule"] in TXN]


def test_registered_partition_committed_is_clean(tmp_path):
    m = (init_producer_id(1, PID, 0) + add_partitions(2, PID, 0, partition=0)
         + send(3, batch(PID, 0, 0, 3, transactional=True), partition=0, offset=0, txn_id="tx-wire")
         + end_txn(4, PID, 0))
    assert _txn(audit(tmp_path, Conn(m))) == []


def _asked_unanswered(answer: int | None, retried: bool = False):
    """A version 0/1 client asks to register partition 1 after partition 0's write; the
    AddPartitionsToTxn's answer is `answer` (None: not in the capture - lost, or in bytes the
    capture lost), `retried`: then asked again and answered; then it writes to partition 1."""
    add = add_partitions(3, PID, 0, partition=1, error=answer if answer is not None else 0)
    if answer is None:
        add = add[:1] + metadata(8)   # the request alone (a Metadata exchange after it: its own frame)
    if retried:
        add += add_partitions(4, PID, 0, partition=1)
    return (init_producer_id(1, PID, 0) + add_partitions(2, PID, 0, partition=0)
            + send(5, batch(PID, 0, 0, 3, transactional=True), partition=0, offset=0, txn_id="tx-wire") + add
            + send(6, batch(PID, 0, 3, 2, transactional=True), partition=1, offset=0, txn_id="tx-wire")
            + end_txn(7, PID, 0))


def test_a_registration_whose_answer_the_capture_lacks_is_shown_by_the_data(tmp_path):
    """The client sends a partition data only once its AddPartitionsToTxn succeeded (the Java
    client's TransactionManager, librdkafka's): its write to partition 1 after an
    AddPartitionsToTxn of partition 1 whose answer the capture does not hold shows that answer
    was a success - not an unregistered partition. Answered CONCURRENT_TRANSACTIONS (51) and
    never asked again, the same write is (a registration refused: the data is outside any
    transaction); retried and answered, it is clean."""
    for k, (answer, retried, unregistered) in enumerate(((None, False, False), (51, False, True), (51, True, False))):
        fs = _txn(audit(tmp_path, Conn(_asked_unanswered(answer, retried)), name=f"a{k}.pcap"))
        assert [f["partition"] for f in by_rule(fs, "unregistered-partition")] == ([1] if unregistered else []), (k, fs)


def test_unregistered_partition_accepted(tmp_path):
    m = (init_producer_id(1, PID, 0) + add_partitions(2, PID, 0, partition=0)
         + send(3, batch(PID, 0, 0, 3, transactional=True), partition=0, offset=0, txn_id="tx-wire")
         + send(4, batch(PID, 0, 3, 2, transactional=True), partition=1, offset=0, txn_id="tx-wire")
         + end_txn(5, PID, 0))
    fs = _txn(audit(tmp_path, Conn(m)))
    (f,) = by_rule(fs, "unregistered-partition")
    assert (f["partition"], f["producer_id"]) == (1, PID)
    assert details(f)["accepted"] is True and details(f)["registered"] == ["orders-0"]
    # no partition has an open transaction the coordinator does not know but partition 1
    assert all(f["partition"] == 1 for f in fs)
