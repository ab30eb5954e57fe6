# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The rows of a Produce or Fetch exchange walked in C (kaudit/protocol/_cwire), written into
the column builders: the twins of `WireRows._produce`, `_fetch`, `_frame` and `_batch_head`
(sources/wire_rows.py), value for value. Strings the pure path builds with Python (the frame's
partitions, its partition_errors JSON, the error codes) are built here byte for byte; where
JSON would need escaping, Python's json builds it."""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint64_t, INT64_MAX
from libc.math cimport copysign, fabs, floor
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy
from cpython.unicode cimport PyUnicode_DecodeUTF8

from kaudit.protocol._cwire cimport Batch, Msg, Part, Topic, uuid_text
from kaudit.sources._ccolumns cimport Columns

from kaudit.protocol.codecs import codec_name
from kaudit.protocol.record_batch import CONTROL_TYPES
from kaudit.protocol.wire import apis
from kaudit.sources.wire_rows import WireRows, _error_names, _partition_errors_json

DEF PRODUCE = 0
DEF INT32_MAX = 2147483647

cdef list CODECS = [codec_name(i) for i in range(8)]
cdef dict CONTROL_NAMES = dict(CONTROL_TYPES)
cdef str PRODUCE_NAME = apis.api_name(apis.PRODUCE)
cdef str FETCH_NAME = apis.api_name(apis.FETCH)
cdef dict ISOLATION = {0: "read_uncommitted", 1: "read_committed"}


cdef class Sink:
    """The WireRows of a decode, as the row writers use it: its column builders (through its
    own `_list` unless it is a plain WireRows) and its row count."""

    def __init__(self, rows):
        self.rows = rows
        self.plain = type(rows) is WireRows
        self.source = rows.source
        # a parallel decode's KeyedRows (sources/pcap_parallel): the kinds an event touches are
        # noted here, as its own `_list` notes them
        touched = getattr(rows, "_touched", None)
        self.touched = touched if type(touched) is list else None

    cdef Columns cols(self, str kind):
        if self.plain or self.touched is not None:
            c = self.rows.rows.get(kind)
            if c is not None:
                if self.touched is not None and kind not in self.touched:
                    self.touched.append(kind)
                return c
        return self.rows._list(kind)

    cdef list cols_list(self, str kind):
        """The rows of a kind kept as tuples (the kinds not built column by column)."""
        return self.rows._list(kind)


include "_crows_text.pxi"


# ---- rows ------------------------------------------------------------------------------------

cdef int _batch_row(Columns c, str kind, str source, position, Topic *t, const uint8_t *pt,
                    int32_t partition, Batch *b, str name, Msg req, const uint8_t *pq,
                    bint produce) except -1:
    """A BATCH row up to `acks` (`_batch_end` writes the rest): the place,
    wire_rows._batch_head, the wire context."""
    cdef int64_t last_seq
    cdef int16_t attr = b.attributes
    c.begin()
    c.put_text(0, kind)
    c.put_text(1, source)
    _num(c, 2, position)
    c.put_null(3)
    c.put_null(4)
    _opt_str(c, 5, pt, t.name, t.name_len)
    c.put_i64(6, partition)
    c.put_i64(7, b.base_offset)
    c.put_i64(8, b.base_offset + b.lod)
    c.put_i64(9, <int64_t>b.batch_length + 12)
    c.put_i64(10, b.magic)
    c.put_i64(11, b.crc)
    c.put_bool(12, b.crc_ok)
    c.put_i64(13, attr)
    c.put_text(14, CODECS[attr & 7])
    c.put_text(15, "log_append" if attr & 0x08 else "create")
    c.put_bool(16, attr & 0x10)
    c.put_bool(17, attr & 0x20)
    c.put_bool(18, attr & 0x40)
    if b.control >= 0:
        control = CONTROL_NAMES.get(b.control)
        c.put_text(19, control if control is not None else f"UNKNOWN({b.control})")
    else:
        c.put_null(19)
    if b.has_coord:
        c.put_i64(20, b.coord)
    else:
        c.put_null(20)
    c.put_i64(21, b.pid)
    c.put_i64(22, b.epoch)
    c.put_i64(23, b.base_seq)
    if b.base_seq == -1:
        last_seq = -1
    elif <int64_t>b.base_seq > <int64_t>INT32_MAX - b.lod:
        last_seq = <int64_t>b.lod - (<int64_t>INT32_MAX - b.base_seq) - 1
    else:
        last_seq = <int64_t>b.base_seq + b.lod
    c.put_i64(24, last_seq)  # fits: protocol._cwire checked
    c.put_i64(25, b.count)
    c.put_i64(26, b.base_ts)
    c.put_i64(27, b.max_ts)
    c.put_i64(28, b.ple)
    c.put_text(29, name)
    c.put_i64(30, req.api_version)
    c.put_i64(31, req.correlation_id)
    _opt_str(c, 32, pq, req.client_id, req.client_id_len)
    if produce:
        _opt_str(c, 33, pq, req.txn_id, req.txn_id_len)
        c.put_i64(34, req.acks)
    else:
        c.put_null(33)
        c.put_null(34)
    return 0


