"""Markers a consumer fetched end transactions (audit/txn/txn_wire_feed.py `fetched`): a capture of
client traffic only, where the coordinator's WriteTxnMarkers went broker to broker outside it, still
shows each partition's COMMIT/ABORT control batch in the Fetch responses that serve it - the
leader's log, the same evidence a marker on disk is. Crafted positive and negative cases."""

from __future__ import annotations

from fixtures import kafka_encoder as ke
from tests.audit.wire.test_wire_txn_crafted import BROKER, write_markers
from tests.audit.wire.wirecraft import (T0, TOPIC, TS, add_partitions, audit, batch, by_rule, details, end_txn,
                                        init_producer_id, send)
from tests.protocol.wire.wirebytes import array, frame, i8, i16, i32, i64, nbytes, request_header, response_header, string
from tests.sources.pcap.craft import Conn

PID = 4303
T0_MS = int(T0 * 1000)
CONSUMER = dict(client=("10.0.0.4", 41001))
OTHER = dict(client=("10.0.0.5", 41002))
TXN = ("unregistered-partition", "late-transactional-write", "hanging-transaction", "dangling-transaction",
       "coordinator-abort", "torn-transaction", "transaction-outcome-mismatch")


def data(base: int, seq: int, epoch: int = 0, n: int = 3) -> bytes:
    recs = [{"value": f"v{base + i}".encode(), "timestamp_delta": i} for i in range(n)]
    return ke.encode_record_batch_v2(base, recs, producer_id=PID, producer_epoch=epoch, base_sequence=seq,
                                     is_transactional=True, base_timestamp=TS)


def marker(base: int, kind: str, epoch: int, coordinator_epoch: int = 5) -> bytes:
    return ke.encode_control_batch(base, PID, epoch, kind, coordinator_epoch, TS)


def fetch(corr: int, records: bytes, *, partition: int = 2, fetch_offset: int = 10, isolation: int = 0,
          client_id: str = "wire-consumer"):
    """Fetch v4 of one partition answered with `records` (high watermark and LSO past them)."""
    req = (request_header(1, 4, corr, client_id, False)
           + i32(-1) + i32(500) + i32(1) + i32(52428800) + i8(isolation)
           + array(1) + string(TOPIC) + array(1) + i32(partition) + i64(fetch_offset) + i32(1048576))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(TOPIC)
            + array(1) + i32(partition) + i16(0) + i64(100) + i64(100) + array(0) + nbytes(records))
    return [(0, frame(req)), (1, frame(resp))]


def _producer(partitions=(2,), end=None):
    """InitProducerId (timeout 60 s), AddPartitionsToTxn and one accepted batch per partition
    (offset 10), then `end` (EndTxn exchanges) if given."""
    out = init_producer_id(1, PID, 0)
    corr = 2
    for p in partitions:
        out += add_partitions(corr, PID, 0, partition=p)
        out += send(corr + 1, batch(PID, 0, 0, 3, transactional=True), partition=p, offset=10, txn_id="tx-wire")
        corr += 2
    return out + (end or [])


def _late():
    """Write the producer at T0 and every later connection 61 s on (past its 60 s timeout)."""
    moved = []

    def delay(i, p):
        if p.conn >= 1 and not moved:
            moved.append(i)
            return 61.0
        return 0.0
    return {"delay": delay}


def _audit(tmp_path, conns, **kw):
    return [f for f in audit(tmp_path, conns, timed=_late(), now_ms=T0_MS + 300_000, **kw)
            if f["rule"] in TXN]


def test_fetched_abort_at_bumped_epoch_ends_the_dead_producers_transaction(tmp_path):
    """(a) The producer dies mid-transaction; the coordinator times it out and writes ABORT at
    epoch 1 (outside the capture); a consumer fetches it: no hanging transaction, a coordinator
    abort (timeout) told from the fetched marker."""
    consumer = fetch(1, data(10, 0) + marker(13, "ABORT", 1))
    fs = _audit(tmp_path, [Conn(_producer()), Conn(consumer, **CONSUMER)])
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "dangling-transaction") == []
    (f,) = by_rule(fs, "coordinator-abort")
    assert f["severity"] == "info"
    assert (f["topic"], f["partition"], f["producer_id"], f["producer_epoch"]) == (TOPIC, 2, PID, 0)
    d = details(f)
    assert d["cause"] == "timeout" and d["partitions"] == ["orders-2"]
    assert (d["data_epoch"], d["marker_epoch"]) == (0, 1)
    assert any(e["kind"] == "marker" for e in f["evidence"])
    assert fs == [f]


