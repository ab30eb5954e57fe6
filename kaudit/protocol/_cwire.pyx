# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Produce requests and responses (v3-v13) and Fetch requests and responses (v4-v18) walked in
C, with their record sets (v2 batch headers, CRC-32C, control records): the facts their rows
need, as `sources.wire_rows` reads them from the decoded bodies.

Only well-formed messages are taken: the walk gives up (None) on anything else - a cut or
malformed field, a null where Kafka's schema has none, a tagged field, a string that is not
UTF-8, a record set holding a legacy (magic 0/1) entry or a compressed control batch - and the
pure decoders (kio's schema walk, `record_batch`) decide and report. Every read is checked
against the end of the payload first; no length read from the input sizes an allocation.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdint cimport INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memset

from kaudit.protocol.wire import apis
from kaudit.protocol.wire.bodies import FULLY_DECODED
from kaudit.protocol.wire.legacy import has_hand

from kaudit.protocol._creader cimport (
    Rd, _i8, _i16, _i32, _i64, _length, _need, _string, _tags, _uuid, _uvarint, kd_crc32c,
    kd_i16, kd_i32, kd_i64, kd_u32, utf8_ok,
)

DEF PRODUCE = 0
DEF FETCH = 1
DEF METADATA = 3
DEF ADD_PARTITIONS = 24
DEF END_TXN = 26
DEF MAXV = 24
DEF NKEYS = 5
DEF V2_HEADER = 61
DEF LOG_OVERHEAD = 12
DEF V2_MIN_LENGTH = 49
DEF ATTR_CONTROL = 0x20

# per (api key, version), learnt on first use (kio's schemas load lazily): walkable (1, 0 no,
# -1 not known yet), request and response header versions, flexible
cdef int OK[NKEYS][MAXV]
cdef int REQ_HV[NKEYS][MAXV]
cdef int RESP_HV[NKEYS][MAXV]
cdef bint FLEX[NKEYS][MAXV]
for _k in range(NKEYS):
    for _v in range(MAXV):
        OK[_k][_v] = -1
# the api keys walked here, their slot in the tables, and the versions whose layouts are
# written out below
_VERSIONS = {PRODUCE: (3, 13), FETCH: (4, 18), METADATA: (0, 13), ADD_PARTITIONS: (0, 3),
             END_TXN: (0, 5)}


cdef inline int _slot(int key) noexcept:
    if key == PRODUCE:
        return 0
    if key == FETCH:
        return 1
    if key == METADATA:
        return 2
    if key == ADD_PARTITIONS:
        return 3
    if key == END_TXN:
        return 4
    return -1


cdef bint _known(int key, int v) except -1:
    """Does the C walk take this (key, version)? The layouts written out below, when kio
    decodes both directions (what the pure path decodes them with)."""
    cdef int k = _slot(key)
    if k < 0 or not 0 <= v < MAXV:
        return False
    if OK[k][v] < 0:
        lo, hi = _VERSIONS[key]
        # bodies.body_decoder(key, v, entity) == "kio" for both, without importing kio's classes
        ok = (lo <= v <= hi and key in FULLY_DECODED
              and not has_hand(key, v, "request") and not has_hand(key, v, "response")
              and apis.has_kio_class(key, v, "request") and apis.has_kio_class(key, v, "response"))
        if ok:
            REQ_HV[k][v] = apis.request_header_version(key, v)
            RESP_HV[k][v] = apis.response_header_version(key, v)
            FLEX[k][v] = apis.is_flexible(key, v)
        OK[k][v] = 1 if ok else 0
    return OK[k][v] == 1


cdef str uuid_text(const uint8_t *raw):
    """kio_bodies.kafka_uuid: URL-safe base64 without padding (None is the caller's: zero)."""
    cdef const char *alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    cdef char out[24]
    cdef int i = 0, j = 0
    cdef uint32_t v
    while i + 3 <= 15:
        v = (<uint32_t>raw[i] << 16) | (<uint32_t>raw[i + 1] << 8) | raw[i + 2]
        out[j] = alphabet[(v >> 18) & 63]
        out[j + 1] = alphabet[(v >> 12) & 63]
        out[j + 2] = alphabet[(v >> 6) & 63]
        out[j + 3] = alphabet[v & 63]
        i += 3
        j += 4
    v = <uint32_t>raw[15] << 16
    out[j] = alphabet[(v >> 18) & 63]
    out[j + 1] = alphabet[(v >> 12) & 63]
    return out[:22].decode("ascii")


# ---- the message ----------------------------------------------------------------------------

cdef class Msg:

    def __dealloc__(self):
        free(self.topics)
        free(self.parts)
        free(self.batches)
        free(self.aborted)
        free(self.errors)

    cdef int add_error(self, int16_t code) except -1:
        cdef Py_ssize_t cap
        if not code:
            return 0
        if self.nerrors == self.cap_errors:
            cap = self.cap_errors * 2 + 8
            p = <int16_t *>realloc(self.errors, cap * sizeof(int16_t))
            if p == NULL:
                raise MemoryError()
            self.errors, self.cap_errors = p, cap
        self.errors[self.nerrors] = code
        self.nerrors += 1
        return 0

    cdef int add_topic(self) except -1:
        cdef Py_ssize_t cap
        if self.ntopics == self.cap_topics:
            cap = self.cap_topics * 2 + 4
            p = <Topic *>realloc(self.topics, cap * sizeof(Topic))
            if p == NULL:
                raise MemoryError()
            self.topics, self.cap_topics = p, cap
        memset(&self.topics[self.ntopics], 0, sizeof(Topic))
        self.topics[self.ntopics].name_len = -1
        self.topics[self.ntopics].id_zero = True
        self.ntopics += 1
        return 0

    cdef int add_part(self) except -1:
        cdef Py_ssize_t cap
        if self.nparts == self.cap_parts:
            cap = self.cap_parts * 2 + 8
            p = <Part *>realloc(self.parts, cap * sizeof(Part))
            if p == NULL:
                raise MemoryError()
            self.parts, self.cap_parts = p, cap
        self.parts[self.nparts] = Part(topic=self.ntopics - 1, index=0, error=0, offset=0, hw=0,
                                       lso=0, log_start=0, preferred=0, rec_size=-2, truncated=0,
                                       first=self.nbatches, nbatches=0, first_aborted=-1,
                                       naborted=0, has_log_start=False, has_preferred=False)
        self.nparts += 1
        return 0

    cdef int add_batch(self) except -1:
        cdef Py_ssize_t cap
        if self.nbatches == self.cap_batches:
            cap = self.cap_batches * 2 + 8
            p = <Batch *>realloc(self.batches, cap * sizeof(Batch))
            if p == NULL:
                raise MemoryError()
            self.batches, self.cap_batches = p, cap
        self.nbatches += 1
        return 0

    cdef int add_aborted(self, int64_t pid, int64_t first) except -1:
        cdef Py_ssize_t cap
        if self.naborted == self.cap_aborted:
            cap = self.cap_aborted * 2 + 8
            p = <int64_t *>realloc(self.aborted, cap * 2 * sizeof(int64_t))
            if p == NULL:
                raise MemoryError()
            self.aborted, self.cap_aborted = p, cap
        self.aborted[2 * self.naborted] = pid
        self.aborted[2 * self.naborted + 1] = first
        self.naborted += 1
        return 0

    def real(self):
        """The protocol.wire.messages.Request of the payload (decoded once, on demand)."""
        if self._real is None:
            from kaudit.protocol.wire.messages import decode_request

            self._real = decode_request(self.payload, strict=False, deep=False,
                                        max_batch_bytes=self.max_batch_bytes)[0]
        return self._real

    def __getattr__(self, name):
        return getattr(self.real(), name)


# ---- requests -----------------------------------------------------------------------------

cdef Msg parse_request(object payload, const uint8_t *p, Py_ssize_t n, int64_t max_batch_bytes):
    """A Produce, Fetch, Metadata, AddPartitionsToTxn (v0-v3) or EndTxn request payload (after
    the size field), or None."""
    cdef Rd r = Rd(p=p, off=0, end=n, bad=False)
    cdef int key, version
    cdef Msg m
    if n < 8:
        return None
    key = kd_i16(p)
    version = kd_i16(p + 2)
    if not _known(key, version):
        return None
    m = Msg.__new__(Msg)
    m.api_key, m.api_version = key, version
    m.correlation_id = kd_i32(p + 4)
    m.payload = payload
    m.max_batch_bytes = max_batch_bytes
    m.size = <int32_t>n
    r.off = 8
    # request header v1/v2: a nullable int16 string, then (v2) tagged fields
    m.client_id = _string(&r, False, True, &m.client_id_len)
    if REQ_HV[_slot(key)][version] >= 2:
        _tags(&r, True)
    if r.bad:
        return None
    m.base = p
    if key == PRODUCE:
        ok = _produce_request(m, &r, version, FLEX[_slot(key)][version], max_batch_bytes)
    elif key == FETCH:
        ok = _fetch_request(m, &r, version, FLEX[_slot(key)][version])
    else:
        ok = _other_request(m, &r, key, version, FLEX[_slot(key)][version])
    m.base = NULL
    if not ok or r.bad:
        return None
    return m


cdef bint _produce_request(Msg m, Rd *r, int v, bint flex, int64_t max_batch_bytes) except -1:
    cdef int64_t nt, np, k, j, size
    m.txn_id = _string(r, flex, True, &m.txn_id_len)
    m.acks = _i16(r)
    m.timeout = _i32(r)
    nt = _length(r, flex, 4)
    if r.bad or nt < 0:
        return False
    for k in range(nt):
        m.add_topic()
        if v >= 13:
            _uuid(r, m.topics[m.ntopics - 1].id, &m.topics[m.ntopics - 1].id_zero)
        else:
            m.topics[m.ntopics - 1].name = _string(r, flex, False, &m.topics[m.ntopics - 1].name_len)
        np = _length(r, flex, 4)
        if r.bad or np < 0:
            return False
        for j in range(np):
            m.add_part()
            m.parts[m.nparts - 1].index = _i32(r)
            size = _length(r, flex, 4)
            if r.bad:
                return False
            if size >= 0:
                if not _need(r, size):
                    return False
                if not _record_set(m, &m.parts[m.nparts - 1], r.p + r.off, size, False, max_batch_bytes):
                    return False
                r.off += size
            else:
                m.parts[m.nparts - 1].rec_size = -1
            _tags(r, flex)
            if r.bad:
                return False
        _tags(r, flex)
    _tags(r, flex)
    return not r.bad


cdef bint _fetch_request(Msg m, Rd *r, int v, bint flex) except -1:
    cdef int64_t nt, np, k, j
    cdef Py_ssize_t length
    # v15+ (KIP-903): the replica id is in the tagged ReplicaState (a follower's: its tags are not
    # empty, so the schema walk reads them); without it, -1 - a consumer, as Kafka reads it
    m.replica_id = _i32(r) if v < 15 else -1
    m.has_replica_id = True
    m.timeout = _i32(r)  # max_wait_ms
    _i32(r)  # min_bytes
    _i32(r)  # max_bytes
    m.isolation = _i8(r)
    if v >= 7:
        _i32(r)  # session_id
        _i32(r)  # session_epoch
    nt = _length(r, flex, 4)
    if r.bad or nt < 0:
        return False
    for k in range(nt):
        m.add_topic()
        if v >= 13:
            _uuid(r, m.topics[m.ntopics - 1].id, &m.topics[m.ntopics - 1].id_zero)
        else:
            m.topics[m.ntopics - 1].name = _string(r, flex, False, &m.topics[m.ntopics - 1].name_len)
        np = _length(r, flex, 4)
        if r.bad or np < 0:
            return False
        for j in range(np):
            m.add_part()
            m.parts[m.nparts - 1].index = _i32(r)
            if v >= 9:
                _i32(r)  # current_leader_epoch
            m.parts[m.nparts - 1].offset = _i64(r)  # fetch_offset
            if v >= 12:
                _i32(r)  # last_fetched_epoch
            if v >= 5:
                _i64(r)  # log_start_offset
            _i32(r)  # partition_max_bytes
            _tags(r, flex)
            if r.bad:
                return False
        _tags(r, flex)
    if v >= 7:  # forgotten_topics_data
        nt = _length(r, flex, 4)
        if r.bad or nt < 0:
            return False
        for k in range(nt):
            if v >= 13:
                if not _need(r, 16):
                    return False
                r.off += 16
            else:
                _string(r, flex, False, &length)
            np = _length(r, flex, 4)
            if r.bad or np < 0 or not _need(r, np * 4):
                return False
            r.off += np * 4
            _tags(r, flex)
    if v >= 11:
        _string(r, flex, False, &length)  # rack_id
    if v >= 15:
        _fetch_tags(m, r)
    else:
        _tags(r, flex)
    return not r.bad


cdef void _fetch_tags(Msg m, Rd *r) noexcept:
    """A Fetch v15+ request's tagged fields: a follower's ReplicaState (tag 1: replica id, epoch,
    no tags of its own) read; any other tag (a ClusterId, one no version defines) or a state of
    other bytes: given up (the schema walk reads them)."""
    cdef int64_t n = _uvarint(r), tag, size, end
    cdef int64_t k
    for k in range(n):
        tag = _uvarint(r)
        size = _uvarint(r)
        if r.bad or tag != 1 or not _need(r, size):
            r.bad = True
            return
        end = r.off + size
        m.replica_id = _i32(r)
        _i64(r)  # replica_epoch
        _tags(r, True)
        if r.bad or r.off != end:
            r.bad = True
            return


include "_cwire_records.pxi"


# ---- responses --------------------------------------------------------------------------------

cdef Msg parse_response(Msg req, const uint8_t *p, Py_ssize_t n, int64_t max_batch_bytes):
    """The response payload to `req` (a Msg of parse_request), or None."""
    cdef Rd r = Rd(p=p, off=0, end=n, bad=False)
    cdef int key = req.api_key, version = req.api_version
    cdef Msg m = Msg.__new__(Msg)
    cdef bint flex = FLEX[_slot(key)][version]
    m.api_key, m.api_version = key, version
    m.correlation_id = _i32(&r)
    m.size = <int32_t>n
    if RESP_HV[_slot(key)][version] >= 1:
        _tags(&r, True)
    if r.bad:
        return None
    if key == PRODUCE:
        ok = _produce_response(m, &r, version, flex)
    elif key == FETCH:
        ok = _fetch_response(m, &r, version, flex, max_batch_bytes)
    else:
        ok = _other_response(m, &r, key, version, flex)
    if not ok or r.bad:
        return None
    return m


cdef bint _topic(Msg m, Rd *r, int v, bint flex) noexcept:
    cdef Topic *t = &m.topics[m.ntopics - 1]
    if v >= 13:
        _uuid(r, t.id, &t.id_zero)
    else:
        t.name = _string(r, flex, False, &t.name_len)
    return not r.bad


cdef bint _produce_response(Msg m, Rd *r, int v, bint flex) except -1:
    cdef int64_t nt, np, ne, k, j, e
    cdef Py_ssize_t length
    cdef Part *x
    nt = _length(r, flex, 4)
    if r.bad or nt < 0:
        return False
    for k in range(nt):
        m.add_topic()
        if not _topic(m, r, v, flex):
            return False
        np = _length(r, flex, 4)
        if r.bad or np < 0:
            return False
        for j in range(np):
            m.add_part()
            x = &m.parts[m.nparts - 1]
            x.index = _i32(r)
            x.error = _i16(r)
            x.offset = _i64(r)  # base_offset
            _i64(r)  # log_append_time
            if v >= 5:
                _i64(r)  # log_start_offset
            if v >= 8:
                ne = _length(r, flex, 4)  # record_errors
                if r.bad or ne < 0:
                    return False
                for e in range(ne):
                    _i32(r)
                    _string(r, flex, True, &length)
                    _tags(r, flex)
                    if r.bad:
                        return False
                _string(r, flex, True, &length)  # error_message
            _tags(r, flex)
            if r.bad:
                return False
        _tags(r, flex)
    m.throttle = _i32(r)
    _tags(r, flex)
    return not r.bad


cdef bint _fetch_response(Msg m, Rd *r, int v, bint flex, int64_t max_bb) except -1:
    cdef int64_t nt, np, na, k, j, e, size, pid
    cdef Part *x
    m.throttle = _i32(r)
    if v >= 7:
        m.top_error = _i16(r)
        m.has_top_error = True
        _i32(r)  # session_id
    nt = _length(r, flex, 4)
    if r.bad or nt < 0:
        return False
    for k in range(nt):
        m.add_topic()
        if not _topic(m, r, v, flex):
            return False
        np = _length(r, flex, 4)
        if r.bad or np < 0:
            return False
        for j in range(np):
            m.add_part()
            x = &m.parts[m.nparts - 1]
            x.index = _i32(r)
            x.error = _i16(r)
            x.hw = _i64(r)
            x.lso = _i64(r)
            if v >= 5:
                x.log_start = _i64(r)
                x.has_log_start = True
            na = _length(r, flex, 4)  # aborted_transactions (nullable)
            if r.bad:
                return False
            if na >= 0:
                x.first_aborted = m.naborted
                for e in range(na):
                    pid = _i64(r)
                    m.add_aborted(pid, _i64(r))
                    _tags(r, flex)
                    if r.bad:
                        return False
                x.naborted = na
            if v >= 11:
                x.preferred = _i32(r)
                x.has_preferred = True
            size = _length(r, flex, 4)  # records (nullable)
            if r.bad:
                return False
            if size >= 0:
                if not _need(r, size):
                    return False
                x = &m.parts[m.nparts - 1]
                if not _record_set(m, x, r.p + r.off, size, True, max_bb):
                    return False
                r.off += size
            else:
                x.rec_size = -1
            _tags(r, flex)
            if r.bad:
                return False
        _tags(r, flex)
    _tags(r, flex)
    return not r.bad


include "_cwire_txn.pxi"