cdef int _batch_end(Columns c, req_ts, resp_ts, bint has_error, int16_t error, bint has_base,
                    int64_t base, topic_id) except -1:
    _num(c, 35, req_ts)
    _num(c, 36, resp_ts)
    if has_error:
        c.put_i64(37, error)
    else:
        c.put_null(37)
    if has_base:
        c.put_i64(38, base)
    else:
        c.put_null(38)
    c.put_text(39, topic_id)
    c.finish()
    return 0


cdef int _frame_row(Sink s, str name, Msg req, const uint8_t *pq, codes, throttle, bint produce,
                    pid, epoch, partitions, partition_errors, isolation, req_frame, resp_frame,
                    req_ts, resp_ts, req_size, resp_size) except -1:
    """WireRows._frame: the FRAME row of a Produce or Fetch exchange."""
    cdef Columns c = s.cols("frame")
    cdef int i
    c.begin()
    c.put_text(0, s.source)
    c.put_text(1, name)
    _num(c, 2, req_frame)
    _num(c, 3, resp_frame)
    _num(c, 4, req_ts)
    _num(c, 5, resp_ts)
    _latency(c, 6, req_ts, resp_ts)
    _num(c, 7, req_size)
    _num(c, 8, resp_size)
    c.put_i64(9, req.api_key)
    c.put_text(10, PRODUCE_NAME if produce else FETCH_NAME)
    c.put_i64(11, req.api_version)
    c.put_i64(12, req.correlation_id)
    _opt_str(c, 13, pq, req.client_id, req.client_id_len)
    c.put_text(14, codes)
    c.put_text(15, _error_names(codes) if codes else None)
    if produce:
        _opt_str(c, 16, pq, req.txn_id, req.txn_id_len)
    else:
        c.put_null(16)
    c.put_obj(17, pid)
    c.put_obj(18, epoch)
    if produce:
        c.put_i64(19, req.acks)
    else:
        c.put_null(19)
    c.put_i64(20, req.timeout)
    c.put_null(21)
    c.put_text(22, partitions)
    for i in range(23, 30):
        c.put_null(i)
    c.put_text(30, isolation)
    c.put_null(31)
    c.put_null(32)
    c.put_obj(33, throttle)
    c.put_null(34)
    c.put_text(35, partition_errors)
    c.put_null(36)
    c.put_null(37)
    c.put_text(38, "kio")
    c.put_bool(39, True)
    c.put_null(40)
    c.finish()
    return 0


