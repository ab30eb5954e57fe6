# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled capture decode: the twin of the loop of `pcap._decode` and of the hot half of
`Conversation` (feed, _frames, _request, _response) and of `WireRows._produce`/`_fetch`.

Capture events come from the compiled capture walk (kaudit/capture/_cstreams: an in-order
segment needs no event object); a Kafka connection's bytes go to the compiled frame splitter;
a complete Produce or Fetch frame is walked in C (kaudit/protocol/_cwire) and its rows are
written straight into the column builders (kaudit/sources/_ccolumns). Anything else - another
API, a request the C walk gives up on, SASL, a frame cut by a gap, a connection not yet known
to be Kafka - goes to the pure methods of the same objects, which define the rows. `Direction`
is conversation._Direction with its chunks in C."""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, INT64_MAX
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8

from kaudit.capture._cstreams cimport Conn, Walker
from kaudit.protocol._cframing cimport Splitter
from kaudit.protocol._cwire cimport Msg, parse_request, parse_response
from kaudit.sources._crows cimport Sink, bases_fit, fetch_rows, other_rows, produce_rows

from kaudit.capture.events import ConnOpen, Diverted, StreamData
from kaudit.protocol.wire.framing import Frame
from kaudit.sources.conversation import Exchange

cdef extern from "_kafka_c.h":
    int32_t kd_i32(const uint8_t *p) nogil

DEF EV_END = 0
DEF EV_DATA = 1
DEF EV_OBJ = 2
DEF PRODUCE = 0
DEF FETCH = 1


# ---- conversation._Direction -------------------------------------------------------------

cdef class Direction:
    """conversation._Direction: where the bytes of one direction came from."""
    cdef public object splitter
    cdef public list held
    cdef public int64_t bytes
    cdef int64_t *c_start
    cdef int64_t *c_end
    cdef int64_t *c_last
    cdef double *c_ts
    cdef object tsnone   # chunks whose time is None (stitched captures): their start offsets
    cdef Py_ssize_t head, count, cap

    def __init__(self):
        self.splitter = None
        self.held = []
        self.bytes = 0

    def __dealloc__(self):
        free(self.c_start)
        free(self.c_end)
        free(self.c_last)
        free(self.c_ts)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self.cap * 2 + 16, i, j
        cdef int64_t *s = <int64_t *>realloc(NULL, cap * sizeof(int64_t))
        cdef int64_t *e = <int64_t *>realloc(NULL, cap * sizeof(int64_t))
        cdef int64_t *l = <int64_t *>realloc(NULL, cap * sizeof(int64_t))
        cdef double *t = <double *>realloc(NULL, cap * sizeof(double))
        if s == NULL or e == NULL or l == NULL or t == NULL:
            free(s)
            free(e)
            free(l)
            free(t)
            raise MemoryError()
        for i in range(self.count):
            j = (self.head + i) % self.cap
            s[i], e[i], l[i], t[i] = self.c_start[j], self.c_end[j], self.c_last[j], self.c_ts[j]
        free(self.c_start)
        free(self.c_end)
        free(self.c_last)
        free(self.c_ts)
        self.c_start, self.c_end, self.c_last, self.c_ts = s, e, l, t
        self.head, self.cap = 0, cap
        return 0

    cpdef add(self, int64_t start, int64_t end, first, int64_t last, ts):
        cdef Py_ssize_t j
        if self.count == self.cap:
            self._grow()
        j = (self.head + self.count) % self.cap
        self.c_start[j], self.c_end[j], self.c_last[j] = start, end, last
        if ts is None:
            if self.tsnone is None:
                self.tsnone = set()
            self.tsnone.add((start, end))
            self.c_ts[j] = 0.0
        else:
            self.c_ts[j] = ts
        self.count += 1

    cdef inline int add_c(self, int64_t start, int64_t end, int64_t last, double ts) except -1:
        cdef Py_ssize_t j
        if self.count == self.cap:
            self._grow()
        j = (self.head + self.count) % self.cap
        self.c_start[j], self.c_end[j], self.c_last[j], self.c_ts[j] = start, end, last, ts
        self.count += 1
        return 0

    cdef tuple _at(self, Py_ssize_t j):
        ts = self.c_ts[j]
        if self.tsnone is not None and (self.c_start[j], self.c_end[j]) in self.tsnone:
            ts = None
        return self.c_last[j], ts

    cpdef tuple locate(self, int64_t start, int64_t end):
        """(frame number, time) of the packet carrying the last byte of [start, end)."""
        cdef Py_ssize_t i, j
        while self.count > 1 and self.c_end[self.head] <= start:
            self.head = (self.head + 1) % self.cap
            self.count -= 1
        for i in range(self.count):
            j = (self.head + i) % self.cap
            if self.c_end[j] >= end:
                return self._at(j)
        if self.count:
            return self._at((self.head + self.count - 1) % self.cap)
        return None, None


# ---- one connection's conversation, as the loop sees it ------------------------------------

DEF UNDECIDED = 0
DEF KAFKA = 1
DEF OTHER = 2

cdef class _Conv:
    cdef object conv, options, pending
    cdef Sink sink
    cdef int mode, client_dir
    cdef bint fast        # Produce/Fetch exchanges go the C way (not --deep, a WireRows sink)
    cdef int64_t max_bb
    cdef Direction d0, d1
    cdef Splitter s0, s1
    cdef str name

    def __init__(self, conv, Sink sink):
        self.conv = conv
        self.sink = sink
        self.mode = UNDECIDED
        self.check()

    cdef int check(self) except -1:
        """The conversation's protocol, once decided: Kafka with the compiled parts, or not."""
        conv = self.conv
        protocol = conv.protocol
        if protocol is None:
            return 0
        self.mode = OTHER
        d0, d1 = conv.dirs
        if protocol != "kafka" or type(d0) is not Direction or type(d1) is not Direction:
            return 0
        if type(d0.splitter) is not Splitter or type(d1.splitter) is not Splitter:
            return 0
        self.mode = KAFKA
        self.d0, self.d1 = d0, d1
        self.s0, self.s1 = d0.splitter, d1.splitter
        self.client_dir = conv.client_dir
        self.options = conv.options
        self.pending = conv.pending
        self.max_bb = self.options.max_batch_bytes
        # the C rows go to the decode's own WireRows, built column by column
        self.fast = (not self.options.deep and conv.sink is self.sink.rows
                     and getattr(self.sink.rows, "columns", None) is not None)
        self.name = conv.name
        return 0


