# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Rows of one kind built column by column in C buffers, then handed to Arrow without a
Python object per value: the compiled twin of a list of row tuples + `table_from_tuples`.

`Columns(kind, schema)` takes whole rows as tuples in schema order (`append`, what the pure
code does with its lists) and, from the compiled wire path, values one by one (`begin`,
`put_*` once per column, `finish`). `table()` returns the rows so far as an Arrow table and starts again.
Python values convert as `pyarrow.array` converts them for the types the rows hold (None, int,
float, bool, str); a value out of its column's range raises as pyarrow does."""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, INT64_MAX, INT64_MIN
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.unicode cimport PyUnicode_AsUTF8AndSize

import pyarrow as pa

cdef enum:
    T_I8, T_I16, T_I32, T_I64, T_U32, T_F64, T_BOOL, T_STR

_TYPES = {pa.int8(): (T_I8, 1), pa.int16(): (T_I16, 2), pa.int32(): (T_I32, 4),
          pa.int64(): (T_I64, 8), pa.uint32(): (T_U32, 4), pa.float64(): (T_F64, 8),
          pa.bool_(): (T_BOOL, 1), pa.string(): (T_STR, 0)}
# the range of each integer type
cdef long long LO[8]
cdef long long HI[8]
LO[T_I8], HI[T_I8] = -(1 << 7), (1 << 7) - 1
LO[T_I16], HI[T_I16] = -(1 << 15), (1 << 15) - 1
LO[T_I32], HI[T_I32] = -(1 << 31), (1 << 31) - 1
LO[T_I64], HI[T_I64] = INT64_MIN, INT64_MAX
LO[T_U32], HI[T_U32] = 0, (1 << 32) - 1


