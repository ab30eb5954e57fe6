"""A partition's transaction parts in the log's order, whatever order the capture shows them in
(txn_parts.log_order): consumers fetch markers in any order - one that seeks back re-reads old
transactions after newer ones, a lagging consumer (or a follower) reads what another read long
before - and a Produce whose answer the capture lacks has no offset. Each part's `previous` is
the part before it in the log, so the rules that read it (coordinator-epoch-regression,
late-transactional-write, stray-marker, mixed-epoch-transaction, write-after-epoch-end) judge
the log, not the capture. Crafted captures: out-of-order fetches give no false finding, and a
real anomaly fetched out of order is still found, with the right story."""

from __future__ import annotations

from tests.audit.wire.test_wire_txn_fetched_markers import CONSUMER, OTHER, PID, T0_MS, data, fetch, marker
from tests.audit.wire.wirecraft import add_partitions, audit, batch, by_rule, details, end_txn, init_producer_id, send
from tests.sources.pcap.craft import Conn

TXN = ("coordinator-epoch-regression", "late-transactional-write", "stray-marker", "mixed-epoch-transaction",
       "write-after-epoch-end", "torn-transaction", "hanging-transaction", "dangling-transaction",
       "coordinator-abort", "unregistered-partition")


def _rules(fs):
    return sorted(f["rule"] for f in fs if f["rule"] in TXN)


def _two_txns():
    """The producer's coordinator traffic only (its Produce went to a leader outside the capture):
    an aborted transaction on partition 2 (its ABORT at offset 13), then a committed one (its
    COMMIT at offset 17)."""
    return (init_producer_id(1, PID, 0) + add_partitions(2, PID, 0, partition=2) + end_txn(3, PID, 0, committed=False)
            + add_partitions(4, PID, 0, partition=2) + end_txn(5, PID, 0))


def _fetches(first: int, second: int, *, ce=(5, 6), split=True):
    """Consumers fetching the two transactions (data and marker): `first` (13 or 17) then `second`;
    `split`: two consumers at different positions, else one that seeks back to re-read."""
    served = {13: fetch(1, data(10, 0) + marker(13, "ABORT", 0, ce[0]), fetch_offset=10),
              17: fetch(2, data(14, 3) + marker(17, "COMMIT", 0, ce[1]), fetch_offset=14)}
    if split:
        return [Conn(served[first], **CONSUMER), Conn(served[second], **OTHER)]
    return [Conn(served[first] + served[second], **CONSUMER)]


def test_markers_fetched_out_of_log_order_are_no_coordinator_epoch_regression(tmp_path):
    """The coordinator moved (coordinator epoch 5, then 6) between the two transactions; a consumer
    at the head reads the COMMIT at 17, then one behind it (or the same one after a seek back to
    offset 0) reads the ABORT at 13: in the log the coordinator epochs rise - no finding."""
    for k, split in enumerate((True, False)):
        fs = audit(tmp_path, [Conn(_two_txns())] + _fetches(17, 13, split=split), name=f"c{k}.pcap")
        assert _rules(fs) == [], fs


def test_a_real_coordinator_epoch_regression_fetched_out_of_order_is_found(tmp_path):
    """The COMMIT at 17 carries coordinator epoch 5, below the ABORT's 6 at 13 before it (a zombie
    coordinator's marker): found on the COMMIT at offset 17 whichever marker the consumers read
    first."""
    for k, order in enumerate(((13, 17), (17, 13))):
        fs = audit(tmp_path, [Conn(_two_txns())] + _fetches(*order, ce=(6, 5)), name=f"c{k}.pcap")
        (f,) = by_rule(fs, "coordinator-epoch-regression")
        assert "COMMIT marker at offset 17 has coordinator epoch 5, below the earlier 6" in f["message"], order
        assert details(f)["previous_coordinator_epoch"] == 6 and _rules(fs) == ["coordinator-epoch-regression"]


def _fenced_then_late(consumer_first: bool):
    """A producer's first Produce (epoch 0, offsets 10-12) is unanswered in the capture (no offset);
    a new instance fences it (the coordinator's ABORT at epoch 1, offset 13); the old instance's
    next batch (epoch 0, seq 3) is stored after that marker, at offset 14 - a late write. A
    consumer fetches the ABORT before (`consumer_first`) or after that late write."""
    old = (init_producer_id(1, PID, 0) + add_partitions(2, PID, 0, partition=2)
           + send(3, batch(PID, 0, 0, 3, transactional=True), partition=2, error=None, txn_id="tx-wire"))
    new = init_producer_id(1, PID, 1, client_id="wire-producer-2")
    zombie = send(1, batch(PID, 0, 3, 3, transactional=True), partition=2, offset=14, txn_id="tx-wire")
    consumer = Conn(fetch(1, data(10, 0) + marker(13, "ABORT", 1), fetch_offset=10), **CONSUMER)
    conns = [Conn(old), Conn(new, client=("10.0.0.1", 40002)), Conn(zombie, client=("10.0.0.1", 40003))]
    return conns[:2] + [consumer] + conns[2:] if consumer_first else conns + [consumer]


