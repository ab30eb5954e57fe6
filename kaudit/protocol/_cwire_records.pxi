# Record sets inside Produce requests and Fetch responses: part of _cwire.pyx (included). The
# twin of wire.records.decode_record_set (not --deep): whole v2 batches with their CRC, a cut last
# entry, the control record of an uncompressed control batch; a legacy entry or a compressed
# control batch gives the message up to the record layer's own decoder.

cdef bint _record_set(Msg m, Part *part, const uint8_t *b, Py_ssize_t end, bint tail_may_be_cut,
                      int64_t max_bb) except -1:
    """wire.records.decode_record_set (not --deep) into m.batches; False: given up."""
    cdef Py_ssize_t off = 0, nxt
    cdef int64_t length
    cdef int8_t magic
    cdef int16_t attr
    cdef int k
    part.rec_size = end
    part.first = m.nbatches
    part.truncated = 0
    while off < end:
        if end - off >= V2_HEADER:
            length = kd_i32(b + off + 8)
            magic = <int8_t>b[off + 16]
            attr = kd_i16(b + off + 21)
            nxt = off + LOG_OVERHEAD + length
            if (magic == 2 and V2_MIN_LENGTH <= length <= max_bb and nxt <= end
                    and not attr & ATTR_CONTROL):
                if not _take(m, b + off, nxt - off):
                    return False
                off = nxt
                continue
        if end - off < LOG_OVERHEAD:
            part.truncated = end - off
            break
        length = kd_i32(b + off + 8)
        if 0 <= length <= max_bb and off + LOG_OVERHEAD + length > end:
            part.truncated = end - off  # a cut last entry (normal in a Fetch response)
            break
        # record_batch.decode_entry: an error ends the record set (the batches before it stay)
        if off + 16 >= end:
            break
        magic = <int8_t>b[off + 16]
        if magic == 0 or magic == 1:
            return False  # legacy message sets: the record layer's own decoder
        if magic != 2 or off + V2_HEADER > end or length < V2_MIN_LENGTH or length > max_bb:
            break
        nxt = off + LOG_OVERHEAD + length
        if nxt > end:
            break
        k = _take(m, b + off, nxt - off)
        if k < 0:
            m.nbatches -= 1
            break
        if k == 0:
            return False
        off = nxt
    part.nbatches = m.nbatches - part.first
    return True


cdef int _take(Msg m, const uint8_t *b, Py_ssize_t size) except -2:
    """The batch of `size` bytes at b (a whole v2 batch) appended: 1, or for a control batch 0
    (given up: compressed) or -1 (its control record does not decode: the walk stops)."""
    m.add_batch()
    cdef Batch *x = &m.batches[m.nbatches - 1]
    x.base_offset = kd_i64(b)
    x.batch_length = kd_i32(b + 8)
    x.ple = kd_i32(b + 12)
    x.magic = <int8_t>b[16]
    x.crc = kd_u32(b + 17)
    x.crc_ok = kd_crc32c(b + 21, size - 21) == x.crc
    x.attributes = kd_i16(b + 21)
    x.lod = kd_i32(b + 23)
    x.base_ts = kd_i64(b + 27)
    x.max_ts = kd_i64(b + 35)
    x.pid = kd_i64(b + 43)
    x.epoch = kd_i16(b + 51)
    x.base_seq = kd_i32(b + 53)
    x.count = kd_i32(b + 57)
    x.control = -1
    x.has_coord = False
    if not _fits(x):
        return 0
    if x.attributes & ATTR_CONTROL:
        if x.attributes & 7:
            return 0
        return _control(x, b + V2_HEADER, size - V2_HEADER)
    return 1


cdef bint _fits(Batch *x) noexcept nogil:
    """The row's derived values fit their columns (last offset, batch size, last sequence);
    where they would not, the pure path decides what happens."""
    cdef int64_t last
    if x.lod > 0 and x.base_offset > INT64_MAX - <int64_t>x.lod:
        return False
    if x.lod < 0 and x.base_offset < INT64_MIN - <int64_t>x.lod:
        return False
    if x.batch_length > INT32_MAX - LOG_OVERHEAD:
        return False
    if x.base_seq != -1:
        if <int64_t>x.base_seq > <int64_t>INT32_MAX - x.lod:
            last = <int64_t>x.lod - (<int64_t>INT32_MAX - x.base_seq) - 1
        else:
            last = <int64_t>x.base_seq + x.lod
        if last < INT32_MIN or last > INT32_MAX:
            return False
    return True


cdef int _control(Batch *x, const uint8_t *data, Py_ssize_t n) noexcept nogil:
    """record_batch.decode_records_v2 + decode_control_record on an uncompressed control
    batch's records: 1 (x.control, x.coord set when its first record names them), -1 when any
    record or the control key/value does not decode."""
    cdef Rd r = Rd(p=data, off=0, end=n, bad=False)
    cdef Py_ssize_t endr, key, value, hk, kn = -1, vn = -1, hkn, hvn, key0 = 0, value0 = 0
    cdef int64_t length, headers, i, j
    if x.count < 0 or <int64_t>x.count * 7 > n:
        return -1
    for i in range(x.count):
        r.end = n
        length = _varint(&r)
        if r.bad or length < 6 or length > n - r.off:
            return -1
        endr = r.off + length
        r.end = endr  # a record never reads past its own length
        r.off += 1  # attributes
        _varlong(&r)  # timestamp delta
        _varint(&r)  # offset delta
        key = _vbytes(&r, &hkn)
        value = _vbytes(&r, &hvn)
        if i == 0:
            kn, vn = hkn, hvn
            key0, value0 = key, value
        headers = _varint(&r)
        if r.bad or headers < 0 or headers * 2 > endr - r.off:
            return -1
        for j in range(headers):
            hk = _vbytes(&r, &hkn)
            if r.bad or hkn < 0:
                return -1
            _vbytes(&r, &hvn)
            if r.bad or not utf8_ok(data + hk, hkn):
                return -1
        if r.bad or r.off != endr:
            return -1
    if x.count == 0:
        return 1
    if kn < 4:
        return -1
    x.control = kd_i16(data + key0 + 2)
    if x.control == 0 or x.control == 1:
        if vn < 6:
            return -1
        x.has_coord = True
        x.coord = kd_i32(data + value0 + 2)
    return 1


cdef inline int64_t _varint(Rd *r) noexcept nogil:
    cdef int64_t v = _uvarint(r)
    return (v >> 1) ^ -(v & 1)


cdef inline void _varlong(Rd *r) noexcept nogil:
    """primitives.read_uvarlong's bounds (at most 10 bytes); the value is not needed."""
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if not _need(r, 1):
            return
        b = r.p[r.off]
        r.off += 1
        if not b & 0x80:
            return
        shift += 7
        if shift > 63:
            r.bad = True
            return


cdef inline Py_ssize_t _vbytes(Rd *r, Py_ssize_t *length) noexcept nogil:
    """record_batch._varint_bytes: offset, length (-1: null)."""
    cdef int64_t k = _varint(r)
    cdef Py_ssize_t at
    length[0] = -1
    if r.bad:
        return 0
    if k == -1:
        return 0
    if k < -1 or not _need(r, k):
        r.bad = True
        return 0
    at = r.off
    r.off += k
    length[0] = k
    return at
