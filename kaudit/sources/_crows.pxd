from libc.stdint cimport uint8_t

from kaudit.protocol._cwire cimport Msg
from kaudit.sources._ccolumns cimport Columns


cdef class Sink:
    cdef object rows
    cdef bint plain
    cdef list touched   # a KeyedRows's kinds touched since its last mark (None: not one)
    cdef readonly str source
    cdef Columns cols(self, str kind)
    cdef list cols_list(self, str kind)


cdef int produce_rows(Sink s, str name, Msg req, Msg resp, const uint8_t *pr, req_frame,
                      resp_frame, req_ts, resp_ts, req_size, resp_size) except -1
cdef int fetch_rows(Sink s, str name, Msg req, Msg resp, const uint8_t *pr, req_frame,
                    resp_frame, req_ts, resp_ts, req_size, resp_size) except -1
cdef int other_rows(Sink s, str name, Msg req, Msg resp, const uint8_t *pr, req_frame,
                    resp_frame, req_ts, resp_ts, req_size, resp_size) except -1
cdef bint bases_fit(Msg req, Msg resp, const uint8_t *pr) except -1