# ---- the loop -------------------------------------------------------------------------------

def events_loop(streams, session, rows, fragments, summary, int flush_rows):
    """pcap._decode's loop over the capture events (yields (kind, table) chunks, as it does)."""
    cdef Walker w = Walker(streams)
    cdef int k
    cdef Conn conn
    cdef _Conv cs
    cdef object owner = w.mv
    cdef bint zero_copy = w.mv.readonly
    cdef Sink sink = Sink(rows)
    convs = session.convs
    try:
        while True:
            k = w.next_event()
            if k == EV_DATA:
                conn = w.d_conn
                cs = conn.user
                if cs is None:
                    cs = conn.user = _state(convs[conn.conn_id], sink)
                _walk_data(w, cs, owner, zero_copy)
            elif k == EV_OBJ:
                ev = w.obj
                t = type(ev)
                if t is StreamData:
                    _data(_state(convs[ev.conn_id], sink), ev)
                elif t is Diverted:
                    if fragments.add(ev):
                        yield from fragments.tables()
                else:
                    session.event(ev)
                    if t is ConnOpen:
                        summary.connections += 1
            else:
                return
            if rows.count >= flush_rows:
                yield from rows.tables()
    finally:
        w.stop()
        w.release()


cdef inline int _walk_data(Walker w, _Conv cs, object owner, bint zero_copy) except -1:
    """Conversation.data of the walk's last EV_DATA (an in-order segment, in the mapping
    `owner`): _feed, with C values on the Kafka path."""
    cdef Direction d
    cdef Splitter sp
    if zero_copy and cs.mode == KAFKA:
        d = cs.d0 if w.d_dir == 0 else cs.d1
        sp = cs.s0 if w.d_dir == 0 else cs.s1
        d.bytes += w.d_len
        d.add_c(w.d_off, w.d_off + w.d_len, w.frame, w.ts)
        evs = sp.cfeed(owner, w.d_start, w.buf + w.d_start, w.d_len, True)
        if evs:
            _frames(cs, w.d_dir, evs)
    elif zero_copy:
        _feed(cs, w.d_dir, w.d_off, owner, w.d_start, w.buf + w.d_start, w.d_len, w.frame, w.frame, w.ts)
    else:
        _feed(cs, w.d_dir, w.d_off, owner, w.d_start, NULL, w.d_len, w.frame, w.frame, w.ts)
    return 0


