from libc.stdint cimport int32_t, int64_t, uint8_t


cdef struct Col:
    int type
    int width               # bytes per value (fixed-width types)
    char *data              # values, or a string column's bytes
    Py_ssize_t size, cap    # a string column's bytes used / allocated
    int32_t *offs           # a string column's offsets (rows + 1; a null row's: fixed up at the end)
    Py_ssize_t nulls


cdef class Columns:
    cdef readonly str kind
    cdef object schema
    cdef int ncols
    cdef Col *cols
    cdef uint8_t *valid     # row by row: one byte per column, 1 when the row set it
    cdef Py_ssize_t n, cap

    cdef int begin(self) except -1
    cdef void put_null(self, int c) noexcept
    cdef void put_i64(self, int c, int64_t v) noexcept
    cdef void put_f64(self, int c, double v) noexcept
    cdef void put_bool(self, int c, bint v) noexcept
    cdef int put_str(self, int c, const char *s, Py_ssize_t length) except -1
    cdef int put_text(self, int c, object v) except -1
    cdef int put_obj(self, int c, object v) except -1
    cdef void finish(self) noexcept
    cpdef append(self, tuple row)
    cdef void _free(self) noexcept
    cdef int _reset(self) except -1
    cdef int _grow(self, Py_ssize_t cap) except -1
    cdef object _array(self, int i)
