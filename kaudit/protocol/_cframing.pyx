# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of `framing.FrameSplitter`: the same attributes, events and behaviour. The
in-step path - whole frames taken from the bytes fed, a frame in progress completed, its size
checked - is C here; every other state (a frame cut by a gap, a search for a plausible header
after lost bytes or a bad size) runs the pure class's own methods on this object."""

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF

cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject **b, Py_ssize_t size) except -1

from kaudit.protocol.wire import framing as _py
from kaudit.protocol.wire.framing import BadSize, Frame

cdef FS = _py.FrameSplitter
DEF SYNC = 0
DEF DRAIN = 1
DEF RESYNC = 2
DEF ACC_MIN = 65536


cdef inline int32_t _i32(const uint8_t *p) noexcept nogil:
    return <int32_t>((<unsigned>p[0] << 24) | (<unsigned>p[1] << 16) | (<unsigned>p[2] << 8) | p[3])


cdef class Splitter:
    """framing.FrameSplitter, compiled (see the module docstring)."""

    def __init__(self, direction="request", *, max_size=_py.DEFAULT_MAX_FRAME, synced=True,
                 correlation_ids=None, check=None):
        FS.__init__(self, direction, max_size=max_size, synced=synced,
                    correlation_ids=correlation_ids, check=check)

    @property
    def offset(self):
        return self._end

    # The pure methods see one bytearray, `_buf`. A frame arriving over many segments is
    # gathered in `_acc` instead (a bytes object grown geometrically, never beyond what arrived
    # times two, then trimmed to the frame: its payload without a copy); reading `_buf` turns
    # it back into the bytearray.
    @property
    def _buf(self):
        if self._acc is not None:
            self._b = PyByteArray_FromStringAndSize(PyBytes_AS_STRING(self._acc), self._acc_len)
            self._acc = None
        return self._b

    @_buf.setter
    def _buf(self, value):
        self._acc = None
        self._b = value

    @property
    def synced(self):
        return self._state != RESYNC

    # the pure class's methods for everything off the in-step path
    def gap(self, length):
        return FS.gap(self, length)

    def finish(self):
        return FS.finish(self)

    def _restart(self, offset, reason, synced):
        return FS._restart(self, offset, reason, synced)

    def _search(self):
        return FS._search(self)

    def _compact(self):
        return FS._compact(self)

    def feed(self, data):
        t = type(data)
        if t is not bytes and (t is not memoryview or not data.readonly or data.format != "B"):
            # frames may be slices of `data`: only of immutable bytes (a copy otherwise)
            data = bytes(data)
        elif t is memoryview and not data.c_contiguous:
            data = bytes(data)
        cdef const uint8_t[::1] view = data
        cdef Py_ssize_t n = view.shape[0]
        if not n:
            return []
        return self.cfeed(data, 0, &view[0], n, False)

    cdef list cfeed(self, object owner, Py_ssize_t at, const uint8_t *p, Py_ssize_t n, bint light):
        """`feed` of the n bytes at p, which are owner[at:at + n] (owner: immutable bytes or a
        read-only byte memoryview; frames found whole in them are slices of it). `light`: the
        frames found on the in-step path come as (offset, size, payload) tuples, not Frame
        objects (the compiled consumer's form; every other event is as `feed` gives it)."""
        cdef list events
        cdef Py_ssize_t pos, base, k
        cdef int32_t size
        if n <= 0:
            return []
        if self._state == DRAIN:
            return FS.feed(self, owner[at:at + n])
        if self._acc is not None:
            if n < self._need:
                self._end += n
                self._need -= n
                self._acc_add(p, n)
                return []
            k = self._need  # the frame gathered in _acc is complete
            self._end += k
            self._acc_add(p, k)
            events = [self._acc_frame(light)]
            if n > k:
                events.extend(self.cfeed(owner, at + k, p + k, n - k, light))
            return events
        self._end += n
        if n < self._need:  # the frame in progress is still incomplete: nothing to report
            self._need -= n
            _append(self._b, p, n)
            return []
        events = []
        if self._state == SYNC and self._pos == PyByteArray_GET_SIZE(self._b):
            # nothing buffered: whole frames are taken from the bytes as they are (no copy)
            base = self._end - n
            pos = 0
            while n - pos >= 4:
                size = _i32(p + pos)
                if size < 0 or size > self.max_size or n - pos - 4 < size:
                    break
                payload = owner[at + pos + 4:at + pos + 4 + size]
                events.append((base + pos, size, payload) if light else _new_frame(base + pos, size, payload))
                pos += 4 + size
            self._base, self._pos = base + pos, 0
            if pos == n:
                self._b = bytearray()
                self._need = 0
                return events
            if n - pos >= 4 and size >= 0 and size <= self.max_size:
                # a frame whose size is known begins here and goes on in later segments
                self._b = bytearray()
                self._acc_start(p + pos, n - pos, size)
                return events
            self._b = PyByteArray_FromStringAndSize(<const char *>p + pos, n - pos)
            self._run(events)
            return events
        _append(self._b, p, n)
        self._run(events)
        return events

    cdef int _acc_start(self, const uint8_t *p, Py_ssize_t n, int32_t size) except -1:
        """Gather the frame of `size` whose first n bytes (size field included) are at p."""
        cdef Py_ssize_t cap = min(<Py_ssize_t>size + 4, max(2 * n, ACC_MIN))
        self._acc = PyBytes_FromStringAndSize(NULL, cap)
        memcpy(PyBytes_AS_STRING(self._acc), p, n)
        self._acc_len = n
        self._acc_size = size
        self._need = size + 4 - n
        self._pos = 0
        return 0

    cdef int _acc_add(self, const uint8_t *p, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap = len(self._acc), want = self._acc_len + n
        cdef PyObject *o
        if want > cap:
            cap = min(<Py_ssize_t>self._acc_size + 4, max(2 * cap, want))
            o = <PyObject *>self._acc
            Py_INCREF(self._acc)
            self._acc = None  # the resize needs the only reference: ours, now
            _PyBytes_Resize(&o, cap)  # takes ours, gives one to the resized object
            self._acc = <object>o
            Py_DECREF(self._acc)
        memcpy(PyBytes_AS_STRING(self._acc) + self._acc_len, p, n)
        self._acc_len = want
        return 0

    cdef object _acc_frame(self, bint light):
        """The gathered frame, complete: its Frame (light: tuple); the buffer is empty again."""
        acc = self._acc
        self._acc = None
        self._b = bytearray()
        frame = ((self._base, self._acc_size, memoryview(acc)[4:]) if light
                 else _new_frame(self._base, self._acc_size, memoryview(acc)[4:]))
        self._base += 4 + self._acc_size
        self._pos = 0
        self._need = 0
        return frame

    def _run(self, list events):
        cdef bytearray buf = self._buf
        cdef Py_ssize_t pos, avail
        cdef int32_t size
        self._need = 0
        while self._state == SYNC:
            pos = self._pos
            avail = PyByteArray_GET_SIZE(buf) - pos
            if avail < 4:
                self._need = 4 - avail
                break
            size = _i32(<const uint8_t *>PyByteArray_AS_STRING(buf) + pos)
            if size < 0 or size > self.max_size:
                events.append(BadSize(self._base + pos, size))
                self._state = RESYNC
                self._skip_start = self._base + pos
                self._skip_reason = "bad_size"
                self._scan = pos + 1
                return FS._run(self, events)  # the search, and whatever follows it
            if avail < 4 + size:
                self._need = 4 + size - avail
                break
            if pos == 0 and avail == 4 + size:
                # the buffer is this frame: handed over whole, a new buffer takes its place
                events.append(_new_frame(self._base, size, memoryview(buf).toreadonly()[4:]))
                self._base += avail
                buf = self._b = bytearray()
                self._pos = 0
                continue
            events.append(_new_frame(self._base + pos, size, bytes(buf[pos + 4:pos + 4 + size])))
            self._pos = pos + 4 + size
        if self._state != SYNC:
            return FS._run(self, events)
        self._compact()


cdef object _new_frame(int64_t offset, int64_t size, object payload):
    """Frame(offset, size, payload): the dataclass's fields set without its Python __init__."""
    f = _FRAME_NEW(Frame)
    f.offset = offset
    f.size = size
    f.payload = payload
    f.complete = True
    f.lost = 0
    return f


cdef object _FRAME_NEW = Frame.__new__


cdef int _append(bytearray buf, const uint8_t *p, Py_ssize_t n) except -1:
    cdef Py_ssize_t old = PyByteArray_GET_SIZE(buf)
    PyByteArray_Resize(buf, old + n)
    memcpy(PyByteArray_AS_STRING(buf) + old, p, n)
    return 0
