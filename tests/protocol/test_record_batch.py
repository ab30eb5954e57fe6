"""Golden bytes, truncation at every position and properties of the record-batch decoder."""

from __future__ import annotations

import pytest

from kaudit.protocol.errors import DecodeError, Truncated
from kaudit.protocol.record_batch import decode_entry, next_sequence

# A real batch: j-fence-0 offset 0, written by Kafka 3.0.2 for the Java producer pid 2003.
DATA_BATCH = bytes.fromhex(
    "0000000000000000"  # base_offset 0
    "00000044"          # batch_length 68 (size 80)
    "00000000"          # partition_leader_epoch 0
    "02"                # magic 2
    "3870ec1f"          # crc 946924575 (CRC-32C of attributes..end)
    "0010"              # attributes: transactional, codec none, CreateTime
    "00000000"          # last_offset_delta 0
    "000001a1fc56ece1"  # base_timestamp 1795234917601
    "000001a1fc56ece1"  # max_timestamp 1795234917601
    "00000000000007d3"  # producer_id 2003
    "0000"              # producer_epoch 0
    "00000000"          # base_sequence 0
    "00000001"          # records_count 1
    "24"                # record length 18 (zig-zag varint)
    "00"                # record attributes
    "00"                # timestamp delta 0
    "00"                # offset delta 0
    "04" "4130"         # key length 2, "A0"
    "14" "7a6f6d6269652d412d30"  # value length 10, "zombie-A-0"
    "00"                # header count 0
)

# The coordinator's ABORT marker at j-fence-0 offset 3 (fencing: epoch 1, coordinator epoch 0).
ABORT_MARKER = bytes.fromhex(
    "0000000000000003"  # base_offset 3
    "00000042"          # batch_length 66
    "00000000"          # partition_leader_epoch 0
    "02"                # magic 2
    "790f6135"          # crc 2031051061
    "0030"              # attributes: transactional + control
    "00000000"          # last_offset_delta 0
    "000001a1fc56ee15"  # base_timestamp 1795234917909
    "000001a1fc56ee15"  # max_timestamp
    "00000000000007d3"  # producer_id 2003
    "0001"              # producer_epoch 1
    "ffffffff"          # base_sequence -1
    "00000001"          # records_count 1
    "20" "00" "00" "00"  # record length 16, attributes, timestamp delta, offset delta
    "08" "00000000"     # key length 4: version 0, type 0 (ABORT)
    "0c" "000000000000"  # value length 6: version 0, coordinator_epoch 0
    "00"                # header count 0
)


def test_golden_data_batch():
    b, end = decode_entry(DATA_BATCH, 0, deep=True)
    assert end == len(DATA_BATCH) == 80
    assert (b.base_offset, b.last_offset, b.batch_size, b.magic) == (0, 0, 80, 2)
    assert (b.crc, b.crc_ok, b.codec, b.timestamp_type) == (946924575, True, "none", "create")
    assert (b.is_transactional, b.is_control, b.producer_id, b.producer_epoch) == (True, False, 2003, 0)
    assert (b.base_sequence, b.last_sequence, b.record_count) == (0, 0, 1)
    assert (b.base_timestamp_ms, b.max_timestamp_ms) == (1795234917601, 1795234917601)
    [r] = b.records
    assert (r.offset, r.key, r.value, r.sequence, r.timestamp_ms) == (0, b"A0", b"zombie-A-0", 0, 1795234917601)


def test_golden_abort_marker():
    b, _ = decode_entry(ABORT_MARKER, 0)
    assert (b.is_control, b.control_type, b.coordinator_epoch) == (True, "ABORT", 0)
    assert (b.producer_epoch, b.base_sequence, b.last_sequence) == (1, -1, -1)
    assert b.records is None  # headers only unless deep


def test_crc_mismatch_is_data():
    bad = bytearray(DATA_BATCH)
    bad[-2] ^= 0x01  # a payload byte
    b, _ = decode_entry(bytes(bad), 0, deep=True)
    assert not b.crc_ok


@pytest.mark.parametrize("blob", [DATA_BATCH, ABORT_MARKER], ids=["data", "abort"])
def test_truncated_at_every_position(blob):
    for cut in range(len(blob)):
        with pytest.raises(Truncated):
            decode_entry(blob[:cut], 0, deep=True)


@pytest.mark.parametrize("blob", [DATA_BATCH, ABORT_MARKER], ids=["data", "abort"])
def test_fed_byte_by_byte(blob):
    # A stream consumer retries as bytes arrive: only Truncated until the last byte.
    buf = bytearray()
    for i, byte in enumerate(blob):
        buf.append(byte)
        if i < len(blob) - 1:
            with pytest.raises(Truncated):
                decode_entry(bytes(buf), 0)
    b, end = decode_entry(bytes(buf), 0)
    assert end == len(blob) and b.crc_ok


def test_every_single_byte_flip_decodes_or_raises_decode_error():
    for i in range(len(DATA_BATCH)):
        for bit in (0x01, 0x80):
            bad = bytearray(DATA_BATCH)
            bad[i] ^= bit
            try:
                b, _ = decode_entry(bytes(bad), 0, deep=True)
            except DecodeError:
                continue
            # CRC covers attributes..end; flips before it leave the CRC valid
            assert b.crc_ok == (i < 21 and i not in range(17, 21))


def test_sequence_wraps_at_int32_max():
    assert next_sequence(2**31 - 1, 1) == 0
    assert next_sequence(2**31 - 3, 5) == 2
    assert next_sequence(5, 4) == 9
