# The compiled capture loop's state and header reads: part of _cstreams.pyx (included). The
# reassembler's state classes (twins of tcp._Half, tcp._Conn and the half's history deque), the
# cache of connections by raw addresses and ports, and the link/IP/TCP header read.

# ---- the reassembler's state (twins of tcp._Half and tcp._Conn) ----------------------------

cdef class History:
    """_Half.history: the last HISTORY_SEGMENTS delivered segments, newest last, as a deque of
    maxlen HISTORY_SEGMENTS holds them - packed ints (offset << 64 | buffer position << 24 |
    length, tcp.PACK_*) or (offset, bytes) tuples - with the packed ones kept as C ints."""

    def __cinit__(self):
        self.objs = [None] * HISTORY_SEGMENTS
        self.head = self.count = 0

    cdef inline void add_packed(self, int64_t off, int64_t pos, int64_t n) noexcept:
        cdef int j = (self.head + self.count) % HISTORY_SEGMENTS
        if self.count == HISTORY_SEGMENTS:
            self.head = (self.head + 1) % HISTORY_SEGMENTS
        else:
            self.count += 1
        self.off[j], self.pos[j], self.length[j] = off, pos, n
        if self.objs[j] is not None:
            self.objs[j] = None

    def add(self, int64_t off, int64_t pos, int64_t n):
        """add_packed from Python (the tests compare this history with the deque)."""
        self.add_packed(off, pos, n)

    def append(self, x):
        cdef int j = (self.head + self.count) % HISTORY_SEGMENTS
        if self.count == HISTORY_SEGMENTS:
            self.head = (self.head + 1) % HISTORY_SEGMENTS
        else:
            self.count += 1
        self.objs[j] = x

    def clear(self):
        self.objs = [None] * HISTORY_SEGMENTS
        self.head = self.count = 0

    cdef object _item(self, int i):
        cdef int j = (self.head + i) % HISTORY_SEGMENTS
        x = self.objs[j]
        if x is None:
            x = (<object>self.off[j] << 64) | (<object>self.pos[j] << 24) | self.length[j]
        return x

    def detach(self, buf, Py_ssize_t limit):
        """capture.live._detach_half for this history: from the newest, each entry that points
        into the window `buf` (packed, or a view of it) copied out as (offset, bytes), until
        `limit` bytes are kept (the entry that reaches it included); the older ones dropped."""
        cdef int i, j, keep = 0, drop
        cdef Py_ssize_t total = 0
        for i in range(self.count - 1, -1, -1):
            j = (self.head + i) % HISTORY_SEGMENTS
            x = self.objs[j]
            if x is None:
                x = self.objs[j] = (self.off[j], bytes(buf[self.pos[j]:self.pos[j] + self.length[j]]))
            elif isinstance(x, int):
                x = self.objs[j] = (x >> 64, bytes(buf[(x >> 24) & 0xFFFFFFFFFF:((x >> 24) & 0xFFFFFFFFFF) + (x & 0xFFFFFF)]))
            elif type(x[1]) is not bytes:
                x = self.objs[j] = (x[0], bytes(x[1]))
            keep += 1
            total += len(x[1])
            if total >= limit:
                break
        drop = self.count - keep
        for i in range(drop):
            self.objs[(self.head + i) % HISTORY_SEGMENTS] = None
        self.head = (self.head + drop) % HISTORY_SEGMENTS
        self.count = keep

    def __len__(self):
        return self.count

    def __iter__(self):
        return iter([self._item(i) for i in range(self.count)])

    def __reversed__(self):
        return iter([self._item(i) for i in range(self.count - 1, -1, -1)])

    @property
    def maxlen(self):
        return HISTORY_SEGMENTS


