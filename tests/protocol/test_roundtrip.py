"""Hypothesis round trips through the test-only encoder (fixtures/kafka_encoder.py): every
codec, control batches, sequences at the int32 wrap, magic 0/1 messages and wrappers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures import kafka_encoder as enc
from kaudit.protocol.record_batch import decode_entry, next_sequence
from kaudit.sources.batch_table import v2_table

CODECS = ["none", "gzip", "snappy", "snappy-raw", "lz4", "zstd"]
maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(min_size=1, max_size=8), maybe_bytes)
record = st.fixed_dictionaries({
    "key": maybe_bytes, "value": maybe_bytes,
    "timestamp_delta": st.integers(0, 10_000),
    "headers": st.lists(header, max_size=3),
})


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(record, min_size=1, max_size=12),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    producer_id=st.integers(-1, 2**40),
    producer_epoch=st.integers(-1, 32767),
    base_sequence=st.one_of(st.just(-1), st.integers(0, 2**31 - 1), st.integers(2**31 - 8, 2**31 - 1)),
    transactional=st.booleans(),
    ts_type=st.sampled_from(["create", "log_append"]),
    leader_epoch=st.integers(-1, 2**31 - 1),
)
def test_v2_round_trip(records, codec, base_offset, producer_id, producer_epoch, base_sequence,
                       transactional, ts_type, leader_epoch):
    recs = [dict(r, offset_delta=i) for i, r in enumerate(records)]
    blob = enc.encode_record_batch_v2(
        base_offset, recs, codec=codec, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, is_transactional=transactional, timestamp_type=ts_type,
        partition_leader_epoch=leader_epoch)
    b, end = decode_entry(blob, 0, deep=True)
    assert end == len(blob) and b.crc_ok
    assert b.codec == codec.split("-")[0]
    assert (b.base_offset, b.last_offset, b.record_count) == (base_offset, base_offset + len(recs) - 1, len(recs))
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (producer_id, producer_epoch, base_sequence)
    assert b.is_transactional == transactional and b.partition_leader_epoch == leader_epoch
    assert b.timestamp_type == ts_type
    expected_last = -1 if base_sequence == -1 else next_sequence(base_sequence, len(recs) - 1)
    assert b.last_sequence == expected_last
    for i, (r, want) in enumerate(zip(b.records, recs)):
        assert (r.key, r.value) == (want["key"], want["value"])
        assert r.headers == [(k, v) for k, v in want["headers"]]
        assert r.offset == base_offset + i
        ts = b.max_timestamp_ms if ts_type == "log_append" else enc.DEFAULT_TIMESTAMP + want["timestamp_delta"]
        assert r.timestamp_ms == ts
        assert r.sequence == (-1 if base_sequence == -1 else next_sequence(base_sequence, i))
    # the vectorised hot path agrees with the one-at-a-time decoder
    row = v2_table(blob, [0], [True], {"source": "x"}, lambda p: (None, None)).to_pylist()[0]
    assert (row["last_sequence"], row["last_offset"], row["codec"]) == (b.last_sequence, b.last_offset, b.codec)


@settings(max_examples=50, deadline=None)
@given(
    ctype=st.sampled_from(["COMMIT", "ABORT"]),
    coordinator_epoch=st.integers(0, 2**31 - 1),
    producer_id=st.integers(0, 2**40),
    epoch=st.integers(0, 32767),
)
def test_control_round_trip(ctype, coordinator_epoch, producer_id, epoch):
    blob = enc.encode_control_batch(7, producer_id, epoch, ctype, coordinator_epoch)
    b, _ = decode_entry(blob, 0)
    assert (b.is_control, b.is_transactional, b.control_type) == (True, True, ctype)
    assert (b.coordinator_epoch, b.producer_id, b.producer_epoch, b.base_sequence) == (
        coordinator_epoch, producer_id, epoch, -1)


@settings(max_examples=100, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    offset=st.integers(0, 2**40),
    key=maybe_bytes,
    value=maybe_bytes,
    timestamp=st.integers(0, 2**41),
)
def test_legacy_message_round_trip(magic, offset, key, value, timestamp):
    blob = enc.encode_legacy_message(offset, key, value, magic=magic,
                                     timestamp=timestamp if magic == 1 else None)
    b, end = decode_entry(blob, 0, deep=True)
    assert end == len(blob) and b.crc_ok and b.magic == magic
    assert (b.base_offset, b.last_offset, b.record_count, b.codec) == (offset, offset, 1, "none")
    [r] = b.records
    assert (r.key, r.value, r.offset) == (key, value, offset)
    if magic == 1:
        assert r.timestamp_ms == timestamp == b.max_timestamp_ms


@settings(max_examples=100, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(["gzip", "snappy", "lz4"]),
    values=st.lists(maybe_bytes, min_size=1, max_size=8),
    wrapper_offset=st.integers(100, 2**40),
)
def test_legacy_wrapper_round_trip(magic, codec, values, wrapper_offset):
    blob = enc.encode_legacy_wrapper([{"value": v} for v in values], magic=magic, codec=codec,
                                     wrapper_offset=wrapper_offset)
    b, end = decode_entry(blob, 0, deep=True)
    n = len(values)
    assert end == len(blob) and b.crc_ok and b.codec == codec
    assert (b.base_offset, b.last_offset, b.record_count) == (wrapper_offset - n + 1, wrapper_offset, n)
    assert [r.value for r in b.records] == values
    assert [r.offset for r in b.records] == list(range(wrapper_offset - n + 1, wrapper_offset + 1))