def test_a_late_write_is_found_whenever_its_previous_marker_is_fetched(tmp_path):
    """The late write at offset 14 comes after the fencing's ABORT at 13 in the log whether the
    consumer read that marker before the write or after it: late-transactional-write (epoch 0
    below the marker's 1, opening a transaction no coordinator knows) with the ABORT at offset
    13 as its previous marker - not a transaction the ABORT took in."""
    for k, first in enumerate((True, False)):
        fs = audit(tmp_path, _fenced_then_late(first), name=f"c{k}.pcap")
        (f,) = by_rule(fs, "late-transactional-write")
        assert "data at offsets 14-16 reached the partition after its previous ABORT marker at offset 13" in f["message"]
        assert "its epoch 0 is older than the marker's 1" in f["message"], first
        assert details(f)["previous_marker_offset"] == 13
        (h,) = by_rule(fs, "hanging-transaction")   # no coordinator will end it
        assert h["first_offset"] == 14
        # not data the fencing's ABORT discarded: it lies after that marker
        assert not any("discarded" in f["message"] for f in by_rule(fs, "write-after-epoch-end"))


def _v2_read_mid_transaction(re_read: bool):
    """A version-2 producer (EndTxn v5 bumps the epoch): its first transaction's Produce (epoch 0,
    offsets 10-12) unanswered in the capture, committed (COMMIT at offset 13, epoch 1); its second
    transaction's data at offsets 14-16 (epoch 1), committed (the coordinator's WriteTxnMarkers in
    the capture: its COMMIT at 17, epoch 2). A consumer reads the COMMIT at 13 while the second
    transaction is open, and the one at 17 after it - or (`re_read`) reads the second transaction
    first and the first one after a seek back."""
    from tests.audit.wire.test_wire_txn_crafted import BROKER, write_markers
    from tests.audit.wire.wirecraft_txn import end_txn_v5

    first = (init_producer_id(1, PID, 0) + send(2, batch(PID, 0, 0, 3, transactional=True), partition=2, error=None,
                                                txn_id="tx-wire") + end_txn_v5(3, PID, 0))
    second = send(4, batch(PID, 1, 0, 3, transactional=True), partition=2, offset=14, txn_id="tx-wire")
    end = [Conn(end_txn_v5(5, PID, 1), client=("10.0.0.1", 40002)),
           Conn(write_markers(1, PID, 2, committed=True), **BROKER)]
    m13 = fetch(1, data(10, 0) + marker(13, "COMMIT", 1), fetch_offset=10)
    m17 = fetch(2, data(14, 0, epoch=1) + marker(17, "COMMIT", 2), fetch_offset=14)
    if re_read:
        return [Conn(first + second)] + end + [Conn(m17 + m13, **CONSUMER)]
    return [Conn(first + second), Conn(m13, **CONSUMER)] + end + [Conn(m17, **OTHER)]


def test_a_marker_read_while_the_next_transaction_is_written_ends_its_own(tmp_path):
    """The COMMIT at 13 ends the first transaction's data, wherever the capture shows it (the
    transaction boundaries txn_fetched.ends_unseen draws read the log's order too): no hanging
    first transaction "with no marker on orders-2", no torn one, no mixed-epoch or stray finding -
    both committed, nothing to report."""
    for k, re_read in enumerate((False, True)):
        fs = audit(tmp_path, _v2_read_mid_transaction(re_read), name=f"c{k}.pcap")
        assert _rules(fs) == [], [(f["rule"], f["message"]) for f in fs]


