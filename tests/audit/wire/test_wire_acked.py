"""offset-acknowledged-twice and acknowledged-records-replaced (audit/producers/wire_acked.py):
crafted captures of Produce acknowledgements and later Fetch responses, each case against its
negative twin."""

from __future__ import annotations

import pytest

from kaudit.audit.producers import acked_pairs, wire_acked
from tests.audit.wire.wirecraft import TOPIC, TS, audit, by_rule, details, send
from tests.audit.wire import wirecraft as wc

from fixtures import kafka_encoder as ke
from tests.protocol.wire.wirebytes import array, frame, i8, i16, i32, i64, nbytes, request_header, response_header, string
from tests.sources.pcap.craft import Conn

RULES = ("offset-acknowledged-twice", "acknowledged-records-replaced")
P1 = dict(client=("10.0.0.4", 41001), server=("10.0.0.2", 9092))
P2 = dict(client=("10.0.0.5", 41002), server=("10.0.0.3", 9092))
READER = dict(client=("10.0.0.6", 41003), server=("10.0.0.3", 9092))


def at(base: int, pid: int, epoch: int, seq: int, n: int = 3, tag: str = "", **kw) -> bytes:
    """wirecraft.batch's records (the same bytes a producer sent) stored at offset `base`."""
    recs = [{"key": f"k{i}".encode(), "value": f"v{tag}-{seq}-{i}".encode(), "timestamp_delta": i}
            for i in range(n)]
    return ke.encode_record_batch_v2(base, recs, producer_id=pid, producer_epoch=epoch if pid >= 0 else -1,
                                     base_sequence=seq if pid >= 0 else -1, base_timestamp=TS, **kw)


def fetch(corr: int, records: bytes, *, hw: int, isolation: int = 1, fetch_offset: int = 0):
    """Fetch v4 of orders-0 and its response."""
    req = (request_header(1, 4, corr, "reader", False)
           + i32(-1) + i32(500) + i32(1) + i32(52428800) + i8(isolation)
           + array(1) + string(TOPIC) + array(1) + i32(0) + i64(fetch_offset) + i32(1048576))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(TOPIC)
            + array(1) + i32(0) + i16(0) + i64(hw) + i64(hw) + array(0) + nbytes(records))
    return [(0, frame(req)), (1, frame(resp))]


@pytest.fixture(autouse=True, params=["columnar", "one-pair-blocks", "reference", "too-many-pairs", "uncertified"])
def _both_ways(request, monkeypatch):
    """Every case through the column-wise comparison (acked_pairs.py), in blocks of one candidate
    pair, the reference loop, the column-wise one falling back to the loop, and without the clean
    certificate (acked_clean.py) first."""
    monkeypatch.setattr(wire_acked, "COLUMNAR", request.param != "reference")
    monkeypatch.setattr(wire_acked, "CERTIFY", request.param != "uncertified")
    if request.param == "too-many-pairs":
        monkeypatch.setattr(acked_pairs, "MAX_PAIRS", 0)
    if request.param == "one-pair-blocks":
        monkeypatch.setattr(acked_pairs, "BLOCK_PAIRS", 1)


def run(tmp_path, conns):
    return audit(tmp_path, conns, select=RULES)


def _brief(fs):
    return sorted((f["rule"], f["severity"], f["first_offset"], f["last_offset"]) for f in fs)


def test_offset_acknowledged_to_two_writes(tmp_path):
    """Producer 7's batch acknowledged at 5-7 with acks=all; later producer 8's at 5-7 again:
    the first write is lost, told once on orders-0 with both acknowledgements."""
    first = Conn(send(1, wc.batch(7, 0, 0), offset=5, client_id="app-a"), **P1)
    later = Conn(send(1, wc.batch(8, 0, 0), offset=5, client_id="app-b"), **P2)
    fs = run(tmp_path, [first, later])
    assert _brief(fs) == [("offset-acknowledged-twice", "critical", 5, 7)]
    f = fs[0]
    d = details(f)
    assert (f["topic"], f["partition"], f["producer_id"], f["client_id"]) == (TOPIC, 0, 7, "app-a")
    assert d["lost"][0]["offsets"] == [5, 7] and d["lost"][0]["acks"] == -1
    assert d["replaced_by"][0]["producer_id"] == 8 and d["replaced_by"][0]["client_id"] == "app-b"
    assert [e["kind"] for e in f["evidence"]] == ["produce", "produce"]
    assert "acks=all" in f["message"] and "app-a" in f["message"]


def test_acks1_overlap_is_a_warning_and_same_write_twice_is_none(tmp_path):
    first = Conn(send(1, wc.batch(7, 0, 0), offset=5, acks=1), **P1)
    later = Conn(send(1, wc.batch(8, 0, 0), offset=6, acks=1), **P2)
    assert _brief(run(tmp_path, [first, later])) == [("offset-acknowledged-twice", "warning", 5, 7)]
    # an idempotent retry answered with the original offset is the same write
    again = Conn(send(1, wc.batch(7, 0, 0), offset=5) + send(2, wc.batch(7, 0, 0), offset=5), **P1)
    # non-idempotent: the same bytes at the same offset (the exchange seen twice), and different
    # offsets for different writes
    anon = Conn(send(3, wc.batch(-1, -1, 0), offset=20) + send(4, wc.batch(-1, -1, 0, tag="x"), offset=23), **P2)
    assert run(tmp_path, [again, anon]) == []


