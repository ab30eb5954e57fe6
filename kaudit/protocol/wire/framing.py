"""Kafka framing of one TCP direction: `size int32 | payload`, sans-IO and incremental.

`FrameSplitter` is fed the bytes of one direction in stream order, in chunks of any size
(`feed`), told about lost bytes (`gap`) and about the end of the stream (`finish`). Each call
returns the events that became known, in that order:

- `Frame`: a frame and the stream offset of its size field; `complete=False` when some of its
  bytes were lost (then `payload` is the part received before the first lost byte).
- `Gap`: `length` bytes lost at `offset` (as reported by the caller).
- `BadSize`: a size field that is negative or above `max_size`; never allocated.
- `Skipped`: bytes passed over while searching for a plausible frame header (after a gap, a bad
  size, or at the start of a stream joined mid-connection).
- `Incomplete` (from `finish`): the stream ended inside a frame.

Stream offsets count every byte fed plus every lost byte of known length, so the bytes of a
stream are covered exactly once by: received frame bytes (`Frame.wire_size - Frame.lost`),
`Gap`, `Skipped` and `Incomplete.received`.

Resynchronisation: after a gap that cuts a frame whose size is known, the splitter stays in step
(it knows where that frame ends); otherwise, and after a bad size, it tests every following
position with a plausibility check - `plausible_request` for the client's direction,
`plausible_response` (best with the correlation ids still awaiting an answer) for the broker's -
and resumes at the first that passes.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from kaudit import native
from kaudit.protocol.wire.headers import DEFAULT_MAX_FRAME, plausible_request, plausible_response

_I32 = struct.Struct(">i")
_COMPACT_AT = 1 << 16


@dataclass(slots=True)
class Frame:
    offset: int  # stream offset of the size field
    size: int  # the size field: length of the payload
    payload: bytes  # or a memoryview of the bytes fed (never changed afterwards)
    complete: bool = True
    lost: int = 0  # bytes of this frame that were lost (None: unknown amount)

    @property
    def wire_size(self) -> int:
        return 4 + self.size

    @property
    def end(self) -> int:
        return self.offset + 4 + self.size


@dataclass(slots=True)
class Gap:
    offset: int
    length: int | None  # None: an unknown number of bytes (offsets then ignore them)


@dataclass(slots=True)
class BadSize:
    offset: int
    size: int


@dataclass(slots=True)
class Skipped:
    offset: int
    length: int
    reason: str  # "gap" | "bad_size" | "start"


@dataclass(slots=True)
class Incomplete:
    offset: int
    size: int | None  # None when the size field itself is incomplete
    data: bytes  # the payload bytes received contiguously after the size field
    received: int  # bytes of this frame received (size field included)


_SYNC, _DRAIN, _RESYNC = 0, 1, 2


class FrameSplitter:
    """Split one direction of a Kafka connection into frames (see the module docstring).

    direction: "request" (client to broker) or "response"; it chooses the resync check.
    correlation_ids: for responses, a live container of the correlation ids still awaiting an
        answer (the caller keeps it up to date, requests first): a resync candidate must carry
        one of them (at the start of a stream joined mid-connection, see plausible_response).
    synced: False when the stream was joined mid-connection (the first bytes are searched).
    check: a custom `(buf, offset) -> bool | None` plausibility check (None = need more bytes;
        False must be final). It only sees positions that pass a cheap prefilter: a size high
        byte that fits `max_size`, then for requests zero high bytes of api key and version, for
        responses a non-negative correlation id.
    """

    def __init__(self, direction: str = "request", *, max_size: int = DEFAULT_MAX_FRAME,
                 synced: bool = True, correlation_ids=None, check=None):
        if direction not in ("request", "response"):
            raise ValueError(f"direction must be 'request' or 'response', not {direction!r}")
        self.direction = direction
        self.max_size = max_size
        if check is None:
            if direction == "request":
                def check(buf, off):
                    return plausible_request(buf, off, max_size)
            else:
                def check(buf, off):
                    # joined mid-connection: the first responses may answer unseen requests
                    return plausible_response(buf, off, correlation_ids, max_size,
                                              chain=self._skip_reason == "start")
        self._check = check
        hi = min(max_size >> 24, 0x7F)
        hi_class = re.escape(bytes([0])) if hi == 0 else b"\\x00-" + re.escape(bytes([hi]))
        if direction == "request":
            # size high byte, api_key high byte 0, api_version high byte 0
            pattern = b"(?=[" + hi_class + b"][\\s\\S]{3}\\x00[\\s\\S]\\x00)"
            self._lookahead = 7
        else:
            pattern = b"(?=[" + hi_class + b"][\\s\\S]{3}[\\x00-\\x7f])"
            self._lookahead = 5
        self._prefilter = re.compile(pattern)
        self._buf = bytearray()
        self._base = 0  # stream offset of _buf[0]
        self._pos = 0  # parse position in _buf
        self._end = 0  # stream offset after the last byte fed or lost
        self._state = _SYNC if synced else _RESYNC
        self._skip_start = 0
        self._skip_reason = "start"
        self._scan = 0  # resync: positions before this in _buf were rejected
        # synced and waiting: bytes still missing before the next frame (or its size) is whole;
        # `feed` only appends while fewer arrive (0: no such shortcut)
        self._need = 0
        # drain state (a frame cut by a gap whose end is known)
        self._d_offset = self._d_size = self._d_remaining = 0
        self._d_lost = 0
        self._d_prefix = b""

    @property
    def offset(self) -> int:
        """Stream offset just after the bytes fed (and lost) so far."""
        return self._end

    @property
    def synced(self) -> bool:
        return self._state != _RESYNC

    # ---- input ---------------------------------------------------------------------------

    def feed(self, data) -> list:
        t = type(data)
        if t is not bytes and (t is not memoryview or not data.readonly or data.format != "B"):
            # frames may be slices of `data`: only of immutable bytes (a copy otherwise)
            data = bytes(data)
        n = len(data)
        if not n:
            return []
        self._end += n
        if n < self._need:  # the frame in progress is still incomplete: nothing to report
            self._need -= n
            self._buf += data
            return []
        events: list = []
        if self._state == _SYNC and self._pos == len(self._buf):
            # nothing buffered: whole frames are taken from `data` as they are (no copy)
            base = self._end - n
            max_size = self.max_size
            pos = 0
            while n - pos >= 4:
                size = _I32.unpack_from(data, pos)[0]
                if size < 0 or size > max_size or n - pos - 4 < size:
                    break
                events.append(Frame(base + pos, size, data[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            self._base, self._pos = base + pos, 0
            if pos == n:
                self._buf = bytearray()
                self._need = 0
                return events
            self._buf = bytearray(data[pos:])
            self._run(events)  # a frame still incomplete, or a size to report
            return events
        start = 0
        if self._state == _DRAIN:
            take = min(n, self._d_remaining)
            self._d_remaining -= take
            start = take
            if self._d_remaining == 0:
                events.append(Frame(self._d_offset, self._d_size, self._d_prefix, False,
                                    self._d_lost))
                self._d_prefix = b""
                self._state = _SYNC
                self._buf = bytearray()
                self._base = self._end - (n - take)
                self._pos = 0
            if start == n:
                return events
        self._buf += data[start:] if start else data
        self._run(events)
        return events

    def gap(self, length: int | None) -> list:
        """`length` bytes were lost at the current offset (None: an unknown amount)."""
        self._need = 0
        events: list = []
        x = self._end
        if length is not None and length <= 0:
            return events
        after = x + length if length is not None else x
        state = self._state
        if state == _DRAIN:
            frame_end = self._d_offset + 4 + self._d_size
            if length is not None and after < frame_end:
                self._d_lost += length
                self._d_remaining -= length
                events.append(Gap(x, length))
                self._end = after
                return events
            lost = None if length is None else self._d_lost + frame_end - x
            events.append(Frame(self._d_offset, self._d_size, self._d_prefix, False, lost))
            self._d_prefix = b""
            events.append(Gap(x, length))
            self._restart(after, "gap", synced=length is not None and after == frame_end)
            return events
        if state == _SYNC:
            buf, pos = self._buf, self._pos
            avail = len(buf) - pos
            if avail >= 4:
                size = _I32.unpack_from(buf, pos)[0]
                f_off = self._base + pos
                frame_end = f_off + 4 + size
                if length is not None and after < frame_end:
                    self._d_offset, self._d_size = f_off, size
                    self._d_prefix = bytes(buf[pos + 4:])
                    self._d_lost = length
                    self._d_remaining = frame_end - after
                    self._state = _DRAIN
                    self._buf = bytearray()
                    self._base, self._pos = after, 0
                    events.append(Gap(x, length))
                    self._end = after
                    return events
                lost = None if length is None else frame_end - x
                events.append(Frame(f_off, size, bytes(buf[pos + 4:]), False, lost))
                events.append(Gap(x, length))
                self._restart(after, "gap", synced=length is not None and after == frame_end)
                return events
            if avail:
                events.append(Skipped(self._base + pos, avail, "gap"))
            events.append(Gap(x, length))
            self._restart(after, "gap", synced=False)
            return events
        # resync in progress: everything buffered is passed over
        if x > self._skip_start:
            events.append(Skipped(self._skip_start, x - self._skip_start, self._skip_reason))
        events.append(Gap(x, length))
        self._restart(after, "gap", synced=False)
        return events

    def finish(self) -> list:
        """The stream ended: report an unfinished frame or an unfinished search."""
        events: list = []
        if self._state == _DRAIN:
            received = self._d_size + 4 - self._d_lost - self._d_remaining
            events.append(Incomplete(self._d_offset, self._d_size, self._d_prefix, received))
        elif self._state == _SYNC:
            avail = len(self._buf) - self._pos
            if avail:
                size = _I32.unpack_from(self._buf, self._pos)[0] if avail >= 4 else None
                events.append(Incomplete(self._base + self._pos, size,
                                         bytes(self._buf[self._pos + 4:]), avail))
        elif self._end > self._skip_start:
            events.append(Skipped(self._skip_start, self._end - self._skip_start,
                                  self._skip_reason))
        self._restart(self._end, "start", synced=True)
        return events

    # ---- internals -----------------------------------------------------------------------

    def _restart(self, offset: int, reason: str, synced: bool) -> None:
        self._buf = bytearray()
        self._base = offset
        self._pos = 0
        self._scan = 0
        self._end = offset
        self._state = _SYNC if synced else _RESYNC
        self._skip_start = offset
        self._skip_reason = reason
        self._need = 0

    def _run(self, events: list) -> None:
        buf = self._buf
        max_size = self.max_size
        self._need = 0
        while True:
            if self._state == _SYNC:
                pos = self._pos
                avail = len(buf) - pos
                if avail < 4:
                    self._need = 4 - avail
                    break
                size = _I32.unpack_from(buf, pos)[0]
                if size < 0 or size > max_size:
                    events.append(BadSize(self._base + pos, size))
                    self._state = _RESYNC
                    self._skip_start = self._base + pos
                    self._skip_reason = "bad_size"
                    self._scan = pos + 1
                    continue
                if avail < 4 + size:
                    self._need = 4 + size - avail
                    break
                if pos == 0 and avail == 4 + size:
                    # the buffer is this frame: handed over whole, a new buffer takes its place
                    events.append(Frame(self._base, size, memoryview(buf).toreadonly()[4:]))
                    self._base += avail
                    buf = self._buf = bytearray()
                    self._pos = 0
                    continue
                events.append(Frame(self._base + pos, size, bytes(buf[pos + 4 : pos + 4 + size])))
                self._pos = pos + 4 + size
            else:
                found = self._search()
                if found is None:
                    break
                if self._base + found > self._skip_start:
                    events.append(Skipped(self._skip_start, self._base + found - self._skip_start,
                                          self._skip_reason))
                self._pos = found
                self._state = _SYNC
        self._compact()

    def _search(self) -> int | None:
        """First position from `_scan` that passes the check; None if undecided or none yet."""
        buf = self._buf
        n = len(buf)
        check = self._check
        p = self._scan
        limit = n - self._lookahead  # the prefilter needs its lookahead bytes
        search = self._prefilter.search
        while p < limit:
            m = search(buf, p, limit + self._lookahead)
            if m is None or m.start() >= limit:
                p = limit
                break
            p = m.start()
            r = check(buf, p)
            if r is True:
                return p
            if r is None:
                self._scan = p
                return None
            p += 1
        while p < n:  # the tail: too short for the prefilter, decide one by one
            r = check(buf, p)
            if r is True:
                return p
            if r is None:
                self._scan = p
                return None
            p += 1
        self._scan = n
        return None

    def _compact(self) -> None:
        drop = self._scan if self._state == _RESYNC else self._pos
        if drop and (drop >= _COMPACT_AT or drop == len(self._buf)):
            del self._buf[:drop]
            self._base += drop
            self._pos = max(self._pos - drop, 0)
            self._scan = max(self._scan - drop, 0)


def new_splitter(direction: str = "request", **kw) -> FrameSplitter:
    """A FrameSplitter, or its compiled twin (kaudit/protocol/_cframing.pyx: the same attributes,
    events and behaviour) when the compiled core is in use."""
    c = native.module("kaudit.protocol._cframing")
    return (FrameSplitter if c is None else c.Splitter)(direction, **kw)