def test_a_write_answered_while_the_coordinators_markers_were_out_is_in_the_part_its_offset_says(tmp_path):
    """One broker's view (the coordinator's and the client's AddPartitionsToTxn and EndTxn went
    elsewhere): data at offsets 10-12, the coordinator's WriteTxnMarkers ABORT sent, then the
    producer's next batch (offsets 13-14) sent and answered before the markers' answer, and a
    consumer served the ABORT at offset 15 after both. No transaction begins before the last
    one's markers are all written (CONCURRENT_TRANSACTIONS), so that write raced the marker and
    the ABORT at 15 ends all five records: no torn transaction, nothing open. Stored after the
    marker (its offset past it), the same write opens a transaction the capture shows no end of
    (under one epoch, version 0/1: the next transaction's data as far as the log tells)."""
    from tests.audit.wire.wirecraft_txn import markers, write_ordered
    from tests.audit.wire.wirecraft import TOPIC
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap_session import PcapOptions

    for k, (late_at, abort_at, want) in enumerate(((13, 15, []), (14, 13, ["dangling-transaction"]))):
        producer = (send(1, batch(PID, 0, 0, 3, transactional=True), partition=2, offset=10, txn_id="tx-wire")
                    + send(2, batch(PID, 0, 3, 2, transactional=True), partition=2, offset=late_at, txn_id="tx-wire"))
        coordinator = markers(1, PID, 0, committed=False, parts=((TOPIC, 2),), client_id="broker-3-txn-marker-sender")
        served = data(10, 0) + (data(13, 3, n=2) + marker(15, "ABORT", 0, 0) if abort_at == 15
                                else marker(13, "ABORT", 0, 0) + data(14, 3, n=2))
        consumer = fetch(1, served, fetch_offset=10)
        conns = [Conn(producer), Conn(coordinator, client=("10.0.0.3", 40100)), Conn(consumer, **CONSUMER)]
        order = [(0, 0), (0, 1), (1, 0), (0, 2), (0, 3), (1, 1), (2, 0), (2, 1)]
        path = tmp_path / f"race{k}.pcap"
        write_ordered(path, conns, order)
        run = audit_pcaps([str(path)], PcapOptions(), now_ms=T0_MS + 60_000)
        assert not run.errors and _rules(run.findings) == want, (k, run.findings)


def _raced_next_write(answered_before_marker: bool, fetched: bool = False):
    """One broker's view of a producer whose EndTxn the capture lacks: its data of epoch 4 at
    offsets 10-12, then its next write, of epoch 5, sent just before the coordinator's COMMIT of
    epoch 5 (the end of epoch 4's transaction under version 2) - its answer lost, or (the
    negative) answered at offset 13 before the marker was sent. `fetched`: a consumer then served
    the partition from offset 10 - the COMMIT at 13 and the write's batch at 14, or (answered)
    the write at 13 and the COMMIT at 15."""
    from tests.audit.wire.wirecraft import TOPIC
    from tests.audit.wire.wirecraft_txn import markers

    nxt = dict(error=0, offset=13) if answered_before_marker else dict(error=None)
    producer = (send(1, batch(PID, 4, 0, 3, transactional=True), partition=2, offset=10, txn_id="tx-wire")
                + send(2, batch(PID, 5, 0, 2, transactional=True), partition=2, txn_id="tx-wire", **nxt))
    coordinator = markers(1, PID, 5, committed=True, parts=((TOPIC, 2),), client_id="broker-3-txn-marker-sender")
    order = [(0, 0), (0, 1), (0, 2)] + ([(0, 3)] if answered_before_marker else []) + [(1, 0), (1, 1)]
    conns = [Conn(producer), Conn(coordinator, client=("10.0.0.3", 40100))]
    if fetched:
        served = data(10, 0, epoch=4) + (data(13, 0, epoch=5, n=2) + marker(15, "COMMIT", 5, 0) if answered_before_marker
                                         else marker(13, "COMMIT", 5, 0) + data(14, 0, epoch=5, n=2))
        conns.append(Conn(fetch(1, served, fetch_offset=10), **CONSUMER))
        order += [(2, 0), (2, 1)]
    return conns, order


