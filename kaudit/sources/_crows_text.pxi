# The pieces of a row the pure path builds with Python: part of _crows.pyx (included). Strings
# written byte for byte as the pure path writes them (the frame's partitions, its
# partition_errors JSON, the error codes), a topic's key and text, the latency's rounding, and
# the typed column writes shared by the row writers.

# ---- strings built in C -----------------------------------------------------------------------

cdef struct Buf:
    char *data
    Py_ssize_t len, cap


cdef int _add(Buf *b, const char *s, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef char *p
    if b.len + n > b.cap:
        cap = max(b.cap * 2, b.len + n, 256)
        p = <char *>realloc(b.data, cap)
        if p == NULL:
            raise MemoryError()
        b.data, b.cap = p, cap
    memcpy(b.data + b.len, s, n)
    b.len += n
    return 0


cdef int _int(Buf *b, int64_t v) except -1:
    """str(v), in decimal."""
    cdef char tmp[24]
    cdef int i = 24
    cdef uint64_t u = <uint64_t>v if v >= 0 else <uint64_t>0 - <uint64_t>v
    while True:
        i -= 1
        tmp[i] = 48 + <char>(u % 10)
        u //= 10
        if not u:
            break
    if v < 0:
        i -= 1
        tmp[i] = 45
    return _add(b, tmp + i, 24 - i)


cdef bint _plain_json(const uint8_t *s, Py_ssize_t n) noexcept:
    """json.dumps writes the string as it is between quotes (printable ASCII, no quote or
    backslash)."""
    cdef Py_ssize_t i
    for i in range(n):
        if s[i] < 0x20 or s[i] >= 0x7F or s[i] == 34 or s[i] == 92:
            return False
    return True


cdef int _topic_into(Buf *b, Topic *t, const uint8_t *p) except -1:
    """summary_batches._topic as f-string text: the name, else the id, else "None"."""
    if t.name_len >= 0:
        return _add(b, <const char *>p + t.name, t.name_len)
    if t.id_zero:
        return _add(b, "None", 4)
    text = uuid_text(t.id).encode("ascii")
    return _add(b, text, len(text))


cdef object _text(Buf *b):
    return PyUnicode_DecodeUTF8(b.data, b.len, NULL) if b.len else ""


# ---- shared pieces ------------------------------------------------------------------------------

cdef inline bint _same_topic(Topic *a, const uint8_t *pa, Topic *b, const uint8_t *pb) noexcept:
    """The topics are the same key (summary_batches._tkey: the name, else the id)."""
    if a.name_len >= 0 or b.name_len >= 0:
        return (a.name_len == b.name_len
                and memcmp(pa + a.name, pb + b.name, a.name_len) == 0)
    if a.id_zero or b.id_zero:
        return a.id_zero and b.id_zero
    return memcmp(a.id, b.id, 16) == 0


cdef object _topic_id(Topic *t):
    """The topic_id field of versions naming topics by id (else None)."""
    if t.name_len >= 0 or t.id_zero:
        return None
    return uuid_text(t.id)


cdef Py_ssize_t _answer(Msg req, Part *x, const uint8_t *pq, Msg resp, const uint8_t *pr) noexcept:
    """The last response partition with the request partition's topic and index, or -1."""
    cdef Py_ssize_t i = resp.nparts - 1
    while i >= 0:
        if (resp.parts[i].index == x.index
                and _same_topic(&req.topics[x.topic], pq, &resp.topics[resp.parts[i].topic], pr)):
            return i
        i -= 1
    return -1


cdef bint bases_fit(Msg req, Msg resp, const uint8_t *pr) except -1:
    """Every response_base_offset the rows would carry fits an int64 (else the pure path
    says what happens)."""
    cdef const uint8_t[::1] qv = req.payload
    cdef Py_ssize_t i, a, j
    cdef int64_t base
    cdef Part *x
    for i in range(req.nparts):
        x = &req.parts[i]
        if not x.nbatches:
            continue
        a = _answer(req, x, &qv[0], resp, pr)
        if a < 0:
            continue
        base = resp.parts[a].offset
        for j in range(x.first, x.first + x.nbatches):
            if base >= 0:
                if req.batches[j].lod >= 0 and base > INT64_MAX - 1 - <int64_t>req.batches[j].lod:
                    return False
                base = base + req.batches[j].lod + 1
    return True


cdef double _round3(double x) except? -1:
    """round(x, 3) as Python computes it (the decimal nearest, ties to even, on x's exact
    value). Far from a tie, the product x * 1000 rounded tells; within a few ulps of one,
    Python's own round decides."""
    cdef double y, f, d
    if fabs(x) < 1e9:
        y = x * 1000.0
        f = floor(y)
        d = y - f
        if fabs(d - 0.5) > fabs(y) * 1e-15 + 1e-300:
            if d > 0.5:
                f += 1.0
            return copysign(0.0, x) if f == 0.0 else f / 1000.0
    return round(x, 3)


def round3(double x):
    """_round3, for the tests (it must equal round(x, 3))."""
    return _round3(x)


cdef int _latency(Columns c, int col, req_ts, resp_ts) except -1:
    """round((resp_ts - req_ts) * 1000.0, 3) (null without both times)."""
    if req_ts is None or resp_ts is None:
        c.put_null(col)
    else:
        c.put_f64(col, _round3((<double>resp_ts - <double>req_ts) * 1000.0))
    return 0


cdef int _num(Columns c, int col, object v) except -1:
    """A frame number, size or time (maybe None)."""
    if v is None:
        c.put_null(col)
    elif type(v) is float:
        c.put_f64(col, v)
    else:
        c.put_obj(col, v)  # an int: range-checked for its column
    return 0


cdef int _opt_str(Columns c, int col, const uint8_t *p, Py_ssize_t at, Py_ssize_t length) except -1:
    if length < 0:
        c.put_null(col)
        return 0
    return c.put_str(col, <const char *>p + at, length)


cdef object _codes(Msg resp):
    """",".join of summary.error_codes: distinct non-zero codes in order of appearance."""
    cdef int16_t seen[64]
    cdef int n = 0, k
    cdef Py_ssize_t i
    cdef int16_t e
    cdef Buf b = Buf(NULL, 0, 0)
    try:
        for i in range(-1, resp.nparts):
            if i < 0:
                if not resp.has_top_error:
                    continue
                e = resp.top_error
            else:
                e = resp.parts[i].error
            if not e:
                continue
            for k in range(n):
                if seen[k] == e:
                    break
            else:
                if n == 64:
                    return None  # very many: the caller's Python does it
                seen[n] = e
                n += 1
                if b.len:
                    _add(&b, ",", 1)
                _int(&b, e)
        return _text(&b)
    finally:
        free(b.data)


cdef object _partitions(Msg req, const uint8_t *pq):
    """The frame's partitions: topic-partition of every request partition, in order."""
    cdef Buf b = Buf(NULL, 0, 0)
    cdef Py_ssize_t i
    if not req.nparts:
        return None
    try:
        for i in range(req.nparts):
            if i:
                _add(&b, ",", 1)
            _topic_into(&b, &req.topics[req.parts[i].topic], pq)
            _add(&b, "-", 1)
            _int(&b, req.parts[i].index)
        return _text(&b)
    finally:
        free(b.data)


cdef object _partition_errors(Msg resp, const uint8_t *pr):
    """wire_rows._partition_errors_json of [(None, topic, index, error_code)], or None."""
    cdef Buf b = Buf(NULL, 0, 0)
    cdef Py_ssize_t i
    cdef Topic *t
    if not resp.nparts:
        return None
    try:
        _add(&b, "[", 1)
        for i in range(resp.nparts):
            t = &resp.topics[resp.parts[i].topic]
            _add(&b, "[null, " if i == 0 else ", [null, ", 7 if i == 0 else 9)
            if t.name_len >= 0:
                if not _plain_json(pr + t.name, t.name_len):
                    return _partition_errors_py(resp, pr)
                _add(&b, '"', 1)
                _add(&b, <const char *>pr + t.name, t.name_len)
                _add(&b, '"', 1)
            elif t.id_zero:
                _add(&b, "null", 4)
            else:
                _add(&b, '"', 1)
                _topic_into(&b, t, pr)
                _add(&b, '"', 1)
            _add(&b, ", ", 2)
            _int(&b, resp.parts[i].index)
            _add(&b, ", ", 2)
            _int(&b, resp.parts[i].error)
            _add(&b, "]", 1)
        _add(&b, "]", 1)
        return _text(&b)
    finally:
        free(b.data)


cdef object _topic_text(Topic *t, const uint8_t *p):
    if t.name_len >= 0:
        return PyUnicode_DecodeUTF8(<const char *>p + t.name, t.name_len, NULL)
    return None if t.id_zero else uuid_text(t.id)


cdef object _partition_errors_py(Msg resp, const uint8_t *pr):
    return _partition_errors_json([(None, _topic_text(&resp.topics[resp.parts[i].topic], pr),
                                    resp.parts[i].index, resp.parts[i].error)
                                   for i in range(resp.nparts)])


cdef object _codes_py(Msg resp):
    seen = {}
    if resp.has_top_error and resp.top_error:
        seen[resp.top_error] = None
    for i in range(resp.nparts):
        if resp.parts[i].error:
            seen.setdefault(resp.parts[i].error, None)
    return ",".join([str(c) for c in seen])
