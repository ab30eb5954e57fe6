"""TCP reassembly per connection and per direction, as a stream of small events.

    r = Reassembler()
    for each packet: events = r.feed(segment, frame_no, ts)
    at the end:      events = r.flush()

Events: ConnOpen, StreamData, StreamGap, StreamConflict, ConnClose (with ConnStats). Every
connection gets exactly one ConnOpen and one ConnClose. Directions are neutral: 0 is a -> b and
1 is b -> a, where `a` is the side that opened the connection when the handshake was seen
(`syn_seen`) and otherwise just the sender of the first packet seen.

Stream offsets count payload bytes from the first byte after the SYN (or from the first segment
seen, for a capture that starts mid-connection); sequence numbers wrap at 2**32, offsets do not.
Missing bytes are never invented: the consumer gets StreamGap(offset, length) and then the data
after it. Out-of-order data waits in a per-direction buffer capped at `max_buffer` bytes; a hole is
declared lost when the peer acknowledges past it, when the buffer overflows, or at flush/RST.
StreamData.data is a memoryview into the capture buffer: copy what you keep.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

from kaudit import native
from kaudit.capture.events import (
    ConnClose, ConnOpen, ConnStats, StreamConflict, StreamData, StreamGap,
)
from kaudit.capture.link import ACK, CONTROL_FLAGS, FIN, RST, SYN

MASK = 0xFFFFFFFF
MAX_BUFFER = 16 * 1024 * 1024
# Delivered segments kept to tell identical retransmissions from conflicting ones.
HISTORY_SEGMENTS = 256
# History ints: offset << PACK_OFF | buffer position << PACK_POS | length
PACK_OFF, PACK_POS = 64, 24
PACK_POS_MASK, PACK_LEN_MASK = (1 << 40) - 1, (1 << 24) - 1
# Closed connections stay known (for their trailing ACKs/FINs) this long in capture time.
CLOSED_LINGER = 240.0


class _Piece:
    """Buffered out-of-order bytes [off, end); data None = a known hole (snaplen cut)."""

    __slots__ = ("off", "end", "data", "frame", "ts")

    def __init__(self, off, end, data, frame, ts):
        self.off = off
        self.end = end
        self.data = data
        self.frame = frame
        self.ts = ts


def _piece_off(p):
    return p.off


ACKED_UNSEEN = "acknowledged, not captured"   # a tail gap's reason

# _acked_start: a direction of a connection whose SYN was seen starts where its peer's first ACK
# says, when that ACK comes before the direction's first segment (its SYN-ACK, or its first
# data, not captured): bytes between that ACK and the first segment captured are a gap at its
# start, not an unseen beginning - a lost first answer is not taken for no answer.


def _acked_unseen(half) -> int:
    """Bytes at a closing direction's end that the peer acknowledged and the capture never showed
    (the last segments dropped by the capture, no later byte of theirs to reveal a hole). The FIN
    is no data: past a FIN seen nothing counts; without one, one byte past the last delivered may
    be the FIN's own sequence number (a lost FIN, no data lost)."""
    if half.peer_ack < 0 or half.base is None:
        return 0
    acked = half.offset(half.peer_ack)
    if half.fin_off is not None:
        acked = min(acked, half.fin_off)
    elif acked == half.next_off + 1:
        return 0
    return max(acked - half.next_off, 0)


