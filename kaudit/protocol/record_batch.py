"""Record batches, sans-IO: magic 2 batches and magic 0/1 message sets (with compressed wrappers).

Mirrors Kafka's DefaultRecordBatch / DefaultRecord / LegacyRecord / AbstractLegacyRecordBatch.
Every entry in a log starts with `offset int64 | length int32` and has its magic byte at +16,
so `decode_entry` dispatches on that byte. A CRC mismatch is data (`crc_ok`), not an error;
structural problems raise `DecodeError`/`Truncated` with the absolute byte position.
"""

from __future__ import annotations

import json
import struct
import zlib
from base64 import b64encode
from dataclasses import dataclass, field

from kaudit.protocol.codecs import DEFAULT_MAX_BYTES, codec_name, decompress
from kaudit.protocol.crc import crc32c
from kaudit.protocol.errors import DecodeError, LimitExceeded, Truncated
from kaudit.protocol.primitives import read_varint, read_varlong

# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
# base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, records_count
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size  # 61
LOG_OVERHEAD = 12  # offset int64 + length int32 precede every entry
V2_MIN_LENGTH = V2_HEADER_SIZE - LOG_OVERHEAD  # batch_length of an empty batch: 49
CRC_START = 21  # CRC-32C covers attributes .. end
MAGIC_OFFSET = 16
INT32_MAX = 0x7FFFFFFF

ATTR_CODEC = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}

# Legacy message: offset int64 | size int32 | crc uint32 | magic int8 | attributes int8
LEGACY_PREFIX = struct.Struct(">qiIbb")
LEGACY_MIN_SIZE = {0: 14, 1: 22}  # crc+magic+attr+[timestamp]+key len+value len