cdef int produce_rows(Sink s, str name, Msg req, Msg resp, const uint8_t *pr, req_frame,
                      resp_frame, req_ts, resp_ts, req_size, resp_size) except -1:
    """WireRows._produce for a walked Produce request and its walked response (or none)."""
    cdef const uint8_t[::1] qv = req.payload
    cdef const uint8_t *pq = &qv[0]
    cdef Py_ssize_t i, j, a
    cdef Part *x
    cdef Columns batches = None
    cdef int64_t n = 0, base
    cdef int16_t error
    cdef bint answered, has_base
    codes = throttle = partition_errors = None
    if resp is not None:
        codes = _codes(resp)
        if codes is None:
            codes = _codes_py(resp)
        throttle = resp.throttle
        partition_errors = _partition_errors(resp, pr)
    s.cols("frame")  # kinds in the order the pure path adds them: frame, batch
    pid = epoch = None
    for i in range(req.nparts):
        x = &req.parts[i]
        if not x.nbatches:
            continue
        if pid is None:
            pid, epoch = req.batches[x.first].pid, req.batches[x.first].epoch
        answered, error, base = False, 0, 0
        if resp is not None:
            a = _answer(req, x, pq, resp, pr)
            if a >= 0:
                answered, error, base = True, resp.parts[a].error, resp.parts[a].offset
        if batches is None:
            batches = s.cols("batch")
        topic_id = _topic_id(&req.topics[x.topic])
        for j in range(x.first, x.first + x.nbatches):
            _batch_row(batches, "produce", s.source, req_frame, &req.topics[x.topic], pq, x.index,
                       &req.batches[j], name, req, pq, True)
            _batch_end(batches, req_ts, resp_ts, answered, error, answered, base, topic_id)
            n += 1
            if answered and base >= 0:
                base = base + req.batches[j].lod + 1
    _frame_row(s, name, req, pq, codes, throttle, True, pid, epoch, _partitions(req, pq),
               partition_errors, None, req_frame, resp_frame, req_ts, resp_ts, req_size, resp_size)
    s.rows.count += n + 1
    return 0


cdef int _fetch_part_head(Columns parts, Sink s, str name, Msg req, const uint8_t *pq, Topic *t,
                          const uint8_t *pt, int64_t index, isolation, resp_frame, req_ts,
                          resp_ts) except -1:
    """A fetch_partition row's first columns (0-11), the same for an answered partition and a
    request partition the response left out; `pt`: the buffer `t`'s name lies in."""
    parts.begin()
    parts.put_text(0, s.source)
    parts.put_text(1, name)
    _num(parts, 2, resp_frame)
    _num(parts, 3, req_ts)
    _num(parts, 4, resp_ts)
    parts.put_i64(5, req.api_version)
    parts.put_i64(6, req.correlation_id)
    _opt_str(parts, 7, pq, req.client_id, req.client_id_len)
    _opt_str(parts, 8, pt, t.name, t.name_len)
    parts.put_i64(9, index)
    parts.put_text(10, isolation)
    if req.has_replica_id:
        parts.put_i64(11, req.replica_id)
    else:
        parts.put_null(11)
    return 0


