"""What a batch's records say, apart from where and when the batch was written: a checksum of the
record bytes alone, computed from the batch columns without reading the batch again.

A v2 batch's CRC-32C covers its 40 header bytes from `attributes` on (attributes, last offset
delta, base and max timestamp, producer id, epoch, base sequence, record count) and then the
records, each of which holds its offset and timestamp *deltas*, key, value and headers
(DefaultRecord). The header bytes are all columns, so the records' own checksum follows from the
batch CRC by CRC algebra (zlib's crc32_combine run backwards): crc(H || R) = x^(8|R|)·crc(H) ⊕
crc(R). Two batches whose records are byte-identical get the same records checksum whatever their
producer, sequences or batch timestamps. A magic 0/1 message's CRC-32 covers magic, attributes,
[timestamp], key and value: the same algebra removes the timestamp. Compressed records compare by
their compressed bytes (the same client compresses the same records the same way).

All of it is numpy over a chunk's rows: a byte table per header byte, and one carry-less multiply
per row by x^(8|R|) mod P (cached per records length).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import np_col as _np_col


def np_col(t: pa.Table, name: str, fill, dtype) -> np.ndarray:
    """A column as numpy, `fill` where null or absent (a partial table in a test)."""
    if name not in t.column_names:
        return np.full(t.num_rows, fill, dtype=dtype)
    return _np_col(t, name, fill, dtype)

_POLY = {"crc32c": 0x82F63B78, "crc32": 0xEDB88320}   # reflected polynomials
V2_HEADER = 61        # bytes before the first record of a v2 batch (batch_size counts them)
V2_CRC_FROM = 21      # the CRC covers the batch from `attributes` on
LEGACY_OVERHEAD = 12  # offset and size before a magic 0/1 message's CRC
_X2N: dict[str, list[int]] = {}
_XPOW: dict[tuple[str, int], int] = {}


def _table(poly: int) -> np.ndarray:
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> np.uint32(1)) ^ np.uint32(poly), t >> np.uint32(1)).astype(np.uint32)
    return t


_TABLES = {k: _table(p) for k, p in _POLY.items()}


def _multmodp(a: int, b: int, poly: int) -> int:
    """a·b modulo the polynomial (reflected bit order), as zlib's multmodp."""
    m, p = 1 << 31, 0
    while m:
        if a & m:
            p ^= b
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return p


def x8n(kind: str, n: int) -> int:
    """x^(8n) modulo the polynomial: the operator of appending n zero bytes (cached)."""
    v = _XPOW.get((kind, n))
    if v is None:
        poly = _POLY[kind]
        if kind not in _X2N:
            t = [1 << 30]   # x^1
            for _ in range(31):
                t.append(_multmodp(t[-1], t[-1], poly))
            _X2N[kind] = t
        t, p, k, m = _X2N[kind], 1 << 31, 3, n
        while m:
            if m & 1:
                p = _multmodp(t[k & 31], p, poly)
            m >>= 1
            k += 1
        v = _XPOW[(kind, n)] = p
    return v


def _vmultmodp(a: np.ndarray, b: np.ndarray, poly: int) -> np.ndarray:
    a, b = a.astype(np.uint32), b.astype(np.uint32)
    p = np.zeros(a.size, dtype=np.uint32)
    zero, one, P = np.uint32(0), np.uint32(1), np.uint32(poly)
    for i in range(31, -1, -1):
        p ^= np.where((a >> np.uint32(i)) & one, b, zero)
        b = (b >> one) ^ np.where(b & one, P, zero)
    return p


