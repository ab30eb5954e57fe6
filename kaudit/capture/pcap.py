"""Capture files, sans-IO over one buffer (bytes, bytearray, mmap, memoryview).

Classic pcap (microsecond and nanosecond magic, either byte order) and pcapng (sections of either
byte order, interfaces with their own link type, if_tsresol and if_tsoffset; EPB, SPB and the
obsolete OPB; every other block skipped). Packet data are zero-copy memoryviews into the buffer.

Lenient at the boundary: a cut or corrupt file yields every packet it can, records a
`CaptureIssue` in `Capture.issues` and, for a corrupt header in the middle, resynchronises on the
next plausible record. Only `open_capture` raises, and only `DecodeError` subclasses.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

from kaudit.protocol.errors import DecodeError, Truncated

# A caplen above this is corruption, whatever the header's snaplen says (Wireshark's own bound
# is 256 KiB for most link types; loopback TSO captures stay well under it).
MAX_CAPLEN = 256 * 1024
# Resync looks this far ahead for the next plausible record before giving up.
RESYNC_WINDOW = 4 * 1024 * 1024
# During resync a record's seconds must be this close to the last good one.
RESYNC_MAX_SKEW = 86400
# A live capture (capture/live.py) walks what has arrived so far (`Capture.final` False): a record
# that runs past the end waits for more bytes, and so does a bad header until this much follows
# it, so that the resync sees what it would see in the whole file (its window and a record on
# each side of the candidate).
LIVE_LOOKAHEAD = RESYNC_WINDOW + 2 * (MAX_CAPLEN + 4096 + 16)

PCAPNG_SHB = 0x0A0D0D0A
_BOM = 0x1A2B3C4D
_IDB, _OPB, _SPB, _EPB = 1, 2, 3, 6
_DSB = 0x0000000A  # Decryption Secrets Block (pcapng spec, section 4.7)


class RawPacket:
    """One captured frame. `data` holds `caplen` bytes; `origlen` is the length on the wire."""

    __slots__ = ("frame_no", "ts", "linktype", "caplen", "origlen", "data", "iface")

    def __init__(self, frame_no, ts, linktype, caplen, origlen, data, iface=0):
        self.frame_no = frame_no  # 1-based, like Wireshark
        self.ts = ts  # float seconds since the epoch
        self.linktype = linktype
        self.caplen = caplen
        self.origlen = origlen
        self.data = data  # memoryview into the capture buffer
        self.iface = iface  # pcapng interface index (global across sections), 0 for pcap

    def __repr__(self):
        return (f"RawPacket(frame_no={self.frame_no}, ts={self.ts:.9f}, linktype={self.linktype}, "
                f"caplen={self.caplen}, origlen={self.origlen}, iface={self.iface})")


class CaptureIssue:
    """Something wrong in the file itself. `position` is the byte offset in the file; `frame_no` is
    the last frame yielded before it (0 if none); `kind` is truncated | corrupt | unsupported;
    `skipped` is how many bytes were not decoded because of it."""

    __slots__ = ("position", "message", "frame_no", "kind", "skipped")

    def __init__(self, position, message, frame_no=0, kind="corrupt", skipped=0):
        self.position = position
        self.message = message
        self.frame_no = frame_no
        self.kind = kind
        self.skipped = skipped

    def __repr__(self):
        return (f"CaptureIssue(position={self.position}, kind={self.kind!r}, "
                f"message={self.message!r}, frame_no={self.frame_no}, skipped={self.skipped})")


class Interface:
    """A pcapng interface (or the single link of a classic pcap)."""

    __slots__ = ("linktype", "snaplen", "units", "tsoffset", "name")

    def __init__(self, linktype, snaplen, units=1_000_000, tsoffset=0, name=None):
        self.linktype = linktype
        self.snaplen = snaplen
        self.units = units  # timestamp units per second (if_tsresol)
        self.tsoffset = tsoffset  # seconds added to every timestamp (if_tsoffset)
        self.name = name


def _as_view(buf) -> memoryview:
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1 or mv.format not in ("B", "b", "c"):
        mv = mv.cast("B")
    elif mv.format != "B":
        mv = mv.cast("B")
    return mv


def open_capture(buf) -> "Capture":
    """Sniff the format. Raises DecodeError for anything but pcap/pcapng (Truncated if the file
    header itself is cut)."""
    mv = _as_view(buf)
    head = bytes(mv[:4])
    if len(head) == 4:
        if head in _PCAP_MAGIC:
            return PcapCapture(mv, *_PCAP_MAGIC[head])
        if head == b"\x0a\x0d\x0d\x0a":
            return PcapngCapture(mv)
        if head in (b"\xa1\xb2\xcd\x34", b"\x34\xcd\xb2\xa1"):
            raise DecodeError("unsupported modified (Kuznetzov) pcap", 0)
    raise DecodeError("not a pcap or pcapng file", 0)


def iter_packets(buf, issues: list | None = None) -> Iterator[RawPacket]:
    """Every packet of the capture in `buf`; file problems are appended to `issues` if given."""
    cap = open_capture(buf)
    if issues is not None:
        cap.issues = issues
    return iter(cap)


class Capture:
    """Base of the two readers: iterate it for RawPackets, then look at `issues`."""

    format = "?"

    def __init__(self, mv: memoryview):
        self.buf = mv
        self.issues: list[CaptureIssue] = []
        self.interfaces: list[Interface] = []
        self.frames = 0  # packets yielded so far
        self.skipped_bytes = 0  # bytes not decoded because of corruption or truncation
        # A live capture's window (capture/live.py): `final` False means more bytes may follow
        # the buffer, so a walk stops at an incomplete record and `resume` says where (None: the
        # walk went through, or stopped for good); frames are numbered on from `frame_base`;
        # `prev_sec` is the last record's seconds (pcap resync); `head` the (offset, length)
        # of the current section's header and interface blocks (pcapng), which the next window
        # starts with.
        self.final = True
        self.resume = None
        self.frame_base = 0
        self.prev_sec = None
        self.head: list[tuple[int, int]] = []

    def _wait(self, off, frame) -> bool:
        """In a live window, whether the walk must stop at `off` until more bytes arrive (an
        incomplete record, or a bad one without the lookahead its resync needs)."""
        if self.final or len(self.buf) - off >= LIVE_LOOKAHEAD:
            return False
        self.resume, self.frames = off, frame
        return True

    def _issue(self, position, message, kind="corrupt", skipped=0):
        self.skipped_bytes += skipped
        self.issues.append(CaptureIssue(position, message, self.frames, kind, skipped))

    def records(self) -> Iterator[tuple]:
        """(frame_no, ts, linktype, start, end, origlen, iface) per packet: the packet's bytes are
        buf[start:end]. The cheap form of iteration, for hot loops."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[RawPacket]:
        mv = self.buf
        for frame, ts, lt, start, end, origlen, iface in self.records():
            yield RawPacket(frame, ts, lt, end - start, origlen, mv[start:end], iface)