def test_non_idempotent_writes_at_one_offset(tmp_path):
    first = Conn(send(1, wc.batch(-1, -1, 0), offset=9), **P1)
    later = Conn(send(1, wc.batch(-1, -1, 0, tag="other"), offset=9), **P2)
    assert _brief(run(tmp_path, [first, later])) == [("offset-acknowledged-twice", "critical", 9, 11)]


def test_fetch_returns_other_records_at_an_acknowledged_offset(tmp_path):
    acked = Conn(send(1, wc.batch(7, 0, 0), offset=5), **P1)
    reader = Conn(fetch(1, at(5, 9, 0, 0), hw=8, fetch_offset=5), **READER)
    fs = run(tmp_path, [acked, reader])
    assert _brief(fs) == [("acknowledged-records-replaced", "critical", 5, 7)]
    d = details(fs[0])
    assert d["replaced_by"][0]["producer_id"] == 9 and d["replaced_by"][0]["kind"] == "fetch"
    assert [e["kind"] for e in fs[0]["evidence"]] == ["produce", "fetch"]


def test_same_records_refetched_are_no_loss(tmp_path):
    acked = Conn(send(1, wc.batch(7, 0, 0), offset=5) + send(2, wc.batch(-1, -1, 0), offset=8), **P1)
    reader = Conn(fetch(1, at(5, 7, 0, 0) + at(8, -1, -1, 0), hw=11, fetch_offset=5)
                  + fetch(2, at(5, 7, 0, 0), hw=11, fetch_offset=5), **READER)
    assert run(tmp_path, [acked, reader]) == []


def test_fetch_before_the_acknowledgement_is_not_judged(tmp_path):
    """A Fetch answered before the write was acknowledged read the log before the write."""
    reader = Conn(fetch(1, at(5, 9, 0, 0), hw=8, fetch_offset=5), **READER)
    acked = Conn(send(1, wc.batch(7, 0, 0), offset=5), **P1)
    assert run(tmp_path, [reader, acked]) == []


def test_non_idempotent_other_records_in_a_fetch(tmp_path):
    acked = Conn(send(1, wc.batch(-1, -1, 0), offset=5, acks=1), **P1)
    other = Conn(fetch(1, at(5, -1, -1, 0, tag="z"), hw=8, fetch_offset=5), **READER)
    assert _brief(run(tmp_path, [acked, other])) == [("acknowledged-records-replaced", "warning", 5, 7)]


def test_broker_rewritten_header_or_codec_is_not_other_records(tmp_path):
    """Non-idempotent: the broker stamps LogAppendTime into the header (same records, another CRC:
    the records' own checksum decides), or recompresses to the topic's codec (not comparable)."""
    acked = Conn(send(1, wc.batch(-1, -1, 0), offset=5) + send(2, wc.batch(-1, -1, 3), offset=8), **P1)
    reader = Conn(fetch(1, at(5, -1, -1, 0, timestamp_type="log_append", max_timestamp=TS + 5000)
                        + at(8, -1, -1, 3, tag="recompressed", codec="gzip"), hw=11, fetch_offset=5), **READER)
    assert run(tmp_path, [acked, reader]) == []


def test_fetch_of_the_later_write_at_an_offset_acknowledged_twice(tmp_path):
    """A Fetch returning the second write is other records for the first: both views told."""
    first = Conn(send(1, wc.batch(7, 0, 0), offset=5), **P1)
    later = Conn(send(1, wc.batch(8, 0, 0), offset=5), **P2)
    reader = Conn(fetch(1, at(5, 8, 0, 0), hw=8, fetch_offset=5), **READER)
    fs = run(tmp_path, [first, later, reader])
    assert _brief(fs) == [("acknowledged-records-replaced", "critical", 5, 7),
                          ("offset-acknowledged-twice", "critical", 5, 7)]
    assert len({f["incident"] for f in fs}) == 1


def _txn_write_lost(tmp_path, end):
    """Producer 7's transactional batch acknowledged at 5-7 (acks=all), then (`end`) its EndTxn,
    then producer 8's batch acknowledged at 5-7: an unclean election lost the first write."""
    first = Conn(send(1, wc.batch(7, 0, 0, transactional=True), offset=5, txn_id="tx", client_id="app-a")
                 + end, **P1)
    later = Conn(send(1, wc.batch(8, 0, 0), offset=5, client_id="app-b"), **P2)
    return run(tmp_path, [first, later])


def test_a_lost_transactional_write_the_client_was_told_committed_is_critical(tmp_path):
    """Its EndTxn COMMIT answered without error: the coordinator had decided the commit, the write
    was as committed as acks=all data - critical (an error before, 'its transaction's outcome not
    seen', though the capture showed it: the simulator's elect:txn_unclean,
    regressions/elect-txn_unclean-data-committed-capture.json)."""
    fs = _txn_write_lost(tmp_path, wc.end_txn(2, 7, 0, committed=True, txn_id="tx", client_id="app-a"))
    assert _brief(fs) == [("offset-acknowledged-twice", "critical", 5, 7)]
    assert "EndTxn" in fs[0]["message"]


@pytest.mark.parametrize("end", ["abort", "refused", "none"])
def test_a_lost_transactional_write_not_known_committed_stays_an_error(tmp_path, end):
    """The twins: its EndTxn aborted, refused (CONCURRENT_TRANSACTIONS), or not in the capture."""
    msgs = {"abort": wc.end_txn(2, 7, 0, committed=False, txn_id="tx", client_id="app-a"),
            "refused": wc.end_txn(2, 7, 0, error=51, txn_id="tx", client_id="app-a"), "none": []}[end]
    assert _brief(_txn_write_lost(tmp_path, msgs)) == [("offset-acknowledged-twice", "error", 5, 7)]