def next_sequence(sequence: int, increment: int) -> int:
    """DefaultRecordBatch.incrementSequence: sequences wrap from INT32_MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(slots=True)
class Record:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list = field(default_factory=list)  # [(key str, value bytes | None)]
    sequence: int = -1
    attributes: int = 0
    # legacy (magic 0/1) messages carry their own CRC
    crc: int | None = None
    crc_ok: bool | None = None

    @property
    def key_size(self) -> int:
        return -1 if self.key is None else len(self.key)

    @property
    def value_size(self) -> int:
        return -1 if self.value is None else len(self.value)

    def headers_json(self) -> str:
        return json.dumps(
            [[k, None if v is None else b64encode(v).decode()] for k, v in self.headers]
        )


@dataclass(slots=True)
class Batch:
    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    crc_ok: bool
    attributes: int
    last_offset_delta: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    control_type: str | None = None
    coordinator_epoch: int | None = None
    records: list | None = None

    @property
    def batch_size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def codec(self) -> str:
        return codec_name(self.attributes & ATTR_CODEC)

    @property
    def timestamp_type(self) -> str:
        if self.magic == 0:
            return "none"
        return "log_append" if self.attributes & ATTR_TIMESTAMP_TYPE else "create"

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == -1:
            return -1
        return next_sequence(self.base_sequence, self.last_offset_delta)


def peek_magic(buf, offset: int) -> int:
    if offset + MAGIC_OFFSET >= len(buf):
        raise Truncated("entry header cut before the magic byte", offset, MAGIC_OFFSET + 1)
    m = buf[offset + MAGIC_OFFSET]
    return m - 256 if m > 127 else m


def decode_entry(buf, offset: int, *, deep: bool = False, max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """One log entry (a v2 batch, or a legacy message/wrapper) -> (Batch, new_offset)."""
    magic = peek_magic(buf, offset)
    if magic == 2:
        return decode_batch_v2(buf, offset, deep=deep, max_batch_bytes=max_batch_bytes)
    if magic in (0, 1):
        return decode_legacy(buf, offset, deep=deep, max_batch_bytes=max_batch_bytes)
    raise DecodeError(f"unknown magic {magic}", offset + MAGIC_OFFSET)


def decode_batch_v2(buf, offset: int, *, deep: bool = False, max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """A magic 2 record batch -> (Batch, offset after it).

    Headers only unless `deep`; control batches always get their control record decoded.
    """
    n = len(buf)
    if offset + V2_HEADER_SIZE > n:
        raise Truncated("record batch header cut", offset, V2_HEADER_SIZE)
    (base_offset, batch_length, ple, magic, crc, attributes, lod, base_ts, max_ts, pid, epoch,
     base_seq, count) = V2_HEADER.unpack_from(buf, offset)
    if magic != 2:
        raise DecodeError(f"magic {magic} is not 2", offset + MAGIC_OFFSET)
    if batch_length < V2_MIN_LENGTH:
        raise DecodeError(f"batch length {batch_length} is below the v2 minimum", offset + 8)
    if batch_length > max_batch_bytes:
        raise LimitExceeded(f"batch length {batch_length} exceeds --max-batch-bytes", offset + 8)
    end = offset + LOG_OVERHEAD + batch_length
    if end > n:
        raise Truncated(f"batch of {batch_length + LOG_OVERHEAD} bytes cut at {n}", offset, end - n)
    mv = memoryview(buf)
    crc_ok = crc32c(mv[offset + CRC_START : end]) == crc
    batch = Batch(offset, base_offset, batch_length, ple, magic, crc, crc_ok, attributes, lod,
                  base_ts, max_ts, pid, epoch, base_seq, count)
    is_control = bool(attributes & ATTR_CONTROL)
    if deep or is_control:
        records = decode_records_v2(batch, mv[offset + V2_HEADER_SIZE : end],
                                    offset + V2_HEADER_SIZE, max_batch_bytes)
        if is_control and records:
            batch.control_type, batch.coordinator_epoch = decode_control_record(
                records[0], offset + V2_HEADER_SIZE)
        if deep:
            batch.records = records
    return batch, end


def decode_records_v2(batch: Batch, payload, payload_position: int,
                      max_batch_bytes: int = DEFAULT_MAX_BYTES) -> list[Record]:
    """The records of a v2 batch; `payload` is the bytes after the 61-byte header."""
    codec = batch.attributes & ATTR_CODEC
    if codec:
        data = decompress(codec, payload, max_batch_bytes, payload_position)
        base_pos = -1  # positions inside decompressed data are not file positions
    else:
        data = payload
        base_pos = payload_position
    data = memoryview(data)  # slicing must never copy
    records = []
    off = 0
    count = batch.record_count
    if count < 0:
        raise DecodeError(f"negative record count {count}", batch.position + 57)
    # Each record takes at least 7 bytes: a count beyond that is a lie, never a loop bound.
    if count * 7 > len(data):
        raise Truncated(f"{count} records cannot fit in {len(data)} bytes", batch.position + 57)
    for _ in range(count):
        try:
            rec, off = _decode_record_v2(data, off, batch)
        except DecodeError as e:
            if e.position >= 0 and base_pos >= 0:
                e.position += base_pos
            else:
                e.position = payload_position
            raise
        records.append(rec)
    return records


def _decode_record_v2(data, off: int, batch: Batch):
    length, off = read_varint(data, off)
    start = off
    if length < 6:
        raise DecodeError(f"record length {length} is below the minimum of 6", off)
    if off + length > len(data):
        raise Truncated(f"record of {length} bytes cut", off, length)
    end = off + length
    rec_view = data[:end]  # records never read past their own length
    attrs = rec_view[off]
    off += 1
    ts_delta, off = read_varlong(rec_view, off)
    offset_delta, off = read_varint(rec_view, off)
    key, off = _varint_bytes(rec_view, off)
    value, off = _varint_bytes(rec_view, off)
    n_headers, off = read_varint(rec_view, off)
    if n_headers < 0 or n_headers * 2 > end - off:
        raise DecodeError(f"header count {n_headers}", off)
    headers = []
    for _ in range(n_headers):
        hk, off = _varint_bytes(rec_view, off)
        if hk is None:
            raise DecodeError("null header key", off)
        hv, off = _varint_bytes(rec_view, off)
        try:
            headers.append((hk.decode("utf-8"), hv))
        except UnicodeDecodeError:
            raise DecodeError("header key is not UTF-8", off) from None
    if off != end:
        raise DecodeError(f"record length {length} disagrees with its fields ({off - start})", start)
    ts = batch.base_timestamp_ms + ts_delta
    if batch.attributes & ATTR_TIMESTAMP_TYPE:
        ts = batch.max_timestamp_ms  # LogAppendTime: every record takes the batch's time
    seq = -1 if batch.base_sequence == -1 else next_sequence(batch.base_sequence, offset_delta)
    return Record(batch.base_offset + offset_delta, ts, key, value, headers, seq, attrs), off


def _varint_bytes(data, off: int):
    n, off = read_varint(data, off)
    if n == -1:
        return None, off
    if n < -1:
        raise DecodeError(f"length {n}", off)
    if off + n > len(data):
        raise Truncated(f"field of {n} bytes cut", off, n)
    return bytes(data[off : off + n]), off + n


def decode_control_record(record: Record, position: int = -1):
    """ControlRecordType key (version, type) and, for COMMIT/ABORT, EndTransactionMarker value."""
    key = record.key
    if key is None or len(key) < 4:
        raise DecodeError("control record key shorter than 4 bytes", position)
    ctype = struct.unpack_from(">h", key, 2)[0]
    name = CONTROL_TYPES.get(ctype, f"UNKNOWN({ctype})")
    coordinator_epoch = None
    if ctype in (0, 1):
        value = record.value
        if value is None or len(value) < 6:
            raise DecodeError("end transaction marker value shorter than 6 bytes", position)
        coordinator_epoch = struct.unpack_from(">i", value, 2)[0]
    return name, coordinator_epoch


def control_info(buf, offset: int, max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """(control_type, coordinator_epoch) of the control batch at `offset`, as `decode_batch_v2`
    gives them; (None, None) where it raises. The broker's own marker (one uncompressed record,
    one-byte varints, no headers: MemoryRecords.withEndTransactionMarker) is read in place; any
    other batch, and any doubt, goes through `decode_batch_v2`."""
    try:
        got = _control_in_place(buf, offset, max_batch_bytes)
    except (IndexError, struct.error):
        got = None
    if got is not None:
        return got
    try:
        b, _ = decode_batch_v2(buf, offset, max_batch_bytes=max_batch_bytes)
        return b.control_type, b.coordinator_epoch
    except DecodeError:
        return None, None


_CONTROL_KEY_TYPE = struct.Struct(">h")
_MARKER_EPOCH = struct.Struct(">i")


def _control_in_place(buf, offset: int, max_batch_bytes: int):
    """`control_info` of a batch that passes every check decode_batch_v2, decode_records_v2 and
    decode_control_record make, for the one shape it reads; None for any other (no verdict)."""
    if offset + V2_HEADER_SIZE > len(buf):
        return None
    (_, batch_length, _, magic, _, attributes, _, _, _, _, _, _, count) = V2_HEADER.unpack_from(buf, offset)
    end = offset + LOG_OVERHEAD + batch_length
    if (magic != 2 or not V2_MIN_LENGTH <= batch_length <= max_batch_bytes or end > len(buf)
            or attributes & ATTR_CODEC or not attributes & ATTR_CONTROL or count != 1):
        return None
    p = offset + V2_HEADER_SIZE
    z = buf[p]                      # the record's length: a one-byte varint, not negative
    length = z >> 1
    r = p + 1                       # attributes | timestamp delta | offset delta | key length
    if z & 0x81 or length < 6 or r + length > end or (buf[r + 1] | buf[r + 2]) & 0x80:
        return None
    kz = buf[r + 3]
    klen = kz >> 1
    k = r + 4
    if kz & 0x81 or klen < 4 or k + klen + 2 > r + length:
        return None
    vz = buf[k + klen]
    vlen = vz >> 1
    v = k + klen + 1
    if vz & 0x81 or v + vlen + 1 != r + length or buf[v + vlen] != 0:   # 0: no headers, then its end
        return None
    ctype = _CONTROL_KEY_TYPE.unpack_from(buf, k + 2)[0]
    name = CONTROL_TYPES.get(ctype, f"UNKNOWN({ctype})")
    if ctype not in (0, 1):
        return name, None
    if vlen < 6:
        return None
    return name, _MARKER_EPOCH.unpack_from(buf, v + 2)[0]


# ---- magic 0/1 ---------------------------------------------------------------------------


def decode_legacy(buf, offset: int, *, deep: bool = False, max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """A magic 0/1 log entry -> (Batch, new_offset). A compressed wrapper becomes one Batch
    whose records are its inner messages (AbstractLegacyRecordBatch semantics)."""
    msg, end = _decode_legacy_message(buf, offset, max_batch_bytes)
    offset_, size, crc, magic, attrs, ts, key, value, crc_ok = msg
    codec = attrs & ATTR_CODEC
    ts_type = ATTR_TIMESTAMP_TYPE if magic == 1 and attrs & ATTR_TIMESTAMP_TYPE else 0
    if codec == 0:
        records = [Record(offset_, ts, key, value, [], -1, attrs, crc, crc_ok)]
    else:
        if value is None:
            raise DecodeError("compressed wrapper message without a value", offset)
        inner = decompress(codec, value, max_batch_bytes, offset)
        records = _decode_inner_messages(inner, offset_, magic, ts, ts_type, max_batch_bytes, offset)
        if not records:
            raise DecodeError("compressed wrapper message holds no messages", offset)
    batch = Batch(
        position=offset,
        base_offset=records[0].offset,
        batch_length=size,
        partition_leader_epoch=-1,
        magic=magic,
        crc=crc,
        crc_ok=crc_ok,
        attributes=attrs,
        last_offset_delta=offset_ - records[0].offset,
        base_timestamp_ms=records[0].timestamp_ms if magic == 1 else -1,
        max_timestamp_ms=ts if magic == 1 else -1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        record_count=len(records),
        records=records if deep else None,
    )
    return batch, end


def _decode_legacy_message(buf, offset: int, max_batch_bytes: int):
    n = len(buf)
    if offset + LEGACY_PREFIX.size > n:
        raise Truncated("message header cut", offset, LEGACY_PREFIX.size)
    msg_offset, size, crc, magic, attrs = LEGACY_PREFIX.unpack_from(buf, offset)
    if magic not in (0, 1):
        raise DecodeError(f"magic {magic} is not 0 or 1", offset + MAGIC_OFFSET)
    if size < LEGACY_MIN_SIZE[magic]:
        raise DecodeError(f"message size {size} below the magic {magic} minimum", offset + 8)
    if size > max_batch_bytes:
        raise LimitExceeded(f"message size {size} exceeds --max-batch-bytes", offset + 8)
    end = offset + LOG_OVERHEAD + size
    if end > n:
        raise Truncated(f"message of {size + LOG_OVERHEAD} bytes cut at {n}", offset, end - n)
    mv = memoryview(buf)
    crc_ok = (zlib.crc32(mv[offset + 16 : end]) & 0xFFFFFFFF) == crc
    off = offset + 18
    ts = -1
    if magic == 1:
        ts = struct.unpack_from(">q", buf, off)[0]
        off += 8
    key, off = _int32_bytes(mv, off, end)
    value, off = _int32_bytes(mv, off, end)
    if off != end:
        raise DecodeError(f"message size {size} disagrees with its fields", offset + 8)
    return (msg_offset, size, crc, magic, attrs, ts, key, value, crc_ok), end


def _int32_bytes(mv, off: int, end: int):
    if off + 4 > end:
        raise Truncated("bytes length cut", off, 4)
    length = struct.unpack_from(">i", mv, off)[0]
    off += 4
    if length == -1:
        return None, off
    if length < -1 or off + length > end:
        raise DecodeError(f"bytes length {length} runs past the message", off - 4)
    return bytes(mv[off : off + length]), off + length


def _decode_inner_messages(inner: bytes, wrapper_offset: int, magic: int, wrapper_ts: int,
                           ts_type: int, max_batch_bytes: int, position: int) -> list[Record]:
    msgs = []
    off = 0
    while off < len(inner):
        try:
            m, off = _decode_legacy_message(inner, off, max_batch_bytes)
        except DecodeError as e:
            e.position = position  # inner positions are inside decompressed bytes
            raise
        msgs.append(m)
    records = []
    if magic == 1 and msgs:
        # Inner offsets are relative; the wrapper carries the absolute offset of the last one.
        last_rel = msgs[-1][0]
        for m in msgs:
            ts = wrapper_ts if ts_type else m[5]
            records.append(Record(wrapper_offset - last_rel + m[0], ts, m[6], m[7], [], -1,
                                  m[4], m[2], m[8]))
    else:
        for m in msgs:
            records.append(Record(m[0], m[5], m[6], m[7], [], -1, m[4], m[2], m[8]))
    return records
