"""Golden bytes: Produce, Fetch, the old consumer APIs and WriteTxnMarkers, by kio and by hand."""

from __future__ import annotations

import pytest
import wiregolden as g
from wirebytes import TAGS0, carray, cstring, i16, i32, i64, request_header, string

from kaudit.protocol.errors import DecodeError, Truncated
from kaudit.protocol.wire import decode_request, decode_response
from kaudit.protocol.wire.bodies import UnsupportedVersion, body_decoder
from kaudit.protocol.wire.summary import fetch_batches, fetch_partitions, frame_fields, produce_batches


def req(payload):
    r, end = decode_request(payload)
    assert end == len(payload) and r.trailing == 0 and r.error is None
    return r


def resp(payload, key, version):
    r, end = decode_response(payload, key, version)
    assert end == len(payload) and r.trailing == 0 and r.error is None
    return r


def test_produce_v2_hand_written_with_a_magic_1_message_set():
    r = req(g.PRODUCE_V2_REQUEST)
    assert (r.api_name, r.api_version, r.correlation_id, r.client_id, r.decoder) == (
        "Produce", 2, 11, "old-producer", "hand")
    assert r.body["transactional_id"] is None and r.body["acks"] == 1
    assert r.body["timeout_ms"] == 1500
    rs = r.body["topic_data"][0]["partition_data"][0]["records"]
    assert rs.size == len(g.LEGACY_SET) and rs.error is None and not rs.partial
    (b,) = rs.batches
    assert (b.magic, b.record_count, b.producer_id, b.base_sequence, b.crc_ok) == (1, 1, -1, -1, True)
    p = resp(g.PRODUCE_V2_RESPONSE, 0, 2)
    part = p.body["responses"][0]["partition_responses"][0]
    assert part == {"index": 4, "error_code": 0, "base_offset": 120, "log_append_time_ms": -1}
    assert p.body["throttle_time_ms"] == 0
    (row,) = produce_batches(r, p)
    assert (row["topic"], row["partition"], row["acks"], row["response_error"],
            row["response_base_offset"]) == ("legacy", 4, 1, 0, 120)


def test_produce_v3_by_kio_with_a_transactional_batch():
    r = req(g.PRODUCE_V3_REQUEST)
    assert r.decoder == "kio" and r.body["transactional_id"] == "txn-a"
    assert r.body["timeout_ms"] == 30000  # kio's timedelta back to milliseconds
    (row,) = produce_batches(r)
    b = row["batch"]
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.record_count,
            b.is_transactional, b.codec) == (2003, 0, 3, 5, 3, True, "none")
    assert row["response_error"] is None and row["transactional_id"] == "txn-a"


def test_produce_v9_flexible_with_two_partitions_and_their_answers():
    r = req(g.PRODUCE_V9_REQUEST)
    p = resp(g.PRODUCE_V9_RESPONSE, 0, 9)
    rows = produce_batches(r, p)
    assert [(x["topic"], x["partition"], x["response_error"], x["response_base_offset"])
            for x in rows] == [("j-fence", 0, 47, -1), ("j-idem", 2, 0, 500)]
    idem = rows[1]["batch"]
    assert (idem.codec, idem.record_count, idem.producer_epoch, idem.base_sequence) == ("lz4", 5, 2, 85)
    f = frame_fields(r, p)
    assert (f["api_name"], f["transactional_id"], f["acks"], f["timeout_ms"], f["error_codes"],
            f["producer_id"], f["producer_epoch"]) == (
        "Produce", "java-fence", -1, 30000, "47", 2003, 0)
    assert f["partitions"] == "j-fence-0,j-idem-2"
    assert f["partition_errors"] == [(None, "j-fence", 0, 47), (None, "j-idem", 2, 0)]


def test_fetch_v3_request_and_v0_response_hand_written_with_a_cut_last_message():
    r = req(g.FETCH_V3_REQUEST)
    assert r.decoder == "hand"
    assert r.body["max_bytes"] == 52428800 and r.body["topics"][0]["partitions"][0]["fetch_offset"] == 120
    p = resp(g.FETCH_V0_RESPONSE, 1, 0)
    rs = p.body["responses"][0]["partitions"][0]["records"]
    assert len(rs.batches) == 1 and rs.truncated == 9 and rs.error is None
    (part,) = fetch_partitions(r, p)
    assert (part["high_watermark"], part["last_stable_offset"], part["isolation_level"],
            part["fetch_offset"], part["truncated_bytes"]) == (121, None, "read_uncommitted", 120, 9)


