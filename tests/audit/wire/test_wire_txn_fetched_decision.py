"""What one fetched marker proves about a transaction's other partitions (audit/txn/txn_fetched.py
`decides`), under transaction versions 0/1 and 2. The coordinator writes its decision's marker to
every registered partition; its own abort bumps the epoch (0/1: the timeout/fencing abort; 2:
every end), and only it commits - so a fetched COMMIT, or an ABORT at the data's epoch + 1, ends
the whole transaction (the other partitions' markers just not in the capture). An admin's abort
(kafka-transactions.sh abort: one partition, at the data's epoch) proves nothing about the others.
Crafted captures: the producer's requests, the consumers' Fetch responses serving the markers, no
coordinator WriteTxnMarkers unless said."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures import kafka_encoder as ke
from tests.audit.wire.test_wire_txn_versions import PID, T0_MS, Story, run, txn
from tests.audit.wire.wirecraft import TS, add_partitions, by_rule, details, end_txn
from tests.audit.wire.wirecraft_txn import describe_producers, markers
from tests.protocol.wire.wirebytes import array, frame, i8, i16, i32, i64, nbytes, request_header, response_header, string

LATE = T0_MS + 300_000   # the reference time: past the 60 s transaction timeout


def served(corr: int, partition: int, offset: int, kind: str, epoch: int, coordinator_epoch: int = 0):
    """A consumer's Fetch v4 of orders-`partition` from `offset`, answered with one control batch
    (the producer's `kind` marker at `offset`, of `epoch`)."""
    records = ke.encode_control_batch(offset, PID, epoch, kind, coordinator_epoch, TS)
    req = (request_header(1, 4, corr, "wire-consumer", False) + i32(-1) + i32(500) + i32(1) + i32(52428800)
           + i8(0) + array(1) + string("orders") + array(1) + i32(partition) + i64(offset) + i32(1048576))
    resp = (response_header(corr, False) + i32(0) + array(1) + string("orders") + array(1) + i32(partition)
            + i16(0) + i64(offset + 1) + i64(offset + 1) + array(0) + nbytes(records))
    return [(0, frame(req)), (1, frame(resp))]


class Consumed(Story):
    ENDS = dict(Story.ENDS, consumer=dict(client=("10.0.0.4", 41001), server=("10.0.0.2", 9092)))

    def fetch(self, partition: int, offset: int, kind: str, epoch: int) -> None:
        self.on("consumer", served(self._c(), partition, offset, kind, epoch))


def _two_partitions(tv: int) -> Consumed:
    """A producer writes orders-0 (offset 0) and orders-1 (offset 0) in one transaction, then dies:
    no EndTxn."""
    s = Consumed(tv)
    s.send(0, 0)
    s.send(1, 0)
    return s


@pytest.mark.parametrize("tv", [1, 2])
def test_timeout_abort_fetched_on_one_partition_ends_the_transaction(tmp_path, tv):
    """The coordinator times the transaction out (ABORT at epoch 1 on both partitions, outside the
    capture); a consumer fetches orders-0's only: nothing hanging - a coordinator abort whose
    marker on orders-1 was not seen."""
    s = _two_partitions(tv)
    s.fetch(0, 1, "ABORT", 1)
    fs = txn(run(tmp_path, s, now_ms=LATE))
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "dangling-transaction") == []
    (f,) = fs
    assert f["rule"] == "coordinator-abort" and f["severity"] == "info"
    d = details(f)
    assert d["markers_unseen"] == ["orders-1"] and d["marker_epoch"] == 1 and d["data_epoch"] == 0
    assert "orders-1 was not seen in the capture" in f["message"]
    assert "served to consumers" in f["message"]


def test_timeout_abort_fetched_on_a_registered_partition_without_data(tmp_path):
    """Version 0/1: orders-2 registered but never written; its ABORT (epoch 1) is the only marker
    a consumer fetches: it ends the transaction - orders-0 and orders-1 are not hanging."""
    s = _two_partitions(1)
    s.on("client", add_partitions(s._c(), PID, 0, partition=2))
    s.fetch(2, 5, "ABORT", 1)
    fs = txn(run(tmp_path, s, now_ms=LATE))
    (f,) = fs
    assert f["rule"] == "coordinator-abort"
    assert details(f)["markers_unseen"] == ["orders-0", "orders-1"]


@pytest.mark.parametrize("tv", [1, 2])
def test_commit_fetched_on_one_partition_ends_the_transaction(tmp_path, tv):
    """The EndTxn is not in the capture, but a consumer fetches orders-0's COMMIT (epoch 0 under
    0/1, 1 under 2): only the coordinator commits - orders-1 is committed too, unseen."""
    s = _two_partitions(tv)
    s.fetch(0, 1, "COMMIT", 1 if tv == 2 else 0)
    assert txn(run(tmp_path, s, now_ms=LATE)) == []


@pytest.mark.parametrize("tv", [1, 2])
def test_admin_abort_fetched_on_one_partition_leaves_the_other_hanging(tmp_path, tv):
    """kafka-transactions.sh abort of orders-0 (ABORT at the data's epoch 0, its WriteTxnMarkers
    not in the capture): it proves nothing about orders-1, still hanging past the timeout."""
    s = _two_partitions(tv)
    s.fetch(0, 1, "ABORT", 0)
    fs = txn(run(tmp_path, s, now_ms=LATE))
    assert [(f["rule"], f["partition"]) for f in fs] == [("hanging-transaction", 1)]
    assert by_rule(fs, "coordinator-abort") == []


