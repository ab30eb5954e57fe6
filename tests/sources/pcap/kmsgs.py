"""Test helper: the Kafka frames of the crafted conversations (size-prefixed, ready for TCP).

Written field by field with the wire tests' primitives (tests/protocol/wire/wirebytes.py) and
the test-only record batch encoder (fixtures/kafka_encoder.py), independent of kaudit's decoders.
"""

from __future__ import annotations

from fixtures import kafka_encoder as ke
from tests.protocol.wire.wirebytes import (
    TAGS0,
    array,
    boolean,
    carray,
    cbytes,
    cstring,
    frame,
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
CLIENT_ID = "kaudit-producer"
TXN_ID = "tx-orders"
PID, EPOCH = 2003, 2
PASSWORD = "S3cr3t-pa55"

# ---- record batches --------------------------------------------------------------------------

PRODUCE_BATCH_PLAIN = ke.encode_record_batch_v2(
    0, [{"key": b"k0", "value": b"order-0"}, {"key": b"k1", "value": b"order-1"}],
    producer_id=PID, producer_epoch=EPOCH, base_sequence=0, is_transactional=True,
    base_timestamp=TS)
PRODUCE_BATCH_GZIP = ke.encode_record_batch_v2(
    0, [{"value": b"audit-entry-" + bytes([65 + i]) * 40} for i in range(5)],
    producer_id=PID, producer_epoch=EPOCH, base_sequence=10, is_transactional=True,
    codec="gzip", base_timestamp=TS)
FETCH_BATCHES = (
    ke.encode_record_batch_v2(40, [{"value": b"a"}] * 3, producer_id=7, producer_epoch=1,
                              base_sequence=0, is_transactional=True, base_timestamp=TS)
    + ke.encode_control_batch(43, 7, 1, "ABORT", coordinator_epoch=5)
    + ke.encode_record_batch_v2(44, [{"value": b"b" * 30}] * 4, base_timestamp=TS)
)


# ---- requests and responses (frames) ---------------------------------------------------------

def api_versions(corr, client_id=CLIENT_ID):
    req = request_header(18, 3, corr, client_id, True) + cstring("kaudit-test") + cstring("1.0") + TAGS0
    resp = (response_header(corr, False) + i16(0)
            + carray(3)
            + i16(0) + i16(0) + i16(9) + TAGS0
            + i16(1) + i16(0) + i16(12) + TAGS0
            + i16(18) + i16(0) + i16(3) + TAGS0
            + i32(0) + TAGS0)
    return frame(req), frame(resp)


def metadata(corr, topic="orders", client_id=CLIENT_ID):
    req = request_header(3, 1, corr, client_id, False) + array(1) + string(topic)
    resp = (response_header(corr, False)
            + array(1) + i32(1) + string("broker-1") + i32(9092) + string(None)  # brokers
            + i32(1)  # controller_id
            + array(1) + i16(0) + string(topic) + boolean(False)  # topics[0]
            + array(1) + i16(0) + i32(0) + i32(1) + array(1) + i32(1) + array(1) + i32(1))
    return frame(req), frame(resp)


def init_producer_id(corr, client_id=CLIENT_ID):
    req = (request_header(22, 4, corr, client_id, True) + cstring(TXN_ID) + i32(60000)
           + i64(-1) + i16(-1) + TAGS0)
    resp = response_header(corr, True) + i32(0) + i16(0) + i64(PID) + i16(EPOCH) + TAGS0
    return frame(req), frame(resp)


def add_partitions(corr, client_id=CLIENT_ID):
    req = (request_header(24, 3, corr, client_id, True) + cstring(TXN_ID) + i64(PID) + i16(EPOCH)
           + carray(2)
           + cstring("orders") + carray(1) + i32(0) + TAGS0
           + cstring("audit") + carray(1) + i32(1) + TAGS0
           + TAGS0)
    resp = (response_header(corr, True) + i32(0)
            + carray(2)
            + cstring("orders") + carray(1) + i32(0) + i16(0) + TAGS0 + TAGS0
            + cstring("audit") + carray(1) + i32(1) + i16(0) + TAGS0 + TAGS0
            + TAGS0)
    return frame(req), frame(resp)


def produce(corr, acks=-1, client_id=CLIENT_ID, txn_id=TXN_ID):
    """Produce v3: orders-0 (plain batch) and audit-1 (gzip batch)."""
    req = (request_header(0, 3, corr, client_id, False)
           + string(txn_id) + i16(acks) + i32(30000)
           + array(2)
           + string("orders") + array(1) + i32(0) + nbytes(PRODUCE_BATCH_PLAIN)
           + string("audit") + array(1) + i32(1) + nbytes(PRODUCE_BATCH_GZIP))
    resp = (response_header(corr, False)
            + array(2)
            + string("orders") + array(1) + i32(0) + i16(0) + i64(100) + i64(-1)
            + string("audit") + array(1) + i32(1) + i16(0) + i64(7) + i64(-1)
            + i32(0))
    return frame(req), frame(resp)


def fetch(corr, client_id="kaudit-consumer"):
    """Fetch v4 read_committed of orders-0: three batches and one aborted transaction."""
    req = (request_header(1, 4, corr, client_id, False)
           + i32(-1) + i32(500) + i32(1) + i32(52428800) + i8(1)
           + array(1) + string("orders") + array(1) + i32(0) + i64(40) + i32(1048576))
    resp = (response_header(corr, False) + i32(0)
            + array(1) + string("orders")
            + array(1) + i32(0) + i16(0) + i64(48) + i64(40)
            + array(1) + i64(7) + i64(40)  # aborted_transactions: producer 7 from offset 40
            + nbytes(FETCH_BATCHES))
    return frame(req), frame(resp)


def end_txn(corr, committed=True, client_id=CLIENT_ID):
    req = (request_header(26, 3, corr, client_id, True) + cstring(TXN_ID) + i64(PID) + i16(EPOCH)
           + boolean(committed) + TAGS0)
    resp = response_header(corr, True) + i32(0) + i16(0) + TAGS0
    return frame(req), frame(resp)


def sasl_handshake(corr, version, mechanism="PLAIN", client_id="sasl-client"):
    req = request_header(17, version, corr, client_id, False) + string(mechanism)
    resp = response_header(corr, False) + i16(0) + array(2) + string("PLAIN") + string("SCRAM-SHA-256")
    return frame(req), frame(resp)


def sasl_authenticate(corr, auth: bytes, client_id="sasl-client"):
    """SaslAuthenticate v2 (flexible)."""
    req = request_header(36, 2, corr, client_id, True) + cbytes(auth) + TAGS0
    resp = response_header(corr, True) + i16(0) + cstring(None) + cbytes(b"") + i64(3600000) + TAGS0
    return frame(req), frame(resp)


def sasl_authenticate_v1(corr, auth: bytes, client_id="sasl-client"):
    req = request_header(36, 1, corr, client_id, False) + nbytes(auth)
    resp = response_header(corr, False) + i16(0) + string(None) + nbytes(b"") + i64(3600000)
    return frame(req), frame(resp)


# ---- the reference conversation ----------------------------------------------------------------

def conversation():
    """(messages, names): the transactional producer's conversation of the main tests, with
    some pipelining. names: message index -> "request <api>" / "response <api>"."""
    av, md, ip, ap, pr, fe, et = (api_versions(0), metadata(1), init_producer_id(2),
                                  add_partitions(3), produce(4), fetch(5), end_txn(6))
    plan = [
        (0, av[0], "request api_versions"), (1, av[1], "response api_versions"),
        (0, md[0], "request metadata"), (1, md[1], "response metadata"),
        (0, ip[0], "request init_producer_id"), (1, ip[1], "response init_producer_id"),
        (0, ap[0], "request add_partitions"),
        (0, pr[0], "request produce"),  # pipelined behind AddPartitionsToTxn
        (1, ap[1], "response add_partitions"), (1, pr[1], "response produce"),
        (0, fe[0], "request fetch"), (1, fe[1], "response fetch"),
        (0, et[0], "request end_txn"), (1, et[1], "response end_txn"),
    ]
    return [(d, b) for d, b, _ in plan], {n: i for i, (_, _, n) in enumerate(plan)}
