"""The whole capture layer in one loop: capture file -> TCP segments -> reassembly events.

The loop inlines the common case (Ethernet with or without VLAN tags, or Linux SLL; IPv4 without
options; a TCP segment of a known connection that is in order, or a pure ACK) because per-packet
function calls and objects dominate the cost in CPython. Everything else goes through
LinkDecoder.decode and Reassembler.feed, which define the behaviour; tests check that both paths
give the same events.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator

from kaudit import native
from kaudit.capture.events import Diverted, StreamData
from kaudit.capture.link import ACK, CONTROL_FLAGS, LinkDecoder, TcpSegment, tcp_records
from kaudit.capture.pcap import open_capture
from kaudit.capture.tcp import MASK, MAX_BUFFER, Reassembler

# A memory-mapped capture's pages stay resident once read, so a big file would count in the
# process's RSS as a whole. Every RELEASE_EVERY bytes read, the pages before the current record
# are dropped (MADV_DONTNEED): the mapping is a read-only shared file mapping, so anything still
# referenced there (unacknowledged segments, payload views) is simply read back from the page
# cache when touched again.
RELEASE_EVERY = 32 << 20
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_C = "kaudit.capture._cstreams"


class CaptureStreams:
    """`events()` yields ConnOpen/StreamData/StreamGap/StreamConflict/ConnClose for every TCP
    connection of the capture in `buf`. Afterwards: `issues` (file problems), `packets`,
    `tcp_packets`, `dropped` (non-TCP packets by reason), `last_ts`.

    `divert`: 4-tuples (src, sport, dst, dport; both orientations) whose segments are not
    reassembled but yielded as `Diverted` events, in capture order (the sources layer stitches
    connections that span rotated capture files this way). Those packets never reach the
    reassembler, so the fused fast path below never sees them: no cost for the others.

    A live capture (capture/live.py) walks one window of the stream at a time with the same
    `reassembler` and `link` decoder: `final` False leaves the connections open at the window's
    end and stops at an incomplete record (`capture.resume`); frames count on from `frame_base`.

    Raises only DecodeError (from open_capture, for input that is not a capture)."""

    def __init__(self, buf, max_buffer: int = MAX_BUFFER, divert=None, *, reassembler=None, link=None,
                 final: bool = True, frame_base: int = 0, prev_sec=None):
        self.capture = open_capture(buf)
        self.capture.final, self.capture.frame_base, self.capture.prev_sec = final, frame_base, prev_sec
        self.final = final
        self.divert = divert or None
        # the mapping whose read pages are released as the loop goes (None: not an mmap)
        self._mapped = buf if isinstance(buf, mmap.mmap) and _DONTNEED is not None else None
        self.link = link if link is not None else LinkDecoder()
        self.reassembler = reassembler if reassembler is not None else Reassembler(max_buffer)
        self.packets = frame_base  # frames read (the last frame number)
        self.last_ts = None

    @property
    def issues(self):
        return self.capture.issues

    @property
    def dropped(self):
        return self.link.dropped

    @property
    def compiled(self) -> bool:
        """Does this capture go through the compiled loop (kaudit/capture/_cstreams)?"""
        c = native.module(_C)
        return c is not None and self.reassembler._conn_cls is c.Conn

    def events(self) -> Iterator:
        if self.compiled:
            return native.module(_C).events(self)
        return self._events()

    def _events(self) -> Iterator:
        """The pure loop (the compiled twin: kaudit/capture/_cstreams.pyx)."""
        mv = self.capture.buf
        decode = self.link.decode
        v4 = self.link._v4
        v4_name = self.link._v4_name
        r = self.reassembler
        r.buf = mv
        feed = r.feed
        table = r._table
        # (src|dst, sport|dport) ints -> the reassembler's table entry; entries of closed
        # connections go stale and are refreshed through the general path
        fast_tab = {}
        frame = self.capture.frame_base
        ts = None
        control = CONTROL_FLAGS   # a local name for the hot loop
        ack_flag = ACK
        mask = MASK
        mapped = self._mapped
        divert = self.divert
        release_at = RELEASE_EVERY if mapped is not None else float("inf")
        try:
            for frame, ts, lt, start, end, origlen, tcp in tcp_records(self.capture):
                if start >= release_at:
                    _release(mapped, start)
                    release_at = start + RELEASE_EVERY
                if tcp is not None:
                    addrs, ports, seq, ack, flags, pstart, wire_end = tcp
                    key = (addrs, ports)
                    ent = fast_tab.get(key)
                    if ent is not None and not flags & control:
                        conn, dr, half, other = ent
                        n = wire_end - pstart
                        if conn.closed is None and (not n or seq == half.exp_seq):
                            # == Reassembler.feed's fast path ==
                            half.packets += 1
                            if n:
                                payload = mv[pstart:wire_end]
                                off = half.next_off
                                half.next_off = off + n
                                half.exp_seq = (seq + n) & mask
                                # packed like tcp.PACK_*: offset, buffer position, length
                                half.history.append((off << 64) | (pstart << 24) | n)
                                yield StreamData(conn.conn_id, dr, off, payload, frame, frame, ts)
                            elif half.base is None:
                                half.start(seq)
                            if flags & ack_flag:
                                other.peer_ack = ack
                                if other.base is None and conn.syn_seen:
                                    other.start(ack)   # tcp._acked_start
                                if other.pending:
                                    other.last_ack = ack
                                    out = []
                                    r._release_acked(conn, 1 - dr, other, frame, ts, out)
                                    yield from out
                            continue
                    src, dst = addrs >> 32, addrs & 0xFFFFFFFF
                    sport, dport = ports >> 16, ports & 0xFFFF
                    s = v4.get(src) or v4_name(src)
                    d = v4.get(dst) or v4_name(dst)
                    seg = TcpSegment(s, d, sport, dport, seq, ack, flags, mv[pstart:wire_end], 0)
                    if divert is not None and (s, sport, d, dport) in divert:
                        yield Diverted(seg, frame, ts)
                        continue
                    yield from feed(seg, frame, ts)
                    ent = table.get((s, sport, d, dport))
                    if ent is not None:
                        if len(fast_tab) > 2 * len(table) + 1024:
                            fast_tab.clear()
                        fast_tab[key] = ent
                    continue
                seg = decode(lt, mv[start:end], origlen)
                if seg is not None:
                    if divert is not None and (seg.src, seg.sport, seg.dst, seg.dport) in divert:
                        yield Diverted(seg, frame, ts)
                        continue
                    evs = feed(seg, frame, ts)
                    if evs:
                        yield from evs
        finally:
            self.packets, self.last_ts = frame, ts
        if ts is not None or self.final:
            r.last_frame, r.last_ts = frame, ts
        if self.final:
            yield from r.flush()

    @property
    def tcp_packets(self):
        return self.packets - sum(self.link.dropped.values())


def _release(mapped, upto: int) -> None:
    """Drop the resident pages of `mapped` before `upto` (whole pages only)."""
    n = upto - upto % mmap.PAGESIZE
    if n > 0:
        try:
            mapped.madvise(_DONTNEED, 0, n)
        except (OSError, ValueError):  # a closed map or a kernel that refuses: only memory is at stake
            pass