class _Half:
    """One direction of a connection."""

    __slots__ = ("base", "exp_seq", "next_off", "isn", "fin_off", "pending", "pending_bytes",
                 "history", "last_ack", "peer_ack", "packets")

    def __init__(self):
        self.base = None  # sequence number of stream offset 0
        # sequence number of next_off when the next in-order segment can take the fast path
        # (base known, nothing buffered, no FIN yet), else -1: one comparison in the hot loop
        self.exp_seq = -1
        self.next_off = 0  # everything before this was delivered or declared a gap
        self.isn = None  # the SYN's sequence number, when seen
        self.fin_off = None  # stream offset of the FIN, when seen
        self.pending: list[_Piece] = []  # sorted by offset, never overlapping
        self.pending_bytes = 0
        # recently delivered segments, to compare retransmissions with: (offset, bytes), or an
        # int packing (offset, position in the capture buffer, length) from the fused loop,
        # which keeps the garbage collector out of the hot path
        self.history: deque = deque(maxlen=HISTORY_SEGMENTS)
        self.last_ack = None  # latest ack from the peer while data of this direction waits
        self.peer_ack = -1  # latest ack from the peer (-1: none): at the close, bytes it shows lost
        self.packets = 0  # the hot counter lives here; ConnStats gets it at the close

    def start(self, seq):
        self.base = seq
        self.sync()

    def sync(self):
        if self.base is None or self.pending or self.fin_off is not None:
            self.exp_seq = -1
        else:
            self.exp_seq = (self.base + self.next_off) & MASK

    def offset(self, seq):
        """Stream offset of sequence number `seq`: the unwrap closest to next_off."""
        d = (seq - self.base - self.next_off) & MASK
        return self.next_off + (d - 0x100000000 if d & 0x80000000 else d)


class _Conn:
    __slots__ = ("conn_id", "a", "b", "syn_seen", "halves", "stats", "closed", "keys")

    def __init__(self, conn_id, a, b, syn_seen):
        self.conn_id = conn_id
        self.a = a
        self.b = b
        self.syn_seen = syn_seen
        self.halves = (_Half(), _Half())
        self.stats = ConnStats()
        self.closed = None  # close ts once closed
        self.keys = ((a[0], a[1], b[0], b[1]), (b[0], b[1], a[0], a[1]))


# the compiled twins of _Half and _Conn (same attributes and methods), chosen per reassembler
_C = "kaudit.capture._cstreams"


