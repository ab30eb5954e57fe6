"""Crafted captures, positive and negative, for the wire transaction rules (audit/wire_txn.py)."""

from __future__ import annotations

import pytest

from tests.audit.wire.wirecraft import (T0, TOPIC, add_partitions, audit, batch, by_rule, details, end_txn,
                                        init_producer_id, send)
from tests.protocol.wire.wirebytes import (TAGS0, boolean, carray, cstring, frame, i16, i32, i64,
                                           request_header, response_header)
from tests.sources.pcap.craft import Conn

PID = 4202
T0_MS = int(T0 * 1000)
TXN = ("unregistered-partition", "late-transactional-write", "hanging-transaction", "dangling-transaction",
       "coordinator-abort")


def _txn(fs):
    return [f for f in fs if f["rule"] in TXN]


def _open_txn(partition: int = 2):
    """InitProducerId (timeout 60 s), AddPartitionsToTxn, one accepted transactional Produce."""
    return (init_producer_id(1, PID, 0) + add_partitions(2, PID, 0, partition=partition)
            + send(3, batch(PID, 0, 0, 3, transactional=True), partition=partition, offset=10,
                   txn_id="tx-wire"))


# ---- open transaction at the end of the capture --------------------------------------------------

def test_open_transaction_past_timeout_is_hanging(tmp_path):
    fs = _txn(audit(tmp_path, Conn(_open_txn()), now_ms=T0_MS + 120_000))
    (f,) = fs
    assert f["rule"] == "hanging-transaction"
    assert (f["topic"], f["partition"], f["producer_id"], f["producer_epoch"]) == ("orders", 2, PID, 0)
    d = details(f)
    assert d["start_offset"] == 10 and d["end_txn"] is None
    assert any("past its timeout of 60000 ms" in r for r in d["reasons"])


def test_open_transaction_within_timeout_is_dangling(tmp_path):
    fs = _txn(audit(tmp_path, Conn(_open_txn()), now_ms=T0_MS + 5_000))
    (f,) = fs
    assert f["rule"] == "dangling-transaction"
    assert (f["partition"], f["producer_id"]) == (2, PID)
    assert details(f)["reasons"] == []


def test_open_transaction_committed_is_clean(tmp_path):
    fs = audit(tmp_path, Conn(_open_txn() + end_txn(4, PID, 0)), now_ms=T0_MS + 120_000)
    assert _txn(fs) == []
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "dangling-transaction") == []


# ---- coordinator abort (fencing) -----------------------------------------------------------------

def write_markers(corr: int, pid: int, epoch: int, *, committed: bool, partition: int = 2,
                  topic: str = TOPIC, coordinator_epoch: int = 5, error: int = 0):
    """WriteTxnMarkers v1 (flexible) of one producer and one partition, coordinator to leader."""
    req = (request_header(27, 1, corr, "broker-1", True) + carray(1)
           + i64(pid) + i16(epoch) + boolean(committed)
           + carray(1) + cstring(topic) + carray(1) + i32(partition) + TAGS0
           + i32(coordinator_epoch) + TAGS0 + TAGS0)
    resp = (response_header(corr, True) + carray(1) + i64(pid)
            + carray(1) + cstring(topic) + carray(1) + i32(partition) + i16(error) + TAGS0 + TAGS0
            + TAGS0 + TAGS0)
    return [(0, frame(req)), (1, frame(resp))]


BROKER = dict(client=("10.0.0.3", 50001), server=("10.0.0.2", 9093))   # coordinator -> leader


@pytest.mark.parametrize("fenced_error", [90, 47])
def test_fenced_transaction_is_coordinator_abort(tmp_path, fenced_error):
    """A second instance's InitProducerId bumps the epoch; the coordinator aborts the open
    transaction of epoch 0 with ABORT markers at epoch 1; the old instance's EndTxn is fenced."""
    old = _open_txn() + init_producer_id(4, PID, 1, client_id="wire-producer-2")
    zombie = end_txn(5, PID, 0, error=fenced_error)
    fs = _txn(audit(tmp_path, [Conn(old), Conn(write_markers(1, PID, 1, committed=False), **BROKER),
                               Conn(zombie, client=("10.0.0.1", 40002))]))
    (f,) = by_rule(fs, "coordinator-abort")
    assert (f["producer_id"], f["producer_epoch"], f["transactional_id"]) == (PID, 0, "tx-wire")
    d = details(f)
    assert d["cause"] == "fencing" and d["partitions"] == ["orders-2"]
    assert (d["data_epoch"], d["marker_epoch"]) == (0, 1)
    # the marker ended the data on orders-2: no open transaction is left
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "dangling-transaction") == []


@pytest.mark.parametrize("marker_epoch", [0, 1])
def test_producer_abort_is_not_coordinator_abort(tmp_path, marker_epoch):
    """The producer aborts its own transaction (EndTxn committed=False); the markers (same epoch,
    or the next one as with transaction version 2) are not a coordinator abort."""
    client = _open_txn() + end_txn(4, PID, 0, committed=False)
    fs = _txn(audit(tmp_path, [Conn(client),
                               Conn(write_markers(1, PID, marker_epoch, committed=False), **BROKER)],
                    now_ms=T0_MS + 120_000))
    assert by_rule(fs, "coordinator-abort") == []
    assert fs == []
