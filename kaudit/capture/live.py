"""A capture that arrives in pieces: a pcap or pcapng stream on a pipe (`tcpdump -w - | kaudit
pcap -`) or a file still being written (`kaudit pcap --follow`).

The bytes received are walked one *window* at a time by the very readers and the capture loop
of a file (pcap.py, streams.py and their compiled twin): a window is the stream's header (the
pcap file header, or the pcapng section header and interface blocks seen so far) followed by the
bytes not walked yet. The walk stops at a record that has not arrived whole (`Capture.final`
False: `Capture.resume`) and the rest waits for the next window; the reassembler and the link
decoder go on from window to window, so connections, sequence numbers and frame numbers run on.
Only the last window (end of stream, Ctrl-C) is walked as the end of a file: a cut record is then
reported, and the connections still open are closed.

What the file's walk keeps as positions in its one buffer - the reassembler's recent segments,
kept to tell identical retransmissions from conflicting ones - is copied out of a window before
the next one (`detach`), at most LIVE_HISTORY_BYTES per direction. Windows are immutable bytes:
payload views that the decoding above still holds stay valid.

Bounds by capture time, so that hours of traffic keep memory flat (`expire_idle`): a connection
with no packet for CONN_IDLE_S is closed (reason "idle": its unanswered requests are reported as
in a capture that ends there); a closed connection is forgotten CLOSED_LINGER seconds after its
close, as in a file.
"""

from __future__ import annotations

from kaudit.capture.tcp import CLOSED_LINGER, PACK_LEN_MASK, PACK_OFF, PACK_POS, PACK_POS_MASK

# Kafka brokers close a connection idle for connections.max.idle.ms (10 minutes by default), and
# clients refresh their metadata every metadata.max.age.ms (5 minutes): a connection silent for
# longer than both is over. Checked every IDLE_SWEEP_S of capture time.
CONN_IDLE_S = 660.0
IDLE_SWEEP_S = 30.0
# Recent segments kept per direction once a window is left, to compare retransmissions with (a
# file keeps the last 256 segments as positions in its mapping).
LIVE_HISTORY_BYTES = 64 << 10
_HEADER = {"pcap": 24, "pcapng": 28}

__all__ = ["LiveCapture", "detach", "expire_idle", "CONN_IDLE_S", "CLOSED_LINGER"]


class LiveCapture:
    """The bytes of a stream not walked yet, and what the next window starts with.

    `window(final)` -> (bytes, prefix length) or None (not enough to walk yet); after walking it,
    `walked(capture, prefix_len)` keeps the unconsumed tail. `issues` collects the capture's own
    issues with their positions in the stream; `dead` is set when the walk gave up (a corrupt
    header with no record after it: the file's walk stops there too), after which input is only
    counted (`skipped`)."""

    def __init__(self):
        self.pending = bytearray()
        self.prefix = b""
        self.base = 0          # stream offset of pending[0]
        self.received = 0
        self.frames = 0
        self.prev_sec = None
        self.dead = False
        self.skipped = 0
        self.issues: list = []
        self.format: str | None = None

    def push(self, data) -> None:
        self.received += len(data)
        if self.dead:
            self.skipped += len(data)
        else:
            self.pending += data

    def window(self, final: bool):
        if self.dead or (not self.pending and self.prefix):
            return None
        if not self.prefix:
            if not final and len(self.pending) < 28:
                return None   # the file header (or the section header) has not arrived yet
            return bytes(self.pending), 0
        return self.prefix + bytes(self.pending), len(self.prefix)

    def walked(self, cap, plen: int, last_ts) -> None:
        """After a walk of a window with a prefix of `plen` bytes: the walk's issues, the tail
        left for the next window and that window's prefix."""
        self.format = cap.format
        for issue in cap.issues:
            if issue.position < plen:
                continue   # in the prefix: reported when its bytes first came
            issue.position += self.base - plen
            self.issues.append(issue)
        n = len(self.pending)
        consumed = n if cap.resume is None else max(0, cap.resume - plen)
        if cap.resume is None and not cap.final:
            self.dead = True   # the walk stopped for good; the rest is not decoded, as in a file
            self.skipped += n - consumed
            consumed = n
        win = cap.buf
        if cap.format == "pcap":
            self.prefix = bytes(win[:24])
        elif cap.head:
            self.prefix = b"".join(bytes(win[o:o + ln]) for o, ln in cap.head)
        del self.pending[:consumed]
        self.base += consumed
        if last_ts is not None:
            self.prev_sec = int(last_ts)


def detach(reassembler, seen: dict) -> None:
    """Copy out of the current window what the reassembler keeps as positions in it or views of
    it (recent segments, buffered out-of-order bytes) for the connections that had packets since
    the last call (`seen`: conn_id -> packets then)."""
    buf = reassembler.buf
    for conn in reassembler._open.values():
        h0, h1 = conn.halves
        count = h0.packets + h1.packets
        if seen.get(conn.conn_id) == count:
            continue
        seen[conn.conn_id] = count
        _detach_half(h0, buf)
        _detach_half(h1, buf)
    reassembler.buf = None


def _detach_half(half, buf) -> None:
    hist = half.history
    if hasattr(hist, "detach"):   # the compiled reassembler's history: the same walk, in C
        hist.detach(buf, LIVE_HISTORY_BYTES)
    elif len(hist):
        keep, total = [], 0
        for h in reversed(hist):
            if h.__class__ is int:
                pos = (h >> PACK_POS) & PACK_POS_MASK
                off, data = h >> PACK_OFF, bytes(buf[pos:pos + (h & PACK_LEN_MASK)])
            else:
                off, data = h[0], h[1] if type(h[1]) is bytes else bytes(h[1])
            keep.append((off, data))
            total += len(data)
            if total >= LIVE_HISTORY_BYTES:
                break
        hist.clear()
        for x in reversed(keep):
            hist.append(x)
    _detach_pending(half)


def _detach_pending(half) -> None:
    for p in half.pending:
        if p.data is not None and type(p.data) is not bytes:
            p.data = bytes(p.data)


def expire_idle(reassembler, activity: dict, seen: dict, now: float, frame: int,
                idle: float = CONN_IDLE_S) -> list:
    """Close the connections that had no packet for `idle` seconds of capture time (reason
    "idle") and forget the closed ones past their linger; the events of the closes. `activity`:
    conn_id -> (packets, capture time they last changed), kept between calls."""
    out: list = []
    for conn in list(reassembler._open.values()):
        h0, h1 = conn.halves
        count = h0.packets + h1.packets
        prev = activity.get(conn.conn_id)
        if prev is None or prev[0] != count:
            activity[conn.conn_id] = (count, now)
        elif now - prev[1] >= idle:
            reassembler._close(conn, "idle", frame, now, out)
    reassembler._evict(now)
    for cid in [c for c in activity if c not in reassembler._open]:
        del activity[cid]
        seen.pop(cid, None)
    return out
