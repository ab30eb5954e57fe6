"""Transactions on the wire (audit/wire_txn.py) on crafted captures."""

from __future__ import annotations

from tests.audit.wire.wirecraft import (add_partitions, audit, batch, by_rule, details, end_txn,
                                        init_producer_id, send)
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