class Reassembler:
    def __init__(self, max_buffer: int = MAX_BUFFER, first_conn_id: int = 0):
        self.max_buffer = max_buffer
        c = native.module(_C)
        # compiled connection state (whose hot fields the compiled capture loop reads in C), or
        # the pure classes; every method below works on either
        self._conn_cls = c.Conn if c is not None else _Conn
        self._table: dict[tuple, tuple[_Conn, int]] = {}  # 4-tuple -> (connection, direction)
        self._open: dict[int, _Conn] = {}
        self._closed: dict[int, _Conn] = {}  # in closing order, for lingering eviction
        self._next_id = first_conn_id  # a successor reassembler goes on numbering (pcap_stitch)
        self.connections = 0
        self.last_frame = 0
        self.last_ts = 0.0
        self.buf = None  # the capture buffer, for packed history entries (set by CaptureStreams)

    def lookup(self, src, sport, dst, dport):
        """(conn_id, direction) of the connection a segment with these endpoints belongs to
        now, or None (never seen, or forgotten after its close)."""
        ent = self._table.get((src, sport, dst, dport))
        return None if ent is None else (ent[0].conn_id, ent[1])

    # ---- the hot path (CaptureStreams inlines a copy of it: keep the two in step) ----------
    def feed(self, seg, frame, ts):
        """Events caused by one TCP segment (an empty tuple when none)."""
        self.last_frame = frame
        self.last_ts = ts
        ent = self._table.get((seg.src, seg.sport, seg.dst, seg.dport))
        flags = seg.flags
        if ent is not None and not flags & CONTROL_FLAGS and not seg.truncated:
            conn, d, half, other = ent
            payload = seg.payload
            seq = seg.seq
            if conn.closed is None and (not payload or seq == half.exp_seq):
                half.packets += 1
                if payload:  # in order: straight through
                    n = len(payload)
                    off = half.next_off
                    half.next_off = off + n
                    half.exp_seq = (seq + n) & MASK
                    half.history.append((off, payload))
                    out = [StreamData(conn.conn_id, d, off, payload, frame, frame, ts)]
                else:
                    if half.base is None:
                        half.start(seq)
                    out = ()
                if flags & ACK:
                    other.peer_ack = seg.ack
                    if other.base is None and conn.syn_seen:
                        other.start(seg.ack)   # _acked_start
                    if other.pending:
                        other.last_ack = seg.ack
                        out = list(out)
                        self._release_acked(conn, 1 - d, other, frame, ts, out)
                return out
        return self._feed_general(ent, seg, frame, ts)

    def _feed_general(self, ent, seg, frame, ts):
        if ent is None or (seg.flags & SYN and self._is_new(ent, seg)):
            return self._new_conn(ent, seg, frame, ts)
        conn, d = ent[0], ent[1]
        if conn.closed is not None:
            conn.stats.packets[d] += 1
            conn.stats.late_packets[d] += 1
            return ()
        conn.halves[d].packets += 1
        return self._segment(conn, d, seg, frame, ts)

    # ---- connections --------------------------------------------------------------------
    def _is_new(self, ent, seg):
        """Does this SYN start a new connection on a known 4-tuple (port reuse)?"""
        conn, d = ent[0], ent[1]
        if conn.closed is not None:
            return True
        half = conn.halves[d]
        if half.isn is not None:
            return seg.seq != half.isn  # same ISN: a retransmitted SYN
        if seg.flags & ACK and half.base is not None and (seg.seq + 1) & MASK == half.base:
            return False   # the SYN-ACK its peer's first ACK already answered (_acked_start): late, or again
        # this side sent segments without a SYN: the SYN belongs to a later connection
        return half.base is not None

    def _new_conn(self, old, seg, frame, ts):
        out = []
        if old is not None and old[0].closed is None:
            self._close(old[0], "reused", frame, ts, out)
        src, dst = (seg.src, seg.sport), (seg.dst, seg.dport)
        flags = seg.flags
        synack = flags & SYN and flags & ACK
        a, b = (dst, src) if synack else (src, dst)
        conn = self._conn_cls(self._next_id, a, b, bool(flags & SYN))
        self._next_id += 1
        self.connections += 1
        self._open[conn.conn_id] = conn
        h0, h1 = conn.halves
        self._table[conn.keys[0]] = (conn, 0, h0, h1)
        self._table[conn.keys[1]] = (conn, 1, h1, h0)
        out.append(ConnOpen(conn.conn_id, a, b, conn.syn_seen, ts, frame))
        if synack:  # the SYN itself was not captured: the ack tells its sequence number
            conn.halves[0].isn = (seg.ack - 1) & MASK
            conn.halves[0].start(seg.ack)
        d = 1 if synack else 0
        conn.halves[d].packets += 1
        # run the segment through the ordinary path on the fresh connection
        res = self._segment(conn, d, seg, frame, ts)
        out.extend(res)
        return out

    def _segment(self, conn, d, seg, frame, ts):
        out = []
        half = conn.halves[d]
        st = conn.stats
        flags = seg.flags
        seq = seg.seq
        if flags & SYN:
            if half.isn is None:
                half.isn = seq
                if half.base is None:
                    half.start((seq + 1) & MASK)
                conn.syn_seen = True
            elif not seg.payload:
                st.retransmissions[d] += 1
            seq = (seq + 1) & MASK  # the SYN takes one sequence number; data follows it
        if flags & RST:
            self._close(conn, "rst", frame, ts, out)
            return out
        payload = seg.payload
        if payload or seg.truncated:
            self._data(conn, d, half, seq, payload, seg.truncated, frame, ts, out)
        elif half.base is None:
            half.start(seq)
        if flags & FIN and half.fin_off is None:
            half.fin_off = half.offset((seq + len(payload) + seg.truncated) & MASK)
        other = conn.halves[1 - d]
        if flags & ACK:
            other.peer_ack = seg.ack
            if other.base is None and conn.syn_seen:
                other.start(seg.ack)   # _acked_start
            if other.pending:
                other.last_ack = seg.ack
                self._release_acked(conn, 1 - d, other, frame, ts, out)
        self._maybe_finished(conn, frame, ts, out)
        conn.halves[0].sync()
        conn.halves[1].sync()
        return out

    def _maybe_finished(self, conn, frame, ts, out):
        h0, h1 = conn.halves
        if (conn.closed is None and h0.fin_off is not None and h1.fin_off is not None
                and h0.next_off >= h0.fin_off and h1.next_off >= h1.fin_off):
            self._close(conn, "fin", frame, ts, out)

    def _close(self, conn, reason, frame, ts, out):
        if conn.closed is not None:
            return
        for d in (0, 1):
            half = conn.halves[d]
            while half.pending:
                self._gap_to_first(conn, d, half, "lost", frame, ts, out)
            tail = _acked_unseen(half)
            if tail:
                self._gap(conn, d, half, tail, ACKED_UNSEEN, frame, ts, out)
            st = conn.stats
            st.stream_bytes[d] = half.next_off
            st.packets[d] = half.packets
            st.data_bytes[d] = half.next_off - st.gap_bytes[d]
            half.history.clear()
            half.exp_seq = -1
        conn.closed = ts
        del self._open[conn.conn_id]
        self._closed[conn.conn_id] = conn
        out.append(ConnClose(conn.conn_id, reason, ts, frame, conn.stats))
        if reason != "end":
            self._evict(ts)

    def _evict(self, now):
        closed = self._closed
        while closed:
            cid = next(iter(closed))
            conn = closed[cid]
            if conn.closed > now - CLOSED_LINGER:
                break
            del closed[cid]
            for key in conn.keys:
                ent = self._table.get(key)
                if ent is not None and ent[0] is conn:
                    del self._table[key]

    @property
    def next_conn_id(self) -> int:
        return self._next_id

    def flush(self, frame=None, ts=None):
        """Declare every remaining hole and close every open connection ('end'); frame and ts
        default to the last packet fed."""
        frame = self.last_frame if frame is None else frame
        ts = self.last_ts if ts is None else ts
        out = []
        for conn in list(self._open.values()):
            self._close(conn, "end", frame, ts, out)
        return out

    # ---- data ---------------------------------------------------------------------------
    def _data(self, conn, d, half, seq, payload, truncated, frame, ts, out):
        st = conn.stats
        if half.base is None:
            half.start(seq)
        if truncated:
            st.truncated_bytes[d] += truncated
        # the segment covers [off, end): captured bytes [off, off + n), then `truncated` missing
        off = half.offset(seq)
        n = len(payload)
        end = off + n + truncated
        fin = half.fin_off
        if fin is not None and end > fin:  # bytes after the FIN: a real stack ignores them
            cut = max(fin, off)
            st.ignored_bytes[d] += end - cut
            end = cut
            if end <= off:
                return
            if n > end - off:
                n = end - off
                payload = payload[:n]
        if off < 0:  # before the first byte this capture shows for the direction
            if end <= 0:
                st.ignored_bytes[d] += end - off
                return
            st.ignored_bytes[d] += -off
            k = min(-off, n)
            payload = payload[k:]
            n -= k
            off = 0
        nxt = half.next_off
        if off < nxt:
            cover = min(off + n, nxt)
            if n == 1 and off == nxt - 1:
                st.keepalives[d] += 1  # one garbage byte just below the window edge
            elif cover > off:
                st.retransmissions[d] += 1
                st.retransmitted_bytes[d] += cover - off
                self._check_history(conn, d, half, off, payload[:cover - off], frame, ts, out)
            if end <= nxt:
                return
            k = cover - off
            payload = payload[k:]
            n -= k
            off = nxt
        pieces = []
        if n:
            pieces.append(_Piece(off, off + n, payload, frame, ts))
        if end > off + n:
            pieces.append(_Piece(off + n, end, None, frame, ts))
        if off > nxt:
            st.out_of_order[d] += 1
        if not half.pending:
            half.last_ack = None  # only acks seen while data waits count (older ones may wrap)
        for p in pieces:
            self._insert(conn, d, half, p, out)
        self._drain(conn, d, half, out)
        if half.pending:
            if half.last_ack is not None:
                self._release_acked(conn, d, half, frame, ts, out)
            while half.pending_bytes > self.max_buffer:
                self._gap_to_first(conn, d, half, "overflow", frame, ts, out)
        if half.fin_off is not None:
            self._maybe_finished(conn, frame, ts, out)

    def _insert(self, conn, d, half, new, out):
        """Add `new` to the buffer; bytes already buffered win (compared, not replaced)."""
        pend = half.pending
        i = bisect_right(pend, new.off, key=_piece_off)
        if i and pend[i - 1].end > new.off:
            i -= 1
        off, end = new.off, new.end
        add = []
        seen_before = False
        while i < len(pend) and pend[i].off < end:
            p = pend[i]
            if off < p.off:
                add.append(self._sub(new, off, p.off))
            lo, hi = max(off, p.off), min(end, p.end)
            seen_before = True
            if hi > lo and new.data is not None and p.data is not None:
                self._compare(conn, d, lo, new.data[lo - new.off:hi - new.off],
                              p.data[lo - p.off:hi - p.off], new.frame, new.ts, out)
            off = max(off, p.end)
            i += 1
        if off < end:
            add.append(self._sub(new, off, end))
        if seen_before and new.data is not None:
            conn.stats.retransmissions[d] += 1
            conn.stats.retransmitted_bytes[d] += (new.end - new.off) - sum(p.end - p.off for p in add)
        for p in add:
            pend.insert(bisect_right(pend, p.off, key=_piece_off), p)
            if p.data is not None:
                half.pending_bytes += p.end - p.off

    @staticmethod
    def _sub(p, lo, hi):
        if lo == p.off and hi == p.end:
            return p
        data = None if p.data is None else p.data[lo - p.off:hi - p.off]
        return _Piece(lo, hi, data, p.frame, p.ts)

    def _drain(self, conn, d, half, out):
        """Deliver buffered pieces that start at (or before) next_off."""
        pend = half.pending
        while pend and pend[0].off <= half.next_off:
            p = pend.pop(0)
            if p.data is not None:
                half.pending_bytes -= p.end - p.off
            if p.end <= half.next_off:
                continue  # covered by a gap declared meanwhile
            lo = half.next_off
            if p.data is None:
                self._gap(conn, d, half, p.end - lo, "truncated", p.frame, p.ts, out)
                continue
            data = p.data if lo == p.off else p.data[lo - p.off:]
            half.next_off = p.end
            half.history.append((lo, data))
            out.append(StreamData(conn.conn_id, d, lo, data, p.frame, p.frame, p.ts))

    def _gap(self, conn, d, half, length, reason, frame, ts, out):
        st = conn.stats
        st.gaps[d] += 1
        st.gap_bytes[d] += length
        out.append(StreamGap(conn.conn_id, d, half.next_off, length, frame, ts, reason))
        half.next_off += length

    def _gap_to_first(self, conn, d, half, reason, frame, ts, out):
        first = half.pending[0].off
        if first > half.next_off:
            self._gap(conn, d, half, first - half.next_off, reason, frame, ts, out)
        self._drain(conn, d, half, out)

    def _release_acked(self, conn, d, half, frame, ts, out):
        """The peer acknowledged bytes before buffered data that the capture never showed: they
        will not be retransmitted, so the hole is lost now (not at the end of the capture)."""
        acked = half.offset(half.last_ack)
        if half.fin_off is not None and acked > half.fin_off:
            acked = half.fin_off  # the FIN's own sequence number is not data
        while half.pending and acked > half.next_off:
            first = half.pending[0].off
            self._gap(conn, d, half, min(acked, first) - half.next_off, "lost", frame, ts, out)
            self._drain(conn, d, half, out)
        if half.fin_off is not None:
            self._maybe_finished(conn, frame, ts, out)
        half.sync()

    # ---- retransmissions ----------------------------------------------------------------
    def _check_history(self, conn, d, half, off, data, frame, ts, out):
        """Compare re-sent bytes with what was delivered (as far as the history reaches)."""
        end = off + len(data)
        for h in reversed(half.history):
            if h.__class__ is int:
                hoff = h >> PACK_OFF
                pos = (h >> PACK_POS) & PACK_POS_MASK
                hdata = self.buf[pos:pos + (h & PACK_LEN_MASK)]
            else:
                hoff, hdata = h
            hend = hoff + len(hdata)
            if hend <= off:
                break
            if hoff >= end:
                continue
            lo, hi = max(off, hoff), min(end, hend)
            self._compare(conn, d, lo, data[lo - off:hi - off], hdata[lo - hoff:hi - hoff],
                          frame, ts, out)

    @staticmethod
    def _compare(conn, d, off, new, old, frame, ts, out):
        if new != old:
            st = conn.stats
            st.conflicts[d] += 1
            st.conflict_bytes[d] += len(new)
            out.append(StreamConflict(conn.conn_id, d, off, len(new), frame, ts))
