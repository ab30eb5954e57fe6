from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t

# a connection key: source address (16), destination address (16), ports (4), pad, IP version
cdef enum:
    KEY_LEN = 40

cdef struct Packet:
    uint8_t key[40]
    uint16_t sport, dport
    uint32_t seq, ack
    uint8_t flags
    Py_ssize_t pstart, pend


cdef class History:
    cdef int64_t off[256]
    cdef int64_t pos[256]
    cdef int64_t length[256]
    cdef list objs
    cdef int head, count
    cdef void add_packed(self, int64_t off, int64_t pos, int64_t n) noexcept
    cdef object _item(self, int i)


cdef class Half:
    cdef public object base, isn, fin_off, last_ack
    cdef public History history
    cdef public int64_t exp_seq, next_off, pending_bytes, packets, peer_ack
    cdef public list pending
    cpdef start(self, seq)
    cpdef sync(self)


cdef class Conn:
    cdef public object conn_id, a, b, syn_seen, stats, closed, keys, user
    cdef public tuple halves


cdef struct Slot:
    uint64_t hash
    uint8_t key[40]
    void *ent   # a (conn, direction, half, other half) tuple, owned; NULL = empty


cdef class _Cache:
    cdef Slot *slots
    cdef Py_ssize_t cap, used
    cdef void clear(self) noexcept
    cdef void *get(self, const uint8_t *key, uint64_t h) noexcept
    cdef int put(self, const uint8_t *key, uint64_t h, object ent) except -1
    cdef int _grow(self) except -1


cdef class Walker:
    cdef readonly object streams, capture, mv
    cdef const uint8_t[::1] view
    cdef const uint8_t *buf
    cdef Py_ssize_t n, off
    cdef bint pcapng, swap, done, ended, have_ts
    cdef double units, last_ts
    cdef int lt
    cdef int64_t sec
    cdef object st, ifaces_list
    cdef Py_ssize_t nifaces
    cdef int *iface_lt
    cdef double *iface_hi
    cdef double *iface_units
    cdef double *iface_tsoff
    # the current record
    cdef public int64_t frame
    cdef public double ts
    cdef double rec_ts
    cdef int rec_lt
    cdef Py_ssize_t rec_start, rec_end, rec_origlen
    # the packet path
    cdef object link, decode, v4, v6, r, feed, table, divert, mapped
    cdef Py_ssize_t release_at, release_every
    cdef _Cache cache
    cdef list queue
    cdef Py_ssize_t qi
    # the last event: EV_DATA's fields, or EV_OBJ's object
    cdef public object obj
    cdef Conn d_conn
    cdef int d_dir
    cdef int64_t d_off
    cdef Py_ssize_t d_start, d_len

    cdef int next_event(self) except -1
    cdef object data_event(self)
    cdef int _record(self) except -1
    cdef int _record_pcap(self) except -1
    cdef int _record_ng(self) except -1
    cdef int _take(self, tuple rec) except -1
    cdef int _load_ng(self) except -1
    cdef void _free_ifaces(self) noexcept
    cdef uint32_t _rd(self, Py_ssize_t at) noexcept
    cdef int _known(self, Packet *p, uint64_t h) except -1
    cdef int _general(self) except -1
    cdef int _end(self) except -1
