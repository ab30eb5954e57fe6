"""Bounded reads of Kafka's primitives for the compiled message walks (kaudit/protocol/_cwire,
_cother): every read checks the end first and marks the reader bad instead of reading past it."""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "_kafka_c.h":
    int64_t kd_i64(const uint8_t *p) nogil
    int32_t kd_i32(const uint8_t *p) nogil
    uint32_t kd_u32(const uint8_t *p) nogil
    int16_t kd_i16(const uint8_t *p) nogil
    uint32_t kd_crc32c(const uint8_t *p, size_t n) nogil


cdef inline bint utf8_ok(const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """What str(bytes, 'utf-8') accepts (no surrogates, no overlong forms, up to U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, lo, hi
    cdef int k, more
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        lo, hi = 0x80, 0xBF
        if 0xC2 <= c <= 0xDF:
            more = 1
        elif 0xE0 <= c <= 0xEF:
            more = 2
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F
        elif 0xF0 <= c <= 0xF4:
            more = 3
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            return False
        if i + more >= n:
            return False
        if not lo <= s[i + 1] <= hi:
            return False
        for k in range(2, more + 1):
            if not 0x80 <= s[i + k] <= 0xBF:
                return False
        i += more + 1
    return True


cdef struct Rd:
    const uint8_t *p
    Py_ssize_t off, end
    bint bad


cdef inline bint _need(Rd *r, Py_ssize_t k) noexcept nogil:
    if r.bad or k > r.end - r.off:
        r.bad = True
        return False
    return True


cdef inline int8_t _i8(Rd *r) noexcept nogil:
    if not _need(r, 1):
        return 0
    r.off += 1
    return <int8_t>r.p[r.off - 1]


cdef inline int16_t _i16(Rd *r) noexcept nogil:
    if not _need(r, 2):
        return 0
    r.off += 2
    return kd_i16(r.p + r.off - 2)


cdef inline int32_t _i32(Rd *r) noexcept nogil:
    if not _need(r, 4):
        return 0
    r.off += 4
    return kd_i32(r.p + r.off - 4)


cdef inline int64_t _i64(Rd *r) noexcept nogil:
    if not _need(r, 8):
        return 0
    r.off += 8
    return kd_i64(r.p + r.off - 8)


cdef inline int64_t _uvarint(Rd *r) noexcept nogil:
    """primitives.read_uvarint: at most 5 bytes."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if not _need(r, 1):
            return 0
        b = r.p[r.off]
        r.off += 1
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not b & 0x80:
            return <int64_t>v
        shift += 7
        if shift > 28:
            r.bad = True
            return 0


cdef inline int64_t _length(Rd *r, bint flex, int width) noexcept nogil:
    """A length prefix as the kio walkers read it: -1 null, below -1 given up."""
    cdef int64_t n
    if flex:
        n = _uvarint(r) - 1
    elif width == 2:
        n = _i16(r)
    else:
        n = _i32(r)
    if n < -1:
        r.bad = True
    return n


cdef inline void _tags(Rd *r, bint flex) noexcept nogil:
    """An empty tagged-field section (any tag: given up, the schema walk reads tags)."""
    if flex and _i8(r) != 0:
        r.bad = True


cdef inline Py_ssize_t _string(Rd *r, bint flex, bint nullable, Py_ssize_t *length) noexcept nogil:
    """A string's offset (its length in *length, -1 for null): UTF-8 checked."""
    cdef int64_t n = _length(r, flex, 2)
    cdef Py_ssize_t at = r.off
    length[0] = -1
    if r.bad:
        return 0
    if n < 0:
        if not nullable:
            r.bad = True
        return 0
    if not _need(r, n) or not utf8_ok(r.p + r.off, n):
        r.bad = True
        return 0
    r.off += n
    length[0] = n
    return at


cdef inline void _uuid(Rd *r, uint8_t *id, bint *zero) noexcept nogil:
    """16 bytes of a uuid into id; *zero: all of them are 0 (Kafka's "none")."""
    cdef int i
    if not _need(r, 16):
        return
    zero[0] = True
    for i in range(16):
        id[i] = r.p[r.off + i]
        if id[i]:
            zero[0] = False
    r.off += 16
