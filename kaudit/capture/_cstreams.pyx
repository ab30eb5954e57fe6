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


include "_cstreams_state.pxi"


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
        self.sec = -1 if cap.prev_sec is None else cap.prev_sec
        self.frame = cap.frame_base
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
                    if p.flags & ACK:
                        other.peer_ack = p.ack
                        if other.base is None and conn.syn_seen:
                            other.start(p.ack)   # tcp._acked_start
                        if other.pending:
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
        if ts is not None or self.streams.final:
            self.r.last_frame, self.r.last_ts = self.frame, ts
        # a live window leaves its connections open for the next one
        self.queue = list(self.r.flush()) if self.streams.final else []
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
