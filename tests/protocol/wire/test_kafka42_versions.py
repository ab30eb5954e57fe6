"""Every version Kafka 4.2 defines for the APIs the audit reads (Kafka's JSON message specs,
clients/src/main/resources/common/message/*.json), decoded; a newer one reported as such.

The table is the specs' "validVersions" (Kafka 4.2): KIP-1228 added WriteTxnMarkers v2 (the
transaction version on each marker), KIP-939 InitProducerId v6 (Enable2Pc, KeepPreparedTxn),
KIP-1152 ListTransactions v2 (TransactionalIdPattern), KIP-848 ConsumerGroupHeartbeat v1.
Kafka's trunk has since added TxnOffsetCommit v6 (KIP-1319, topic ids): the newer-than-known case."""

from __future__ import annotations

import pytest
from wirebytes import TAGS0, boolean, carray, cstring, i8, i16, i32, i64, request_header, response_header

from kaudit.protocol.wire import apis, decode_request, decode_response
from kaudit.protocol.wire.bodies import UnsupportedVersion, body_decoder
from kaudit.protocol.wire.summary import frame_fields, txn_events

KAFKA_42 = {  # api key: (first version, last version)
    0: (3, 13), 1: (4, 18), 3: (0, 13), 19: (2, 7), 22: (0, 6), 24: (0, 5), 25: (0, 4), 26: (0, 5),
    27: (1, 2), 28: (0, 5), 61: (0, 0), 65: (0, 0), 66: (0, 2), 68: (0, 1), 75: (0, 0),
}


@pytest.mark.parametrize("key", sorted(KAFKA_42))
def test_every_kafka_42_version_is_decoded(key):
    first, last = KAFKA_42[key]
    assert apis.max_version(key) >= last, apis.api_name(key)
    for v in range(first, last + 1):
        for entity in ("request", "response"):
            assert body_decoder(key, v, entity) in ("kio", "hand"), (apis.api_name(key), v, entity)


def _pair(req_payload, resp_payload=None):
    r, end = decode_request(req_payload)
    assert r.error is None and end == len(req_payload) and r.trailing == 0
    p = None
    if resp_payload is not None:
        p, end = decode_response(resp_payload, r.api_key, r.api_version)
        assert p.error is None and end == len(resp_payload) and p.trailing == 0
    return r, p


def test_write_txn_markers_v2_carries_the_transaction_version():
    """KIP-1228: WritableTxnMarker.TransactionVersion (int8, v2+)."""
    marker = (i64(1000) + i16(7) + boolean(True) + carray(1) + cstring("orders") + carray(2) + i32(0) + i32(3)
              + TAGS0 + i32(4) + i8(2))
    req = request_header(27, 2, 9, "broker-1-txn-marker-sender", True) + carray(1) + marker + TAGS0 + TAGS0
    resp = (response_header(9, True) + carray(1) + i64(1000) + carray(1) + cstring("orders") + carray(2)
            + i32(0) + i16(0) + TAGS0 + i32(3) + i16(0) + TAGS0 + TAGS0 + TAGS0 + TAGS0)
    r, p = _pair(req, resp)
    (e,) = txn_events(r, p)
    assert (e["event"], e["producer_id"], e["producer_epoch"], e["result"], e["coordinator_epoch"],
            e["partitions"], e["transaction_version"], e["error_codes"]) == (
        "WRITE_MARKERS", 1000, 7, "COMMIT", 4, "orders-0,orders-3", 2, "")


def test_init_producer_id_v6_two_phase_commit():
    """KIP-939: Enable2Pc and KeepPreparedTxn in the request, the ongoing transaction's id and
    epoch in the response."""
    req = (request_header(22, 6, 3, "tpc-producer", True) + cstring("tx-2pc") + i32(60000) + i64(-1) + i16(-1)
           + boolean(True) + boolean(False) + TAGS0)
    resp = response_header(3, True) + i32(0) + i16(0) + i64(42) + i16(0) + i64(-1) + i16(-1) + TAGS0
    r, p = _pair(req, resp)
    (e,) = txn_events(r, p)
    assert (e["transactional_id"], e["producer_id"], e["producer_epoch"], e["enable_2pc"], e["keep_prepared_txn"]) == (
        "tx-2pc", 42, 0, True, False)
    assert p.body["ongoing_txn_producer_id"] == -1
    assert (e["ongoing_txn_producer_id"], e["ongoing_txn_producer_epoch"]) == (-1, -1)


