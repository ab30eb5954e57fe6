"""Epochs and outcomes over one producer's history, on crafted captures, under transaction
version 0/1 and 2: a zombie's Produce accepted on a partition its transaction never registered
and exposed by the new instance's COMMIT; a Produce accepted (error 0) after its epoch's fencing
began at the coordinator, aborted by the fencing's marker (told at info); an admin's abort of
two of three partitions of an open transaction the producer then commits (the story told on the
damaged partitions, its timeline that transaction's); a marker re-sent after a coordinator
failover (not an anomaly)."""

from __future__ import annotations

import pytest

from kaudit.audit.stories import incidents
from kaudit.report import story as stories
from tests.audit.wire.test_wire_txn_versions import PID, T0_MS, Story, run
from tests.audit.wire.wirecraft import add_partitions, batch, by_rule, details, init_producer_id, send
from tests.audit.wire.wirecraft_txn import describe_producers, markers


def serious(fs):
    return [f for f in fs if f["severity"] in ("warning", "error", "critical")]


def fence(s: Story, corr: int, tv: int):
    """A new instance's InitProducerId (epoch 2) fences the open transaction: the coordinator's
    ABORT markers at epoch 1 on the registered partitions."""
    parts = [("orders", p) for p in s.open]
    s.on("client", init_producer_id(corr, PID, 2, txn_id="tx-wire", client_id="wire-producer-2"))
    s.on("coord", markers(corr + 1, PID, 1, committed=False, parts=parts))
    s.epoch, s.open, s.seq = 2, [], {}


@pytest.mark.parametrize("tv", [1, 2])
def test_zombie_on_unregistered_partition_exposed_by_commit(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0)
    fence(s, 40, tv)
    # the zombie (epoch 0) writes to orders-1, never registered: the broker stores it
    s.on("client", send(50, batch(PID, 0, 1, 1, transactional=True), partition=1, offset=0, txn_id="tx-wire"))
    s.send(1, 1)
    s.end(True)
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (z,) = by_rule(fs, "write-after-epoch-end")
    assert (z["severity"], z["topic"], z["partition"], z["first_offset"], z["producer_epoch"]) == \
        ("critical", "orders", 1, 0, 0)
    assert details(z)["outcome"] == "committed" and "accepted" in z["message"] or "inside" in z["message"]
    (m,) = by_rule(fs, "mixed-epoch-transaction")
    assert details(m)["epochs"] == [0, 2]
    incidents.assign(fs)
    (inc,) = [i for i in stories.incidents(fs, None) if i["severity"] == "critical"]
    assert inc["kind"] == "zombie"
    assert "orders-1@0 were stored and a later COMMIT exposed them" in inc["narrative"]["impact"]
    assert "not stored" not in inc["narrative"]["impact"]


@pytest.mark.parametrize("tv", [1, 2])
def test_produce_accepted_after_fencing_began_is_told(tmp_path, tv):
    """The zombie's Produce reaches the leader after the new instance's InitProducerId and before
    the fencing's ABORT marker: accepted (error 0), then aborted by that marker. The race every
    fencing has: told at info, with what became of the data; nothing above info."""
    s = Story(tv)
    s.send(0, 0)
    parts = [("orders", 0)]
    s.on("client", init_producer_id(40, PID, 2, txn_id="tx-wire", client_id="wire-producer-2"))
    s.on("client", send(41, batch(PID, 0, 1, 1, transactional=True), partition=0, offset=1, txn_id="tx-wire"))
    s.on("coord", markers(42, PID, 1, committed=False, parts=parts))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (z,) = by_rule(fs, "write-after-epoch-end")
    assert (z["severity"], z["first_offset"], details(z)["outcome"]) == ("info", 1, "aborted")
    assert "accepted (error 0) after epoch 0 was fenced" in z["message"]
    assert "discarded it" in z["message"]
    assert serious(fs) == [], [(f["rule"], f["message"]) for f in serious(fs)]
    incidents.assign(fs)
    (inc,) = [i for i in stories.incidents(fs, None) if i["kind"] == "zombie"]
    assert "refused" not in inc["narrative"]["impact"]


def _fencing_answered_concurrent(s: Story, *, produce_first: bool):
    """Kafka's order: the new instance's InitProducerId is answered CONCURRENT_TRANSACTIONS once the
    coordinator has written PrepareAbort (handleInitProducerId); the fencing's ABORT markers go out;
    the retry gets epoch 2. The zombie's Produce (epoch 0, registered orders-0) is accepted before
    the new instance's request (`produce_first`) or after it, before the markers."""
    init = init_producer_id(40, -1, -1, txn_id="tx-wire", error=51, client_id="wire-producer-2")
    zombie = send(41, batch(PID, 0, 1, 1, transactional=True), partition=0, offset=1, txn_id="tx-wire")
    s.on("client" if produce_first else "client2", zombie if produce_first else init[:1])
    s.on("client2" if produce_first else "client", init[:1] if produce_first else zombie)
    s.on("coord", markers(42, PID, 1, committed=False, parts=[("orders", 0)]))
    s.on("client2", init[1:])
    s.on("client2", init_producer_id(43, PID, 2, txn_id="tx-wire", client_id="wire-producer-2"))