cdef int fetch_rows(Sink s, str name, Msg req, Msg resp, const uint8_t *pr, req_frame,
                    resp_frame, req_ts, resp_ts, req_size, resp_size) except -1:
    """WireRows._fetch for a walked Fetch request and its walked response."""
    cdef const uint8_t[::1] qv = req.payload
    cdef const uint8_t *pq = &qv[0]
    cdef Py_ssize_t i, j, k
    cdef Part *x
    cdef Topic *t
    cdef Columns parts = None, batches = None
    cdef int64_t n = 0
    cdef Buf b = Buf(NULL, 0, 0)
    isolation = ISOLATION.get(req.isolation)
    s.cols("frame")  # kinds in the order the pure path adds them
    try:
        for i in range(resp.nparts):
            x = &resp.parts[i]
            t = &resp.topics[x.topic]
            if parts is None:
                parts = s.cols("fetch_partition")
            topic_id = _topic_id(t)
            _fetch_part_head(parts, s, name, req, pq, t, pr, x.index, isolation, resp_frame, req_ts, resp_ts)
            k = req.nparts - 1  # the fetch offset: the last request partition of that key
            while k >= 0:
                if (req.parts[k].index == x.index
                        and _same_topic(&req.topics[req.parts[k].topic], pq, t, pr)):
                    break
                k -= 1
            if k >= 0:
                parts.put_i64(12, req.parts[k].offset)
            else:
                parts.put_null(12)
            parts.put_i64(13, x.error)
            parts.put_i64(14, x.hw)
            parts.put_i64(15, x.lso)
            if x.has_log_start:
                parts.put_i64(16, x.log_start)
            else:
                parts.put_null(16)
            if x.first_aborted < 0:
                parts.put_null(17)
            else:
                b.len = 0
                for j in range(x.first_aborted, x.first_aborted + x.naborted):
                    if j > x.first_aborted:
                        _add(&b, ",", 1)
                    _int(&b, resp.aborted[2 * j])
                    _add(&b, "@", 1)
                    _int(&b, resp.aborted[2 * j + 1])
                parts.put_str(17, b.data, b.len)
            if x.has_preferred:
                parts.put_i64(18, x.preferred)
            else:
                parts.put_null(18)
            if x.rec_size < 0:
                parts.put_null(19)
                parts.put_i64(20, 0)
                parts.put_i64(21, 0)
            else:
                parts.put_obj(19, x.rec_size)
                parts.put_i64(20, x.nbatches)
                parts.put_obj(21, x.truncated)
            parts.put_text(22, topic_id)
            parts.finish()
            n += 1
            if not x.nbatches:
                continue
            if batches is None:
                batches = s.cols("batch")
            for j in range(x.first, x.first + x.nbatches):
                _batch_row(batches, "fetch", s.source, resp_frame, t, pr, x.index, &resp.batches[j],
                           name, req, pq, False)
                _batch_end(batches, req_ts, resp_ts, True, x.error, False, 0, topic_id)
                n += 1
        if not resp.has_top_error or resp.top_error == 0:
            n += _omitted_rows(s, name, req, pq, resp, pr, isolation, resp_frame, req_ts, resp_ts)
    finally:
        free(b.data)
    codes = _codes(resp)
    if codes is None:
        codes = _codes_py(resp)
    _frame_row(s, name, req, pq, codes, resp.throttle, False, None, None, _partitions(req, pq),
               None, isolation, req_frame, resp_frame, req_ts, resp_ts, req_size, resp_size)
    s.rows.count += n + 1
    return 0


cdef int64_t _omitted_rows(Sink s, str name, Msg req, const uint8_t *pq, Msg resp, const uint8_t *pr,
                           isolation, resp_frame, req_ts, resp_ts) except -1:
    """summary_batches.omitted_fetch_parts: a row per request partition the response left out
    (once per topic and partition, in request order, with the last entry's fetch offset)."""
    cdef Py_ssize_t k, j
    cdef Part *x
    cdef Topic *t
    cdef Columns parts = None
    cdef int64_t n = 0
    cdef bint seen
    cdef int col
    for k in range(req.nparts):
        x = &req.parts[k]
        if _answer(req, x, pq, resp, pr) >= 0:
            continue
        t = &req.topics[x.topic]
        seen = False
        for j in range(k):
            if req.parts[j].index == x.index and _same_topic(&req.topics[req.parts[j].topic], pq, t, pq):
                seen = True
                break
        if seen:
            continue
        j = req.nparts - 1   # the fetch offset: the last request partition of that key
        while j > k:
            if req.parts[j].index == x.index and _same_topic(&req.topics[req.parts[j].topic], pq, t, pq):
                break
            j -= 1
        if parts is None:
            parts = s.cols("fetch_partition")
        _fetch_part_head(parts, s, name, req, pq, t, pq, x.index, isolation, resp_frame, req_ts, resp_ts)
        parts.put_i64(12, req.parts[j].offset)
        for col in range(13, 20):
            parts.put_null(col)
        parts.put_i64(20, 0)
        parts.put_i64(21, 0)
        parts.put_text(22, _topic_id(t))
        parts.finish()
        n += 1
    return n


include "_crows_txn.pxi"
