# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled core of the record-batch layer: CRC-32C, the v2 batch walk (`batch_scan`) and the
record walk of `--deep` (`record_columns`). Each function is the C twin of a pure-Python one
and gives the same result; every read is checked against the end of its buffer first. Where the
record walk meets anything but a well-formed batch it hands the batch back (False) and the
reference decoder decides - and reports - what is wrong."""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8

import json
from base64 import b64encode

from kaudit.protocol.codecs import decompress
from kaudit.protocol.errors import DecodeError

cdef extern from "_kafka_c.h":
    int64_t kd_i64(const uint8_t *p) nogil
    int32_t kd_i32(const uint8_t *p) nogil
    uint32_t kd_u32(const uint8_t *p) nogil
    int16_t kd_i16(const uint8_t *p) nogil
    uint32_t kd_crc32c(const uint8_t *p, size_t n) nogil

cdef extern from *:
    bint add_overflow "__builtin_add_overflow" (int64_t a, int64_t b, int64_t *res) nogil

DEF HEADER = 61
DEF LOG_OVERHEAD = 12
DEF V2_MIN_LENGTH = 49
DEF CRC_START = 21
DEF INT32_MAX = 0x7FFFFFFF
DEF ATTR_CODEC = 0x07
DEF ATTR_TIMESTAMP_TYPE = 0x08
DEF ATTR_CONTROL = 0x20

STOP_END = "end"
STOP_LIMIT = "limit"
STOP_OTHER = "other"


def crc32c(const uint8_t[::1] data):
    """CRC-32C of a buffer (the crc32c package's value)."""
    return kd_crc32c(&data[0], data.shape[0]) if data.shape[0] else 0


cdef bint _plausible(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t max_batch_bytes) nogil:
    if pos + HEADER > end:
        return False
    cdef int32_t length = kd_i32(b + pos + 8)
    if <int8_t>b[pos + 16] != 2 or length < V2_MIN_LENGTH or length > max_batch_bytes:
        return False
    cdef Py_ssize_t stop = pos + LOG_OVERHEAD + length
    if stop > end:
        return False
    return kd_crc32c(b + pos + CRC_START, stop - pos - CRC_START) == kd_u32(b + pos + 17)


def plausible_v2(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end, int64_t max_batch_bytes):
    """batch_scan.plausible_v2."""
    if end > buf.shape[0]:
        end = buf.shape[0]
    if pos < 0 or buf.shape[0] == 0:
        return False
    return _plausible(&buf[0], pos, end, max_batch_bytes)


cdef struct Walk:
    Py_ssize_t *pos
    uint8_t *ok
    Py_ssize_t cap


cdef int _grow(Walk *w) noexcept nogil:
    """Doubles the walk's arrays (at least 4096 entries): 0, or -1 when memory ran out (the
    arrays then stay as they were)."""
    cdef Py_ssize_t cap = w.cap * 2 if w.cap else 4096
    cdef Py_ssize_t *p = <Py_ssize_t *>realloc(w.pos, cap * sizeof(Py_ssize_t))
    if p == NULL:
        return -1
    w.pos = p
    cdef uint8_t *o = <uint8_t *>realloc(w.ok, cap)
    if o == NULL:
        return -1
    w.ok = o
    w.cap = cap
    return 0


def scan_v2(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_batches,
            int64_t max_batch_bytes, int64_t max_span=1 << 62):
    """batch_scan.scan_v2: (positions, crc_ok, stop_position, stop_reason). The walk (CRC-32C of
    every batch: most of a decode's time) runs without the GIL, so an audit's folds run beside it
    (engine.local); the lists are built after it."""
    positions = []
    oks = []
    if end > buf.shape[0]:
        end = buf.shape[0]
    if buf.shape[0] == 0 or start < 0:
        return positions, oks, start, (STOP_END if start == end else STOP_OTHER)
    cdef const uint8_t *b = &buf[0]
    cdef Py_ssize_t pos = start, nxt, limit = end - HEADER, n = 0, i
    cdef int64_t span_end = start + max_span if max_span < (1 << 62) else (1 << 62)
    cdef int32_t length
    cdef bint ok
    cdef int stopped = 0   # 0: the walk reached `limit`, 1: STOP_LIMIT, 2: STOP_OTHER, 3: no memory
    cdef Walk w
    w.pos = NULL
    w.ok = NULL
    w.cap = 0
    with nogil:
        while pos <= limit:
            if n >= max_batches or pos >= span_end:
                stopped = 1
                break
            length = kd_i32(b + pos + 8)
            if <int8_t>b[pos + 16] != 2 or length < V2_MIN_LENGTH or length > max_batch_bytes:
                stopped = 2
                break
            nxt = pos + LOG_OVERHEAD + length
            if nxt > end:
                stopped = 2
                break
            ok = kd_crc32c(b + pos + CRC_START, nxt - pos - CRC_START) == kd_u32(b + pos + 17)
            if not ok and nxt != end and not _plausible(b, nxt, end, max_batch_bytes):
                stopped = 2
                break
            if n == w.cap and _grow(&w) != 0:
                stopped = 3
                break
            w.pos[n] = pos
            w.ok[n] = ok
            n += 1
            pos = nxt
    try:
        if stopped == 3:
            raise MemoryError()
        for i in range(n):
            positions.append(w.pos[i])
            oks.append(w.ok[i] != 0)
    finally:
        free(w.pos)
        free(w.ok)
    if stopped == 1:
        return positions, oks, pos, STOP_LIMIT
    if stopped == 2:
        return positions, oks, pos, STOP_OTHER
    return positions, oks, pos, (STOP_END if pos == end else STOP_OTHER)


# v2_headers' column layout: (name, header offset, size), by size so every column is aligned
HEADER_COLUMNS = (("base_offset", 0, 8), ("base_timestamp", 27, 8), ("max_timestamp", 35, 8),
                  ("producer_id", 43, 8), ("batch_length", 8, 4), ("partition_leader_epoch", 12, 4),
                  ("crc", 17, 4), ("last_offset_delta", 23, 4), ("base_sequence", 53, 4),
                  ("records_count", 57, 4), ("attributes", 21, 2), ("producer_epoch", 51, 2),
                  ("magic", 16, 1))


def v2_headers(const uint8_t[::1] buf, positions, crc_ok):
    """The headers of the v2 batches at `positions` (as scan_v2 gave them) in one pass, for
    batch_table.v2_table: (headers, positions, crc_ok) as bytearrays - the 61-byte headers' fields
    column by column in native byte order (HEADER_COLUMNS: n values of each, in that order; the
    arrays go to Arrow without a copy), n int64 and n bool. Every position is checked against
    the buffer first."""
    cdef Py_ssize_t n = len(positions), i, p, size = buf.shape[0]
    if len(crc_ok) != n:
        raise ValueError("positions and crc_ok differ in length")
    cdef bytearray hdr = bytearray(n * HEADER)
    cdef bytearray pos = bytearray(n * 8)
    cdef bytearray oks = bytearray(n)
    if n == 0:
        return hdr, pos, oks
    cdef int64_t *c64 = <int64_t *>(<char *>hdr)          # 4 columns of int64
    cdef int32_t *c32 = <int32_t *>(c64 + 4 * n)          # 6 of int32
    cdef int16_t *c16 = <int16_t *>(c32 + 6 * n)          # 2 of int16
    cdef int8_t *c8 = <int8_t *>(c16 + 2 * n)             # magic
    cdef int64_t *po = <int64_t *>(<char *>pos)
    cdef uint8_t *ok = <uint8_t *>(<char *>oks)
    cdef const uint8_t *b
    for i in range(n):
        p = positions[i]
        if p < 0 or p + HEADER > size:
            raise ValueError(f"no v2 batch header at {p}: the buffer holds {size} bytes")
        b = &buf[p]
        po[i] = p
        ok[i] = 1 if crc_ok[i] else 0
        c64[i] = kd_i64(b)
        c64[n + i] = kd_i64(b + 27)
        c64[2 * n + i] = kd_i64(b + 35)
        c64[3 * n + i] = kd_i64(b + 43)
        c32[i] = kd_i32(b + 8)
        c32[n + i] = kd_i32(b + 12)
        c32[2 * n + i] = <int32_t>kd_u32(b + 17)
        c32[3 * n + i] = kd_i32(b + 23)
        c32[4 * n + i] = kd_i32(b + 53)
        c32[5 * n + i] = kd_i32(b + 57)
        c16[i] = kd_i16(b + 21)
        c16[n + i] = kd_i16(b + 51)
        c8[i] = <int8_t>b[16]
    return hdr, pos, oks


# ---- the record walk -------------------------------------------------------------------------

cdef struct Buf:
    char *data
    Py_ssize_t len
    Py_ssize_t cap


cdef int _reserve(Buf *b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t need = b.len + extra, cap
    cdef char *p
    if need <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap * 2 > need else need
    if cap < 4096:
        cap = 4096
    p = <char *>realloc(b.data, cap)
    if p == NULL:
        raise MemoryError()
    b.data = p
    b.cap = cap
    return 0


cdef inline int _put(Buf *b, const void *src, Py_ssize_t n) except -1:
    if b.len + n > b.cap:
        _reserve(b, n)
    memcpy(b.data + b.len, src, n)
    b.len += n
    return 0


cdef inline int _uvarint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *off, uint64_t *out,
                         int max_shift) nogil:
    """primitives.read_uvarint (max_shift 28) / read_uvarlong (63): 0, or -1 where the pure
    reader raises (or where its value would not fit 64 bits)."""
    cdef uint64_t r = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if off[0] >= end:
            return -1
        b = p[off[0]]
        off[0] += 1
        if shift == 63 and (b & 0x7E):
            return -1
        r |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = r
            return 0
        shift += 7
        if shift > max_shift:
            return -1


cdef inline int _zz(const uint8_t *p, Py_ssize_t end, Py_ssize_t *off, int64_t *out, int max_shift) nogil:
    cdef uint64_t v
    if _uvarint(p, end, off, &v, max_shift):
        return -1
    out[0] = <int64_t>(v >> 1) ^ -(<int64_t>(v & 1))
    return 0


cdef class RecordColumns:
    """The `record` rows of --deep as columns (sources.record_columns turns them into Arrow)."""

    cdef Buf position, base, offset, ts, seq, ksize, vsize
    cdef Buf kdata, vdata, koff, voff, kvalid, vvalid, hkdata, hkoff, hdata, hoff
    cdef Buf ctype, cepoch, cvalid
    cdef public Py_ssize_t rows
    cdef list control_names
    cdef Py_ssize_t _marks[20]

    def __cinit__(self):
        self.rows = 0
        self.control_names = []
        cdef int32_t zero = 0
        _put(&self.koff, &zero, 4)
        _put(&self.voff, &zero, 4)
        _put(&self.hkoff, &zero, 4)
        _put(&self.hoff, &zero, 4)

    def __dealloc__(self):
        cdef Buf *bs[20]
        self._bufs(bs)
        for i in range(20):
            free(bs[i].data)
            bs[i].data = NULL

    def __len__(self):
        return self.rows

    @property
    def nbytes(self):
        return self.kdata.len + self.vdata.len + self.hdata.len + 40 * self.rows

    cdef void _mark(self):
        cdef Buf *bs[20]
        self._bufs(bs)
        for i in range(20):
            self._marks[i] = bs[i].len

    cdef void _rewind(self, Py_ssize_t rows):
        cdef Buf *bs[20]
        self._bufs(bs)
        for i in range(20):
            bs[i].len = self._marks[i]
        self.rows = rows

    cdef void _bufs(self, Buf **bs):
        bs[0] = &self.position; bs[1] = &self.base; bs[2] = &self.offset; bs[3] = &self.ts
        bs[4] = &self.seq; bs[5] = &self.ksize; bs[6] = &self.vsize; bs[7] = &self.kdata
        bs[8] = &self.vdata; bs[9] = &self.koff; bs[10] = &self.voff; bs[11] = &self.kvalid
        bs[12] = &self.vvalid; bs[13] = &self.hkdata; bs[14] = &self.hkoff; bs[15] = &self.hdata
        bs[16] = &self.hoff; bs[17] = &self.ctype; bs[18] = &self.cepoch; bs[19] = &self.cvalid

    cdef int _bytes(self, Buf *data, Buf *offs, Buf *valid, Buf *size, const uint8_t *p,
                    int64_t n) except -1:
        cdef int32_t end32, size32 = <int32_t>n
        cdef uint8_t v = n >= 0
        if n > 0:
            _put(data, p, n)
        end32 = <int32_t>data.len
        _put(offs, &end32, 4)
        _put(valid, &v, 1)
        _put(size, &size32, 4)
        return 0

    cdef int _text(self, Buf *data, Buf *offs, str s) except -1:
        b = s.encode("utf-8")
        _put(data, <const char *>b, len(b))
        cdef int32_t end32 = <int32_t>data.len
        _put(offs, &end32, 4)
        return 0

    cdef int _tail(self, object control_type, object coordinator_epoch) except -1:
        cdef uint8_t code = 0, valid = coordinator_epoch is not None
        cdef int32_t ce = 0 if coordinator_epoch is None else coordinator_epoch
        if control_type is not None:
            if control_type not in self.control_names:
                self.control_names.append(control_type)
            code = 1 + self.control_names.index(control_type)
        _put(&self.ctype, &code, 1)
        _put(&self.cepoch, &ce, 4)
        _put(&self.cvalid, &valid, 1)
        self.rows += 1
        return 0

    def append(self, int64_t position, int64_t batch_base_offset, int64_t offset, int64_t timestamp_ms,
               int32_t sequence, key, value, str header_keys, str headers, control_type,
               coordinator_epoch):
        """One record row decoded by the reference path."""
        cdef const uint8_t[::1] k, v
        _put(&self.position, &position, 8)
        _put(&self.base, &batch_base_offset, 8)
        _put(&self.offset, &offset, 8)
        _put(&self.ts, &timestamp_ms, 8)
        _put(&self.seq, &sequence, 4)
        if key is None:
            self._bytes(&self.kdata, &self.koff, &self.kvalid, &self.ksize, NULL, -1)
        else:
            k = key
            self._bytes(&self.kdata, &self.koff, &self.kvalid, &self.ksize,
                        &k[0] if len(key) else NULL, len(key))
        if value is None:
            self._bytes(&self.vdata, &self.voff, &self.vvalid, &self.vsize, NULL, -1)
        else:
            v = value
            self._bytes(&self.vdata, &self.voff, &self.vvalid, &self.vsize,
                        &v[0] if len(value) else NULL, len(value))
        self._text(&self.hkdata, &self.hkoff, header_keys)
        self._text(&self.hdata, &self.hoff, headers)
        self._tail(control_type, coordinator_epoch)

    def add_batch(self, const uint8_t[::1] buf, Py_ssize_t position, int64_t max_batch_bytes):
        """The records of the well-formed, non-control v2 batch at `position` -> True; False
        (nothing added) for anything else: the reference decoder then takes the batch."""
        if buf.shape[0] == 0:
            return False
        return self._add(buf, &buf[0], buf.shape[0], position, max_batch_bytes)

    def add_batches(self, const uint8_t[::1] buf, positions, Py_ssize_t i, int64_t max_batch_bytes,
                    Py_ssize_t flush_bytes):
        """add_batch for positions[i], positions[i + 1], ... in one call (one-record batches:
        the call per batch cost more than its records) -> (j, declined): positions[i:j] were
        added; it stopped at the end, after an added batch brought `nbytes` to `flush_bytes`,
        or (declined) at positions[j], which add_batch refused (nothing of it added)."""
        cdef Py_ssize_t n = len(positions), size = buf.shape[0]
        if size == 0:
            return i, i < n
        cdef const uint8_t *base = &buf[0]
        while i < n:
            if not self._add(buf, base, size, positions[i], max_batch_bytes):
                return i, True
            i += 1
            if self.kdata.len + self.vdata.len + self.hdata.len + 40 * self.rows >= flush_bytes:
                break
        return i, False

    cdef bint _add(self, const uint8_t[::1] buf, const uint8_t *base, Py_ssize_t n,
                   Py_ssize_t position, int64_t max_batch_bytes) except -1:
        cdef Py_ssize_t end
        cdef const uint8_t[::1] data
        if position < 0 or position + HEADER > n:
            return False
        cdef const uint8_t *b = base + position
        cdef int32_t length = kd_i32(b + 8)
        cdef int16_t attrs = kd_i16(b + 21)
        if <int8_t>b[16] != 2 or length < V2_MIN_LENGTH or length > max_batch_bytes:
            return False
        end = position + LOG_OVERHEAD + length
        if end > n or attrs & ATTR_CONTROL:
            return False
        if attrs & ATTR_CODEC:
            try:
                data = decompress(attrs & ATTR_CODEC, buf[position + HEADER:end], max_batch_bytes,
                                  position + HEADER)
            except DecodeError:
                return False
            return self._walk(&data[0] if data.shape[0] else NULL, data.shape[0], b, position)
        return self._walk(b + HEADER, end - position - HEADER, b, position)

    cdef bint _walk(self, const uint8_t *p, Py_ssize_t n, const uint8_t *h, int64_t position) except -1:
        cdef Py_ssize_t off = 0, end, start_rows = self.rows
        cdef int64_t base_offset = kd_i64(h), base_ts = kd_i64(h + 27), max_ts = kd_i64(h + 35)
        cdef int32_t base_seq = kd_i32(h + 53), count = kd_i32(h + 57), seq32
        cdef int16_t attrs = kd_i16(h + 21)
        cdef int64_t length, ts_delta, delta, klen, vlen, nh, hk, hv, ts, offset, seq
        cdef const uint8_t *kp
        cdef const uint8_t *vp
        if count < 0 or <int64_t>count * 7 > n:
            return False
        self._mark()
        for _ in range(count):
            if _zz(p, n, &off, &length, 28) or length < 6 or off + length > n:
                return self._fail(start_rows)
            end = off + length
            off += 1  # record attributes: not a row field
            if _zz(p, end, &off, &ts_delta, 63) or _zz(p, end, &off, &delta, 28):
                return self._fail(start_rows)
            if _zz(p, end, &off, &klen, 28) or klen < -1 or (klen > 0 and off + klen > end):
                return self._fail(start_rows)
            kp = p + off
            if klen > 0:
                off += klen
            if _zz(p, end, &off, &vlen, 28) or vlen < -1 or (vlen > 0 and off + vlen > end):
                return self._fail(start_rows)
            vp = p + off
            if vlen > 0:
                off += vlen
            if _zz(p, end, &off, &nh, 28) or nh < 0 or nh * 2 > end - off:
                return self._fail(start_rows)
            if nh:
                headers = self._headers(p, &off, end, nh)
                if headers is None:
                    return self._fail(start_rows)
            if off != end:
                return self._fail(start_rows)
            if attrs & ATTR_TIMESTAMP_TYPE:
                ts = max_ts
            elif add_overflow(base_ts, ts_delta, &ts):
                return self._fail(start_rows)
            if add_overflow(base_offset, delta, &offset):
                return self._fail(start_rows)
            if base_seq == -1:
                seq = -1
            elif base_seq > INT32_MAX - delta:
                seq = delta - (INT32_MAX - base_seq) - 1
            else:
                seq = base_seq + delta
            if seq < -2147483648 or seq > INT32_MAX:
                return self._fail(start_rows)
            seq32 = <int32_t>seq
            _put(&self.position, &position, 8)
            _put(&self.base, &base_offset, 8)
            _put(&self.offset, &offset, 8)
            _put(&self.ts, &ts, 8)
            _put(&self.seq, &seq32, 4)
            self._bytes(&self.kdata, &self.koff, &self.kvalid, &self.ksize, kp, klen)
            self._bytes(&self.vdata, &self.voff, &self.vvalid, &self.vsize, vp, vlen)
            if nh:
                self._text(&self.hkdata, &self.hkoff, ",".join([k for k, _ in headers]))
                self._text(&self.hdata, &self.hoff, json.dumps(
                    [[k, None if v is None else b64encode(v).decode()] for k, v in headers]))
            else:
                self._empty_headers()
            self._tail(None, None)
            off = end
        return True

    cdef int _empty_headers(self) except -1:
        cdef int32_t end32 = <int32_t>self.hkdata.len
        _put(&self.hkoff, &end32, 4)
        _put(&self.hdata, b"[]", 2)
        end32 = <int32_t>self.hdata.len
        _put(&self.hoff, &end32, 4)
        return 0

    cdef object _headers(self, const uint8_t *p, Py_ssize_t *off, Py_ssize_t end, int64_t nh):
        """[(key str, value bytes | None)] as record_batch reads them, or None where it raises."""
        cdef int64_t klen, vlen
        out = []
        for _ in range(nh):
            if _zz(p, end, off, &klen, 28) or klen < 0 or off[0] + klen > end:
                return None
            try:
                key = PyUnicode_DecodeUTF8(<const char *>p + off[0], klen, "strict")
            except UnicodeDecodeError:
                return None
            off[0] += klen
            if _zz(p, end, off, &vlen, 28) or vlen < -1 or (vlen > 0 and off[0] + vlen > end):
                return None
            if vlen == -1:
                value = None
            else:
                value = PyBytes_FromStringAndSize(<const char *>p + off[0], vlen)
                off[0] += vlen
            out.append((key, value))
        return out

    cdef bint _fail(self, Py_ssize_t rows):
        self._rewind(rows)
        return False

    def take(self):
        """The columns so far, as raw little-endian buffers; the builder starts over."""
        out = {}
        names = ("position", "batch_base_offset", "offset", "timestamp_ms", "sequence", "key_size",
                 "value_size")
        cdef Buf *bs[20]
        self._bufs(bs)
        for i, name in enumerate(names):
            out[name] = PyBytes_FromStringAndSize(bs[i].data, bs[i].len)
        out["key"] = (self._raw(&self.koff), self._raw(&self.kdata), self._raw(&self.kvalid))
        out["value"] = (self._raw(&self.voff), self._raw(&self.vdata), self._raw(&self.vvalid))
        out["header_keys"] = (self._raw(&self.hkoff), self._raw(&self.hkdata), None)
        out["headers"] = (self._raw(&self.hoff), self._raw(&self.hdata), None)
        out["control_type"] = (self._raw(&self.ctype), list(self.control_names))
        out["coordinator_epoch"] = (self._raw(&self.cepoch), self._raw(&self.cvalid))
        out["rows"] = self.rows
        for i in range(20):
            bs[i].len = 0
        self.rows = 0
        self.control_names = []
        cdef int32_t zero = 0
        _put(&self.koff, &zero, 4)
        _put(&self.voff, &zero, 4)
        _put(&self.hkoff, &zero, 4)
        _put(&self.hoff, &zero, 4)
        return out

    cdef bytes _raw(self, Buf *b):
        return PyBytes_FromStringAndSize(b.data, b.len)