cdef _Conv _state(conv, Sink sink):
    """The compiled state of a conversation (made once)."""
    cs = conv.cstate
    if cs is None:
        cs = conv.cstate = _Conv(conv, sink)
    return cs


cdef int _data(_Conv cs, ev) except -1:
    """Conversation.data of a StreamData event."""
    cdef const uint8_t[::1] view
    data = ev.data
    if type(data) is memoryview and data.readonly and data.c_contiguous and len(data):
        view = data
        return _feed(cs, ev.direction, ev.stream_offset, data, 0, &view[0], view.shape[0],
                     ev.first_frame, ev.last_frame, ev.ts)
    cs.conv.data(ev)
    if cs.mode == UNDECIDED:
        cs.check()
    return 0


cdef int _feed(_Conv cs, int direction, int64_t off, object owner, Py_ssize_t at,
               const uint8_t *p, Py_ssize_t n, first, int64_t last, ts) except -1:
    """Conversation.feed of owner[at:at + n] (at p in memory; NULL: not read-only, the pure
    method copies it)."""
    cdef Direction d
    cdef Splitter sp
    if cs.mode == KAFKA and p != NULL:
        d = cs.d0 if direction == 0 else cs.d1
        sp = cs.s0 if direction == 0 else cs.s1
        d.bytes += n
        d.add(off, off + n, first, last, ts)
        evs = sp.cfeed(owner, at, p, n, True)
        if evs:
            _frames(cs, direction, evs)
        return 0
    cs.conv.feed(direction, off, owner[at:at + n], first, last, ts)
    if cs.mode == UNDECIDED:
        cs.check()
    return 0


# ---- the loop of one process of a parallel decode (sources/pcap_parallel) --------------------

cdef object _NOT_MINE = object()  # Conn.user of a connection another process decodes


def owned_loop(streams, session, rows, fragments, summary, int part, owner, Py_ssize_t hand_rows,
               Py_ssize_t quiet):
    """events_loop for one process of a parallel decode: every process walks the whole capture
    (the same events, numbered alike from 0) but decodes only the connections with
    `owner(conn_id) == part`, skipping the others' segments before any byte is looked at; the
    rows each event adds are logged with its number (`rows.mark`, a pcap_parallel.KeyedRows).
    Yields an event number when the rows so far are to be handed on (`hand_rows` rows, or
    `quiet` events since the last hand-over), and the chunks of `fragments` (None: diverted
    segments are another process's)."""
    cdef Walker w = Walker(streams)
    cdef int k
    cdef Conn conn
    cdef object buf_owner = w.mv
    cdef bint zero_copy = w.mv.readonly
    cdef Sink sink = Sink(rows)
    cdef Py_ssize_t number = -1, handed = 0
    cdef list touched = rows._touched
    cdef bint mine
    convs = session.convs
    mark = rows.mark
    event = session.event
    try:
        while True:
            k = w.next_event()
            if k == EV_END:
                return
            number += 1
            mine = False
            if k == EV_DATA:
                conn = w.d_conn
                u = conn.user
                if u is None:
                    conv = convs.get(conn.conn_id)
                    u = conn.user = _NOT_MINE if conv is None else _state(conv, sink)
                if u is not _NOT_MINE:
                    mine = True
                    _walk_data(w, <_Conv>u, buf_owner, zero_copy)
            else:
                ev = w.obj
                t = type(ev)
                if t is Diverted:
                    if fragments is not None and fragments.add(ev):
                        yield from fragments.tables()
                elif t is ConnOpen:
                    summary.connections += 1
                    if owner(ev.conn_id) == part:
                        mine = True
                        event(ev, number)
                elif ev.conn_id in convs:
                    mine = True
                    if t is StreamData:
                        _data(_state(convs[ev.conn_id], sink), ev)
                    else:
                        event(ev, number)
            if mine and len(touched):
                mark(number)
            if rows.count >= hand_rows or number - handed >= quiet:
                handed = number
                yield number
    finally:
        w.stop()
        w.release()


