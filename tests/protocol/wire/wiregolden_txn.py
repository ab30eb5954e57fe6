"""Golden producer/transaction, ApiVersions and SASL messages (flexible versions, by kio)."""

from __future__ import annotations

from wirebytes import (
    TAGS0,
    array,
    boolean,
    carray,
    cbytes,
    cstring,
    i16,
    i32,
    i64,
    request_header,
    response_header,
    string,
)

TS = 1_795_234_917_000

INIT_PID_V4_REQUEST = (
    request_header(22, 4, 1, "java-fence-B", True)
    + cstring("java-fence")  # transactional_id
    + i32(60000)  # transaction_timeout_ms
    + i64(-1)  # producer_id (v3+): none yet
    + i16(-1)  # producer_epoch (v3+)
    + TAGS0
)
INIT_PID_V4_RESPONSE = (
    response_header(1, True)
    + i32(0)  # throttle_time_ms
    + i16(0)  # error_code
    + i64(2003)  # producer_id
    + i16(2)  # producer_epoch
    + TAGS0
)
ADD_PARTITIONS_V3_REQUEST = (
    request_header(24, 3, 4, "java-fence-B", True)
    + cstring("java-fence")  # v3_and_below_transactional_id
    + i64(2003) + i16(2)  # producer id and epoch
    + carray(1) + cstring("j-fence")  # topics[0].name
    + carray(2) + i32(0) + i32(1)  # partitions
    + TAGS0 + TAGS0
)
ADD_PARTITIONS_V3_RESPONSE = (
    response_header(4, True)
    + i32(0)  # throttle_time_ms
    + carray(1) + cstring("j-fence")  # results_by_topic_v3_and_below[0].name
    + carray(2)
    + i32(0) + i16(0) + TAGS0  # partition_index, partition_error_code
    + i32(1) + i16(51) + TAGS0  # CONCURRENT_TRANSACTIONS
    + TAGS0 + TAGS0
)
ADD_PARTITIONS_V4_REQUEST = (  # a broker verifying two transactions (KIP-890)
    request_header(24, 4, 5, "broker-1", True)
    + carray(2)  # transactions
    + cstring("tx-a") + i64(10) + i16(0) + boolean(True)  # id, pid, epoch, verify_only
    + carray(1) + cstring("t") + carray(1) + i32(3) + TAGS0 + TAGS0
    + cstring("tx-b") + i64(11) + i16(4) + boolean(True)
    + carray(1) + cstring("t") + carray(1) + i32(5) + TAGS0 + TAGS0
    + TAGS0
)
ADD_PARTITIONS_V4_RESPONSE = (
    response_header(5, True)
    + i32(0) + i16(0)  # throttle_time_ms, error_code
    + carray(2)  # results_by_transaction
    + cstring("tx-a") + carray(1) + cstring("t") + carray(1) + i32(3) + i16(0) + TAGS0 + TAGS0 + TAGS0
    + cstring("tx-b") + carray(1) + cstring("t") + carray(1) + i32(5) + i16(48) + TAGS0 + TAGS0
    + TAGS0
    + TAGS0
)
ADD_OFFSETS_V3_REQUEST = (
    request_header(25, 3, 6, "ctp", True)
    + cstring("ctp-txn") + i64(1001) + i16(0) + cstring("ctp-group") + TAGS0
)
END_TXN_V3_REQUEST = (
    request_header(26, 3, 7, "java-fence-B", True)
    + cstring("java-fence") + i64(2003) + i16(2)
    + boolean(True)  # committed
    + TAGS0
)
END_TXN_V3_RESPONSE = response_header(7, True) + i32(0) + i16(0) + TAGS0
END_TXN_V5_REQUEST = (
    request_header(26, 5, 8, "tv2", True)
    + cstring("tv2-txn") + i64(44) + i16(7) + boolean(False) + TAGS0
)
END_TXN_V5_RESPONSE = (
    response_header(8, True)
    + i32(0) + i16(0)
    + i64(44)  # producer_id (v5+): the producer id for the next transaction
    + i16(8)  # producer_epoch (v5+): bumped
    + TAGS0
)
TXN_OFFSET_COMMIT_V3_REQUEST = (
    request_header(28, 3, 9, "ctp", True)
    + cstring("ctp-txn") + cstring("ctp-group") + i64(1001) + i16(0)
    + i32(1)  # generation_id
    + cstring("member-1")  # member_id
    + cstring(None)  # group_instance_id
    + carray(1) + cstring("ctp-in") + carray(1)
    + i32(0) + i64(15) + i32(-1) + cstring(None) + TAGS0  # index, offset, leader epoch, metadata
    + TAGS0 + TAGS0
)
TXN_OFFSET_COMMIT_V3_RESPONSE = (
    response_header(9, True) + i32(0)
    + carray(1) + cstring("ctp-in") + carray(1) + i32(0) + i16(0) + TAGS0 + TAGS0 + TAGS0
)
DESCRIBE_PRODUCERS_V0_RESPONSE = (
    response_header(10, True) + i32(0)
    + carray(1) + cstring("dup-expire") + carray(1)
    + i32(0) + i16(0) + cstring(None)  # partition_index, error_code, error_message
    + carray(1)  # active_producers
    + i64(0) + i32(0) + i32(9)  # producer_id, producer_epoch (int32 here), last_sequence
    + i64(TS) + i32(-1) + i64(-1)  # last_timestamp, coordinator_epoch, current_txn_start_offset
    + TAGS0 + TAGS0 + TAGS0 + TAGS0
)
DESCRIBE_TRANSACTIONS_V0_RESPONSE = (
    response_header(11, True) + i32(0)
    + carray(1)
    + i16(0) + cstring("kx-hang") + cstring("Ongoing")  # error_code, id, state
    + i32(60000) + i64(TS)  # transaction_timeout_ms, transaction_start_time_ms
    + i64(0) + i16(3)  # producer_id, producer_epoch
    + carray(1) + cstring("hang") + carray(2) + i32(1) + i32(3) + TAGS0
    + TAGS0 + TAGS0
)
LIST_TRANSACTIONS_V1_RESPONSE = (
    response_header(12, True) + i32(0) + i16(0)
    + carray(0)  # unknown_state_filters
    + carray(1) + cstring("kx-hang") + i64(0) + cstring("Ongoing") + TAGS0
    + TAGS0
)
API_VERSIONS_V3_REQUEST = (
    request_header(18, 3, 0, "rdkafka", True) + cstring("librdkafka") + cstring("2.16.0") + TAGS0
)
API_VERSIONS_V3_RESPONSE = (
    response_header(0, False)  # ApiVersions responses: always header v0
    + i16(0)
    + carray(2) + i16(0) + i16(0) + i16(9) + TAGS0 + i16(18) + i16(0) + i16(3) + TAGS0
    + i32(0) + TAGS0
)
API_VERSIONS_V4_UNSUPPORTED = (  # Kafka 3.0.2 answering a v4 request: error 35 in a v0 body
    response_header(1, False)
    + i16(35)  # UNSUPPORTED_VERSION
    + array(1) + i16(18) + i16(0) + i16(3)  # ApiVersions 0..3
)
SASL_HANDSHAKE_V1_REQUEST = request_header(17, 1, 1, "c", False) + string("PLAIN")
SASL_HANDSHAKE_V1_RESPONSE = (
    response_header(1, False) + i16(0) + array(2) + string("PLAIN") + string("SCRAM-SHA-256")
)
SASL_PLAIN_V2_REQUEST = (
    request_header(36, 2, 2, "c", True) + cbytes(b"\x00alice\x00s3cr3t-PASSWORD") + TAGS0
)
SASL_SCRAM_V2_RESPONSE = (
    response_header(3, True) + i16(0) + cstring(None)
    + cbytes(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    + i64(0) + TAGS0
)

GOLDEN_TXN = [
    ("init_producer_id v4", "request", 22, 4, INIT_PID_V4_REQUEST),
    ("init_producer_id v4", "response", 22, 4, INIT_PID_V4_RESPONSE),
    ("add_partitions v3", "request", 24, 3, ADD_PARTITIONS_V3_REQUEST),
    ("add_partitions v3", "response", 24, 3, ADD_PARTITIONS_V3_RESPONSE),
    ("add_partitions v4", "request", 24, 4, ADD_PARTITIONS_V4_REQUEST),
    ("add_partitions v4", "response", 24, 4, ADD_PARTITIONS_V4_RESPONSE),
    ("add_offsets v3", "request", 25, 3, ADD_OFFSETS_V3_REQUEST),
    ("end_txn v3", "request", 26, 3, END_TXN_V3_REQUEST),
    ("end_txn v3", "response", 26, 3, END_TXN_V3_RESPONSE),
    ("end_txn v5", "request", 26, 5, END_TXN_V5_REQUEST),
    ("end_txn v5", "response", 26, 5, END_TXN_V5_RESPONSE),
    ("txn_offset_commit v3", "request", 28, 3, TXN_OFFSET_COMMIT_V3_REQUEST),
    ("txn_offset_commit v3", "response", 28, 3, TXN_OFFSET_COMMIT_V3_RESPONSE),
    ("describe_producers v0", "response", 61, 0, DESCRIBE_PRODUCERS_V0_RESPONSE),
    ("describe_transactions v0", "response", 65, 0, DESCRIBE_TRANSACTIONS_V0_RESPONSE),
    ("list_transactions v1", "response", 66, 1, LIST_TRANSACTIONS_V1_RESPONSE),
    ("api_versions v3", "request", 18, 3, API_VERSIONS_V3_REQUEST),
    ("api_versions v3", "response", 18, 3, API_VERSIONS_V3_RESPONSE),
    ("api_versions v4 unsupported", "response", 18, 4, API_VERSIONS_V4_UNSUPPORTED),
    ("sasl_handshake v1", "request", 17, 1, SASL_HANDSHAKE_V1_REQUEST),
    ("sasl_handshake v1", "response", 17, 1, SASL_HANDSHAKE_V1_RESPONSE),
    ("sasl_authenticate v2", "request", 36, 2, SASL_PLAIN_V2_REQUEST),
    ("sasl_authenticate v2", "response", 36, 2, SASL_SCRAM_V2_RESPONSE),
]