def test_a_raced_write_without_an_answer_lands_after_the_marker_of_its_epoch(tmp_path):
    """The unanswered write of epoch 5 has no offset, and its request came before the COMMIT's:
    by time alone it would be in epoch 4's part (a part of two epochs, a write after epoch 4's
    end). The marker ends data of epoch 4, answered before it was sent: whatever the version,
    a transaction is one epoch, so the write of the marker's epoch is the next transaction's and
    lands after the marker (txn_wire_order). Answered at offset 13 before the marker was sent,
    the same write is in epoch 4's part: mixed-epoch-transaction is still found.

    With a consumer's Fetch serving the COMMIT at 13 and the unanswered write's batch (same epoch
    and first sequence) at 14, the broker stored it after the marker: the coordinator ends a
    producer's transactions in order, and a marker of epoch E + 1 after epoch-E data with no end
    the capture shows is that data's end (a version-2 end's bump; a fencing abort's under 0/1)
    - the COMMIT ends epoch 4's transaction, the write begins the next one: no torn transaction
    (a COMMIT decided, epoch 4's data "with no marker"), no part of two epochs."""
    from tests.audit.wire.wirecraft_txn import write_ordered
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap_session import PcapOptions

    for k, (answered, fetched) in enumerate((a, f) for f in (False, True) for a in (False, True)):
        conns, order = _raced_next_write(answered, fetched)
        path = tmp_path / f"raced{k}.pcap"
        write_ordered(path, conns, order)
        run = audit_pcaps([str(path)], PcapOptions(), now_ms=T0_MS + 60_000)
        rules = [r for r in _rules(run.findings) if r != "dangling-transaction"]
        assert not run.errors and ("mixed-epoch-transaction" in rules) == answered, (k, run.findings)
        if not answered:
            assert rules == [], run.findings


def test_markers_of_a_transaction_the_capture_lost_before_a_raced_write(tmp_path):
    """A producer whose every end bumps its epoch (its epoch-3 data committed by a COMMIT of epoch
    4: version 2) - one broker's view, its EndTxns elsewhere: its epoch-4 transaction's data is
    not in the capture (lost), only the COMMIT of epoch 5 that ends it; the next transaction's
    write (epoch 5) was sent just before those markers, its answer lost, and a consumer served
    the COMMIT at offset 13 and the write's batch at 14. The markers end the transaction the
    capture lost (version 2: a marker never ends data of its own epoch), not the write's: no
    torn transaction (a COMMIT decided, the write's data "with no marker"); the write's
    transaction is open at the capture's end. Without the fetch, the write proves nothing
    stored: nothing to tell at all - no write "stored inside" a later epoch's transaction."""
    from tests.audit.wire.wirecraft import TOPIC
    from tests.audit.wire.wirecraft_txn import markers, write_ordered
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap_session import PcapOptions

    for k, fetched in enumerate((True, False)):
        producer = (send(1, batch(PID, 3, 0, 3, transactional=True), partition=2, offset=5, txn_id="tx-wire")
                    + send(2, batch(PID, 5, 0, 2, transactional=True), partition=2, txn_id="tx-wire", error=None))
        coordinator = (markers(1, PID, 4, committed=True, parts=((TOPIC, 2),), client_id="broker-3-txn-marker-sender")
                       + markers(2, PID, 5, committed=True, parts=((TOPIC, 2),), client_id="broker-3-txn-marker-sender"))
        conns = [Conn(producer), Conn(coordinator, client=("10.0.0.3", 40100))]
        order = [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (1, 2), (1, 3)]
        if fetched:
            conns.append(Conn(fetch(1, marker(13, "COMMIT", 5, 0) + data(14, 0, epoch=5, n=2), fetch_offset=13),
                              **CONSUMER))
            order += [(2, 0), (2, 1)]
        path = tmp_path / f"lostbefore{k}.pcap"
        write_ordered(path, conns, order)
        run = audit_pcaps([str(path)], PcapOptions(), now_ms=T0_MS + 60_000)
        assert not run.errors and _rules(run.findings) == (["dangling-transaction"] if fetched else []), \
            (k, run.findings)


def test_a_late_write_whose_answer_was_lost_is_placed_by_its_fetched_copy_or_its_retry(tmp_path):
    """The fenced producer's next batch (epoch 0, seq 3) has no answer in the capture: by its
    request alone it would sit before the fencing's ABORT (offset 13). A consumer's Fetch serves
    that batch (same epoch and first sequence: the broker stores a batch once by them) at offset
    14, after the ABORT - or the client's retry of it is answered at offset 14: it is a late
    write, found as with its own answer (the first attempt's line still says it had none).
    Served nowhere and not retried, the write proves nothing stored: no late write."""
    for k, shown in enumerate(("copy", "retry", None)):
        conns = _fenced_then_late(False)
        zombie = send(1, batch(PID, 0, 3, 3, transactional=True), partition=2, error=None, txn_id="tx-wire")
        if shown == "retry":
            zombie += send(2, batch(PID, 0, 3, 3, transactional=True), partition=2, offset=14, txn_id="tx-wire")
        conns[2] = Conn(zombie, client=("10.0.0.1", 40003))
        if shown == "copy":
            conns.append(Conn(fetch(2, data(14, 3), fetch_offset=14), **OTHER))
        fs = audit(tmp_path, conns, name=f"late{k}.pcap")
        late = by_rule(fs, "late-transactional-write")
        assert len(late) == (shown is not None), (k, fs)
        if shown:
            assert "data at offsets 14-16 reached the partition after its previous ABORT marker at offset 13" \
                in late[0]["message"]
            said = "\n".join(late[0]["timeline"])
            assert "epoch 0 seq 3-5 (3 records) -> no response" in said, said