cdef class Columns:

    def __cinit__(self, str kind, schema):
        self.kind = kind
        self.schema = schema
        self.ncols = len(schema)
        self.cols = <Col *>malloc(self.ncols * sizeof(Col))
        if self.cols == NULL:
            raise MemoryError()
        memset(self.cols, 0, self.ncols * sizeof(Col))
        for i, f in enumerate(schema):
            t = _TYPES.get(f.type)
            if t is None:
                raise TypeError(f"{kind}.{f.name}: no column builder for {f.type}")
            self.cols[i].type, self.cols[i].width = t
        self._reset()

    def __dealloc__(self):
        self._free()
        free(self.cols)

    cdef void _free(self) noexcept:
        cdef int i
        for i in range(self.ncols):
            free(self.cols[i].data)
            free(self.cols[i].offs)
            self.cols[i].data = NULL
            self.cols[i].offs = NULL
        free(self.valid)
        self.valid = NULL

    cdef int _reset(self) except -1:
        self._free()
        self.n = self.cap = 0
        for i in range(self.ncols):
            self.cols[i].size = self.cols[i].cap = self.cols[i].nulls = 0
        self._grow(64)
        return 0

    cdef int _grow(self, Py_ssize_t cap) except -1:
        cdef Col *c
        cdef int i
        self.valid = <uint8_t *>_realloc(self.valid, cap * self.ncols)
        for i in range(self.ncols):
            c = &self.cols[i]
            if c.type == T_STR:
                c.offs = <int32_t *>_realloc(c.offs, (cap + 1) * sizeof(int32_t))
                if self.cap == 0:
                    c.offs[0] = 0
            else:
                c.data = <char *>_realloc(c.data, cap * c.width)
        self.cap = cap
        return 0

    def __len__(self):
        return self.n

    # ---- one row, value by value ----------------------------------------------------------

    cdef int begin(self) except -1:
        if self.n == self.cap:
            self._grow(self.cap * 2)
        # a column this row does not set is null (never garbage)
        memset(self.valid + self.n * self.ncols, 0, self.ncols)
        return 0

    cdef void put_null(self, int c) noexcept:
        pass  # begin() made every column of the row null

    cdef void put_i64(self, int c, int64_t v) noexcept:
        cdef Col *col = &self.cols[c]
        cdef char *at = col.data + self.n * col.width
        self.valid[self.n * self.ncols + c] = 1
        if col.type == T_I64:
            (<int64_t *>at)[0] = v
        elif col.type == T_I32:
            (<int32_t *>at)[0] = <int32_t>v
        elif col.type == T_I16:
            (<int16_t *>at)[0] = <int16_t>v
        elif col.type == T_U32:
            (<uint32_t *>at)[0] = <uint32_t>v
        else:
            (<int8_t *>at)[0] = <int8_t>v

    cdef void put_f64(self, int c, double v) noexcept:
        cdef Col *col = &self.cols[c]
        self.valid[self.n * self.ncols + c] = 1
        (<double *>(col.data + self.n * 8))[0] = v

    cdef void put_bool(self, int c, bint v) noexcept:
        cdef Col *col = &self.cols[c]
        self.valid[self.n * self.ncols + c] = 1
        col.data[self.n] = 1 if v else 0

    cdef int put_str(self, int c, const char *s, Py_ssize_t length) except -1:
        cdef Col *col = &self.cols[c]
        cdef Py_ssize_t cap
        if col.size + length > 0x7FFFFFFF:
            raise OverflowError(f"{self.kind}: string column over 2 GiB in one chunk")
        if col.size + length > col.cap:
            cap = max(col.cap * 2, col.size + length, 4096)
            col.data = <char *>_realloc(col.data, cap)
            col.cap = cap
        if length:
            memcpy(col.data + col.size, s, length)
        col.size += length
        col.offs[self.n + 1] = <int32_t>col.size
        self.valid[self.n * self.ncols + c] = 1
        return 0

    cdef int put_text(self, int c, object v) except -1:
        """A str (or None) into a string column."""
        cdef Py_ssize_t length
        cdef const char *s
        if v is None:
            self.put_null(c)
            return 0
        s = PyUnicode_AsUTF8AndSize(v, &length)
        return self.put_str(c, s, length)

    cdef int put_obj(self, int c, object v) except -1:
        """Any row value, converted as pyarrow.array converts it."""
        cdef int t = self.cols[c].type
        cdef int overflow = 0
        cdef long long x
        if v is None:
            self.put_null(c)
        elif t == T_STR:
            if isinstance(v, bytes):
                self.put_str(c, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v))
            elif isinstance(v, str):
                self.put_text(c, v)
            else:
                raise TypeError(f"{self.kind}.{self.schema[c].name}: expected str, got {type(v).__name__}")
        elif t == T_F64:
            self.put_f64(c, float(v))
        elif t == T_BOOL:
            if type(v) is not bool:
                raise TypeError(f"{self.kind}.{self.schema[c].name}: expected bool, got {type(v).__name__}")
            self.put_bool(c, v)
        else:
            if type(v) is bool or not isinstance(v, int):
                raise TypeError(f"{self.kind}.{self.schema[c].name}: expected int, got {type(v).__name__}")
            x = PyLong_AsLongLongAndOverflow(v, &overflow)
            if overflow or x < LO[t] or x > HI[t]:
                raise OverflowError(f"{self.kind}.{self.schema[c].name}: {v} does not fit {self.schema[c].type}")
            self.put_i64(c, x)
        return 0

    cdef void finish(self) noexcept:
        self.n += 1

    cpdef append(self, tuple row):
        """One row, a tuple in schema order (the pure path's list.append). A value refused
        leaves nothing of the row behind."""
        cdef int i
        if len(row) != self.ncols:
            raise ValueError(f"{self.kind} row of {len(row)} values, the schema has {self.ncols}")
        sizes = [self.cols[i].size for i in range(self.ncols)]
        self.begin()
        try:
            for i in range(self.ncols):
                self.put_obj(i, row[i])
        except BaseException:
            for i in range(self.ncols):
                self.cols[i].size = sizes[i]
            raise
        self.finish()

    # ---- out ------------------------------------------------------------------------------

    def table(self):
        """The rows so far as an Arrow table (this builder starts again, empty)."""
        arrays = [self._array(i) for i in range(self.ncols)]
        self._reset()
        return pa.Table.from_arrays(arrays, schema=self.schema)

    cdef object _array(self, int i):
        cdef Col *col = &self.cols[i]
        cdef Py_ssize_t n = self.n, k, w = self.ncols
        f = self.schema[i]
        col.nulls = 0
        for k in range(n):
            if not self.valid[k * w + i]:
                col.nulls += 1
                if col.type == T_STR:  # an unset string: empty at the offset it was at
                    col.offs[k + 1] = col.offs[k]
        validity = None if col.nulls == 0 else pa.py_buffer(_bits(self.valid + i, n, w))
        if col.type == T_STR:
            offs = PyBytes_FromStringAndSize(<char *>col.offs, (n + 1) * sizeof(int32_t))
            data = PyBytes_FromStringAndSize(col.data, col.size) if col.size else b""
            return pa.Array.from_buffers(f.type, n, [validity, pa.py_buffer(offs), pa.py_buffer(data)],
                                         null_count=col.nulls)
        if col.type == T_BOOL:
            data = _bits(<uint8_t *>col.data, n, 1)
        else:
            data = PyBytes_FromStringAndSize(col.data, n * col.width)
        return pa.Array.from_buffers(f.type, n, [validity, pa.py_buffer(data)], null_count=col.nulls)


cdef bytes _bits(const uint8_t *flags, Py_ssize_t n, Py_ssize_t stride):
    """n bytes (0/1, `stride` apart) packed into Arrow's bitmap (least significant bit first)."""
    cdef bytes out = PyBytes_FromStringAndSize(NULL, (n + 7) // 8)
    cdef uint8_t *b = <uint8_t *>PyBytes_AS_STRING(out)
    cdef Py_ssize_t i
    memset(b, 0, (n + 7) // 8)
    for i in range(n):
        if flags[i * stride]:
            b[i >> 3] |= 1 << (i & 7)
    return out


cdef void *_realloc(void *p, size_t size) except NULL:
    cdef void *q = realloc(p, size if size else 1)
    if q == NULL:
        raise MemoryError()
    return q
