"""Batch rows as Arrow columns: vectorised header decoding for runs of v2 batches (the hot path),
and row dicts for batches decoded one at a time (legacy, odd or wire batches)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pyarrow as pa

from kaudit import native
from kaudit.model import BATCH
from kaudit.protocol.codecs import CODEC_NAMES
from kaudit.protocol.record_batch import ATTR_CONTROL, V2_HEADER_SIZE, Batch

# The 61-byte v2 header as a numpy record: one fancy-index gather decodes every batch at once.
_HDR = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
assert _HDR.itemsize == V2_HEADER_SIZE
_C = "kaudit.protocol._cbatch"
_SPAN = np.arange(V2_HEADER_SIZE, dtype=np.int64)
_INT32_MAX = 0x7FFFFFFF


@lru_cache(maxsize=None)
def _dictionaries() -> tuple[pa.Array, pa.Array]:
    """(codec names, timestamp types) to take from; built on first use, not at import (the
    first pyarrow conversion imports pandas: ~0.2 s that a capture decode need not wait for)."""
    return (pa.array(list(CODEC_NAMES) + ["unknown-5", "unknown-6", "unknown-7"]),
            pa.array(["create", "log_append"]))


_CONSTS: dict = {}


def _const(value, n: int, typ: pa.DataType) -> pa.Array:
    """n copies of `value`. Arrow arrays are immutable, so the chunks of a file (all of
    CHUNK_BATCHES rows but the last) share one: building the place's string columns per chunk
    cost a third of the header decode on one-record batches. The cache holds about one file's
    constants (a few MB) and starts over when it grows past that."""
    key = (value, n, typ)
    a = _CONSTS.get(key)
    if a is None:
        if len(_CONSTS) >= 32:
            _CONSTS.clear()
        a = _CONSTS[key] = pa.nulls(n, typ) if value is None else pa.repeat(pa.scalar(value, typ), n)
    return a


def _names(names: pa.Array, codes: np.ndarray) -> pa.Array:
    """names[codes] as a string column; one shared constant when every row has the same code."""
    first = int(codes[0])
    if (codes == first).all():
        return _const(names[first].as_py(), len(codes), pa.string())
    return names.take(pa.array(codes))


def _headers(buf, positions, crc_ok) -> tuple[dict, np.ndarray, np.ndarray]:
    """({field of _HDR: n values}, positions int64, crc_ok bool) - in one C pass where the
    compiled core is built (its columns are read in place), else with one numpy gather (the
    reference)."""
    c = native.module(_C)
    if c is not None:
        hdr, pos, oks = c.v2_headers(buf, positions, crc_ok)
        n, at, h = len(positions), 0, {}
        for name, _, size in c.HEADER_COLUMNS:
            h[name] = np.frombuffer(hdr, dtype=_HDR[name].newbyteorder("="), count=n, offset=at)
            at += n * size
        return h, np.frombuffer(pos, dtype=np.int64), np.frombuffer(oks, dtype=bool)
    pos = np.asarray(positions, dtype=np.int64)
    raw = np.frombuffer(buf, dtype=np.uint8)
    h = raw[pos[:, None] + _SPAN].view(_HDR).reshape(len(positions))
    return h, pos, np.asarray(crc_ok, dtype=bool)


def _int(values: np.ndarray, typ) -> pa.Array:
    return pa.array(values.astype(typ, copy=False))


def v2_table(buf, positions: list[int], crc_ok: list[bool], place: dict, control_info) -> pa.Table:
    """Batch rows for v2 batches at `positions` of `buf`.

    `place` gives source/replica/log_dir/topic/partition; `control_info(position)` returns
    (control_type, coordinator_epoch) for the few control batches.
    """
    n = len(positions)
    codecs, ts_types = _dictionaries()
    h, pos, crc_ok = _headers(buf, positions, crc_ok)
    base_offset = h["base_offset"].astype(np.int64, copy=False)
    lod = h["last_offset_delta"].astype(np.int64)
    attrs = h["attributes"].astype(np.int16, copy=False)
    base_seq = h["base_sequence"].astype(np.int64)
    last_seq = base_seq + lod
    last_seq = np.where(last_seq > _INT32_MAX, last_seq - (_INT32_MAX + 1), last_seq)
    last_seq = np.where(base_seq == -1, -1, last_seq).astype(np.int32)
    is_control = (attrs & ATTR_CONTROL) != 0

    control_type = None
    coordinator_epoch = None
    controls = np.flatnonzero(is_control)
    if len(controls):
        ct = [None] * n
        ce = [None] * n
        for i in controls:
            ct[i], ce[i] = control_info(positions[i])
        control_type = pa.array(ct, pa.string())
        coordinator_epoch = pa.array(ce, pa.int32())

    cols = {
        "source_kind": _const("log", n, pa.string()),
        "source": _const(place["source"], n, pa.string()),
        "position": pa.array(pos),
        "replica": _const(place.get("replica"), n, pa.string()),
        "log_dir": _const(place.get("log_dir"), n, pa.string()),
        "topic": _const(place.get("topic"), n, pa.string()),
        "partition": _const(place.get("partition"), n, pa.int32()),
        "base_offset": pa.array(base_offset),
        "last_offset": pa.array(base_offset + lod),
        "batch_size": pa.array(h["batch_length"].astype(np.int32, copy=False) + 12),
        "magic": _int(h["magic"], np.int8),
        "crc": _int(h["crc"], np.uint32),
        "crc_ok": pa.array(crc_ok),
        "attributes": pa.array(attrs),
        "codec": _names(codecs, (attrs & 7).astype(np.int8)),
        "timestamp_type": _names(ts_types, ((attrs >> 3) & 1).astype(np.int8)),
        "is_transactional": pa.array((attrs & 0x10) != 0),
        "is_control": pa.array(is_control),
        "has_delete_horizon": pa.array((attrs & 0x40) != 0),
        "control_type": control_type if control_type is not None else _const(None, n, pa.string()),
        "coordinator_epoch": coordinator_epoch if coordinator_epoch is not None
        else _const(None, n, pa.int32()),
        "producer_id": _int(h["producer_id"], np.int64),
        "producer_epoch": _int(h["producer_epoch"], np.int16),
        "base_sequence": _int(h["base_sequence"], np.int32),
        "last_sequence": pa.array(last_seq),
        "record_count": _int(h["records_count"], np.int32),
        "base_timestamp_ms": _int(h["base_timestamp"], np.int64),
        "max_timestamp_ms": _int(h["max_timestamp"], np.int64),
        "partition_leader_epoch": _int(h["partition_leader_epoch"], np.int32),
        "topic_id": _const(place.get("topic_id"), n, pa.string()),
    }
    arrays = [cols[f.name] if f.name in cols else _const(None, n, f.type) for f in BATCH]
    return pa.Table.from_arrays(arrays, schema=BATCH)


def batch_row(b: Batch, place: dict, source_kind: str = "log") -> dict:
    """One batch row from a decoded `Batch` (slow path: legacy messages, wire batches)."""
    row = {
        "source_kind": source_kind,
        "position": b.position,
        "base_offset": b.base_offset,
        "last_offset": b.last_offset,
        "batch_size": b.batch_size,
        "magic": b.magic,
        "crc": b.crc,
        "crc_ok": b.crc_ok,
        "attributes": b.attributes,
        "codec": b.codec,
        "timestamp_type": b.timestamp_type,
        "is_transactional": b.is_transactional,
        "is_control": b.is_control,
        "has_delete_horizon": b.has_delete_horizon,
        "control_type": b.control_type,
        "coordinator_epoch": b.coordinator_epoch,
        "producer_id": b.producer_id,
        "producer_epoch": b.producer_epoch,
        "base_sequence": b.base_sequence,
        "last_sequence": b.last_sequence,
        "record_count": b.record_count,
        "base_timestamp_ms": b.base_timestamp_ms,
        "max_timestamp_ms": b.max_timestamp_ms,
        "partition_leader_epoch": b.partition_leader_epoch,
    }
    row.update(place)
    return row