def test_markers_whose_transaction_the_capture_lost_still_end_it(tmp_path):
    """One broker's view with packets lost: the aborted transaction's data and registration are
    not in the capture, only the coordinator's WriteTxnMarkers ABORT (epoch 0) and a consumer's
    Fetch of that ABORT at offset 12; then the next transaction's write at offsets 13-14 and its
    COMMIT at 15. The coordinator writes markers only to end a transaction that registered
    the partition: they end one of their own, begun unseen, and the fetched ABORT is that
    WriteTxnMarkers (it gets offset 12, so the data after it is after it). Nothing to report -
    not a stray marker "with no transactional data before it" (its data is outside the
    capture). The real case (a late write told as a torn transaction when those markers ended
    nothing) is tests/audit/test_one_broker_view.py's 02 cut."""
    from tests.audit.wire.wirecraft import TOPIC
    from tests.audit.wire.wirecraft_txn import markers, write_ordered
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap_session import PcapOptions

    producer = send(1, batch(PID, 0, 2, 2, transactional=True), partition=2, offset=13, txn_id="tx-wire")
    coordinator = (markers(1, PID, 0, committed=False, parts=((TOPIC, 2),), client_id="broker-3-txn-marker-sender")
                   + markers(2, PID, 0, committed=True, parts=((TOPIC, 2),), client_id="broker-3-txn-marker-sender"))
    consumer = (fetch(1, marker(12, "ABORT", 0, 0), fetch_offset=12)
                + fetch(2, data(13, 2, n=2) + marker(15, "COMMIT", 0, 0), fetch_offset=13))
    conns = [Conn(producer), Conn(coordinator, client=("10.0.0.3", 40100)), Conn(consumer, **CONSUMER)]
    order = [(1, 0), (1, 1), (2, 0), (2, 1), (0, 0), (0, 1), (1, 2), (1, 3), (2, 2), (2, 3)]
    path = tmp_path / "unseen.pcap"
    write_ordered(path, conns, order, step=0.1)
    run = audit_pcaps([str(path)], PcapOptions(), now_ms=T0_MS + 60_000)
    assert not run.errors and _rules(run.findings) == [], run.findings


def test_a_zombie_write_whose_answer_was_lost_makes_no_mixed_epoch_part(tmp_path):
    """A fenced instance's write (epoch 0) sent just before the new instance's first write of
    epoch 2 (offset 3) and the coordinator's COMMIT (epoch 3, version 2): its answer - a
    rejection, PRODUCER_FENCED - is lost, so it has no offset and its request puts it in epoch
    2's part. Nothing shows it stored: not a part of two epochs. Answered and stored (offset 2),
    the same write is found (a stale epoch's data in that transaction)."""
    from tests.audit.wire.wirecraft import TOPIC
    from tests.audit.wire.wirecraft_txn import markers, write_ordered
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap_session import PcapOptions

    for k, stored in enumerate((False, True)):
        answer = dict(error=0, offset=2) if stored else dict(error=None)
        zombie = send(7, batch(PID, 0, 2, 1, transactional=True), partition=2, txn_id="tx-wire", **answer)
        fresh = send(1, batch(PID, 2, 0, 1, transactional=True), partition=2, offset=3, txn_id="tx-wire")
        coordinator = markers(1, PID, 3, committed=True, parts=((TOPIC, 2),), client_id="broker-3-txn-marker-sender")
        conns = [Conn(zombie, client=("10.0.0.1", 40002)), Conn(fresh), Conn(coordinator, client=("10.0.0.3", 40100))]
        order = [(0, 0)] + ([(0, 1)] if stored else []) + [(1, 0), (1, 1), (2, 0), (2, 1)]
        path = tmp_path / f"zombie{k}.pcap"
        write_ordered(path, conns, order)
        run = audit_pcaps([str(path)], PcapOptions(), now_ms=T0_MS + 60_000)
        rules = _rules(run.findings)
        assert not run.errors and ("mixed-epoch-transaction" in rules) == stored, (k, run.findings)
