# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled capture loop: the twin of `CaptureStreams.events` (streams.py) with the state
classes of the reassembler (`Half`, `Conn`: tcp._Half and tcp._Conn with the same attributes
and methods, whose hot fields are C fields here).

The walk reads plain records itself (a pcap record whose header is sane, a pcapng enhanced
packet block of a known interface) and hands every other one to the reader's own step
(`PcapCapture.irregular`, `PcapngCapture.block`); it decodes the link, IP and TCP headers of a
packet that `LinkDecoder.decode` would turn into a whole TCP segment (any supported link type,
VLAN tags, IPv4 not fragmented, IPv6 without extension headers; the payload captured whole) and
takes the reassembler's fast path for a known connection's in-order segment or pure ACK, as
streams.py does. Everything else - a packet it does not decode, a new connection, a control
flag, data out of order - goes through `LinkDecoder.decode` and `Reassembler.feed`, which
define the behaviour. Every read is checked against the record's end first.
"""

from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memcpy, memset
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.list cimport PyList_GET_SIZE

from collections import deque

from kaudit.capture.events import ConnStats, Diverted, StreamData
from kaudit.capture.link import TcpSegment
from kaudit.capture import streams as _streams  # RELEASE_EVERY and _release, read at use

DEF MASK = 0xFFFFFFFF
DEF HISTORY_SEGMENTS = 256
DEF MAX_CAPLEN = 256 * 1024
DEF FIN = 0x01
DEF SYN = 0x02
DEF RST = 0x04
DEF ACK = 0x10
DEF CONTROL = 0x07  # SYN | FIN | RST

EV_END, EV_DATA, EV_OBJ = 0, 1, 2

cdef extern from *:
    void __builtin_prefetch(const void *p) nogil


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


# ---- the walk -----------------------------------------------------------------------------

cdef class Walker:
    """Records -> packets -> reassembly events of one CaptureStreams (see the module doc).
    `next_event` moves on: EV_DATA (an in-order segment of a known connection: `d_conn`,
    `d_dir`, `d_off`, `d_start`, `d_len`, `frame`, `ts`; its StreamData is not built), EV_OBJ
    (an event object in `obj`) or EV_END."""

    def __init__(self, streams):
        cap = streams.capture
        self.streams = streams
        self.capture = cap
        self.mv = cap.buf
        self.view = cap.buf
        self.n = self.view.shape[0]
        self.buf = &self.view[0] if self.n else NULL
        self.pcapng = cap.format == "pcapng"
        if self.pcapng:
            from kaudit.capture.pcap import _NgWalk
            self.st = _NgWalk()
            self.off = 0
            self._load_ng()
        else:
            self.swap = cap.order == ">"
            self.units = float(cap.units)
            self.lt = cap.linktype
            self.off = 24
        self.sec = -1
        self.frame = 0
        self.ts = 0.0
        self.have_ts = False
        self.link = streams.link
        self.decode = streams.link.decode
        self.v4, self.v6 = streams.link._v4, streams.link._v6
        self.r = streams.reassembler
        self.r.buf = self.mv
        self.feed = self.r.feed
        self.table = self.r._table
        self.divert = streams.divert
        self.mapped = streams._mapped
        self.release_every = _streams.RELEASE_EVERY
        self.release_at = self.release_every if self.mapped is not None else -1
        self.cache = _Cache()
        self.queue = []
        self.qi = 0
        self.done = False
        self.ended = False

    def release(self):
        """Let go of the capture buffer (so that a mapping can be closed)."""
        self.view = None
        self.buf = NULL
        self.n = 0

    # -- records --

    cdef uint32_t _rd(self, Py_ssize_t at) noexcept:
        if self.swap:
            return _u32(self.buf + at)
        return _u32le(self.buf + at)

    cdef int _load_ng(self) except -1:
        """The pcapng walk's byte order and interfaces, after the reader's own step moved it."""
        st = self.st
        self.swap = st.order == ">"
        fast = st.fast_ifaces
        if fast is self.ifaces_list:
            return 0
        self.ifaces_list = fast
        cdef Py_ssize_t count = len(fast)
        self._free_ifaces()
        self.nifaces = 0
        if count:
            self.iface_lt = <int *>malloc(count * sizeof(int))
            self.iface_hi = <double *>malloc(count * sizeof(double))
            self.iface_units = <double *>malloc(count * sizeof(double))
            self.iface_tsoff = <double *>malloc(count * sizeof(double))
            if (self.iface_lt == NULL or self.iface_hi == NULL or self.iface_units == NULL
                    or self.iface_tsoff == NULL):
                self._free_ifaces()
                raise MemoryError()
        for k, f in enumerate(fast):
            self.iface_lt[k] = f[0]
            self.iface_hi[k] = _as_double(f[1])
            self.iface_units[k] = _as_double(f[2])
            self.iface_tsoff[k] = _as_double(f[3])
        self.nifaces = count
        return 0

    cdef void _free_ifaces(self) noexcept:
        free(self.iface_lt)
        free(self.iface_hi)
        free(self.iface_units)
        free(self.iface_tsoff)
        self.iface_lt = NULL
        self.iface_hi = NULL
        self.iface_units = NULL
        self.iface_tsoff = NULL
        self.nifaces = 0

    def __dealloc__(self):
        self._free_ifaces()

    cdef int _record(self) except -1:
        """The next record into rec_* (1), or 0 at the end of the capture."""
        if self.pcapng:
            return self._record_ng()
        return self._record_pcap()

    cdef int _record_pcap(self) except -1:
        cdef Py_ssize_t off, start, end
        cdef uint32_t caplen, origlen, frac
        cdef int64_t prev
        while True:
            if self.done:
                return 0
            off = self.off
            if off + 16 > self.n:
                self.capture.tail(off, self.frame)
                self.done = True
                return 0
            prev = self.sec
            self.sec = self._rd(off)
            frac = self._rd(off + 4)
            caplen = self._rd(off + 8)
            origlen = self._rd(off + 12)
            start = off + 16
            end = start + caplen
            if caplen > MAX_CAPLEN or end > self.n:
                what, value = self.capture.irregular(off, self.frame, None if prev < 0 else prev)
                if what == "resync":
                    self.off = value
                    self.sec = prev
                    continue
                self.done = True
                if what == "cut":
                    return self._take(value)
                return 0
            if end + 128 <= self.n:  # the next record's header and link/IP/TCP headers
                __builtin_prefetch(self.buf + end)
                __builtin_prefetch(self.buf + end + 64)
            self.frame += 1
            self.rec_ts = <double>self.sec + <double>frac / self.units
            self.rec_lt = self.lt
            self.rec_start, self.rec_end, self.rec_origlen = start, end, origlen
            self.off = end
            return 1

    cdef int _take(self, tuple rec) except -1:
        """A record tuple from the reader's own step."""
        self.frame = rec[0]
        self.rec_ts = rec[1]
        self.rec_lt = rec[2]
        self.rec_start, self.rec_end, self.rec_origlen = rec[3], rec[4], rec[5]
        return 1

    cdef int _record_ng(self) except -1:
        cdef Py_ssize_t off, blen
        cdef uint32_t btype, iface, tsh, tsl, caplen
        cdef uint64_t ublen
        cdef double ts
        while True:
            if self.done:
                return 0
            off = self.off
            if off + 12 > self.n:
                self.capture.tail(off, self.frame)
                self.done = True
                return 0
            if off + 32 <= self.n:
                btype = self._rd(off)
                ublen = self._rd(off + 4)
                iface = self._rd(off + 8)
                caplen = self._rd(off + 20)
                if (btype == 6 and <uint64_t>caplen + 32 <= ublen and off + <Py_ssize_t>ublen <= self.n
                        and not ublen & 3 and iface < <uint32_t>self.nifaces
                        and self._rd(off + <Py_ssize_t>ublen - 4) == ublen):
                    blen = ublen
                    if off + blen + 128 <= self.n:  # the next block and its packet's headers
                        __builtin_prefetch(self.buf + off + blen)
                        __builtin_prefetch(self.buf + off + blen + 64)
                    tsh = self._rd(off + 12)
                    tsl = self._rd(off + 16)
                    # as the pure loop: tsh * hi + tsl / units + tsoffset, in that order
                    ts = <double>tsh * self.iface_hi[iface] + <double>tsl / self.iface_units[iface]
                    ts = ts + self.iface_tsoff[iface]
                    self.frame += 1
                    self.last_ts = ts
                    self.rec_ts = ts
                    self.rec_lt = self.iface_lt[iface]
                    self.rec_start = off + 28
                    self.rec_end = off + 28 + caplen
                    self.rec_origlen = self._rd(off + 24)
                    self.off = off + blen
                    return 1
            st = self.st
            st.off, st.frame, st.last_ts = off, self.frame, self.last_ts
            rec = self.capture.block(st)
            self.off, self.frame, self.last_ts = st.off, st.frame, st.last_ts
            if st.done:
                self.done = True
            else:
                self._load_ng()
            if rec is not None:
                return self._take(rec)

    # -- packets --

    cdef int next_event(self) except -1:
        cdef Packet p
        cdef void *ent
        cdef Conn conn
        cdef Half half, other
        cdef Py_ssize_t n, start, end
        cdef uint64_t h
        cdef int64_t off
        cdef int d
        while True:
            if self.qi < PyList_GET_SIZE(self.queue):
                self.obj = self.queue[self.qi]
                self.qi += 1
                return EV_OBJ
            if self.qi:
                self.queue = []
                self.qi = 0
            if self.ended:
                return EV_END
            if not self._record():
                self._end()
                continue
            self.ts = self.rec_ts
            self.have_ts = True
            start, end = self.rec_start, self.rec_end
            if self.release_at >= 0 and start >= self.release_at:
                _streams._release(self.mapped, start)
                self.release_at = start + self.release_every
            if self.buf == NULL or end > self.n or start > end:
                self._general()
                continue
            if not parse_packet(self.buf + start, end - start, self.rec_origlen, self.rec_lt, &p):
                self._general()
                continue
            p.pstart += start
            p.pend += start
            h = _hash(p.key)
            ent = self.cache.get(p.key, h)
            if ent != NULL and not p.flags & CONTROL:
                conn = <Conn>PyTuple_GET_ITEM(<object>ent, 0)
                d = <object>PyTuple_GET_ITEM(<object>ent, 1)
                half = <Half>PyTuple_GET_ITEM(<object>ent, 2)
                other = <Half>PyTuple_GET_ITEM(<object>ent, 3)
                n = p.pend - p.pstart
                if conn.closed is None and (n == 0 or p.seq == half.exp_seq):
                    # == Reassembler.feed's fast path ==
                    half.packets += 1
                    if n:
                        off = half.next_off
                        half.next_off = off + n
                        half.exp_seq = (p.seq + n) & MASK
                        # packed like tcp.PACK_*: offset, buffer position, length
                        half.history.add_packed(off, p.pstart, n)
                    elif half.base is None:
                        half.start(p.seq)
                    if other.pending and p.flags & ACK:
                        other.last_ack = p.ack
                        out = []
                        self.r._release_acked(conn, 1 - d, other, self.frame, self.ts, out)
                        self.queue = out
                    if n:
                        self.d_conn, self.d_dir, self.d_off = conn, d, off
                        self.d_start, self.d_len = p.pstart, n
                        return EV_DATA
                    continue
            self._known(&p, h)

    cdef int _known(self, Packet *p, uint64_t h) except -1:
        """A decoded segment off the fast path: the reassembler's general path, then the cache
        learns its connection."""
        cdef bytes key = p.key[:KEY_LEN]
        if p.key[KEY_LEN - 1] == 4:
            src, dst = _u32(p.key), _u32(p.key + 16)
            s = self.v4.get(src) or self.link._v4_name(src)
            t = self.v4.get(dst) or self.link._v4_name(dst)
        else:
            src, dst = key[0:16], key[16:32]
            s = self.v6.get(src) or self.link._v6_name(src)
            t = self.v6.get(dst) or self.link._v6_name(dst)
        seg = TcpSegment(s, t, p.sport, p.dport, p.seq, p.ack, p.flags, self.mv[p.pstart:p.pend], 0)
        if self.divert is not None and (s, p.sport, t, p.dport) in self.divert:
            self.queue = [Diverted(seg, self.frame, self.ts)]
            return 0
        self.queue = list(self.feed(seg, self.frame, self.ts))
        ent = self.table.get((s, p.sport, t, p.dport))
        if ent is not None and type(ent[0]) is Conn:
            if self.cache.used > 2 * len(self.table) + 1024:
                self.cache.clear()
            self.cache.put(p.key, h, ent)
        return 0

    cdef int _general(self) except -1:
        seg = self.decode(self.rec_lt, self.mv[self.rec_start:self.rec_end], self.rec_origlen)
        if seg is None:
            return 0
        if self.divert is not None and (seg.src, seg.sport, seg.dst, seg.dport) in self.divert:
            self.queue = [Diverted(seg, self.frame, self.ts)]
            return 0
        self.queue = list(self.feed(seg, self.frame, self.ts))
        return 0

    cdef int _end(self) except -1:
        self.ended = True
        ts = self.ts if self.have_ts else None
        self.streams.packets, self.streams.last_ts = self.frame, ts
        self.r.last_frame, self.r.last_ts = self.frame, ts
        self.queue = list(self.r.flush())
        self.qi = 0
        return 0

    cdef object data_event(self):
        """The StreamData of the last EV_DATA."""
        return StreamData(self.d_conn.conn_id, self.d_dir, self.d_off,
                          self.mv[self.d_start:self.d_start + self.d_len], self.frame, self.frame,
                          self.ts)

    def stop(self):
        """The consumer stopped early: what the pure loop's `finally` records."""
        if not self.ended:
            self.streams.packets = self.frame
            self.streams.last_ts = self.ts if self.have_ts else None


def events(streams):
    """`CaptureStreams.events`, compiled."""
    cdef Walker w = Walker(streams)
    cdef int k
    try:
        while True:
            k = w.next_event()
            if k == EV_DATA:
                yield w.data_event()
            elif k == EV_OBJ:
                yield w.obj
            else:
                return
    finally:
        w.stop()
        w.release()


def count_events(streams):
    """(in-order segments, other events) of the capture, without building the segments' events:
    the walk's own cost (benchmarks, tests/capture/bench_capture.py)."""
    cdef Walker w = Walker(streams)
    cdef int k
    cdef Py_ssize_t data = 0, other = 0
    try:
        while True:
            k = w.next_event()
            if k == EV_DATA:
                data += 1
            elif k == EV_OBJ:
                other += 1
            else:
                return data, other
    finally:
        w.stop()
        w.release()