@pytest.mark.parametrize("tv", [1, 2])
def test_produce_accepted_while_init_producer_id_waits_on_the_fencing_is_told(tmp_path, tv):
    """The fencing began with the new instance's request, not with the markers: a Produce the
    leader accepted in between is told at info, aborted by the fencing's marker."""
    s = Story(tv)
    s.send(0, 0)
    _fencing_answered_concurrent(s, produce_first=False)
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (z,) = by_rule(fs, "write-after-epoch-end")
    assert (z["severity"], z["first_offset"], details(z)["outcome"]) == ("info", 1, "aborted")
    assert serious(fs) == [], [(f["rule"], f["message"]) for f in serious(fs)]


@pytest.mark.parametrize("tv", [1, 2])
def test_produce_accepted_before_the_new_instance_asked_is_not_stale(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0)
    _fencing_answered_concurrent(s, produce_first=True)
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    assert by_rule(fs, "write-after-epoch-end") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_clean_fencing_is_quiet(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0)
    fence(s, 40, tv)
    s.send(0, 2)
    s.end(True)
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    assert serious(fs) == [] and by_rule(fs, "write-after-epoch-end") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_admin_abort_of_two_partitions_then_commit(tmp_path, tv):
    s = Story(tv)
    for p in (0, 1, 2):
        s.send(p, 0)
    s.on("admin", describe_producers(90, partition=1, pid=PID, epoch=0, start_offset=0))
    s.on("admin", markers(91, PID, 0, committed=False, parts=[("orders", 1), ("orders", 2)], client_id="adminclient-1"))
    s.send(1, 2)
    s.end(True)
    s.send(0, 2)      # the next transaction
    s.end(True)
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (t,) = by_rule(fs, "torn-transaction")
    d = details(t)
    assert (t["topic"], t["partition"]) == ("orders", 1)
    assert [x[0] for x in d["damaged"]] == ["orders-1", "orders-2"]
    assert d["writers"] == {"orders-0": "coordinator", "orders-1": "admin", "orders-2": "admin"}
    assert any(n["tp"] == "orders-2" and "already been aborted" in n["why"] for n in d["ends_nothing"])
    # the timeline is the torn transaction's, not the next one's
    assert not any("Produce orders-0 epoch %d seq 1" % (1 if tv == 2 else 0) in line for line in t["timeline"])
    incidents.assign(fs)
    (inc,) = [i for i in stories.incidents(fs, None) if i["kind"] == "torn"]
    assert inc["title"].startswith("Torn transaction on orders-1, orders-2")
    assert inc["topic_partitions"] == ["orders-0", "orders-1", "orders-2"]


@pytest.mark.parametrize("tv", [1, 2])
def test_resent_markers_after_coordinator_failover(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0)
    s.send(1, 0)
    s.end(True)
    me = 1 if tv == 2 else 0
    s.on("coord", markers(60, PID, me, committed=True, parts=[("orders", 0), ("orders", 1)], coordinator_epoch=1))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    assert serious(fs) == [], [(f["rule"], f["message"]) for f in serious(fs)]


def init_v6(corr: int, pid: int, epoch: int, *, keep: bool = False, client_id: str = "tpc-producer"):
    """InitProducerId v6 (KIP-939) with Enable2Pc, answered with `epoch` (the ongoing
    transaction's id and epoch when it keeps a prepared one)."""
    from tests.protocol.wire.wirebytes import TAGS0, boolean, cstring, frame, i16, i32, i64, request_header, response_header

    req = (request_header(22, 6, corr, client_id, True) + cstring("tx-wire") + i32(60000) + i64(-1) + i16(-1)
           + boolean(True) + boolean(keep) + TAGS0)
    ongoing = (i64(pid) + i16(epoch - 1)) if keep else (i64(-1) + i16(-1))
    resp = response_header(corr, True) + i32(0) + i16(0) + i64(pid) + i16(epoch) + ongoing + TAGS0
    return [(0, frame(req)), (1, frame(resp))]