def _crc(kind: str, data: np.ndarray) -> np.ndarray:
    """The CRC of each row of `data` (n x k bytes)."""
    t = _TABLES[kind]
    c = np.full(data.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(data.shape[1]):
        c = t[(c ^ data[:, j]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    return c ^ np.uint32(0xFFFFFFFF)


def _be(a: np.ndarray, dtype: str) -> np.ndarray:
    return a.astype(dtype).view(np.uint8).reshape(a.size, -1)


def _strip(kind: str, crc: np.ndarray, head_crc: np.ndarray, tail_len: np.ndarray) -> np.ndarray:
    """crc(R) from crc(H || R), crc(H) and |R|."""
    lens, inv = np.unique(tail_len, return_inverse=True)
    pw = np.array([x8n(kind, int(n)) for n in lens.tolist()], dtype=np.uint32)[inv]
    return crc.astype(np.uint32) ^ _vmultmodp(head_crc, pw, _POLY[kind])


def records_crc(t: pa.Table, mask: np.ndarray) -> np.ndarray:
    """For the rows of `t` selected by `mask`: the checksum of the record bytes alone (v2: the
    records after the 61-byte header; magic 0/1: key and value, without the timestamp), as
    uint64 with the magic in the high bits (formats never compare equal). 0 for a row whose
    length says it holds no records."""
    magic = np_col(t, "magic", 2, np.int64)[mask]
    crc = np_col(t, "crc", 0, np.uint32)[mask]
    size = np_col(t, "batch_size", 0, np.int64)[mask]
    out = np.zeros(magic.size, dtype=np.uint64)
    v2 = np.flatnonzero(magic >= 2)
    if v2.size:
        m = np.flatnonzero(mask)[v2]
        n = v2.size
        base = np_col(t, "base_offset", 0, np.int64)[m]
        h = np.empty((n, 40), dtype=np.uint8)
        h[:, 0:2] = _be(np_col(t, "attributes", 0, np.int64)[m], ">i2")
        h[:, 2:6] = _be(np_col(t, "last_offset", 0, np.int64)[m] - base, ">i4")
        h[:, 6:14] = _be(np_col(t, "base_timestamp_ms", -1, np.int64)[m], ">i8")
        h[:, 14:22] = _be(np_col(t, "max_timestamp_ms", -1, np.int64)[m], ">i8")
        h[:, 22:30] = _be(np_col(t, "producer_id", -1, np.int64)[m], ">i8")
        h[:, 30:32] = _be(np_col(t, "producer_epoch", -1, np.int64)[m], ">i2")
        h[:, 32:36] = _be(np_col(t, "base_sequence", -1, np.int64)[m], ">i4")
        h[:, 36:40] = _be(np_col(t, "record_count", 0, np.int64)[m], ">i4")
        rlen = np.maximum(size[v2] - V2_HEADER, 0)
        out[v2] = _strip("crc32c", crc[v2], _crc("crc32c", h), rlen) | np.uint64(2 << 32)
    old = np.flatnonzero(magic < 2)
    if old.size:
        # magic 0: the CRC covers magic, attributes, key and value only - already the content;
        # magic 1: strip magic, attributes and the 8-byte timestamp
        m1 = old[magic[old] == 1]
        out[old] = crc[old].astype(np.uint64) | (magic[old].astype(np.uint64) << np.uint64(32))
        if m1.size:
            m = np.flatnonzero(mask)[m1]
            h = np.empty((m1.size, 10), dtype=np.uint8)
            h[:, 0] = 1
            h[:, 1] = np_col(t, "attributes", 0, np.int64)[m].astype(np.uint8)
            h[:, 2:10] = _be(np_col(t, "max_timestamp_ms", -1, np.int64)[m], ">i8")
            rest = np.maximum(size[m1] - LEGACY_OVERHEAD - 4 - 10, 0)
            out[m1] = _strip("crc32", crc[m1], _crc("crc32", h), rest) | np.uint64(1 << 32)
    return out


def view_records_crc(b) -> int | None:
    """records_crc of one v2 batch's BatchView (producer_state.BatchView), or None when the view
    lacks a field it needs (attributes, CRC, size)."""
    import struct

    from kaudit.protocol.crc import crc32c

    if b.attributes is None or b.crc is None or b.batch_size is None or b.base_offset is None:
        return None
    last = b.last_offset if b.last_offset is not None else b.base_offset + max(b.record_count - 1, 0)
    try:
        head = struct.pack(">hiqqqhii", b.attributes, last - b.base_offset,
                           -1 if b.first_ts_ms is None else b.first_ts_ms,
                           -1 if b.last_ts_ms is None else b.last_ts_ms,
                           b.producer_id, b.producer_epoch, b.base_sequence, b.record_count)
    except struct.error:
        return None
    n = max(b.batch_size - V2_HEADER, 0)
    return b.crc ^ _multmodp(x8n("crc32c", n), crc32c(head), _POLY["crc32c"])


def records_differ(a, b) -> bool:
    """Whether two batches certainly hold other records: other record counts or sizes, or both
    records checksums known and different (False: the same records, or not known)."""
    if a is None or b is None:
        return False
    if a.record_count != b.record_count or a.batch_size != b.batch_size:
        return True
    x, y = view_records_crc(a), view_records_crc(b)
    return x is not None and y is not None and x != y


def same_records(a, b) -> str | None:
    """How two batches' records compare: "byte-identical" (same CRC, size and timestamps: the
    very batch again), "same-records" (the same record bytes under another batch header: other
    batch timestamps, producer or sequences), or None (other records, or not known)."""
    if a is None or b is None or a.record_count != b.record_count or a.batch_size != b.batch_size:
        return None
    unknown = None in (a.first_ts_ms, b.first_ts_ms)
    if a.crc == b.crc and (unknown or (a.first_ts_ms, a.last_ts_ms) == (b.first_ts_ms, b.last_ts_ms)):
        return "byte-identical"
    x, y = view_records_crc(a), view_records_crc(b)
    return "same-records" if x is not None and x == y else None
