"""Crafted captures, positive and negative, for the wire transaction rules (audit/wire_txn.py)."""

from __future__ import annotations

import pytest

from tests.audit.wire.wirecraft import (T0, TOPIC, add_partitions, audit, batch, by_rule, details, end_txn,
                                        init_producer_id, send)
from tests.protocol.wire.wirebytes import (TAGS0, array, boolean, carray, cstring, frame, i8, i16, i32,
                                           i64, nbytes, request_header, response_header, string)
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
    assert any("past its timeout of 1 min" in r for r in d["reasons"])


def test_open_transaction_within_timeout_is_dangling(tmp_path):
    fs = _txn(audit(tmp_path, Conn(_open_txn()), now_ms=T0_MS + 5_000))
    (f,) = fs
    assert f["rule"] == "dangling-transaction"
    assert (f["partition"], f["producer_id"]) == (2, PID)
    assert details(f)["reasons"] == []


def test_open_data_without_the_coordinators_view_is_told_by_its_age(tmp_path):
    """A capture of the leader only (no InitProducerId, no AddPartitionsToTxn): an open
    transaction's data at its end is in progress within the clients' default transaction timeout
    (1 minute: info), unexplained past it (warning), hanging past transaction.max.timeout.ms."""
    data = Conn(send(3, batch(PID, 0, 0, 3, transactional=True), partition=2, offset=10, txn_id="tx-wire"))
    for k, (after_s, want) in enumerate(((5, ("dangling-transaction", "info")),
                                         (300, ("dangling-transaction", "warning")),
                                         (1200, ("hanging-transaction", "critical")))):
        (f,) = _txn(audit(tmp_path, data, now_ms=T0_MS + after_s * 1000, name=f"d{k}.pcap"))
        assert (f["rule"], f["severity"]) == want, after_s
        if after_s == 5:
            assert "within the clients' default transaction timeout of 1 min" in f["message"]


def test_open_transaction_committed_is_clean(tmp_path):
    fs = audit(tmp_path, Conn(_open_txn() + end_txn(4, PID, 0)), now_ms=T0_MS + 120_000)
    assert _txn(fs) == []
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "dangling-transaction") == []


def test_an_open_transaction_whose_leader_connections_lost_bytes_after_it_is_not_told(tmp_path):
    """The same open transaction past its timeout, and a consumer's Fetch to the leader after it
    whose answer the capture lost (a stream gap: the marker may have been served there, or the
    coordinator's WriteTxnMarkers lost whole on its own connection): a capture that lost bytes
    where the marker would be proves no absence - no hanging, no dangling. The same gap on a
    connection to another broker: hanging, as before."""
    fetch = [(0, frame(request_header(1, 4, 1, "wire-consumer", False) + i32(-1) + i32(500) + i32(1)
                       + i32(52428800) + i8(1) + array(1) + string(TOPIC) + array(1) + i32(2) + i64(10)
                       + i32(1048576))),
             (1, frame(response_header(1, False) + i32(0) + array(0)))]
    consumer = dict(client=("10.0.0.4", 41001))
    lost = lambda s: s.conn == 1 and s.direction == 1   # noqa: E731 - the Fetch's answer
    fs = _txn(audit(tmp_path, [Conn(_open_txn()), Conn(fetch, **consumer)], now_ms=T0_MS + 120_000, drop=lost))
    assert fs == [], fs
    other = dict(consumer, server=("10.0.0.9", 9092))
    fs = _txn(audit(tmp_path, [Conn(_open_txn()), Conn(fetch, **other)], now_ms=T0_MS + 120_000, drop=lost,
                    name="other.pcap"))
    assert [f["rule"] for f in fs] == ["hanging-transaction"], fs


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


@pytest.mark.parametrize("fenced_error", [90, 47])
def test_fencing_without_markers_in_the_capture_is_coordinator_abort_not_hanging(tmp_path, fenced_error):
    """A client-side capture: the second instance's InitProducerId gets epoch 1, so the
    coordinator aborted the open transaction of epoch 0 first; its markers went broker to broker,
    outside the capture. That is a coordinator abort by fencing, not a hanging transaction."""
    old = _open_txn() + init_producer_id(4, PID, 1, client_id="wire-producer-2")
    zombie = end_txn(5, PID, 0, error=fenced_error)
    fs = _txn(audit(tmp_path, [Conn(old), Conn(zombie, client=("10.0.0.1", 40002))],
                    now_ms=T0_MS + 120_000))
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "dangling-transaction") == []
    (f,) = by_rule(fs, "coordinator-abort")
    d = details(f)
    assert (f["producer_id"], f["producer_epoch"], f["transactional_id"]) == (PID, 0, "tx-wire")
    assert (d["cause"], d["partitions"], d["new_epoch"], d["markers_seen"]) == ("fencing", ["orders-2"], 1, False)


def test_a_failed_init_producer_id_does_not_end_the_transaction(tmp_path):
    """InitProducerId answered with an error (CONCURRENT_TRANSACTIONS, 51) bumps nothing: the
    open transaction past its timeout stays hanging."""
    old = _open_txn() + init_producer_id(4, PID, 1, client_id="wire-producer-2", error=51)
    fs = _txn(audit(tmp_path, [Conn(old)], now_ms=T0_MS + 120_000))
    assert by_rule(fs, "coordinator-abort") == []
    assert [f["partition"] for f in by_rule(fs, "hanging-transaction")] == [2]


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


# ---- lso-stuck (audit/wire/wire_lso.py) ---------------------------------------------------------------