# magic bytes -> (byte order, fraction units per second)
_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1_000_000),
    b"\xa1\xb2\xc3\xd4": (">", 1_000_000),
    b"\x4d\x3c\xb2\xa1": ("<", 1_000_000_000),
    b"\xa1\xb2\x3c\x4d": (">", 1_000_000_000),
}


class PcapCapture(Capture):
    format = "pcap"

    def __init__(self, mv, order, units):
        super().__init__(mv)
        if len(mv) < 24:
            raise Truncated(f"pcap file header cut: {len(mv)} of 24 bytes", 0, 24)
        self.order = order
        self.units = units
        self.nanosecond = units == 1_000_000_000
        major, minor, _zone, _sigfigs, snaplen, network = struct.unpack_from(order + "HHiIII", mv, 4)
        self.version = (major, minor)
        self.snaplen = snaplen
        # Upper bits of the link-type word carry FCS information, not the link type.
        self.linktype = network & 0xFFFF
        self.interfaces.append(Interface(self.linktype, snaplen, units))
        self._rec = struct.Struct(order + "IIII")

    def records(self):
        mv = self.buf
        n = len(mv)
        unpack = self._rec.unpack_from
        units = float(self.units)
        lt = self.linktype
        off = 24
        frame = self.frame_base
        sec = self.prev_sec
        while off + 16 <= n:
            prev_sec = sec
            sec, frac, caplen, origlen = unpack(mv, off)
            start = off + 16
            end = start + caplen
            if caplen > MAX_CAPLEN or end > n:
                what, value = self.irregular(off, frame, prev_sec)
                if what == "resync":
                    off, sec = value, prev_sec
                    continue
                if what == "cut":
                    frame += 1
                    yield value
                return   # "stop", or "more" (a live window waits for the rest)
            frame += 1
            yield frame, sec + frac / units, lt, start, end, origlen, 0
            off = end
        self.tail(off, frame)

    # The two steps off the plain path, shared with the compiled walk (kaudit/capture/_cstreams):
    # it reads plain records itself and calls these where the loop above does.
    def irregular(self, off, frame, prev_sec):
        """A record header at `off` whose caplen is absurd or runs past the end: ("resync",
        offset of the next plausible record), ("cut", the record of a file cut inside the packet:
        the last), ("stop", None) or, in a live window, ("more", None). Records the issue."""
        if self._wait(off, frame):
            return "more", None
        mv = self.buf
        n = len(mv)
        sec, frac, caplen, origlen = self._rec.unpack_from(mv, off)
        self.frames = frame
        cut = caplen <= MAX_CAPLEN and caplen <= origlen and frac < self.units
        # a plausible header running past the end is a cut file, unless records follow
        q = self._resync(off, prev_sec, weak=not cut)
        if q is not None:
            self._issue(off, f"corrupt record header (caplen {caplen}); resynchronised at {q}",
                        "corrupt", q - off)
            return "resync", q
        if cut:
            # The file ends inside this packet: yield what is there, like a snaplen cut.
            self._issue(off, f"capture cut inside a packet: caplen {caplen}, "
                             f"{n - off - 16} bytes left", "truncated", 0)
            self.frames = frame + 1
            return "cut", (frame + 1, sec + frac / float(self.units), self.linktype, off + 16, n, origlen, 0)
        self._issue(off, f"corrupt record header (caplen {caplen}); no record after it",
                    "corrupt", n - off)
        return "stop", None

    def tail(self, off, frame):
        """The walk ended at `off` after `frame` records: a cut record header is an issue."""
        self.frames = frame
        n = len(self.buf)
        if not self.final:
            self.resume = off
        elif off < n:
            self._issue(off, f"capture cut inside a record header ({n - off} of 16 bytes)",
                        "truncated", n - off)

    def _plausible(self, off, last_sec) -> int:
        """End of a plausible record at `off`, or -1. Used only while resynchronising."""
        mv = self.buf
        if off + 16 > len(mv):
            return -1
        sec, frac, caplen, origlen = self._rec.unpack_from(mv, off)
        if frac >= self.units or caplen > origlen or origlen > MAX_CAPLEN or caplen == 0:
            return -1
        if last_sec is not None and abs(sec - last_sec) > RESYNC_MAX_SKEW:
            return -1
        end = off + 16 + caplen
        return end if end <= len(mv) else -1

    def _resync(self, off, last_sec, weak):
        """Offset of the next plausible record after a bad header at `off`, or None. One plausible
        header is too easy to find in random bytes: a second must follow it, unless `weak` allows
        a last record that ends exactly at the end of the buffer."""
        n = len(self.buf)
        for q in self._candidates(off + 1, min(n, off + RESYNC_WINDOW), last_sec):
            end = self._plausible(q, last_sec)
            if end >= 0 and ((weak and end == n) or (end < n and self._plausible(end, last_sec) >= 0)):
                return q
        return None

    def _candidates(self, lo, hi, last_sec):
        """Positions worth testing: where the seconds' high bytes are near the last good ones (a
        regex scan, not a Python loop over every byte), or every position without a reference."""
        if last_sec is None:
            yield from range(lo, min(hi, lo + 256 * 1024) - 15)
            return
        top = last_sec >> 16
        pats = []
        for t in range(max(0, top - 2), min(0xFFFF, top + 2) + 1):
            pats.append(re.escape(struct.pack(self.order + "H", t)))
        shift = 2 if self.order == "<" else 0  # where the high half sits in the 4 bytes
        window = bytes(self.buf[lo + shift:hi])
        for m in re.finditer(b"(?=(" + b"|".join(pats) + b"))", window):
            yield lo + m.start()