@pytest.mark.parametrize("tv", [1, 2])
def test_two_phase_commit_prepared_transaction_is_not_hanging(tmp_path, tv):
    """KIP-939: a producer with Enable2Pc has no transaction timeout; its transaction, open 20
    minutes when the capture ends, is in progress (dangling), not hanging; a new instance that
    keeps the prepared transaction (KeepPreparedTxn) does not fence it, and commits it."""
    s = Story(tv)
    s.events.clear()
    s.on("client", init_v6(1, PID, 0))
    s.send(0, 0)
    fs = run(tmp_path, s, now_ms=T0_MS + 20 * 60_000)
    assert by_rule(fs, "hanging-transaction") == []
    assert [f["rule"] for f in serious(fs)] == ["dangling-transaction"]
    s.on("client", init_v6(30, PID, 1, keep=True))
    s.epoch = 1
    s.end(True)
    fs = run(tmp_path, s, now_ms=T0_MS + 20 * 60_000)
    assert serious(fs) == [], [(f["rule"], f["message"]) for f in serious(fs)]
    assert by_rule(fs, "coordinator-abort") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_zombie_on_unregistered_partition_left_open(tmp_path, tv):
    """The zombie's accepted Produce on a partition nothing registered, no later commit: stored
    after its epoch was fenced, no marker ends it; its data joins no transaction of the
    coordinator (a fenced epoch opens none)."""
    s = Story(tv)
    s.send(0, 0)
    fence(s, 40, tv)
    s.on("client", send(50, batch(PID, 0, 1, 1, transactional=True), partition=1, offset=0, txn_id="tx-wire"))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (z,) = by_rule(fs, "write-after-epoch-end")
    assert (z["severity"], z["partition"], details(z)["outcome"], details(z)["how_known"]) == ("error", 1, "open", "time")
    assert "accepted (error 0) after epoch 0 was fenced" in z["message"]
    assert {f["rule"] for f in serious(fs)} >= {"write-after-epoch-end", "hanging-transaction"}


@pytest.mark.parametrize("tv", [1, 2])
def test_zombie_data_on_a_leader_no_marker_reached_is_hanging(tmp_path, tv):
    """The zombie's Produce to a partition led by another broker, which no marker of the capture
    reached: its epoch was fenced and no transaction of the coordinator lists the partition, so
    nothing will end it - hanging (not 'still open at the coordinator'), within its timeout."""
    s = Story(tv)
    s.send(0, 0)
    fence(s, 40, tv)
    s.on("client-b3", send(50, batch(PID, 0, 1, 1, transactional=True), partition=1, offset=0, txn_id="tx-wire"))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (h,) = by_rule(fs, "hanging-transaction")
    assert (h["severity"], h["partition"]) == ("critical", 1)
    assert "its epoch 0 was fenced" in h["message"]
    assert by_rule(fs, "dangling-transaction") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_open_data_of_the_live_epoch_on_another_leader_is_dangling(tmp_path, tv):
    """The twin: the producer's own open transaction (epoch 0, not fenced) on that leader, within
    its timeout: dangling, not hanging."""
    s = Story(tv)
    s.send(0, 0)
    if tv == 1:
        s.on("client", add_partitions(49, PID, 0, partition=1, txn_id="tx-wire"))
    s.on("client-b3", send(50, batch(PID, 0, 0, 1, transactional=True), partition=1, offset=0, txn_id="tx-wire"))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    assert by_rule(fs, "hanging-transaction") == []


def _one_partition_story(tv: int, admin: bool) -> Story:
    """A one-partition transaction (an admin's abort of it while open, or none), written again and
    committed; the next transaction on the same partition aborts."""
    s = Story(tv)
    s.send(0, 0)
    if admin:
        s.on("admin", markers(91, PID, 0, committed=False, parts=[("orders", 0)], client_id="adminclient-1"))
    s.send(0, 2 if admin else 1)
    s.end(True)
    s.send(0, 4 if admin else 3)
    s.end(False)
    return s


@pytest.mark.parametrize("tv", [1, 2])
def test_admin_abort_of_a_one_partition_transaction_then_commit(tmp_path, tv):
    fs = run(tmp_path, _one_partition_story(tv, True), now_ms=T0_MS + 5_000)
    (t,) = by_rule(fs, "torn-transaction")
    assert (t["topic"], t["partition"], t["first_offset"]) == ("orders", 0, 0)
    assert [x[0] for x in details(t)["damaged"]] == ["orders-0"]


@pytest.mark.parametrize("tv", [1, 2])
def test_commit_then_abort_on_one_partition_is_quiet(tmp_path, tv):
    fs = run(tmp_path, _one_partition_story(tv, False), now_ms=T0_MS + 5_000)
    assert serious(fs) == [], [(f["rule"], f["message"]) for f in serious(fs)]