def test_many_consumers_fetching_the_marker_are_one_marker(tmp_path):
    """Two consumers (and a refetch) see the same ABORT at offset 13: one end, one finding."""
    records = data(10, 0) + marker(13, "ABORT", 1)
    consumers = [Conn(fetch(1, records) + fetch(2, records), **CONSUMER), Conn(fetch(1, records), **OTHER)]
    fs = _audit(tmp_path, [Conn(_producer())] + consumers)
    assert [f["rule"] for f in fs] == ["coordinator-abort"]


def test_no_marker_fetched_stays_hanging(tmp_path):
    """(b) The producer dies and no consumer ever sees a marker (only its data): hanging."""
    consumer = fetch(1, data(10, 0))
    fs = _audit(tmp_path, [Conn(_producer()), Conn(consumer, **CONSUMER)])
    assert [(f["rule"], f["partition"]) for f in fs] == [("hanging-transaction", 2)]


def test_a_marker_of_another_producer_or_below_the_data_ends_nothing(tmp_path):
    """A marker fetched on the partition that is another producer's, or one at an offset below
    the producer's data (an earlier transaction's), does not end the open transaction."""
    other = ke.encode_control_batch(8, PID + 1, 1, "ABORT", 5, TS)
    consumer = fetch(1, other + data(10, 0), fetch_offset=8)
    fs = _audit(tmp_path, [Conn(_producer()), Conn(consumer, **CONSUMER)])
    assert [(f["rule"], f["partition"]) for f in fs] == [("hanging-transaction", 2)]


def test_fetched_commit_after_end_txn_adds_nothing(tmp_path):
    """(c) EndTxn COMMIT answered, the coordinator's WriteTxnMarkers in the capture, and a consumer
    fetching the same COMMIT marker: one transaction, committed, no finding."""
    producer = _producer(end=end_txn(9, PID, 0))
    consumer = fetch(1, data(10, 0) + marker(13, "COMMIT", 0))
    conns = [Conn(producer), Conn(write_markers(1, PID, 0, committed=True), **BROKER), Conn(consumer, **CONSUMER)]
    assert _audit(tmp_path, conns) == []
    # and without the WriteTxnMarkers: the fetched COMMIT alone
    assert _audit(tmp_path, [Conn(producer), Conn(consumer, **CONSUMER)], name="b.pcap") == []


def test_coordinator_abort_fetched_on_one_partition_ends_the_other(tmp_path):
    """(d) Two registered partitions; a consumer fetches the ABORT of partition 2 only, at epoch 1
    (the coordinator's bump: its own abort, which it writes to every registered partition):
    partition 3 is aborted too, its marker not seen - no hanging, a coordinator abort saying so."""
    consumer = fetch(1, data(10, 0) + marker(13, "ABORT", 1))
    fs = _audit(tmp_path, [Conn(_producer((2, 3))), Conn(consumer, **CONSUMER)])
    (f,) = fs
    assert f["rule"] == "coordinator-abort" and details(f)["markers_unseen"] == ["orders-3"]


def test_admin_abort_fetched_on_one_partition_leaves_the_other_hanging(tmp_path):
    """(d') The same with the ABORT at the data's epoch 0 (an admin's kafka-transactions.sh abort
    of partition 2): it proves nothing about partition 3, still hanging."""
    consumer = fetch(1, data(10, 0) + marker(13, "ABORT", 0))
    fs = _audit(tmp_path, [Conn(_producer((2, 3))), Conn(consumer, **CONSUMER)])
    assert [(f["rule"], f["partition"]) for f in fs] == [("hanging-transaction", 3)]


def test_a_later_transactions_marker_does_not_end_committed_data(tmp_path):
    """The producer committed (EndTxn COMMIT, its marker at 13 never fetched); a consumer fetching
    from 14 sees a later transaction's ABORT at 14 (a timed-out transaction without data here):
    that ABORT is not the committed data's end - no torn transaction, nothing open."""
    producer = _producer(end=end_txn(9, PID, 0))
    consumer = fetch(1, marker(14, "ABORT", 1), fetch_offset=14)
    assert _audit(tmp_path, [Conn(producer), Conn(consumer, **CONSUMER)]) == []


def test_a_marker_of_a_later_epoch_does_not_end_the_data(tmp_path):
    """A marker two epochs above the data's is no end the coordinator writes for it (epoch, or
    epoch + 1 for its own abort): the open transaction stays hanging."""
    consumer = fetch(1, data(10, 0) + marker(13, "ABORT", 2))
    fs = _audit(tmp_path, [Conn(_producer()), Conn(consumer, **CONSUMER)])
    assert [(f["rule"], f["partition"]) for f in fs] == [("hanging-transaction", 2)]