@pytest.mark.parametrize("tv", [1, 2])
@pytest.mark.parametrize("epoch", [0, 1])
def test_admin_abort_captured_proves_nothing_whatever_its_epoch(tmp_path, tv, epoch):
    """The admin's DescribeProducers and WriteTxnMarkers (adminclient-1) are in the capture, and a
    consumer fetches that marker: an admin's marker ends its partition only, even at epoch + 1."""
    s = _two_partitions(tv)
    s.on("admin", describe_producers(90, partition=0, pid=PID, epoch=0, start_offset=0))
    s.on("admin", markers(91, PID, epoch, committed=False, parts=[("orders", 0)], client_id="adminclient-1"))
    s.fetch(0, 1, "ABORT", epoch)
    fs = txn(run(tmp_path, s, now_ms=LATE))
    assert [(f["rule"], f["partition"]) for f in fs] == [("hanging-transaction", 1)]


@pytest.mark.parametrize("tv", [1, 2])
@pytest.mark.parametrize("commit_first", [True, False])
def test_admin_abort_beside_a_fetched_commit_is_torn(tmp_path, tv, commit_first):
    """An admin aborted orders-1 (ABORT at epoch 0) and the coordinator committed (orders-0's
    COMMIT fetched): torn, whichever marker a consumer read first."""
    s = _two_partitions(tv)
    commit = (0, 1, "COMMIT", 1 if tv == 2 else 0)
    abort = (1, 1, "ABORT", 0)
    for f in ((commit, abort) if commit_first else (abort, commit)):
        s.fetch(*f)
    fs = txn(run(tmp_path, s, now_ms=LATE))
    (t,) = by_rule(fs, "torn-transaction")
    d = details(t)
    assert d["coordinator_result"] == "COMMIT" and d["results"]["orders-1"] == "ABORT"
    assert by_rule(fs, "hanging-transaction") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_no_marker_fetched_stays_hanging(tmp_path, tv):
    """Nothing in the capture ends it: both partitions hanging past the timeout."""
    fs = txn(run(tmp_path, _two_partitions(tv), now_ms=LATE))
    assert sorted((f["rule"], f["partition"]) for f in fs) == [("hanging-transaction", 0), ("hanging-transaction", 1)]


def test_an_earlier_transactions_marker_read_late_proves_nothing(tmp_path):
    """Version 0/1: a first transaction on orders-0 and orders-1 committed (EndTxn, markers not
    in the capture), a second one writes orders-0 only and dies. A lagging consumer then reads
    orders-1's COMMIT (epoch 0, no data of the second transaction there): it may be the first
    transaction's - it ends nothing of the second, still hanging on orders-0."""
    s = Consumed(1)
    s.send(0, 0)
    s.send(1, 0)
    s.on("client", end_txn(s._c(), PID, 0, committed=True))
    s.open = []
    s.send(0, 2)
    s.on("client", add_partitions(s._c(), PID, 0, partition=1))
    s.fetch(1, 1, "COMMIT", 0)
    fs = txn(run(tmp_path, s, now_ms=LATE))
    assert [(f["rule"], f["partition"], f["first_offset"]) for f in fs] == [("hanging-transaction", 0, 2)]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tv=st.sampled_from([1, 2]), n=st.integers(2, 4), data=st.data())
def test_generated_which_partitions_stay_open(tmp_path_factory, tv, n, data):
    """Any number of written partitions, markers fetched on any non-empty subset: the
    coordinator's timeout abort (epoch + 1) leaves none open and names the rest unseen; an
    admin's abort (the data's epoch) of a proper subset leaves exactly the others hanging."""
    seen = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n), label="fetched")
    admin = data.draw(st.booleans(), label="admin") and len(seen) < n
    s = Consumed(tv)
    for p in range(n):
        s.send(p, 0)
    for p in sorted(seen):
        s.fetch(p, 1, "ABORT", 0 if admin else 1)
    fs = txn(run(tmp_path_factory.mktemp("gen"), s, now_ms=LATE))
    if admin:
        assert sorted((f["rule"], f["partition"]) for f in fs) == [
            ("hanging-transaction", p) for p in range(n) if p not in seen]
    else:
        (f,) = fs
        assert f["rule"] == "coordinator-abort"
        assert details(f).get("markers_unseen", []) == sorted(f"orders-{p}" for p in range(n) if p not in seen)


def test_hanging_beside_an_admin_abort_says_why_that_abort_does_not_end_it(tmp_path):
    """The words follow the evidence: orders-1 hanging, its message saying the ABORT at epoch 0 on
    orders-0 is no decision for it."""
    s = _two_partitions(1)
    s.fetch(0, 1, "ABORT", 0)
    (f,) = txn(run(tmp_path, s, now_ms=LATE))
    assert f["rule"] == "hanging-transaction" and f["partition"] == 1
    assert "the ABORT at epoch 0 on orders-0 does not end it" in f["message"]
    assert details(f)["aborted_elsewhere"] == ["orders-0"]