def fetch(corr: int, hw: int, lso: int, *, partition: int = 2, fetch_offset: int = 10,
          isolation: int = 1, client_id: str = "wire-consumer"):
    """Fetch v4 of one partition (isolation 1: read_committed), answered with no records."""
    req = (request_header(1, 4, corr, client_id, False)
           + i32(-1) + i32(500) + i32(1) + i32(52428800) + i8(isolation)
           + array(1) + string(TOPIC) + array(1) + i32(partition) + i64(fetch_offset) + i32(1048576))
    resp = (response_header(corr, False) + i32(0)
            + array(1) + string(TOPIC)
            + array(1) + i32(partition) + i16(0) + i64(hw) + i64(lso)
            + array(0) + nbytes(b""))
    return [(0, frame(req)), (1, frame(resp))]


def _fetches(points, **kw):
    return Conn([m for i, (hw, lso) in enumerate(points) for m in fetch(i + 1, hw, lso, **kw)],
                client=("10.0.0.4", 41001))


SLOW = {"delay": lambda i, p: 2.0}   # 2 s before every packet: the fetches span well over 10 s


def test_lso_stuck_behind_open_transaction(tmp_path):
    fs = audit(tmp_path, _fetches([(13, 10), (15, 10), (17, 10), (19, 10)]), timed=SLOW)
    (f,) = by_rule(fs, "lso-stuck")
    assert (f["topic"], f["partition"], f["first_offset"]) == ("orders", 2, 10)
    d = details(f)
    assert d["last_stable_offset"] == 10 and d["responses"] == 4
    assert d["high_watermarks"] == [13, 19] and d["span_s"] >= 10


def _held_by(two_pc: bool, offset: int = 10):
    """The producer whose open transaction starts at orders-2 offset `offset`: InitProducerId
    (v6 with Enable2Pc: KIP-939 two-phase commit; else v4), AddPartitionsToTxn, one accepted
    transactional Produce; it never ends."""
    from tests.sim.wire import init_producer_id_v6

    init = (init_producer_id_v6(1, PID, 0, txn_id="tx-wire", enable_2pc=True, client_id="wire-producer")
            if two_pc else init_producer_id(1, PID, 0))
    return Conn(init + add_partitions(2, PID, 0, partition=2)
                + send(3, batch(PID, 0, 0, 3, transactional=True), partition=2, offset=offset, txn_id="tx-wire"))


@pytest.mark.parametrize("delay, severity", [(2.0, "warning"), (400.0, "error")])
def test_lso_stuck_behind_plain_transaction_still_warns(tmp_path, delay, severity):
    """A plain transaction (no Enable2Pc) whose data is at the LSO: its coordinator times it out,
    so a stuck LSO is a warning, an error past transaction.max.timeout.ms (15 min)."""
    fs = audit(tmp_path, [_held_by(False), _fetches([(13, 10), (15, 10), (17, 10), (19, 10)])],
               timed={"delay": lambda i, p: delay})
    (f,) = by_rule(fs, "lso-stuck")
    assert f["severity"] == severity and f["producer_id"] is None
    assert "two_phase_commit" not in details(f)


@pytest.mark.parametrize("delay", [2.0, 400.0])
def test_lso_held_by_two_phase_commit_transaction_is_info(tmp_path, delay):
    """KIP-939: the transaction at the LSO is a two-phase-commit one (its InitProducerId asked
    Enable2Pc): its coordinator never times it out, it holds the LSO until its external
    transaction manager decides - told at info, naming it, however long (no warning, no error)."""
    fs = audit(tmp_path, [_held_by(True), _fetches([(13, 10), (15, 10), (17, 10), (19, 10)])],
               timed={"delay": lambda i, p: delay})
    (f,) = by_rule(fs, "lso-stuck")
    assert f["severity"] == "info"
    assert (f["partition"], f["first_offset"], f["producer_id"], f["producer_epoch"]) == (2, 10, PID, 0)
    d = details(f)
    assert d["two_phase_commit"] is True and d["transactional_id"] == "tx-wire"
    assert "external transaction manager" in f["message"] and "KIP-939" in f["message"]


def test_lso_stuck_where_the_two_phase_commit_data_is_not_shown_still_warns(tmp_path):
    """A two-phase-commit producer's data at offset 12, the LSO stuck at 10: the capture does not
    show whose transaction holds the LSO, so it is not excused."""
    fs = audit(tmp_path, [_held_by(True, offset=12), _fetches([(13, 10), (15, 10), (17, 10), (19, 10)])],
               timed=SLOW)
    (f,) = by_rule(fs, "lso-stuck")
    assert f["severity"] == "warning" and f["producer_id"] is None


def test_lso_advancing_is_not_stuck(tmp_path):
    fs = audit(tmp_path, _fetches([(13, 10), (15, 13), (17, 15), (19, 17)]), timed=SLOW)
    assert by_rule(fs, "lso-stuck") == []


def test_lso_constant_but_briefly_is_not_stuck(tmp_path):
    """Same LSO in four responses within a fraction of a second: below MIN_SPAN_S."""
    fs = audit(tmp_path, _fetches([(13, 10), (15, 10), (17, 10), (19, 10)]))
    assert by_rule(fs, "lso-stuck") == []


def test_lso_constant_in_read_uncommitted_is_not_judged(tmp_path):
    fs = audit(tmp_path, _fetches([(13, 10), (15, 10), (17, 10), (19, 10)], isolation=0), timed=SLOW)
    assert by_rule(fs, "lso-stuck") == []
