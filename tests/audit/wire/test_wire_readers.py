"""aborted-read and read-past-lso on the wire (audit/wire/wire_readers.py, reader_replay.py): crafted
read_committed Fetch responses, each case against its negative twin."""

from __future__ import annotations

from tests.audit.wire.wirecraft import TOPIC, audit, by_rule, details, send

from fixtures import kafka_encoder as ke
from tests.audit.wire.test_wire_txn_crafted import write_markers
from tests.protocol.wire.wirebytes import array, frame, i8, i16, i32, i64, nbytes, request_header, response_header, string
from tests.sources.pcap.craft import Conn

RULES = ("aborted-read", "read-past-lso")
PID, EPOCH = 4000, 3
CONSUMER = dict(client=("10.0.0.4", 41001))
OTHER = dict(client=("10.0.0.5", 41002))
BROKER = dict(client=("10.0.0.3", 50001), server=("10.0.0.2", 9093))


def data(base: int, seq: int, n: int = 2, pid: int = PID, txn: bool = True) -> bytes:
    recs = [{"value": f"v{base + i}".encode(), "timestamp_delta": i} for i in range(n)]
    return ke.encode_record_batch_v2(base, recs, producer_id=pid, producer_epoch=EPOCH, base_sequence=seq,
                                     is_transactional=txn)


def marker(base: int, kind: str, pid: int = PID) -> bytes:
    return ke.encode_control_batch(base, pid, EPOCH, kind, 0, ke.DEFAULT_TIMESTAMP)


def fetch(corr: int, records: bytes, *, lso: int, hw: int | None = None, aborted=(), isolation: int = 1,
          fetch_offset: int = 0, partition: int = 0):
    """Fetch v4 of one partition and its response (aborted: [(pid, first offset)])."""
    req = (request_header(1, 4, corr, "rc-consumer", False)
           + i32(-1) + i32(500) + i32(1) + i32(52428800) + i8(isolation)
           + array(1) + string(TOPIC) + array(1) + i32(partition) + i64(fetch_offset) + i32(1048576))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(TOPIC)
            + array(1) + i32(partition) + i16(0) + i64(lso if hw is None else hw) + i64(lso)
            + array(len(aborted)) + b"".join(i64(p) + i64(o) for p, o in aborted)
            + nbytes(records))
    return [(0, frame(req)), (1, frame(resp))]


def _brief(fs):
    return sorted((f["rule"], f["severity"], f["producer_id"], f["first_offset"], f["last_offset"]) for f in fs)


ABORTED_TXN = data(0, 0) + data(2, 2) + marker(4, "ABORT")


def test_aborted_records_without_their_range(tmp_path):
    fs = audit(tmp_path, Conn(fetch(1, ABORTED_TXN, lso=5), **CONSUMER), select=RULES)
    assert _brief(fs) == [("aborted-read", "error", PID, 0, 3)]
    assert details(fs[0])["abort"] == "ABORT marker at offset 4"
    assert [e["kind"] for e in fs[0]["evidence"]] == ["fetch", "marker"]


def test_listed_abort_uncommitted_reader_and_commit_are_clean(tmp_path):
    ok = fetch(1, ABORTED_TXN, lso=5, aborted=[(PID, 0)])
    uncommitted = fetch(2, ABORTED_TXN, lso=5, isolation=0)
    committed = fetch(3, data(5, 4) + marker(7, "COMMIT"), lso=8, fetch_offset=5)
    assert audit(tmp_path, [Conn(ok + committed, **CONSUMER), Conn(uncommitted, **OTHER)], select=RULES) == []


def test_an_aborted_batch_the_cleaner_emptied_delivers_nothing(tmp_path):
    # the cleaner removed the aborted records, keeping the last batch (count 0) for the producer's
    # state: an unlisted response returns no aborted record
    emptied = ke.encode_record_batch_v2(2, [], last_offset_delta=1, producer_id=PID, producer_epoch=EPOCH,
                                        base_sequence=2, is_transactional=True)
    fs = audit(tmp_path, Conn(fetch(1, emptied + marker(4, "ABORT"), lso=5, fetch_offset=2), **CONSUMER),
               select=RULES)
    assert fs == []


def test_list_that_starts_too_late(tmp_path):
    """The list names the producer from offset 2: its batch at 0-1 is delivered."""
    fs = audit(tmp_path, Conn(fetch(1, ABORTED_TXN, lso=5, aborted=[(PID, 2)]), **CONSUMER), select=RULES)
    assert _brief(fs) == [("aborted-read", "error", PID, 0, 1)]


def test_abort_seen_later_by_another_reader(tmp_path):
    """The consumer got the data before the marker reached it; a read_uncommitted reader saw the
    ABORT at 4 - with offsets 0-4 all seen, nothing else can have ended the transaction."""
    early = fetch(1, data(0, 0) + data(2, 2), lso=4)
    other = fetch(1, ABORTED_TXN, lso=5, isolation=0)
    fs = audit(tmp_path, [Conn(early, **CONSUMER), Conn(other, **OTHER)], select=RULES)
    assert _brief(fs) == [("aborted-read", "error", PID, 0, 3)]


