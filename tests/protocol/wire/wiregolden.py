"""Golden Kafka messages written field by field (payloads: header + body, no size prefix).

Layouts from Kafka's JSON message specs (clients/src/main/resources/common/message). Each
constant is a payload; `GOLDEN` lists them all as (name, "request" | "response", api_key,
version, payload) for the truncation tests.
"""

from __future__ import annotations

from fixtures import kafka_encoder as ke
from wirebytes import (
    TAGS0,
    array,
    boolean,
    carray,
    cbytes,
    cstring,
    i8,
    i16,
    i32,
    i64,
    nbytes,
    request_header,
    response_header,
    string,
)

TS = 1_795_234_917_000

# ---- record sets ---------------------------------------------------------------------------

TXN_BATCH = ke.encode_record_batch_v2(
    0, [{"value": b"v0"}, {"value": b"v1"}, {"value": b"v2"}], producer_id=2003, producer_epoch=0,
    base_sequence=3, is_transactional=True, base_timestamp=TS)
IDEM_BATCH = ke.encode_record_batch_v2(
    0, [{"value": b"x" * 10}] * 5, producer_id=1000, producer_epoch=2, base_sequence=85,
    codec="lz4", base_timestamp=TS)
LEGACY_SET = ke.encode_legacy_message(0, None, b"hello", magic=1, timestamp=TS)
FETCHED_1 = ke.encode_record_batch_v2(40, [{"value": b"a"}] * 3, producer_id=7, producer_epoch=1,
                                      base_sequence=0, is_transactional=True, base_timestamp=TS)
FETCHED_2 = ke.encode_control_batch(43, 7, 1, "ABORT", coordinator_epoch=5)
FETCHED_3 = ke.encode_record_batch_v2(44, [{"value": b"b" * 30}] * 4, base_timestamp=TS)
FETCH_SET = FETCHED_1 + FETCHED_2 + FETCHED_3[:50]  # the broker cut the last batch: normal

# ---- Produce -------------------------------------------------------------------------------

PRODUCE_V2_REQUEST = (
    request_header(0, 2, 11, "old-producer", False)
    + i16(1)  # acks
    + i32(1500)  # timeout_ms
    + array(1)  # topic_data
    + string("legacy")  # name
    + array(1)  # partition_data
    + i32(4)  # index
    + nbytes(LEGACY_SET)  # records: one magic 1 message
)
PRODUCE_V2_RESPONSE = (
    response_header(11, False)
    + array(1) + string("legacy")  # responses[0].name
    + array(1) + i32(4)  # partition_responses[0].index
    + i16(0)  # error_code
    + i64(120)  # base_offset
    + i64(-1)  # log_append_time_ms (v2)
    + i32(0)  # throttle_time_ms (v1+)
)
PRODUCE_V3_REQUEST = (
    request_header(0, 3, 12, "txn-producer", False)
    + string("txn-a")  # transactional_id (v3+)
    + i16(-1)  # acks: all
    + i32(30000)  # timeout_ms
    + array(1) + string("orders")  # topic_data[0].name
    + array(1) + i32(0)  # partition_data[0].index
    + nbytes(TXN_BATCH)  # records
)
PRODUCE_V9_REQUEST = (
    request_header(0, 9, 8, "java-fence-A", True)
    + cstring("java-fence")  # transactional_id (compact)
    + i16(-1)  # acks
    + i32(30000)  # timeout_ms
    + carray(2)  # topic_data
    + cstring("j-fence") + carray(1)  # name, partition_data
    + i32(0) + cbytes(TXN_BATCH) + TAGS0  # index, records, partition tags
    + TAGS0  # topic tags
    + cstring("j-idem") + carray(1)
    + i32(2) + cbytes(IDEM_BATCH) + TAGS0
    + TAGS0
    + TAGS0  # request tags
)
PRODUCE_V9_RESPONSE = (
    response_header(8, True)
    + carray(2)  # responses
    + cstring("j-fence") + carray(1)
    + i32(0)  # index
    + i16(47)  # error_code INVALID_PRODUCER_EPOCH
    + i64(-1)  # base_offset
    + i64(-1)  # log_append_time_ms
    + i64(-1)  # log_start_offset
    + carray(0)  # record_errors
    + cstring(None)  # error_message
    + TAGS0 + TAGS0
    + cstring("j-idem") + carray(1)
    + i32(2) + i16(0) + i64(500) + i64(-1) + i64(0) + carray(0) + cstring(None) + TAGS0
    + TAGS0
    + i32(0)  # throttle_time_ms
    + TAGS0
)

# ---- Fetch ---------------------------------------------------------------------------------

FETCH_V3_REQUEST = (
    request_header(1, 3, 21, "old-consumer", False)
    + i32(-1)  # replica_id: a consumer
    + i32(500)  # max_wait_ms
    + i32(1)  # min_bytes
    + i32(52428800)  # max_bytes (v3+)
    + array(1) + string("legacy")  # topics[0].topic
    + array(1) + i32(4)  # partitions[0].partition
    + i64(120)  # fetch_offset
    + i32(1048576)  # partition_max_bytes
)
FETCH_V0_RESPONSE = (
    response_header(21, False)
    + array(1) + string("legacy")  # responses[0].topic
    + array(1) + i32(4)  # partitions[0].partition_index
    + i16(0)  # error_code
    + i64(121)  # high_watermark
    + nbytes(LEGACY_SET + LEGACY_SET[:9])  # records: one message and a cut one
)
FETCH_V4_REQUEST = (
    request_header(1, 4, 30, "rc-consumer", False)
    + i32(-1) + i32(500) + i32(1) + i32(52428800)
    + i8(1)  # isolation_level: read_committed (v4+)
    + array(1) + string("orders")
    + array(1) + i32(0) + i64(40) + i32(1048576)
)
FETCH_V4_RESPONSE = (
    response_header(30, False)
    + i32(0)  # throttle_time_ms
    + array(1) + string("orders")
    + array(1)
    + i32(0)  # partition_index
    + i16(0)  # error_code
    + i64(48)  # high_watermark
    + i64(40)  # last_stable_offset (v4+)
    + array(1)  # aborted_transactions
    + i64(7) + i64(40)  # producer_id, first_offset
    + nbytes(FETCH_SET)  # records
)