def test_init_producer_id_v6_keep_prepared_txn_recovery_golden_bytes():
    """KIP-939 recovery, byte for byte as Kafka's InitProducerIdRequest/Response.json define v6
    (flexible since v2; Enable2Pc, KeepPreparedTxn, OngoingTxnProducerId, OngoingTxnProducerEpoch:
    plain fields of v6+, not tagged). The coordinator kept the prepared transaction of producer id
    1000 epoch 7 and gave the recovering session producer id 1001 epoch 0 (its epoch ran out)."""
    req = bytes.fromhex(
        "0016" "0006" "0000002a"        # api key 22 (InitProducerId), v6, correlation id 42
        "0004" "74706331"               # client id "tpc1" (a plain int16 string in header v2)
        "00"                            # header tagged fields
        "07" "74782d327063"             # TransactionalId: compact string (length + 1 = 7) "tx-2pc"
        "7fffffff"                      # TransactionTimeoutMs: Int.MaxValue (two-phase commit)
        "ffffffffffffffff" "ffff"       # ProducerId -1, ProducerEpoch -1 (v3+)
        "01"                            # Enable2Pc true (v6+)
        "01"                            # KeepPreparedTxn true (v6+)
        "00")                           # tagged fields
    resp = bytes.fromhex(
        "0000002a" "00"                 # correlation id 42, header tagged fields (header v1)
        "00000000"                      # ThrottleTimeMs 0
        "0000"                          # ErrorCode 0
        "00000000000003e9" "0000"       # ProducerId 1001, ProducerEpoch 0: the recovering session
        "00000000000003e8" "0007"       # OngoingTxnProducerId 1000, OngoingTxnProducerEpoch 7 (v6+)
        "00")                           # tagged fields
    r, p = _pair(req, resp)
    (e,) = txn_events(r, p)
    assert (e["event"], e["transactional_id"], e["timeout_ms"], e["request_producer_id"], e["request_producer_epoch"],
            e["enable_2pc"], e["keep_prepared_txn"]) == ("INIT_PRODUCER_ID", "tx-2pc", 2**31 - 1, -1, -1, True, True)
    assert (e["producer_id"], e["producer_epoch"], e["ongoing_txn_producer_id"], e["ongoing_txn_producer_epoch"],
            e["error_codes"]) == (1001, 0, 1000, 7, "")
    # the compiled walker and kio's schema walk agree on every field of both bodies
    from kaudit.protocol.wire.apis import kio_class
    from kaudit.protocol.wire.kio_schema import _walk_generic
    from kaudit.protocol.wire.kio_walkers import compiled_walker, walk_schema

    for entity, payload, body in (("request", req, r.body), ("response", resp, p.body)):
        off = len(payload) - len(_BODY[entity])
        assert payload[off:] == _BODY[entity]
        fast, _ = compiled_walker(22, 6, entity)(payload, off)
        plain, _ = _walk_generic(kio_class(22, 6, entity), payload, off, walk_schema)
        assert fast == plain == body


_BODY = {"request": bytes.fromhex("0774782d327063" "7fffffff" "ffffffffffffffff" "ffff" "01" "01" "00"),
         "response": bytes.fromhex("00000000" "0000" "00000000000003e9" "0000" "00000000000003e8" "0007" "00")}


def test_init_producer_id_before_v6_has_no_ongoing_transaction():
    """v5 knows no OngoingTxnProducerId/Epoch: the row says unknown (null), not -1."""
    req = request_header(22, 5, 4, "p", True) + cstring("tx") + i32(60000) + i64(-1) + i16(-1) + TAGS0
    resp = response_header(4, True) + i32(0) + i16(0) + i64(42) + i16(3) + TAGS0
    r, p = _pair(req, resp)
    (e,) = txn_events(r, p)
    assert (e["producer_id"], e["producer_epoch"], e["ongoing_txn_producer_id"], e["ongoing_txn_producer_epoch"]) == (
        42, 3, None, None)


def test_list_transactions_v2_pattern():
    """KIP-1152: ListTransactions v2 filters by a transactional id pattern."""
    req = (request_header(66, 2, 5, "adminclient-1", True) + carray(0) + carray(0) + i64(-1) + cstring("java.*")
           + TAGS0)
    resp = (response_header(5, True) + i32(0) + i16(0) + carray(0)
            + carray(1) + cstring("java41-txn") + i64(1000) + cstring("CompleteCommit") + TAGS0 + TAGS0)
    r, p = _pair(req, resp)
    assert r.body["transactional_id_pattern"] == "java.*"
    assert frame_fields(r, p)["transactions"] == [("java41-txn", 1000, None, "CompleteCommit", None)]


def test_a_version_newer_than_known_is_reported_as_such():
    """TxnOffsetCommit v6 (KIP-1319, after Kafka 4.2) and a future EndTxn: the header is read,
    the error says the version is newer than kaudit knows, not that the bytes are garbage."""
    for key, version in ((28, 6), (26, 6), (0, 14)):
        payload = request_header(key, version, 1, "future-client", True) + b"\x00" * 16
        with pytest.raises(UnsupportedVersion) as err:
            decode_request(payload)
        assert f"v{version}" in str(err.value) and "newer than kaudit knows" in str(err.value)
        r, _ = decode_request(payload, strict=False)
        assert (r.api_key, r.api_version, r.correlation_id, r.client_id) == (key, version, 1, "future-client")


def test_init_producer_id_v6_fields_round_trip():
    """Any v6 exchange: the row's fields are the bytes' (KIP-939's four fields included)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    i64s, i16s = st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1)

    @settings(max_examples=60, deadline=None)
    @given(pid=i64s, epoch=i16s, opid=i64s, oepoch=i16s, two_pc=st.booleans(), keep=st.booleans(),
           err=st.sampled_from([0, 51, 90]))
    def check(pid, epoch, opid, oepoch, two_pc, keep, err):
        req = (request_header(22, 6, 7, "p", True) + cstring("tx") + i32(2**31 - 1) + i64(-1) + i16(-1)
               + boolean(two_pc) + boolean(keep) + TAGS0)
        resp = response_header(7, True) + i32(0) + i16(err) + i64(pid) + i16(epoch) + i64(opid) + i16(oepoch) + TAGS0
        (e,) = txn_events(*_pair(req, resp))
        assert (e["producer_id"], e["producer_epoch"], e["ongoing_txn_producer_id"], e["ongoing_txn_producer_epoch"],
                e["enable_2pc"], e["keep_prepared_txn"], e["error_codes"]) == (
            pid, epoch, opid, oepoch, two_pc, keep, str(err) if err else "")

    check()