def test_fetched_abort_agrees_with_the_coordinators_markers_and_fencing(tmp_path):
    """A fencing (a new instance's InitProducerId) with the coordinator's WriteTxnMarkers in the
    capture, and a consumer fetching the same ABORT at epoch 1: one coordinator abort (fencing)."""
    producer = _producer() + init_producer_id(9, PID, 1, client_id="wire-producer-2")
    consumer = fetch(1, data(10, 0) + marker(13, "ABORT", 1))
    conns = [Conn(producer), Conn(write_markers(1, PID, 1, committed=False), **BROKER), Conn(consumer, **CONSUMER)]
    fs = _audit(tmp_path, conns)
    (f,) = fs
    assert f["rule"] == "coordinator-abort" and details(f)["cause"] == "fencing"


def test_marker_fetched_long_after_the_producer_died(tmp_path):
    """A lagging consumer reads the timeout abort's marker 200 s after the producer's last write
    (past its timeout and the live settling's margin): no hanging transaction - the live executor
    holds a producer whose transaction shows no end (txn_settle), and tells the file's findings."""
    moved = []

    def delay(i, p):
        if p.conn >= 1 and not moved:
            moved.append(i)
            return 200.0
        return 0.0
    consumer = fetch(1, data(10, 0) + marker(13, "ABORT", 1))
    fs = [f for f in audit(tmp_path, [Conn(_producer((2, 3))), Conn(consumer, **CONSUMER)],
                           timed={"delay": delay}, now_ms=T0_MS + 600_000) if f["rule"] in TXN]
    (f,) = fs
    assert f["rule"] == "coordinator-abort" and details(f)["markers_unseen"] == ["orders-3"]


def _rewritten(b_offset: int):
    """Transaction version 0/1: epoch 0's transaction writes offsets 10-15 of partition 2 (two
    batches) and commits; (an unclean election loses them and the marker) the restarted
    application's epoch 1 writes one batch at `b_offset` and commits; a consumer is served epoch
    1's data and its COMMIT (epoch 1) right after it - at 13, an offset epoch 0's second batch was
    acknowledged at too."""
    a = init_producer_id(1, PID, 0) + add_partitions(2, PID, 0, partition=2)
    a += send(3, batch(PID, 0, 0, 3, transactional=True), partition=2, offset=10, txn_id="tx-wire")
    a += send(4, batch(PID, 0, 3, 3, transactional=True), partition=2, offset=13, txn_id="tx-wire")
    a += end_txn(5, PID, 0, committed=True)
    b = init_producer_id(1, PID, 1) + add_partitions(2, PID, 1, partition=2)
    b += send(3, batch(PID, 1, 0, 3, transactional=True, tag="b"), partition=2, offset=b_offset, txn_id="tx-wire")
    b += end_txn(4, PID, 1, committed=True)
    served = data(b_offset, 0, epoch=1) + marker(b_offset + 3, "COMMIT", 1)
    return [Conn(a), Conn(write_markers(1, PID, 0, committed=True), **BROKER), Conn(b, client=("10.0.0.1", 40002)),
            Conn(write_markers(1, PID, 1, committed=True), client=("10.0.0.3", 50002), server=("10.0.0.4", 9093)),
            Conn(fetch(1, served, fetch_offset=b_offset), **CONSUMER)]


def test_a_marker_after_offsets_acknowledged_again_ends_the_later_write(tmp_path):
    """Offsets 10-12 were acknowledged to epoch 0's write, then to epoch 1's (the first lost): the
    COMMIT of epoch 1 served at 13 follows the later write the log holds - not epoch 0's 10-12
    ended by another epoch's marker (a false mixed-epoch-transaction and late-transactional-write
    before: the simulator's elect:txn_unclean with a rejoining replica's Fetch in the capture,
    regressions/elect-txn_unclean-refetched-marker.json)."""
    fs = audit(tmp_path, _rewritten(10), select=TXN + ("mixed-epoch-transaction",))
    assert by_rule(fs, "mixed-epoch-transaction") == [] and by_rule(fs, "late-transactional-write") == []


def test_a_later_epochs_marker_after_the_only_write_there_is_still_judged(tmp_path):
    """The twin: epoch 1 wrote elsewhere (20-22); what the consumer is served at 20-23 is its own
    - and epoch 0's 10-15 keep their own verdicts (nothing ties them to epoch 1's COMMIT)."""
    fs = audit(tmp_path, _rewritten(20), select=TXN + ("mixed-epoch-transaction",))
    assert by_rule(fs, "mixed-epoch-transaction") == [] and by_rule(fs, "late-transactional-write") == []