def test_unseen_offsets_leave_the_outcome_unknown(tmp_path):
    """Offsets 4-5 were never seen: a COMMIT could lie there before the ABORT at 6."""
    early = fetch(1, data(0, 0) + data(2, 2), lso=4)
    later = fetch(1, marker(6, "ABORT"), lso=7, isolation=0, fetch_offset=6)
    assert audit(tmp_path, [Conn(early, **CONSUMER), Conn(later, **OTHER)], select=RULES) == []


def test_abort_known_from_write_txn_markers(tmp_path):
    """No marker in any Fetch: the Produce stored the batch (offset 0), then the coordinator
    sent WriteTxnMarkers ABORT for the producer to the partition's leader."""
    producer = Conn(send(1, data(0, 0), topic=TOPIC, partition=0, offset=0), client=("10.0.0.1", 40001))
    markers = Conn(write_markers(1, PID, EPOCH, committed=False, partition=0), **BROKER)
    consumer = Conn(fetch(1, data(0, 0), lso=2), **CONSUMER)
    fs = audit(tmp_path, [producer, markers, consumer], select=RULES)
    assert _brief(fs) == [("aborted-read", "error", PID, 0, 1)]
    assert details(fs[0])["abort"].startswith("WriteTxnMarkers ABORT")
    committed = Conn(write_markers(1, PID, EPOCH, committed=True, partition=0), **BROKER)
    assert audit(tmp_path, [producer, committed, consumer], name="c.pcap", select=RULES) == []


def test_a_later_transactions_markers_tell_nothing_of_this_one(tmp_path):
    """The batch's epoch is 3; the only WriteTxnMarkers the capture holds is an ABORT at epoch
    5: it ends a later transaction (a marker ends its epoch's data, or the epoch below's), this
    one's end was lost from the capture - no outcome, no finding; at epoch 4 it is this one's."""
    producer = Conn(send(1, data(0, 0), topic=TOPIC, partition=0, offset=0), client=("10.0.0.1", 40001))
    consumer = Conn(fetch(1, data(0, 0), lso=2), **CONSUMER)
    later = Conn(write_markers(1, PID, EPOCH + 2, committed=False, partition=0), **BROKER)
    assert audit(tmp_path, [producer, later, consumer], select=RULES) == []
    bumped = Conn(write_markers(1, PID, EPOCH + 1, committed=False, partition=0), **BROKER)
    fs = audit(tmp_path, [producer, bumped, consumer], name="v2.pcap", select=RULES)
    assert _brief(fs) == [("aborted-read", "error", PID, 0, 1)]


def test_records_past_the_last_stable_offset(tmp_path):
    fs = audit(tmp_path, Conn(fetch(1, data(0, 0, txn=False) + data(2, 2, txn=False), lso=2, hw=4),
                              **CONSUMER), select=RULES)
    assert _brief(fs) == [("read-past-lso", "error", None, 2, 3)]
    assert details(fs[0]) == {"last_stable_offset": 2, "high_watermark": 4, "batches": 1}
    clean = fetch(1, data(0, 0, txn=False), lso=2, hw=4)
    uncommitted = fetch(2, data(0, 0, txn=False) + data(2, 2, txn=False), lso=2, hw=4, isolation=0)
    assert by_rule(audit(tmp_path, Conn(clean + uncommitted, **CONSUMER), name="n.pcap"), "read-past-lso") == []


def test_a_marker_after_the_next_transactions_end_txn_tells_nothing_of_this_one(tmp_path):
    """Version 0/1 keeps the epoch: transaction 1 (offsets 0-1) committed, its markers lost from
    the capture; transaction 2 (2-3) aborted and the coordinator's ABORT marker request is
    captured. Transaction 2's EndTxn was answered before that marker: the marker ends it, not
    transaction 1 - whose consumer read is no aborted read. With only transaction 1's own EndTxn
    (ABORT) before it, the marker is its end."""
    from tests.audit.wire.wirecraft import end_txn

    first = send(1, data(0, 0), topic=TOPIC, partition=0, offset=0) + end_txn(2, PID, EPOCH, txn_id="tx-r")
    second = send(3, data(2, 2), topic=TOPIC, partition=0, offset=2) + end_txn(4, PID, EPOCH, committed=False,
                                                                            txn_id="tx-r")
    markers = Conn(write_markers(1, PID, EPOCH, committed=False, partition=0), **BROKER)
    consumer = Conn(fetch(1, data(0, 0), lso=2), **CONSUMER)
    both = Conn(first + second, client=("10.0.0.1", 40001))
    assert audit(tmp_path, [both, markers, consumer], select=RULES) == []
    aborted = Conn(send(1, data(0, 0), topic=TOPIC, partition=0, offset=0)
                   + end_txn(2, PID, EPOCH, committed=False, txn_id="tx-r"), client=("10.0.0.1", 40001))
    fs = audit(tmp_path, [aborted, markers, consumer], name="one.pcap", select=RULES)
    assert _brief(fs) == [("aborted-read", "error", PID, 0, 1)]