cdef int _frames(_Conv cs, int direction, list events) except -1:
    """Conversation._frames, with Produce, Fetch, Metadata, AddPartitionsToTxn and EndTxn
    frames the C way. Frames of the splitter's in-step path come as (offset, size, payload)
    tuples (cfeed's light form: every one complete); a Frame is built only for the pure path."""
    cdef bint is_request = direction == cs.client_dir
    cdef Direction d = cs.d0 if direction == 0 else cs.d1
    cdef int64_t offset, size
    for ev in events:
        t = type(ev)
        if t is tuple:
            offset, size, payload = ev
            frame_no, ts = d.locate(offset, offset + 4 + size)
            if is_request:
                _request(cs, offset, size, payload, None, frame_no, ts)
            else:
                _response(cs, offset, size, payload, None, frame_no, ts)
        elif t is Frame:
            end = ev.offset + 4 + (ev.size if ev.complete else len(ev.payload))
            frame_no, ts = d.locate(ev.offset, end)
            if not ev.complete:  # cut by a gap: the pure path says what it is
                cs.conv._frames(direction, [ev])
            elif is_request:
                _request(cs, ev.offset, ev.size, ev.payload, ev, frame_no, ts)
            else:
                _response(cs, ev.offset, ev.size, ev.payload, ev, frame_no, ts)
        else:
            cs.conv._frames(direction, [ev])
    return 0


cdef object _frame_of(int64_t offset, int64_t size, payload, frame):
    """The Frame event the pure methods take (built when the light form came)."""
    return frame if frame is not None else Frame(offset, size, payload)


cdef int _request(_Conv cs, int64_t offset, int64_t size, payload, frame, frame_no, ts) except -1:
    """Conversation._request of a complete frame, the C way when the C walk takes it."""
    conv = cs.conv
    cdef const uint8_t[::1] view
    cdef Msg m = None
    if cs.fast and not conv.sasl_tokens:
        view = payload
        if view.shape[0]:
            m = parse_request(payload, &view[0], view.shape[0], cs.max_bb)
    if m is None:
        conv._request(_frame_of(offset, size, payload, frame), frame_no, ts)
        return 0
    conv.requests += 1
    if m.correlation_id > conv.last_corr:
        conv.last_corr = m.correlation_id
    if m.api_key == PRODUCE and m.acks == 0:  # acks=0: the broker sends no response, by design
        produce_rows(cs.sink, cs.name, m, None, NULL, frame_no, None, ts, None, size, None)
        return 0
    old = cs.pending.pop(m.correlation_id, None)
    if old is not None:  # a reused correlation id: the earlier request got no answer
        conv.unanswered += 1
        conv.sink.exchange(conv, Exchange(old[0], None, old[1], None, old[2], None, old[3], None, old[4], None))
    cs.pending[m.correlation_id] = (m, frame_no, ts, size, True)
    return 0


cdef int _response(_Conv cs, int64_t offset, int64_t size, payload, frame, frame_no, ts) except -1:
    """Conversation._response of a complete frame: the C way for the answer to a request the
    C walk took."""
    conv = cs.conv
    cdef const uint8_t[::1] view
    cdef Msg req, resp = None
    cdef const uint8_t *p = NULL
    if cs.fast and not conv.sasl_replies:
        view = payload
        if view.shape[0] >= 4:
            p = &view[0]
            ent = cs.pending.get(kd_i32(p))
            if ent is not None and type(ent[0]) is Msg:
                req = ent[0]
                resp = parse_response(req, p, view.shape[0], cs.max_bb)
                if resp is not None and req.api_key == PRODUCE and not bases_fit(req, resp, p):
                    resp = None
    if resp is None:
        conv._response(_frame_of(offset, size, payload, frame), frame_no, ts)
        return 0
    conv.responses += 1
    del cs.pending[resp.correlation_id]
    if req.api_key == PRODUCE:
        produce_rows(cs.sink, cs.name, req, resp, p, ent[1], frame_no, ent[2], ts, ent[3], size)
    elif req.api_key == FETCH:
        fetch_rows(cs.sink, cs.name, req, resp, p, ent[1], frame_no, ent[2], ts, ent[3], size)
    else:
        other_rows(cs.sink, cs.name, req, resp, p, ent[1], frame_no, ent[2], ts, ent[3], size)
    return 0