class _NgWalk:
    """Where a pcapng walk is: offset, packets so far, the section's byte order, interfaces
    (and their fast-path facts: linktype, 2**32 / units, units, tsoffset, global id), the
    global index of the section's first interface, the last packet time, and whether the walk
    is over."""

    __slots__ = ("off", "frame", "order", "ifaces", "base", "last_ts", "fast_ifaces", "done",
                 "hdr", "epb", "u32", "full")

    def __init__(self):
        self.off = self.frame = self.base = 0
        self.last_ts = 0.0
        self.ifaces: list[Interface] = []
        self.fast_ifaces: list[tuple] = []
        self.done = False
        self.set_order("<")

    def set_order(self, order: str) -> None:
        self.order = order
        self.hdr = struct.Struct(order + "II").unpack_from
        self.epb = struct.Struct(order + "IIIII").unpack_from
        self.u32 = struct.Struct(order + "I").unpack_from
        self.full = struct.Struct(order + "7I").unpack_from  # an EPB's fixed part


class PcapngCapture(Capture):
    format = "pcapng"

    def __init__(self, mv):
        super().__init__(mv)
        if len(mv) < 28:
            raise Truncated(f"pcapng section header cut: {len(mv)} of 28 bytes", 0, 28)
        bom = bytes(mv[8:12])
        if bom not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
            raise DecodeError("pcapng section header with a bad byte-order magic", 8)
        self.sections = 0
        # called with (secrets type, bytes) for each Decryption Secrets Block (sources set it)
        self.on_secrets = None

    def records(self):
        mv = self.buf
        n = len(mv)
        st = _NgWalk()
        off, frame = 0, self.frame_base
        last_ts = 0.0
        full, u32, fast_ifaces = st.full, st.u32, st.fast_ifaces
        while off + 12 <= n:
            if off + 32 <= n:
                # fast path: a well-formed enhanced packet block of a known interface
                btype, blen, iface, tsh, tsl, caplen, origlen = full(mv, off)
                if (btype == _EPB and caplen + 32 <= blen and off + blen <= n and not blen & 3
                        and iface < len(fast_ifaces) and u32(mv, off + blen - 4)[0] == blen):
                    lt, hi, units, tsoffset, gid = fast_ifaces[iface]
                    # tsh * 2**32 / units as a float product: exact enough (1 ulp) and no bigint
                    last_ts = tsh * hi + tsl / units + tsoffset
                    frame += 1
                    yield frame, last_ts, lt, off + 28, off + 28 + caplen, origlen, gid
                    off += blen
                    continue
            st.off, st.frame, st.last_ts = off, frame, last_ts
            rec = self.block(st)
            if rec is not None:
                yield rec
            if st.done:
                return
            off, frame, last_ts = st.off, st.frame, st.last_ts
            full, u32, fast_ifaces = st.full, st.u32, st.fast_ifaces
        self.tail(off, frame)

    def tail(self, off, frame):
        """The walk ended at `off` after `frame` records: a cut block header is an issue."""
        self.frames = frame
        n = len(self.buf)
        if not self.final:
            self.resume = off
        elif 0 < n - off < 12:
            self._issue(off, f"capture cut inside a block header ({n - off} of 12 bytes)",
                        "truncated", n - off)

    # Everything off the fast path, one block at a time; shared with the compiled walk
    # (kaudit/capture/_cstreams), which reads plain packet blocks itself.
    def block(self, st: "_NgWalk"):
        """The block at `st.off` (any but a well-formed EPB of a known interface): its packet
        record or None; `st` moves on (`st.done`: the walk is over)."""
        mv = self.buf
        n = len(mv)
        off = st.off
        btype, blen = st.hdr(mv, off)
        if btype == PCAPNG_SHB:
            bom = bytes(mv[off + 8:off + 12])
            if bom == b"\x4d\x3c\x2b\x1a":
                st.set_order("<")
            elif bom == b"\x1a\x2b\x3c\x4d":
                st.set_order(">")
            else:
                if self._wait(off, st.frame):
                    st.done = True
                    return None
                self.frames = st.frame
                q = self._find_block(off + 4, st.order)
                self._issue(off, "section header with a bad byte-order magic" + (
                    f"; resynchronised at {q}" if q is not None else ""), "corrupt",
                    (q if q is not None else n) - off)
                if q is None:
                    st.done = True
                else:
                    st.off = q
                return None
            btype, blen = st.hdr(mv, off)
        if blen < 12 or blen & 3 or off + blen > n or st.u32(mv, off + blen - 4)[0] != blen:
            return self._bad_block(st, btype, blen)
        ifaces = st.ifaces
        rec = None
        if btype == _EPB or btype == _OPB:
            if blen < 32:
                st.off = self._skip_bad(off, blen, st.frame, "packet block too short")
                return None
            iface, tsh, tsl, caplen, origlen = st.epb(mv, off + 8)
            if btype == _OPB:  # the obsolete block's interface id is 16 bits (then drops)
                iface = struct.unpack_from(st.order + "H", mv, off + 8)[0]
            if caplen > blen - 32 or iface >= len(ifaces):
                st.off = self._skip_bad(off, blen, st.frame, "packet block: caplen past the block"
                                        if caplen > blen - 32 else f"unknown interface {iface}")
                return None
            ifc = ifaces[iface]
            st.last_ts = ((tsh << 32) | tsl) / ifc.units + ifc.tsoffset
            st.frame += 1
            rec = (st.frame, st.last_ts, ifc.linktype, off + 28, off + 28 + caplen, origlen, st.base + iface)
        elif btype == _IDB:
            self.head.append((off, blen))
            self._interface(mv, off, blen, st.order, ifaces)
            st.fast_ifaces = [(i.linktype, 4294967296 / i.units, i.units, i.tsoffset, st.base + k)
                              for k, i in enumerate(ifaces)]
        elif btype == PCAPNG_SHB:
            self.head = [(off, blen)]
            self.sections += 1
            st.base += len(ifaces)
            st.ifaces = []
            st.fast_ifaces = []
        elif btype == _SPB:
            # No interface id (always 0) and no timestamp: the previous packet's time is kept
            # so that times stay ordered.
            if not ifaces or blen < 16:
                st.off = self._skip_bad(off, blen, st.frame, "simple packet block without interface 0")
                return None
            origlen = st.u32(mv, off + 8)[0]
            caplen = min(origlen, blen - 16)
            if ifaces[0].snaplen:
                caplen = min(caplen, ifaces[0].snaplen)
            st.frame += 1
            rec = (st.frame, st.last_ts, ifaces[0].linktype, off + 12, off + 12 + caplen, origlen, st.base)
        elif btype == _DSB and blen >= 20 and self.on_secrets is not None:
            # Decryption Secrets Block: secrets type, length, the secrets (a TLS key log)
            stype, slen = st.epb(mv, off + 8)[:2]
            if slen <= blen - 20:
                self.on_secrets(stype, mv[off + 16:off + 16 + slen])
        # any other block type (statistics, name resolution, custom) is not needed here and
        # skipped whole
        st.off = off + blen
        return rec

    def _bad_block(self, st, btype, blen):
        """A block whose length is impossible: resynchronise, or end the walk (a cut file)."""
        mv = self.buf
        n = len(mv)
        off = st.off
        if self._wait(off, st.frame):
            st.done = True
            return None
        self.frames = st.frame
        q = self._find_block(off + 4, st.order)
        if q is not None:
            self._issue(off, f"corrupt block (type {btype:#x}, length {blen}); "
                             f"resynchronised at {q}", "corrupt", q - off)
            st.off = q
            return None
        st.done = True
        if off + blen > n and not blen & 3 and blen <= MAX_CAPLEN + 4096:
            self._issue(off, f"capture cut inside a block (type {btype:#x}, length {blen}, "
                             f"{n - off} bytes left)", "truncated", n - off)
            if btype == _EPB and off + 28 <= n and st.ifaces:
                # yield the cut packet's bytes, like a snaplen cut
                iface, tsh, tsl, caplen, origlen = st.epb(mv, off + 8)
                if iface < len(st.ifaces):
                    ifc = st.ifaces[iface]
                    st.frame += 1
                    self.frames = st.frame
                    return (st.frame, ((tsh << 32) | tsl) / ifc.units + ifc.tsoffset,
                            ifc.linktype, off + 28, min(n, off + 28 + caplen), origlen,
                            st.base + iface)
            return None
        self._issue(off, f"corrupt block (type {btype:#x}, length {blen}); "
                         "no block found after it", "corrupt", n - off)
        return None

    def _skip_bad(self, off, blen, frame, message):
        self.frames = frame
        self._issue(off, message, "corrupt", blen)
        return off + blen

    def _interface(self, mv, off, blen, order, ifaces):
        if blen < 20:
            self._issue(off, "interface description block too short", "corrupt", blen)
            ifaces.append(Interface(-1, 0))  # keeps the later interface ids aligned
            return
        linktype, _res, snaplen = struct.unpack_from(order + "HHI", mv, off + 8)
        ifc = Interface(linktype, snaplen)
        pos, end = off + 16, off + blen - 4
        while pos + 4 <= end:
            code, olen = struct.unpack_from(order + "HH", mv, pos)
            if code == 0 or pos + 4 + olen > end:
                break
            if code == 9 and olen >= 1:  # if_tsresol: 10^-v, or 2^-v with the top bit set
                v = mv[pos + 4]
                ifc.units = (1 << (v & 0x7F)) if v & 0x80 else 10 ** v
                if ifc.units == 0 or (v & 0x80 == 0 and v > 19):
                    self._issue(pos, f"unusable if_tsresol {v}", "corrupt")
                    ifc.units = 1_000_000
            elif code == 14 and olen >= 8:  # if_tsoffset, seconds
                ifc.tsoffset = struct.unpack_from(order + "q", mv, pos + 4)[0]
            elif code == 2 and olen:
                ifc.name = bytes(mv[pos + 4:pos + 4 + olen]).rstrip(b"\0").decode("utf-8", "replace")
            pos += 4 + ((olen + 3) & ~3)
        ifaces.append(ifc)
        self.interfaces.append(ifc)

    def _find_block(self, q, order):
        """Offset of the next whole, valid-looking block at or after `q`, or None. Any alignment:
        a corruption may have inserted or removed bytes."""
        mv = self.buf
        n = len(mv)
        hdr = struct.Struct(order + "II").unpack_from
        u32 = struct.Struct(order + "I").unpack_from
        types = (_EPB, _IDB, _SPB, _OPB, 4, 5, PCAPNG_SHB)
        pat = b"(?=(" + b"|".join(re.escape(struct.pack(order + "I", t)) for t in types) + b"))"
        hi = min(n, q + RESYNC_WINDOW)
        for m in re.finditer(pat, bytes(mv[q:hi])):
            p = q + m.start()
            if p + 12 > n:
                break
            btype, blen = hdr(mv, p)
            if blen >= 12 and not blen & 3 and p + blen <= n and u32(mv, p + blen - 4)[0] == blen:
                return p
        return None
