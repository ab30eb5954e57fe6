from libc.stdint cimport int32_t, int64_t, uint8_t


cdef class Splitter:
    cdef public object direction, _check, _prefilter, _skip_reason, _d_prefix
    cdef bytearray _b
    cdef bytes _acc
    cdef Py_ssize_t _acc_len
    cdef int32_t _acc_size
    cdef public int64_t max_size, _lookahead, _base, _pos, _end, _state, _skip_start, _scan
    cdef public int64_t _need, _d_offset, _d_size, _d_remaining, _d_lost
    cdef list cfeed(self, object owner, Py_ssize_t at, const uint8_t *p, Py_ssize_t n, bint light)
    cdef int _acc_start(self, const uint8_t *p, Py_ssize_t n, int32_t size) except -1
    cdef int _acc_add(self, const uint8_t *p, Py_ssize_t n) except -1
    cdef object _acc_frame(self, bint light)