cdef class Half:
    """tcp._Half: one direction of a connection."""

    def __init__(self):
        self.base = None
        self.exp_seq = -1
        self.next_off = 0
        self.isn = None
        self.fin_off = None
        self.pending = []
        self.pending_bytes = 0
        self.history = History()
        self.last_ack = None
        self.peer_ack = -1
        self.packets = 0

    cpdef start(self, seq):
        self.base = seq
        self.sync()

    cpdef sync(self):
        if self.base is None or self.pending or self.fin_off is not None:
            self.exp_seq = -1
        else:
            self.exp_seq = (self.base + self.next_off) & MASK

    def offset(self, seq):
        """Stream offset of sequence number `seq`: the unwrap closest to next_off."""
        d = (seq - self.base - self.next_off) & MASK
        return self.next_off + (d - 0x100000000 if d & 0x80000000 else d)


cdef class Conn:
    """tcp._Conn; `user` is a slot for the consumer's own per-connection object."""

    def __init__(self, conn_id, a, b, syn_seen):
        self.conn_id = conn_id
        self.a = a
        self.b = b
        self.syn_seen = syn_seen
        self.halves = (Half(), Half())
        self.stats = ConnStats()
        self.closed = None
        self.keys = ((a[0], a[1], b[0], b[1]), (b[0], b[1], a[0], a[1]))
        self.user = None


# ---- the connection cache: raw addresses and ports -> the reassembler's table entry --------

cdef inline uint64_t _hash(const uint8_t *k) noexcept nogil:
    cdef uint64_t h = 1469598103934665603ULL, w
    cdef int i
    for i in range(0, KEY_LEN, 8):
        memcpy(&w, k + i, 8)
        h = (h ^ w) * 1099511628211ULL
        h ^= h >> 29
    return h | 1


cdef class _Cache:
    def __cinit__(self):
        self.cap = 1024
        self.slots = <Slot *>calloc(self.cap, sizeof(Slot))
        if self.slots == NULL:
            raise MemoryError()

    def __dealloc__(self):
        self.clear()
        free(self.slots)

    cdef void clear(self) noexcept:
        cdef Py_ssize_t i
        for i in range(self.cap):
            if self.slots[i].ent != NULL:
                Py_XDECREF(<PyObject *>self.slots[i].ent)
                self.slots[i].ent = NULL
        memset(self.slots, 0, self.cap * sizeof(Slot))
        self.used = 0

    cdef void *get(self, const uint8_t *key, uint64_t h) noexcept:
        cdef Py_ssize_t i = h & (self.cap - 1)
        while self.slots[i].ent != NULL:
            if self.slots[i].hash == h and memcmp(self.slots[i].key, key, KEY_LEN) == 0:
                return self.slots[i].ent
            i = (i + 1) & (self.cap - 1)
        return NULL

    cdef int put(self, const uint8_t *key, uint64_t h, object ent) except -1:
        cdef Py_ssize_t i
        if (self.used + 1) * 2 > self.cap:
            self._grow()
        i = h & (self.cap - 1)
        while self.slots[i].ent != NULL:
            if self.slots[i].hash == h and memcmp(self.slots[i].key, key, KEY_LEN) == 0:
                Py_INCREF(ent)
                Py_XDECREF(<PyObject *>self.slots[i].ent)
                self.slots[i].ent = <void *>ent
                return 0
            i = (i + 1) & (self.cap - 1)
        Py_INCREF(ent)
        self.slots[i].ent = <void *>ent
        self.slots[i].hash = h
        memcpy(self.slots[i].key, key, KEY_LEN)
        self.used += 1
        return 0

    cdef int _grow(self) except -1:
        cdef Slot *old = self.slots
        cdef Py_ssize_t old_cap = self.cap, i, j
        cdef Slot *new = <Slot *>calloc(old_cap * 2, sizeof(Slot))
        if new == NULL:
            raise MemoryError()
        self.slots, self.cap = new, old_cap * 2
        for i in range(old_cap):
            if old[i].ent != NULL:
                j = old[i].hash & (self.cap - 1)
                while new[j].ent != NULL:
                    j = (j + 1) & (self.cap - 1)
                new[j] = old[i]
        free(old)
        return 0


# ---- link, IP and TCP headers -----------------------------------------------------------------

cdef inline uint16_t _u16(const uint8_t *p) noexcept nogil:
    return (p[0] << 8) | p[1]


