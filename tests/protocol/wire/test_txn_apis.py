"""Golden bytes: producer and transaction APIs, ApiVersions, SASL; their frame and txn facts."""

from __future__ import annotations

import wiregolden_txn as g

from kaudit.protocol.wire import decode_request, decode_response
from kaudit.protocol.wire.summary import error_name, frame_fields, txn_events


def pair(request_payload, response_payload=None):
    r, _ = decode_request(request_payload)
    assert r.error is None and r.trailing == 0
    p = None
    if response_payload is not None:
        p, _ = decode_response(response_payload, r.api_key, r.api_version)
        assert p.error is None and p.trailing == 0
    return r, p


def test_init_producer_id():
    r, p = pair(g.INIT_PID_V4_REQUEST, g.INIT_PID_V4_RESPONSE)
    f = frame_fields(r, p)
    assert (f["api_name"], f["transactional_id"], f["transaction_timeout_ms"], f["producer_id"],
            f["producer_epoch"], f["error_codes"]) == ("InitProducerId", "java-fence", 60000, 2003, 2, "")
    (e,) = txn_events(r, p)
    assert (e["event"], e["producer_id"], e["producer_epoch"], e["timeout_ms"]) == (
        "INIT_PRODUCER_ID", 2003, 2, 60000)
    (e,) = txn_events(r)  # no response: the request's (none yet) ids, error codes unknown
    assert (e["producer_id"], e["error_codes"]) == (-1, None)


def test_add_partitions_client_v3():
    r, p = pair(g.ADD_PARTITIONS_V3_REQUEST, g.ADD_PARTITIONS_V3_RESPONSE)
    f = frame_fields(r, p)
    assert (f["transactional_id"], f["producer_id"], f["producer_epoch"], f["partitions"]) == (
        "java-fence", 2003, 2, "j-fence-0,j-fence-1")
    assert f["error_codes"] == "51"
    assert f["partition_errors"] == [("java-fence", "j-fence", 0, 0), ("java-fence", "j-fence", 1, 51)]
    (e,) = txn_events(r, p)
    assert (e["event"], e["partitions"], e["error_codes"]) == ("ADD_PARTITIONS", "j-fence-0,j-fence-1", "51")


def test_add_partitions_broker_verification_v4():
    r, p = pair(g.ADD_PARTITIONS_V4_REQUEST, g.ADD_PARTITIONS_V4_RESPONSE)
    f = frame_fields(r, p)
    assert f["transactional_id"] is None  # two transactions in one request
    assert f["transactions"] == [("tx-a", 10, 0, True, "t-3"), ("tx-b", 11, 4, True, "t-5")]
    assert f["partition_errors"] == [("tx-a", "t", 3, 0), ("tx-b", "t", 5, 48)]
    events = txn_events(r, p)
    assert [(e["transactional_id"], e["result"], e["error_codes"]) for e in events] == [
        ("tx-a", "VERIFY", ""), ("tx-b", "VERIFY", "48")]


def test_add_offsets_end_txn_and_txn_offset_commit():
    r, _ = pair(g.ADD_OFFSETS_V3_REQUEST)
    f = frame_fields(r)
    assert (f["transactional_id"], f["producer_id"], f["group_id"], f["error_codes"]) == (
        "ctp-txn", 1001, "ctp-group", None)
    r, p = pair(g.END_TXN_V3_REQUEST, g.END_TXN_V3_RESPONSE)
    f = frame_fields(r, p)
    assert (f["committed"], f["new_producer_id"], f["producer_epoch"]) == (True, None, 2)
    assert txn_events(r, p)[0]["result"] == "COMMIT"
    r, p = pair(g.END_TXN_V5_REQUEST, g.END_TXN_V5_RESPONSE)
    f = frame_fields(r, p)
    assert (f["committed"], f["producer_epoch"], f["new_producer_id"], f["new_producer_epoch"]) == (
        False, 7, 44, 8)
    (e,) = txn_events(r, p)
    assert (e["result"], e["new_producer_epoch"]) == ("ABORT", 8)
    r, p = pair(g.TXN_OFFSET_COMMIT_V3_REQUEST, g.TXN_OFFSET_COMMIT_V3_RESPONSE)
    f = frame_fields(r, p)
    assert (f["group_id"], f["partitions"], f["partition_errors"]) == (
        "ctp-group", "ctp-in-0", [("ctp-txn", "ctp-in", 0, 0)])
    assert r.body["topics"][0]["partitions"][0]["committed_offset"] == 15


def test_describe_producers_transactions_and_list_transactions():
    p, _ = decode_response(g.DESCRIBE_PRODUCERS_V0_RESPONSE, 61, 0)
    assert frame_fields(None, p)["producers"] == [("dup-expire", 0, 0, 0, 9, g.TS, -1, -1)]
    p, _ = decode_response(g.DESCRIBE_TRANSACTIONS_V0_RESPONSE, 65, 0)
    s = p.body["transaction_states"][0]
    assert (s["transaction_timeout_ms"], s["transaction_start_time_ms"]) == (60000, g.TS)
    assert frame_fields(None, p)["transactions"] == [("kx-hang", 0, 3, "Ongoing", "hang-1,hang-3")]
    p, _ = decode_response(g.LIST_TRANSACTIONS_V1_RESPONSE, 66, 1)
    assert frame_fields(None, p)["transactions"] == [("kx-hang", 0, None, "Ongoing", None)]


def test_api_versions_and_the_version_0_fallback():
    r, p = pair(g.API_VERSIONS_V3_REQUEST, g.API_VERSIONS_V3_RESPONSE)
    assert r.body == {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}
    assert [k["api_key"] for k in p.body["api_keys"]] == [0, 18]
    assert p.header.header_version == 0
    p, _ = decode_response(g.API_VERSIONS_V4_UNSUPPORTED, 18, 4)
    assert (p.body_version, p.body["error_code"], p.trailing) == (0, 35, 0)
    assert p.body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 3}]
    assert error_name(35) == "UNSUPPORTED_VERSION" and error_name(5120) == "UNKNOWN(5120)"


def test_sasl_handshake_and_authenticate_are_redacted():
    r, p = pair(g.SASL_HANDSHAKE_V1_REQUEST, g.SASL_HANDSHAKE_V1_RESPONSE)
    assert frame_fields(r, p)["sasl_mechanism"] == "PLAIN"
    assert p.body["mechanisms"] == ["PLAIN", "SCRAM-SHA-256"]
    r, _ = decode_request(g.SASL_PLAIN_V2_REQUEST)
    assert r.body["auth_bytes"] == b"\x00alice\x00<redacted>"
    assert r.body["sasl"]["username"] == "alice"
    f = frame_fields(r)
    assert (f["sasl_mechanism"], f["sasl_username"]) == ("PLAIN", "alice")
    assert b"s3cr3t" not in repr(r).encode() and "s3cr3t" not in repr(f)
    p, _ = decode_response(g.SASL_SCRAM_V2_RESPONSE, 36, 2)
    assert p.body["auth_bytes"] == b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=<redacted>,i=4096"
    assert "QSXCR" not in repr(p)