def test_fetch_v4_kio_aborted_transactions_isolation_and_a_cut_last_batch():
    r = req(g.FETCH_V4_REQUEST)
    p = resp(g.FETCH_V4_RESPONSE, 1, 4)
    (part,) = fetch_partitions(r, p)
    assert part["isolation_level"] == "read_committed"
    assert (part["high_watermark"], part["last_stable_offset"]) == (48, 40)
    assert part["aborted_transactions"] == [(7, 40)]
    assert part["truncated_bytes"] == 50 and part["record_set_error"] is None
    rows = fetch_batches(r, p)
    assert [(x["batch"].base_offset, x["batch"].is_control, x["batch"].control_type) for x in rows] == [
        (40, False, None), (43, True, "ABORT")]
    assert rows[1]["batch"].coordinator_epoch == 5
    assert frame_fields(r, p)["isolation_level"] == "read_committed"


def test_fetch_v17_a_followers_replica_id_from_its_replica_state():
    """Fetch v15+ (KIP-903): ReplicaId left the body for the tagged ReplicaState (tag 1); the
    body's replica_id is what Kafka's FetchRequest.replicaId() reads: the state's, else -1."""
    from tests.sim import wire_group

    answered = [("orders", 0, 0, 10, 10, 0, [], b"")]
    for rid in (3, -1):
        ((_, q), (_, a)) = wire_group.fetch(9, "c", 17, "read_uncommitted", [("orders", 0, 5)], answered,
                                            replica_id=rid)
        r = req(q[4:])
        assert r.body["replica_id"] == rid
        assert fetch_partitions(r, resp(a[4:], 1, 17))[0]["replica_id"] == rid


def test_old_consumer_apis_hand_written():
    r = req(g.LIST_OFFSETS_V0_REQUEST)
    assert r.body["topics"][0]["partitions"][0] == {
        "partition_index": 4, "timestamp": -1, "max_num_offsets": 1}
    p = resp(g.LIST_OFFSETS_V0_RESPONSE, 2, 0)
    assert p.body["topics"][0]["partitions"][0]["old_style_offsets"] == [121, 0]
    r = req(g.OFFSET_COMMIT_V1_REQUEST)
    part = r.body["topics"][0]["partitions"][0]
    assert (r.body["generation_id_or_member_epoch"], part["commit_timestamp"],
            part["committed_offset"]) == (3, g.TS, 121)
    assert resp(g.OFFSET_COMMIT_V1_RESPONSE, 8, 1).body["topics"][0]["partitions"][0]["error_code"] == 0
    assert frame_fields(r)["group_id"] == "group-1"
    r = req(g.OFFSET_FETCH_V0_REQUEST)
    assert r.body["topics"][0]["partition_indexes"] == [4, 5]
    p = resp(g.OFFSET_FETCH_V0_RESPONSE, 9, 0)
    assert p.body["topics"][0]["partitions"][0]["committed_offset"] == 121


def test_write_txn_markers_v0_by_hand_equals_v1_by_kio():
    v0, v1 = req(g.WRITE_MARKERS_V0_REQUEST), req(g.WRITE_MARKERS_V1_REQUEST)
    assert (v0.decoder, v1.decoder) == ("hand", "kio")
    assert v0.body == v1.body
    p = resp(g.WRITE_MARKERS_V0_RESPONSE, 27, 0)
    f = frame_fields(v0, p)
    assert f["markers"] == [(2003, 1, "ABORT", 5, "j-fence", 0, 0), (2003, 1, "ABORT", 5, "j-fence", 1, 0)]
    assert (f["producer_id"], f["producer_epoch"], f["committed"], f["error_codes"]) == (2003, 1, False, "")


def test_who_decodes_what():
    assert body_decoder(0, 2, "request") == "hand" and body_decoder(0, 3, "request") == "kio"
    assert body_decoder(1, 3, "response") == "hand" and body_decoder(1, 16, "response") == "kio"
    assert body_decoder(27, 0, "request") == "hand" and body_decoder(27, 1, "request") == "kio"
    assert body_decoder(12, 4, "request") == "kio"  # Heartbeat: the consumers' timelines read it
    assert body_decoder(15, 5, "request") == "opaque"  # DescribeGroups: not a decoded API
    assert body_decoder(0, 99, "request") == "opaque"


def test_opaque_bodies_and_unknown_versions():
    describe = request_header(15, 5, 9, "c", True) + b"\x02" + cstring("g") + b"\x00" + TAGS0
    r = req(describe)
    assert r.body is None and r.decoder == "opaque" and r.api_name == "DescribeGroups"
    with pytest.raises(UnsupportedVersion):
        decode_request(request_header(0, 99, 1, "c", False) + b"\x00" * 8)
    r, _ = decode_request(request_header(0, 99, 1, "c", False) + b"\x00" * 8, strict=False)
    assert isinstance(r.error, UnsupportedVersion) and r.correlation_id == 1
    # an unknown api key: header v1, body opaque
    r = req(i16(300) + i16(0) + i32(5) + string("future") + b"\x01\x02")
    assert (r.api_name, r.body, r.client_id) == ("Unknown(300)", None, "future")


