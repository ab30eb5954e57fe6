"""One TCP connection seen as a Kafka conversation: which side is the client, frames of each
direction, requests paired with their responses by correlation id.

Fed the capture layer's events for one connection; hands finished exchanges to a sink as
`Exchange` objects (request and/or response with frame numbers and times) and problems as issue
dicts. Secrets: frames that follow a SaslHandshake v0 are raw SASL tokens (both ways, until the
client sends a Kafka request again); they are never decoded or kept.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

from kaudit import native
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire import (
    BadSize,
    Frame,
    Incomplete,
    Skipped,
    decode_request,
    decode_response,
    peek_correlation_id,
    plausible_request,
)
from kaudit.protocol.wire.framing import new_splitter
from kaudit.sources.conversation_tls import TlsConversation

API_PRODUCE, API_SASL_HANDSHAKE = 0, 17
DECIDE_BYTES = 64 * 1024  # data held back while deciding who the client is
MAX_ORPHANS = 64  # unpaired responses held until the end of the connection (then reported)
MAX_ORPHAN_BYTES = 4 << 20
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class Exchange:
    request: object | None       # protocol.wire.Request
    response: object | None      # protocol.wire.Response
    request_frame: int | None
    response_frame: int | None
    request_ts: float | None
    response_ts: float | None
    request_size: int | None
    response_size: int | None
    complete: bool
    decode_error: str | None
    expects_response: bool = True
    correlation_id: int | None = None  # for a response whose request is not in the capture


def endpoint(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class _Direction:
    """Where the bytes of one direction came from: stream offsets -> capture frames and times."""

    __slots__ = ("chunks", "splitter", "held", "bytes")

    def __init__(self):
        self.chunks = deque()  # (start, end, first_frame, last_frame, ts)
        self.splitter = None
        self.held = []         # events held back until the roles are known
        self.bytes = 0

    def add(self, start: int, end: int, first: int, last: int, ts: float) -> None:
        self.chunks.append((start, end, first, last, ts))

    def locate(self, start: int, end: int):
        """(frame number, time) of the packet carrying the last byte of [start, end)."""
        chunks = self.chunks
        while len(chunks) > 1 and chunks[0][1] <= start:
            chunks.popleft()
        for c in chunks:
            if c[1] >= end:
                return c[3], c[4]
        if chunks:
            return chunks[-1][3], chunks[-1][4]
        return None, None


def new_direction():
    """A _Direction, or its compiled twin (kaudit/sources/_cpcap.pyx) with the compiled core."""
    c = native.module("kaudit.sources._cpcap")
    return _Direction() if c is None else c.Direction()


class Conversation(TlsConversation):
    def __init__(self, conn_id: int, a, b, syn_seen: bool, kafka_ports, options, sink):
        self.conn_id = conn_id
        self.a, self.b = a, b
        self.syn_seen = syn_seen
        self.kafka_ports = kafka_ports
        self.options = options
        self.sink = sink
        self.dirs = (new_direction(), new_direction())
        self.cstate = None         # the compiled decode's state of this conversation (_cpcap)
        self.client_dir = None     # 0: a is the client; 1: b is
        self._name = None          # "client -> server", once asked for
        self.protocol = None       # kafka | tls | other (None: undecided)
        self.pending = {}          # correlation id -> (Request, frame, ts, size, complete)
        self.sasl_tokens = False   # after SaslHandshake v0: bare SASL frames follow
        self.sasl_replies = 0      # the client's raw SASL tokens not yet answered (by raw tokens)
        self.last_corr = -1        # highest correlation id of a decoded request (resync check)
        self.first_dir = None      # the direction of the first data seen
        self.orphans = []          # responses with no request (yet): paired at the end if one turns up
        self.requests = self.responses = self.unanswered = 0
        # TLS (protocol "tls"): the record layer (capture/tls) when the connection is TLS, its
        # key log (options.tls_keys, or the Session's with a pcapng's own secrets), and where the
        # decrypted bytes of each direction are (their offsets for the frame locator)
        self.tls = None
        self.tls_keys = getattr(options, "tls_keys", None)
        self.tls_off = [0, 0]
        self.tls_other = False   # decrypted, but not Kafka (TLS off the Kafka ports)
        self.tls_joined = False  # TLS recognised mid-record (a capture joined mid-connection)
        # The roles a Kafka port implies. Kafka is only decided on the first bytes: a TLS client
        # on the Kafka port (a record header read as a size is >= 335 MB) is reported as TLS,
        # not as Kafka frames of absurd sizes.
        self.port_client = None
        if syn_seen and b[1] in kafka_ports:
            self.port_client = 0
        elif not syn_seen and b[1] in kafka_ports and a[1] not in kafka_ports:
            self.port_client = 0
        elif not syn_seen and a[1] in kafka_ports and b[1] not in kafka_ports:
            self.port_client = 1

    # ---- identity ----------------------------------------------------------------------

    @property
    def client(self):
        return self.b if self.client_dir == 1 else self.a

    @property
    def server(self):
        return self.a if self.client_dir == 1 else self.b

    @property
    def name(self) -> str:
        name = self._name
        if name is None:  # kept until the roles change
            name = self._name = f"{endpoint(*self.client)} -> {endpoint(*self.server)}"
        return name

    def _decide(self, client_dir: int, protocol: str = "kafka") -> None:
        self.client_dir = client_dir
        self._name = None
        self.protocol = protocol
        if protocol == "tls":
            self._tls_start()
        if protocol != "kafka":
            return
        self._splitters(client_dir, self.syn_seen)

    def _splitters(self, client_dir: int, synced: bool) -> None:
        max_size = self.options.max_frame_bytes
        self.dirs[client_dir].splitter = new_splitter("request", max_size=max_size, synced=synced,
                                                      check=self._request_check)
        self.dirs[1 - client_dir].splitter = new_splitter(
            "response", max_size=max_size, synced=synced, correlation_ids=self.pending)

    # ---- events from the capture layer -----------------------------------------------------

    def data(self, ev) -> None:
        """A StreamData event."""
        self.feed(ev.direction, ev.stream_offset, ev.data, ev.first_frame, ev.last_frame, ev.ts)

    def feed(self, direction: int, off: int, data, first_frame: int, last_frame: int, ts: float) -> None:
        """The fields of a StreamData event."""
        d = self.dirs[direction]
        n = len(data)
        d.bytes += n
        protocol = self.protocol
        if protocol == "kafka":
            d.add(off, off + n, first_frame, last_frame, ts)
            events = d.splitter.feed(data)
            if events:
                self._frames(direction, events)
            return
        if protocol == "tls":
            self._tls_data(direction, data, first_frame, last_frame, ts)
            return
        if protocol is None:
            if self.first_dir is None:
                self.first_dir = direction
            d.held.append(("data", off, bytes(data), first_frame, last_frame, ts))
            self._try_decide(direction)

    def delivered_before(self, direction: int, offset: int) -> int | None:
        """The frame that carried the last byte before stream offset `offset` (a hole's start),
        Kafka connections only; None: nothing delivered before it."""
        if self.protocol != "kafka" or offset <= 0:
            return None
        return self.dirs[direction].locate(offset - 1, offset)[0]

    def gap(self, ev) -> None:
        d = self.dirs[ev.direction]
        if self.protocol is None:
            d.held.append(("gap", ev.stream_offset, ev.length, ev.frame, ev.frame, ev.ts))
            return
        if self.protocol == "kafka":
            self._frames(ev.direction, d.splitter.gap(ev.length))
        elif self.protocol == "tls":
            self.tls.gap(ev.direction, ev.stream_offset, ev.length)
            self._tls_notes(ev.frame)

    def _held_data(self, direction: int) -> bytes:
        return b"".join(h[2] for h in self.dirs[direction].held if h[0] == "data")

    def _tls(self, data: bytes) -> bool:
        """A TLS record header (content type 20-23, version 3.x) where a frame would start;
        as a Kafka size it would exceed the frame bound."""
        return (len(data) >= 2 and 0x14 <= data[0] <= 0x17 and data[1] == 0x03
                and data[0] << 24 > self.options.max_frame_bytes)

    def _try_decide(self, direction: int, final: bool = False) -> None:
        data = self._held_data(direction)
        if self._tls(data):
            client = self.port_client if self.port_client is not None else (
                direction if self.syn_seen is False else 0)
            self._decide(client, "tls")
            return
        if self.port_client is not None:
            if not final and len(data) == 1 and 0x14 <= data[0] <= 0x17:
                return  # one byte of what may be a TLS record header: wait for the next
            if not self.syn_seen:
                joined = self._tls_joined(direction, data, final)
                if joined is not False:
                    return   # TLS joined mid-record (decided), or more bytes are needed to tell
            self._decide(self.port_client)
        elif self.syn_seen:  # the opener speaks first in Kafka
            looks = plausible_request(data, 0, self.options.max_frame_bytes)
            if looks is True:
                # the acceptor's bytes first: the opener's were lost (a response can read as a
                # request); the opener (a, direction 0) is the client all the same
                self._decide(0)
            elif final:
                return  # finish() tries the other direction, then settles
            elif looks is False and direction == 0:
                self._decide(0, "other")
            elif looks is False and self._held_bytes() > DECIDE_BYTES:
                self._decide(0, "other")
        else:
            client = self._orient(final or self._held_bytes() > DECIDE_BYTES)
            if client is None:
                return
            if client < 0:
                self._decide(0, "other")
            else:
                self._decide(client)
        if self.protocol == "kafka":
            self._replay()

    def _held_bytes(self) -> int:
        return self.dirs[0].bytes + self.dirs[1].bytes  # all held while undecided

    def _orient(self, settle: bool) -> int | None:
        """Who is the client, without a handshake or a Kafka port: the client direction, -1 for
        no Kafka, None for not yet. A response can look like a request too (a correlation id
        below ~13 reads as a Produce header), so a direction that looks like requests is only
        trusted once the other one does not; when both do, the one whose correlation ids come
        back in the other's frames is the client, and when nothing tells, the first speaker."""
        data = [self._held_data(0), self._held_data(1)]
        max_size = self.options.max_frame_bytes
        looks = [plausible_request(x, 0, max_size) if x else None for x in data]
        cands = [i for i in (0, 1) if looks[i] is True]
        if len(cands) == 2:
            votes = [len(_frame_ints(data[c], 8) & _frame_ints(data[1 - c], 4)) for c in (0, 1)]
            if votes[0] != votes[1]:
                return 0 if votes[0] > votes[1] else 1
            return self.first_dir if settle else None
        if cands:
            return cands[0] if settle or looks[1 - cands[0]] is False else None
        return -1 if settle else None

    def _replay(self) -> None:
        """Feed the data held while the roles were unknown."""
        for i in (self.client_dir, 1 - self.client_dir):  # requests first: pairing needs them
            held, self.dirs[i].held = self.dirs[i].held, []
            for kind, off, payload, first_f, last_f, ts in held:
                d = self.dirs[i]
                if kind == "data":
                    d.add(off, off + len(payload), first_f, last_f, ts)
                    self._frames(i, d.splitter.feed(payload))
                else:
                    self._frames(i, d.splitter.gap(payload))

    def finish(self) -> None:
        """The connection ended (or the capture did): flush partial frames and unanswered requests."""
        for i in (0, 1):
            if self.protocol is None and self.dirs[i].held:
                self._try_decide(i, final=True)
        if self.protocol is None:
            if self.port_client is not None:  # on a Kafka port, even if (almost) silent
                self._decide(self.port_client)
                self._replay()
            else:
                self._decide(0, "other")
        if self.protocol == "tls":
            self._tls_finish()
        if self.protocol != "kafka":
            return
        for i in (self.client_dir, 1 - self.client_dir):
            self._frames(i, self.dirs[i].splitter.finish())
        orphans, self.orphans = self.orphans, None
        for ev, frame_no, ts in orphans:  # a cut request surfaces only now: pair what we can
            self._response(ev, frame_no, ts, counted=True)
        for corr, (req, frame, ts, size, complete) in sorted(self.pending.items(), key=lambda kv: kv[1][1] or 0):
            self.unanswered += 1
            self.sink.exchange(self, Exchange(req, None, frame, None, ts, None, size, None, complete, None))
        self.pending.clear()

    # ---- frames ----------------------------------------------------------------------------

    def _frames(self, direction: int, events) -> None:
        is_request = direction == self.client_dir
        d = self.dirs[direction]
        for ev in events:
            if isinstance(ev, Frame):
                frame_no, ts = d.locate(ev.offset, ev.end if ev.complete else ev.offset + 4 + len(ev.payload))
                if is_request:
                    self._request(ev, frame_no, ts)
                else:
                    self._response(ev, frame_no, ts)
            elif isinstance(ev, Skipped):
                frame_no, ts = d.locate(ev.offset, ev.offset + max(ev.length, 1))
                self.sink.issue(self, frame_no, "skipped-bytes", ev.length, ev.offset,
                                f"{ev.length} bytes passed over while resynchronising ({ev.reason})")
            elif isinstance(ev, BadSize):
                frame_no, ts = d.locate(ev.offset, ev.offset + 4)
                self.sink.issue(self, frame_no, "bad-frame-size", None, ev.offset,
                                f"frame size {ev.size} is not plausible (bound {self.options.max_frame_bytes})")
            elif isinstance(ev, Incomplete):
                frame_no, ts = d.locate(ev.offset, ev.offset + max(ev.received, 1))
                what = "request" if is_request else "response"
                self.sink.issue(self, frame_no, "incomplete-frame", ev.received, ev.offset,
                                f"capture ends inside a {what} frame ({ev.received} of "
                                f"{'?' if ev.size is None else ev.size + 4} bytes)")
                if is_request and ev.size is not None and ev.data:
                    # The header of a cut request still names it: keep it, so that its response
                    # (the other direction may go on) pairs with it, marked incomplete.
                    self._request(Frame(ev.offset, ev.size, ev.data, complete=False), frame_no, ts)

    def _request_check(self, buf, off):
        """The request splitter's resync check: a plausible header whose correlation id is above
        the last decoded one (clients count up per connection). Runs of zeros in a lost
        request's tail otherwise pass for a Produce v0 header with correlation id 0, and the
        bogus frame swallows the real requests that follow."""
        r = plausible_request(buf, off, self.options.max_frame_bytes)
        if r is True and _I32.unpack_from(buf, off + 8)[0] <= self.last_corr:
            return False
        return r

    def _request(self, ev: Frame, frame_no, ts) -> None:
        self.requests += 1
        if self.sasl_tokens:
            # After SaslHandshake v0 the mechanism's messages travel as bare frames until the
            # exchange is over (one for PLAIN, two for SCRAM, more for GSSAPI): every frame that
            # is not a plausible request is a token - credentials, never decoded or kept.
            if plausible_request(_I32.pack(ev.size) + bytes(ev.payload), 0,
                                 self.options.max_frame_bytes) is not True:
                self.sasl_replies += 1
                self.sink.issue(self, frame_no, "sasl-token", ev.size, ev.offset,
                                "raw SASL token after SaslHandshake v0 (redacted, not decoded)")
                return
            self.sasl_tokens = False
        try:
            req, _ = decode_request(ev.payload, strict=False, deep=self.options.deep,
                                    max_batch_bytes=self.options.max_batch_bytes)
        except DecodeError as e:
            self.sink.issue(self, frame_no, "undecodable-request", ev.size, ev.offset,
                            f"request header does not decode: {e.message}")
            return
        if req.correlation_id > self.last_corr:
            self.last_corr = req.correlation_id
        if req.api_key == API_SASL_HANDSHAKE and req.api_version == 0:
            self.sasl_tokens = True
        acks0 = req.api_key == API_PRODUCE and req.body is not None and req.body.get("acks") == 0
        error = _error_text(req.error)
        if acks0:  # acks=0: the broker sends no response, by design
            self.sink.exchange(self, Exchange(req, None, frame_no, None, ts, None, ev.size, None,
                                              ev.complete, error, expects_response=False))
            return
        old = self.pending.pop(req.correlation_id, None)
        if old is not None:  # a reused correlation id: the earlier request got no answer
            self.unanswered += 1
            self.sink.exchange(self, Exchange(old[0], None, old[1], None, old[2], None, old[3], None, old[4], None))
        self.pending[req.correlation_id] = (req, frame_no, ts, ev.size, ev.complete)

    def _response(self, ev: Frame, frame_no, ts, counted: bool = False) -> None:
        if not counted:
            self.responses += 1
        if self.sasl_replies:
            # The broker's raw SASL token answering the client's (empty for PLAIN, the SCRAM
            # server messages): no correlation id to read, a secret to keep out of the rows.
            self.sasl_replies -= 1
            self.sink.issue(self, frame_no, "sasl-token", ev.size, ev.offset,
                            "raw SASL token from the broker after SaslHandshake v0 (redacted, not decoded)")
            return
        try:
            corr = peek_correlation_id(ev.payload, 0)
        except DecodeError as e:
            self.sink.issue(self, frame_no, "undecodable-response", ev.size, ev.offset, e.message)
            return
        pending = self.pending.pop(corr, None)
        if (pending is None and self.orphans is not None and len(self.orphans) < MAX_ORPHANS
                and sum(len(o[0].payload) for o in self.orphans) + len(ev.payload) <= MAX_ORPHAN_BYTES):
            self.orphans.append((ev, frame_no, ts))
            return
        if pending is None:
            self.sink.exchange(self, Exchange(None, None, None, frame_no, None, ts, None, ev.size, ev.complete,
                                              "response whose request is not in the capture",
                                              correlation_id=corr))
            return
        req, req_frame, req_ts, req_size, req_complete = pending
        try:
            resp, _ = decode_response(ev.payload, req.api_key, req.api_version, strict=False,
                                      deep=self.options.deep, max_batch_bytes=self.options.max_batch_bytes)
            error = _error_text(req.error) or _error_text(resp.error)
        except DecodeError as e:
            resp, error = None, f"response header does not decode: {e.message}"
        self.sink.exchange(self, Exchange(req, resp, req_frame, frame_no, req_ts, ts, req_size, ev.size,
                                          req_complete and ev.complete, error))


def _frame_ints(buf: bytes, at: int, limit: int = 16) -> set:
    """The int32 at `at` in each of the first frames of `buf` read as a chain of size-prefixed
    frames from its start: correlation ids (at 8 for requests, 4 for responses)."""
    out, off = set(), 0
    while len(out) < limit and off + at + 4 <= len(buf):
        out.add(_I32.unpack_from(buf, off + at)[0])
        size = _I32.unpack_from(buf, off)[0]
        if size < 4:
            break
        off += 4 + size
    return out


def _error_text(err) -> str | None:
    if err is None:
        return None
    return f"{err.message} (byte {err.position})" if err.position >= 0 else err.message
