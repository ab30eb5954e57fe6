"""The reassembler's events: small slots objects, in the order things happened.

StreamData.data is a memoryview into the capture buffer (zero copy): copy what you keep beyond
the buffer's life. Offsets are stream offsets (bytes since the start of the direction's stream).
"""

from __future__ import annotations


class ConnOpen:
    __slots__ = ("conn_id", "a", "b", "syn_seen", "ts", "frame")

    def __init__(self, conn_id, a, b, syn_seen, ts, frame):
        self.conn_id = conn_id
        self.a = a  # (ip, port)
        self.b = b
        self.syn_seen = syn_seen  # True: a opened the connection (SYN or SYN-ACK seen)
        self.ts = ts
        self.frame = frame

    def __repr__(self):
        return f"ConnOpen({self.conn_id}, a={self.a}, b={self.b}, syn_seen={self.syn_seen})"


class StreamData:
    __slots__ = ("conn_id", "direction", "stream_offset", "data", "first_frame", "last_frame", "ts")

    def __init__(self, conn_id, direction, stream_offset, data, first_frame, last_frame, ts):
        self.conn_id = conn_id
        self.direction = direction
        self.stream_offset = stream_offset
        self.data = data
        self.first_frame = first_frame
        self.last_frame = last_frame
        self.ts = ts

    def __repr__(self):
        return (f"StreamData({self.conn_id}, dir={self.direction}, off={self.stream_offset}, "
                f"len={len(self.data)}, frame={self.first_frame})")


class StreamGap:
    """`length` bytes at `stream_offset` that the capture does not have. reason: lost (never seen,
    or not seen before the capture ended), truncated (cut by the snaplen), overflow (the
    out-of-order buffer was full)."""

    __slots__ = ("conn_id", "direction", "stream_offset", "length", "frame", "ts", "reason")

    def __init__(self, conn_id, direction, stream_offset, length, frame, ts, reason):
        self.conn_id = conn_id
        self.direction = direction
        self.stream_offset = stream_offset
        self.length = length
        self.frame = frame
        self.ts = ts
        self.reason = reason

    def __repr__(self):
        return (f"StreamGap({self.conn_id}, dir={self.direction}, off={self.stream_offset}, "
                f"len={self.length}, {self.reason})")


class StreamConflict:
    """A later segment carried different bytes for a range already received; the first bytes
    were kept."""

    __slots__ = ("conn_id", "direction", "stream_offset", "length", "frame", "ts")

    def __init__(self, conn_id, direction, stream_offset, length, frame, ts):
        self.conn_id = conn_id
        self.direction = direction
        self.stream_offset = stream_offset
        self.length = length
        self.frame = frame
        self.ts = ts

    def __repr__(self):
        return (f"StreamConflict({self.conn_id}, dir={self.direction}, off={self.stream_offset}, "
                f"len={self.length}, frame={self.frame})")


class Diverted:
    """A TCP segment of a connection the consumer asked to have handed over raw
    (`CaptureStreams(divert=...)`): not reassembled here. `segment` is the link layer's
    TcpSegment; its payload is a memoryview into the capture buffer (copy what you keep)."""

    __slots__ = ("segment", "frame", "ts")

    def __init__(self, segment, frame, ts):
        self.segment = segment
        self.frame = frame
        self.ts = ts

    def __repr__(self):
        return f"Diverted({self.segment!r}, frame={self.frame})"


class ConnClose:
    """reason: fin (both FINs delivered), rst, reused (a new SYN took the 4-tuple over), end (the
    capture ended with the connection open)."""

    __slots__ = ("conn_id", "reason", "ts", "frame", "stats")

    def __init__(self, conn_id, reason, ts, frame, stats):
        self.conn_id = conn_id
        self.reason = reason
        self.ts = ts
        self.frame = frame
        self.stats = stats

    def __repr__(self):
        return f"ConnClose({self.conn_id}, {self.reason}, frame={self.frame})"


class ConnStats:
    """Per-direction counters ([a->b, b->a]). Packets that arrive after the close (the last ACK,
    a retransmitted FIN) still add to `packets` and `late_packets` of the same object, so read
    it after the end of the capture for totals. `stream_bytes` = data_bytes + gap_bytes."""

    __slots__ = ("packets", "data_bytes", "stream_bytes", "retransmissions",
                 "retransmitted_bytes", "conflicts", "conflict_bytes", "gaps", "gap_bytes",
                 "truncated_bytes", "out_of_order", "keepalives", "ignored_bytes", "late_packets")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, [0, 0])

    def as_dict(self):
        return {name: list(getattr(self, name)) for name in self.__slots__}

    def __repr__(self):
        return f"ConnStats({self.as_dict()})"