def test_what_kios_own_reader_refuses_is_decoded():
    # EndTxn v3 response with an error code newer than kio's enum: kept as an int
    payload = i32(9) + TAGS0 + i32(0) + i16(5120) + TAGS0
    p = resp(payload, 26, 3)
    assert p.decoder == "kio" and p.body == {"throttle_time_ms": 0, "error_code": 5120}
    assert frame_fields(None, p)["error_codes"] == "5120"
    # InitProducerId v4 request with an unknown tagged field (tag 7): skipped, as Kafka does
    body = cstring("t") + i32(60000) + i64(-1) + i16(-1) + b"\x01" + b"\x07" + b"\x02" + b"zz"
    r = req(request_header(22, 4, 2, "c", True) + body)
    assert r.body == {"transactional_id": "t", "transaction_timeout_ms": 60000,
                      "producer_id": -1, "producer_epoch": -1}


def test_trailing_bytes_are_counted_not_hidden():
    r, _ = decode_request(g.FETCH_V3_REQUEST + b"\x00\x00")
    assert r.trailing == 2 and r.body is not None


def test_corrupt_record_set_is_reported_in_the_record_set():
    bad = bytearray(g.TXN_BATCH)
    bad[57:61] = i32(1000)  # records_count: more records than bytes
    payload = g.PRODUCE_V3_REQUEST.replace(g.TXN_BATCH, bytes(bad))
    rs = req(payload).body["topic_data"][0]["partition_data"][0]["records"]
    assert rs.batches[0].crc_ok is False and rs.error is None  # header-only: a CRC mismatch
    r, _ = decode_request(payload, deep=True)  # records decoded: the lie is an error
    rs = r.body["topic_data"][0]["partition_data"][0]["records"]
    assert rs.batches == [] and isinstance(rs.error, DecodeError)
    cut = g.PRODUCE_V3_REQUEST[: -len(g.TXN_BATCH)]
    cut = cut[:-4] + i32(40) + g.TXN_BATCH[:40]  # a Produce record set cut short: an error
    rs = req(cut).body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(rs.error, Truncated) and rs.truncated == 40


def test_fetch_v16_with_topic_ids_by_kio():
    tid = bytes(range(1, 17))
    payload = (
        i32(77) + TAGS0  # response header v1
        + i32(0) + i16(0) + i32(123)  # throttle, error_code, session_id
        + carray(1) + tid  # responses[0].topic_id
        + carray(1) + i32(1) + i16(0) + i64(10) + i64(10) + i64(0)  # index, error, hw, lso, lso
        + carray(0)  # aborted_transactions
        + i32(-1)  # preferred_read_replica
        + carray(None)[:0] + b"\x01"  # records: compact bytes, empty
        + TAGS0 + TAGS0 + TAGS0)
    p = resp(payload, 1, 16)
    (part,) = fetch_partitions(None, p)
    assert part["topic"] is None and part["topic_id"] == "AQIDBAUGBwgJCgsMDQ4PEA"  # Kafka's Uuid.toString
    assert part["aborted_transactions"] == [] and part["batches"] == []


def _spec_paths(spec, prefix=()):
    for name, t in spec:
        yield (*prefix, name)
        if isinstance(t, tuple) and t[0] == "array" and isinstance(t[1], tuple):
            yield from _spec_paths(t[1], (*prefix, name))


def _kio_paths(cls, prefix=()):
    import dataclasses
    import typing

    from kaudit.protocol.wire.kio_schema import _inner_types, _out_name

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        name = _out_name(f.name, f.metadata.get("kafka_type"))
        yield (*prefix, name)
        for c in _inner_types(hints[f.name]):
            if isinstance(c, type) and dataclasses.is_dataclass(c):
                yield from _kio_paths(c, (*prefix, name))


@pytest.mark.parametrize("entity", ["request", "response"])
def test_hand_written_versions_use_the_field_names_of_kios_next_version(entity):
    from kaudit.protocol.wire import apis
    from kaudit.protocol.wire.legacy import REQUESTS, RESPONSES

    # fields of old versions only (gone by kio's oldest version)
    old_only = {("topics", "partitions", "max_num_offsets"), ("topics", "partitions", "old_style_offsets"),
                ("topics", "partitions", "commit_timestamp")}
    for (key, version), spec in (REQUESTS if entity == "request" else RESPONSES).items():
        newer = min(v for v in range(version + 1, apis.max_version(key) + 1)
                    if apis.kio_class(key, v, entity) is not None)
        kio_paths = set(_kio_paths(apis.kio_class(key, newer, entity)))
        missing = set(_spec_paths(spec)) - kio_paths - old_only
        assert missing == set(), (apis.api_name(key), version, entity, missing)