cdef inline uint32_t _u32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint32_t _u32le(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[3] << 24) | (<uint32_t>p[2] << 16) | (<uint32_t>p[1] << 8) | p[0]


cdef inline bint _vlan(uint32_t etype) noexcept nogil:
    return etype == 0x8100 or etype == 0x88A8 or etype == 0x9100 or etype == 0x9200


cdef bint parse_packet(const uint8_t *data, Py_ssize_t n, Py_ssize_t origlen, int lt,
                       Packet *p) noexcept nogil:
    """True when `LinkDecoder.decode(lt, data[:n], origlen)` gives a whole TCP segment
    (truncated 0) without side effects (no fragment, no drop): its fields go to `p`, the
    payload as offsets in `data`. False: the decoder decides."""
    cdef Py_ssize_t off, wire_end, ihl, total, plen, hlen, start
    cdef long etype
    cdef uint32_t fam
    cdef int v
    if origlen < n:
        origlen = n
    if lt == 1:
        if n < 14:
            return False
        etype, off = _u16(data + 12), 14
    elif lt == 113:
        if n < 16:
            return False
        etype, off = _u16(data + 14), 16
    elif lt == 276:
        if n < 20:
            return False
        etype, off = _u16(data), 20
    elif lt == 101 or lt == 12 or lt == 14:
        if n < 1:
            return False
        v = data[0] >> 4
        etype = 0x0800 if v == 4 else (0x86DD if v == 6 else -1)
        off = 0
    elif lt == 228:
        etype, off = 0x0800, 0
    elif lt == 229:
        etype, off = 0x86DD, 0
    elif lt == 0 or lt == 108:
        if n < 4:
            return False
        fam = _u32le(data)
        if fam > 0xFFFF:
            fam = _u32(data)
        if fam == 2:
            etype = 0x0800
        elif fam == 24 or fam == 28 or fam == 30 or fam == 10 or fam == 23:
            etype = 0x86DD
        else:
            return False
        off = 4
    else:
        return False
    while _vlan(etype):
        if off + 4 > n:
            return False
        etype = _u16(data + off + 2)
        off += 4
    memset(p.key, 0, KEY_LEN)
    if etype == 0x0800:
        if off + 20 > n or data[off] >> 4 != 4:
            return False
        ihl = (data[off] & 15) * 4
        total = _u16(data + off + 2)
        # protocol TCP, not a fragment, a length set (0: segmentation offload) and sane
        if ihl < 20 or data[off + 9] != 6 or _u16(data + off + 6) & 0x3FFF or total < ihl:
            return False
        wire_end = off + total
        if wire_end > origlen:
            wire_end = origlen
        memcpy(p.key, data + off + 12, 4)
        memcpy(p.key + 16, data + off + 16, 4)
        p.key[KEY_LEN - 1] = 4
        off += ihl
    elif etype == 0x86DD:
        if off + 40 > n or data[off] >> 4 != 6 or data[off + 6] != 6:
            return False  # extension headers: the decoder walks them
        plen = _u16(data + off + 4)
        if plen == 0:
            return False  # a jumbogram or offload: the capture's length decides
        wire_end = off + 40 + plen
        if wire_end > origlen:
            wire_end = origlen
        memcpy(p.key, data + off + 8, 32)
        p.key[KEY_LEN - 1] = 6
        off += 40
    else:
        return False
    if wire_end > n or off + 20 > wire_end:
        return False  # cut by the snaplen, or no whole TCP header
    hlen = (data[off + 12] >> 4) * 4
    start = off + hlen
    if hlen < 20 or start > wire_end:
        return False
    memcpy(p.key + 32, data + off, 4)
    p.sport = _u16(data + off)
    p.dport = _u16(data + off + 2)
    p.seq = _u32(data + off + 4)
    p.ack = _u32(data + off + 8)
    p.flags = data[off + 13]
    p.pstart = start
    p.pend = wire_end
    return True


cdef inline double _as_double(object v):
    return float(v)