# ---- old consumer APIs (hand-written) ------------------------------------------------------

LIST_OFFSETS_V0_REQUEST = (
    request_header(2, 0, 3, "old-consumer", False)
    + i32(-1)  # replica_id
    + array(1) + string("legacy") + array(1)
    + i32(4)  # partition_index
    + i64(-1)  # timestamp: latest
    + i32(1)  # max_num_offsets (v0 only)
)
LIST_OFFSETS_V0_RESPONSE = (
    response_header(3, False)
    + array(1) + string("legacy") + array(1)
    + i32(4) + i16(0)
    + array(2) + i64(121) + i64(0)  # old_style_offsets
)
OFFSET_COMMIT_V1_REQUEST = (
    request_header(8, 1, 4, "old-consumer", False)
    + string("group-1")  # group_id
    + i32(3)  # generation_id (v1+)
    + string("member-1")  # member_id (v1+)
    + array(1) + string("legacy") + array(1)
    + i32(4)  # partition_index
    + i64(121)  # committed_offset
    + i64(TS)  # commit_timestamp (v1 only)
    + string("")  # committed_metadata
)
OFFSET_COMMIT_V1_RESPONSE = (
    response_header(4, False)
    + array(1) + string("legacy") + array(1) + i32(4) + i16(0)
)
OFFSET_FETCH_V0_REQUEST = (
    request_header(9, 0, 5, "old-consumer", False)
    + string("group-1")
    + array(1) + string("legacy") + array(2) + i32(4) + i32(5)  # partition_indexes
)
OFFSET_FETCH_V0_RESPONSE = (
    response_header(5, False)
    + array(1) + string("legacy") + array(1)
    + i32(4) + i64(121) + string(None)  # partition_index, committed_offset, metadata
    + i16(0)  # error_code
)

# ---- WriteTxnMarkers v0 (hand) and v1 (kio): the same content ------------------------------

WRITE_MARKERS_V0_REQUEST = (
    request_header(27, 0, 16, "broker-1-txn-marker-sender", False)
    + array(1)  # markers
    + i64(2003)  # producer_id
    + i16(1)  # producer_epoch
    + boolean(False)  # transaction_result: ABORT
    + array(1) + string("j-fence") + array(2) + i32(0) + i32(1)  # topics
    + i32(5)  # coordinator_epoch
)
WRITE_MARKERS_V1_REQUEST = (
    request_header(27, 1, 16, "broker-1-txn-marker-sender", True)
    + carray(1)
    + i64(2003) + i16(1) + boolean(False)
    + carray(1) + cstring("j-fence") + carray(2) + i32(0) + i32(1) + TAGS0
    + i32(5)
    + TAGS0  # marker tags
    + TAGS0
)
WRITE_MARKERS_V0_RESPONSE = (
    response_header(16, False)
    + array(1) + i64(2003)  # markers[0].producer_id
    + array(1) + string("j-fence")
    + array(2) + i32(0) + i16(0) + i32(1) + i16(0)  # partitions: index, error_code
)

GOLDEN = [
    ("produce v2", "request", 0, 2, PRODUCE_V2_REQUEST),
    ("produce v2", "response", 0, 2, PRODUCE_V2_RESPONSE),
    ("produce v3", "request", 0, 3, PRODUCE_V3_REQUEST),
    ("produce v9", "request", 0, 9, PRODUCE_V9_REQUEST),
    ("produce v9", "response", 0, 9, PRODUCE_V9_RESPONSE),
    ("fetch v3", "request", 1, 3, FETCH_V3_REQUEST),
    ("fetch v0", "response", 1, 0, FETCH_V0_RESPONSE),
    ("fetch v4", "request", 1, 4, FETCH_V4_REQUEST),
    ("fetch v4", "response", 1, 4, FETCH_V4_RESPONSE),
    ("list_offsets v0", "request", 2, 0, LIST_OFFSETS_V0_REQUEST),
    ("list_offsets v0", "response", 2, 0, LIST_OFFSETS_V0_RESPONSE),
    ("offset_commit v1", "request", 8, 1, OFFSET_COMMIT_V1_REQUEST),
    ("offset_commit v1", "response", 8, 1, OFFSET_COMMIT_V1_RESPONSE),
    ("offset_fetch v0", "request", 9, 0, OFFSET_FETCH_V0_REQUEST),
    ("offset_fetch v0", "response", 9, 0, OFFSET_FETCH_V0_RESPONSE),
    ("write_txn_markers v0", "request", 27, 0, WRITE_MARKERS_V0_REQUEST),
    ("write_txn_markers v1", "request", 27, 1, WRITE_MARKERS_V1_REQUEST),
    ("write_txn_markers v0", "response", 27, 0, WRITE_MARKERS_V0_RESPONSE),
]
