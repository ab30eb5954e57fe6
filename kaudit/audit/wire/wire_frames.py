"""Frame-level rules on the wire, per connection: requests left without a response, error
responses of the producer and transaction APIs, and what the capture could not show (gaps,
undecodable bytes, TLS)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Context, Fold, KeyedState, np_col, np_indices, np_mask
from kaudit.audit.producers.disk_sequences import fenced_epoch  # noqa: F401  (the rule this module also reports)
from kaudit.audit.wire.live_settle import ConnectionSettle
from kaudit.audit.registry import evidence, finding, rule
from kaudit.model import view
from kaudit.timefmt import duration, iso_s
from kaudit.audit.thresholds import REQUEST_TIMEOUT_MS

KEY = ("source", "connection")
FRAME_COLUMNS = KEY + (
    "request_frame", "response_frame", "request_ts", "response_ts", "api_key", "api_name",
    "api_version", "correlation_id", "client_id", "error_codes", "error_names", "transactional_id",
    "producer_id", "producer_epoch", "acks", "timeout_ms", "partitions", "partition_errors", "committed", "complete",
    "decode_error",
)
CONNECTION_COLUMNS = KEY + ("close_reason", "first_ts", "last_ts", "gaps", "gap_bytes", "protocol",
                            "first_frame", "syn_seen")
ISSUE_COLUMNS = KEY + ("position", "issue", "length", "message", "stream_offset")
# the rows as this fold reads them (fields checked at import)
Frame, Conn, Issue = view("frame", FRAME_COLUMNS), view("connection", CONNECTION_COLUMNS), view("decode_issue", ISSUE_COLUMNS)
ROWS = {"frame": Frame, "connection": Conn, "decode_issue": Issue}

# Produce, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit
PRODUCER_APIS = frozenset({0, 22, 24, 25, 26, 27, 28})
UNDECODABLE = {"skipped-bytes", "bad-frame-size", "incomplete-frame", "undecodable-request",
               "undecodable-response", "tls", "tls-stream-gap", "tls-decrypt-failed", "tls-not-records"}
GAPS = {"stream-gap", "tcp-conflict"}
# bytes of a connection the capture lost or could not frame: a response may be among them (a
# resynchronisation after a gap can take a record's bytes for a frame header of absurd size and
# read every later answer as the body of one frame the capture "ends inside")
UNREAD = {"stream-gap", "skipped-bytes", "bad-frame-size", "incomplete-frame"}
FENCED_CODES = {"47", "90"}  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED


@rule("unanswered-request", "warning", "wire", "a request that never got its response",
      "The client did not learn the outcome and may have retried (see retried-batch). Resolve "
      "what happened against the log dirs (`kaudit audit --pcap ... --segments ...`); check the "
      "broker's request latency and network around that time.")
def unanswered_request(frame: Frame, conn: Conn | None, answered_after: bool,
                       end_ts: float | None, lost_after: bool = False,
                       before_answers: bool = False) -> tuple[str, str] | None:
    """Invariant: a broker answers every request on a connection, in order (the request channel
    processes one request per connection at a time, kafka.network.SocketServer), except Produce
    with acks=0. A request is unanswered (warning) when a later request on the same connection was
    answered, when the connection was still in use past the request's timeout (its own
    timeout_ms, at least the clients' default request.timeout.ms of 30 s), or when it is a
    Produce whose connection closed first (the client cannot know whether it was stored; a
    connection whose ports a later connection reused counts as closed). Other requests whose
    connection closed before their timeout are info: a client shutting down or reconnecting
    abandons them. When the capture lost bytes of the connection after the request (or could
    not frame them: UNREAD), the response may be in the gap: info. So too when the capture joined
    the connection after it opened (no SYN) and the request comes before every answer it holds
    of it (`before_answers`) while a later one was answered: the broker's stream is known only
    from the first of its bytes the capture saw, so an answer lost before them leaves no gap
    to see - the capture cannot show it was never sent. `end_ts` is the last time
    the capture shows the connection in use (its close, or its latest request or response),
    not the capture's end: a capture that holds only a few packets of a connection says
    nothing of the rest.
    Returns (reason, severity).
    Benign causes, not flagged: acks=0, requests still in flight when the capture ended (or when
    the capture stopped showing their connection)."""
    if frame.response_frame is not None:
        return None
    if frame.api_key == 0 and frame.acks == 0:
        return None
    verdict = _unanswered(frame, conn, answered_after, end_ts)
    if verdict is not None and lost_after and verdict[1] == "warning":
        return (verdict[0] + "; but the capture lost bytes of this connection after the request "
                "(the response may be in the gap)", "info")
    if verdict is not None and before_answers and answered_after and verdict[1] == "warning":
        return (verdict[0] + "; but the capture joined this connection after it opened and holds "
                "none of the broker's answers on it before that one (the response may be in bytes "
                "the capture did not see)", "info")
    return verdict


def _unanswered(frame, conn, answered_after, end_ts):
    if answered_after:
        return "a later request on the connection was answered", "warning"
    wait_ms = max(frame.timeout_ms or 0, REQUEST_TIMEOUT_MS)
    ts = frame.request_ts
    if conn is not None and conn.close_reason in ("fin", "rst", "reused"):
        waited = None if conn.last_ts is None or ts is None else (conn.last_ts - ts) * 1000
        if conn.close_reason == "reused":
            # its close is not in the capture: a new connection took its ports over later
            how, waited = "the connection ended unseen (a later connection reused its ports)", None
        else:
            how = f"the connection closed ({conn.close_reason.upper()})"
        if waited is not None:
            how += f" {duration(waited)} later"
        if frame.api_key == 0:
            return how + ", before a response: the producer cannot know whether it was stored", "warning"
        if waited is not None and waited >= wait_ms:
            return how + f", after the {duration(wait_ms)} timeout", "warning"
        if waited is None:
            return how + " (a client closing or reconnecting abandons its requests)", "info"
        return how + ", before any timeout (a client closing or reconnecting abandons its requests)", "info"
    if end_ts is not None and ts is not None and (end_ts - ts) * 1000 > wait_ms:
        return (f"no response within {duration(wait_ms)} while the connection was still in use "
                f"({duration((end_ts - ts) * 1000)} later)"), "warning"
    return None


@rule("producer-error", "info", "wire", "an error response to a producer or transaction request",
      "Read it on the producer's timeline: retriable errors (NOT_LEADER_OR_FOLLOWER, "
      "CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS) are normal in small numbers; fatal "
      "ones (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED) end "
      "the producer.")
def producer_error(frame: Frame) -> bool:
    """Invariant: none — this rule puts every error answer of Produce, InitProducerId,
    AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers and TxnOffsetCommit on the
    producer's timeline (org.apache.kafka.common.protocol.Errors; KIP-98, KIP-360, KIP-588).
    Benign causes: retriable errors during leader moves and coordinator loading."""
    return frame.api_key in PRODUCER_APIS and bool(frame.error_codes)


@rule("stream-gap", "info", "wire", "bytes missing from a TCP stream in the capture",
      "The capture dropped packets (snaplen, ring buffer, interface drops) or started mid-stream; "
      "findings on that connection around the gap may be incomplete. Capture with a larger buffer "
      "(`tcpdump -B`) and full snaplen.")
def stream_gap(issue: Issue) -> bool:
    """Invariant: each direction of a TCP connection is a contiguous byte stream (RFC 9293);
    kaudit's reassembly never zero-fills what the capture lacks and reports it instead.
    Benign causes: a capture started or stopped while the connection was open."""
    return issue.issue in GAPS


@rule("undecodable-frame", "info", "wire", "Kafka bytes kaudit could not decode",
      "TLS connections need the keys (or a capture before TLS termination). For other bytes, "
      "check the evidence position; it may be a protocol version kaudit does not know yet.")
def undecodable_frame(issue: Issue) -> bool:
    """Invariant: every byte of a Kafka connection is a length-prefixed frame whose header and body
    decode for its (api_key, api_version) (org.apache.kafka.common.requests.RequestHeader,
    the message JSON specs). Reported: bytes skipped to resynchronise, impossible frame sizes,
    frames cut by the capture, bodies that do not decode, and TLS connections.
    Benign causes: TLS, a capture that starts mid-frame."""
    return issue.issue in UNDECODABLE


class ConnectionGroup:
    plain_runs = True   # runs of plain frames taken at once (`_frames`); False: row by row

    def __init__(self, key: tuple, ctx: Context):
        self.source, self.connection = key
        self.ctx = ctx
        # One capture can hold several TCP connections of the same 4-tuple (port reuse): the
        # sessions, told apart by their first packet's time.
        self.sessions: list[Conn] = []
        self.pending: list[list] = []   # [unanswered request, time a later request was answered]
        self.waiting: list[list] = []   # those no later request was answered after yet
        self.last_answered = None   # stream order (_stream_order) of the latest answered request
        self.first_answered = None  # and of the earliest
        self.last_activity = None   # latest request or response time seen on the connection
        self.gap_frames: list[int] = []   # packets where the capture lost bytes of it (UNREAD)
        self.out: list[dict] = []
        # failed InitProducerId answers (producer id -1) waiting for the producer id the client
        # obtains next on this connection: the error is that producer's (never "non-idempotent")
        self.orphans: list[tuple[str, dict]] = []

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        if kind == "frame":
            self._frames(t)
        for r in ROWS[kind].of(t) if kind != "frame" else ():
            if kind == "connection":
                self.sessions.append(r)
            else:
                self._issue(r)
        out, self.out = self.out, []
        return out

    def _frames(self, t: pa.Table) -> None:
        """`_frame` of each row, in order, with the runs of plain frames - answered, no error, decoded
        - taken at once while no request waits: they only move the connection's last activity
        and its latest answered request (the max of their times and stream orders)."""
        if not self.plain_runs:
            plain = np.zeros(t.num_rows, dtype=bool)
        elif PLAIN in t.column_names:   # computed once for the whole selection (`prepare`)
            plain = np_col(t, PLAIN, False, bool)
        else:
            plain = _plain(t)
        rts = np_col(t, "request_ts", np.nan, np.float64)
        odd = np.flatnonzero(~plain)
        cuts = odd.tolist() + [t.num_rows]
        row = _Rows(t, odd, bool(self.waiting))
        a = 0
        for b in cuts:
            while a < b and self.waiting:   # a plain frame answers what waits before it
                self._frame(row(a))
                a += 1
            if a < b:
                self._plain_run(t, rts, a, b)
            if b < t.num_rows:
                self._frame(row(b))
            a = b + 1

    def _plain_run(self, t: pa.Table, rts: np.ndarray, a: int, b: int) -> None:
        seg = t.slice(a, b - a)
        if self.orphans:
            api, pid = np_col(seg, "api_key", -1, np.int64), np_col(seg, "producer_id", -1, np.int64)
            got = np.flatnonzero((api == 22) & (pid >= 0))
            if len(got):
                g = int(got[0])
                self._adopt(int(pid[g]), int(np_col(seg, "producer_epoch", -1, np.int64)[g]))
        rsp = np_col(seg, "response_ts", np.nan, np.float64)
        top = float(max(np.nanmax(rts[a:b]), np.nanmax(rsp) if np.isfinite(rsp).any() else -np.inf))
        if self.last_activity is None or top > self.last_activity:
            self.last_activity = top
        rf = np_col(seg, "request_frame", 0, np.int64)
        corr = np_col(seg, "correlation_id", 0, np.int64)
        order = np.lexsort((corr, rf, rts[a:b]))
        j, i = int(order[-1]), int(order[0])
        k = (float(rts[a + j]), int(rf[j]), int(corr[j]))
        if self.last_answered is None or k > self.last_answered:
            self.last_answered = k
        k = (float(rts[a + i]), int(rf[i]), int(corr[i]))
        if self.first_answered is None or k < self.first_answered:
            self.first_answered = k

    def _common(self, r: Frame) -> dict:
        return dict(connection=self.connection, client_id=r.client_id, transactional_id=r.transactional_id,
                    producer_id=r.producer_id, producer_epoch=r.producer_epoch)

    def _frame(self, r: Frame) -> None:
        for t in (r.request_ts, r.response_ts):
            if t is not None and (self.last_activity is None or t > self.last_activity):
                self.last_activity = t
        if r.response_frame is None:
            # [request, answered after]: the time of the first later request that was answered
            # (frames come in request time order; one answered earlier in the stream order of a
            # tie counts too)
            p = [r, None]
            if self.last_answered is not None and r.request_ts is not None \
                    and self.last_answered > _stream_order(r):
                p[1] = self.last_answered[0]
            else:
                self.waiting.append(p)
            self.pending.append(p)
        elif r.request_ts is not None:
            k = _stream_order(r)
            if self.last_answered is None or k > self.last_answered:
                self.last_answered = k
            if self.first_answered is None or k < self.first_answered:
                self.first_answered = k
            if self.waiting:
                still = []
                for w in self.waiting:
                    if w[0].request_ts is not None and _stream_order(w[0]) < k:
                        w[1] = r.request_ts
                    else:
                        still.append(w)
                self.waiting = still
        if r.api_key == 22 and not r.error_codes and r.producer_id is not None and r.producer_id >= 0 and self.orphans:
            self._adopt(r.producer_id, r.producer_epoch)
        if producer_error(r):
            self._producer_error(r)
        if r.api_key != 0 and r.error_codes and set(r.error_codes.split(",")) & FENCED_CODES:
            self.out.append(finding(
                "fenced-epoch", f"{r.api_name} v{r.api_version} corr {r.correlation_id} "
                f"(transactional id {r.transactional_id} producer {r.producer_id} epoch "
                f"{r.producer_epoch}) on {self.connection} was rejected as fenced: {r.error_names}",
                severity="warning",
                evidence=[evidence(self.source, r.request_frame, "request"),
                          evidence(self.source, r.response_frame, "response")],
                details={"api": r.api_name, "broker": f"rejected ({r.error_names})"},
                first_ts_ms=_ms(r.request_ts), **self._common(r)))
        if r.decode_error:
            what = (f"{r.api_name} v{r.api_version} corr {r.correlation_id}"
                    if r.api_name else f"response corr {r.correlation_id}")
            frame_no = r.request_frame if r.request_frame is not None else r.response_frame
            self.out.append(finding(
                "undecodable-frame", f"{what} on {self.connection}: {r.decode_error}",
                evidence=[evidence(self.source, frame_no, "request" if r.request_frame is not None else "response")],
                first_ts_ms=_ms(r.request_ts if r.request_ts is not None else r.response_ts),
                **self._common(r)))

    def _producer_error(self, r: Frame) -> None:
        """A producer request answered with an error: its producer-error finding, or - an
        InitProducerId that names no producer id - one kept for the id the client gets next."""
        ev = [evidence(self.source, r.request_frame, "request"),
              evidence(self.source, r.response_frame, "response")]
        who = f"transactional id {r.transactional_id} " if r.transactional_id else ""
        pid = f"producer {r.producer_id} epoch {r.producer_epoch} " if r.producer_id is not None else ""
        failed = _failed_partitions(r.partition_errors)
        where = ""
        if failed:
            where = " (" + ", ".join(f"{t}-{p}: {c}" for t, p, c in failed[:8]) + \
                (f", … {len(failed) - 8} more" if len(failed) > 8 else "") + ")"
        one = dict(topic=failed[0][0], partition=failed[0][1]) if len(failed) == 1 else {}
        text = f"{r.api_name} v{r.api_version} corr {r.correlation_id} "
        kw = dict(evidence=ev, details={"api": r.api_name, "errors": r.error_names,
                                        "error_codes": r.error_codes,
                                        "partitions": [{"topic": t, "partition": p, "error_code": c}
                                                       for t, p, c in failed] or None},
                  first_ts_ms=int(r.request_ts * 1000), last_ts_ms=_ms(r.response_ts),
                  **one, **self._common(r))
        if r.api_key == 22 and (r.producer_id is None or r.producer_id < 0):
            # answered with an error, it names no producer id: the next one the client gets
            self.orphans.append((text + f"({who}client {r.client_id}) on {self.connection}: "
                                 f"{r.error_names}{where}", kw))
        else:
            self.out.append(finding("producer-error", text + f"({who}{pid}client {r.client_id}) on "
                                    f"{self.connection}: {r.error_names}{where}", **kw))

    def _adopt(self, pid: int | None, epoch: int | None) -> None:
        """The failed InitProducerId answers before it belong to producer `pid` (None: unknown)."""
        for text, kw in self.orphans:
            if pid is not None:
                kw = dict(kw, producer_id=pid, producer_epoch=None)
                text += f"; the client then obtained producer id {pid} (epoch {epoch})"
            self.out.append(finding("producer-error", text, **kw))
        self.orphans = []

    def _issue(self, r: Issue) -> None:
        if r.issue in UNREAD and r.position is not None:
            self.gap_frames.append(r.position)
        if stream_gap(r):
            what = "bytes missing" if r.issue == "stream-gap" else "conflicting retransmitted bytes"
            self.out.append(finding(
                "stream-gap", f"{self.connection}: {r.length} {what} at stream offset "
                f"{r.stream_offset} (frame {r.position}): {r.message}",
                evidence=[evidence(self.source, r.position, "packet", r.message)],
                connection=self.connection))
        elif undecodable_frame(r):
            size = f"{r.length} bytes" if r.length is not None else "bytes"
            self.out.append(finding(
                "undecodable-frame", f"{self.connection}: {r.issue} ({size} at stream offset "
                f"{r.stream_offset}, frame {r.position}): {r.message}",
                evidence=[evidence(self.source, r.position, "packet", r.message)],
                connection=self.connection))

    def _session(self, ts: float | None) -> int | None:
        """Index in self.sessions (sorted) of the TCP connection a request at `ts` was sent on."""
        if not self.sessions:
            return None
        i = 0
        for j, c in enumerate(self.sessions):
            if ts is not None and c.first_ts is not None and c.first_ts <= ts:
                i = j
        return i

    def finish(self) -> list[dict]:
        self._adopt(None, None)
        out, self.out = self.out, []
        self.sessions.sort(key=lambda c: (c.first_ts is not None, c.first_ts or 0.0))
        for r, after in self.pending:
            i = self._session(r.request_ts)
            conn = None if i is None else self.sessions[i]
            nxt = self.sessions[i + 1] if i is not None and i + 1 < len(self.sessions) else None
            later = after is not None and self._session(after) == i
            # The capture's end says nothing of a connection it stopped showing (sparse or
            # filtered captures): only the connection's own close or later exchanges count.
            end = self.last_activity
            if nxt is not None and end is not None and nxt.first_ts is not None:
                end = min(end, nxt.first_ts)
            lost = any(g >= (r.request_frame or 0) and (nxt is None or nxt.first_frame is None
                                                          or g < nxt.first_frame)
                       for g in self.gap_frames)
            # joined mid-stream, before every answer it holds: the broker's side before them unseen
            before = conn is not None and conn.syn_seen is False and r.request_ts is not None \
                and self.first_answered is not None and _stream_order(r) < self.first_answered
            verdict = unanswered_request(r, conn, later, end, lost_after=lost, before_answers=before)
            if verdict is None:
                continue
            why, sev = verdict
            out.append(finding(
                "unanswered-request", f"{r.api_name} v{r.api_version} corr {r.correlation_id} "
                f"(client {r.client_id}) on {self.connection} at {iso_s(r.request_ts)}: no response — "
                f"{why}", severity=sev, evidence=[evidence(self.source, r.request_frame, "request")],
                details={"api": r.api_name, "reason": why}, first_ts_ms=_ms(r.request_ts),
                **self._common(r)))
        return out


class _Rows:
    """The frames of a connection's chunk that go one by one (`odd`: those not plain), made in
    one take: each such frame, the one after it (which answers it, mostly) and the first one
    when a request waits from the chunk before; any other frame is made on its own."""

    def __init__(self, t: pa.Table, odd: np.ndarray, waiting: bool):
        self.t = t
        self.rows: dict[int, Frame] = {}
        if len(odd) or waiting:
            idx = np.sort(np.concatenate([odd, odd + 1, [0] if waiting else []]).astype(np.int64))
            idx = idx[(idx < t.num_rows) & np.r_[True, idx[1:] != idx[:-1]]]   # np.unique imports numpy.ma
            sub = t.take(np_indices(idx))
            cols = [sub.column(c).to_pylist() for c in FRAME_COLUMNS]
            self.rows = dict(zip(idx.tolist(), map(Frame._make, zip(*cols))))

    def __call__(self, i: int) -> Frame:
        r = self.rows.get(i)
        return r if r is not None else Frame._make(self.t.column(c)[i].as_py() for c in FRAME_COLUMNS)


def _failed_partitions(partition_errors: str | None) -> list[tuple]:
    """[(topic, partition, error_code)] of a frame's partition answers that carry an error
    (Produce, AddPartitionsToTxn, TxnOffsetCommit: JSON [transactional_id, topic, partition,
    error_code] entries)."""
    if not partition_errors:
        return []
    try:
        rows = json.loads(partition_errors)
    except ValueError:
        return []
    return [(t, p, c) for _, t, p, c in (x for x in rows if isinstance(x, list) and len(x) == 4) if c]


PLAIN = "_plain"   # the frame rows' _plain, a column the fold's prepare adds


def prepare(items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
    """The frame chunks with their `_plain` column: one pass over the selection, not one per
    connection (any share of the connections may be prepared alone)."""
    return [(k, t.append_column(PLAIN, np_mask(_plain(t))) if k == "frame" and t.num_rows else t)
            for k, t in items]


def _plain(t: pa.Table) -> np.ndarray:
    """Frames that only tell the connection was in use: answered, no error code, decoded."""
    answered = pc.and_(pc.is_valid(t.column("response_frame")), pc.is_valid(t.column("request_ts")))
    err = pc.fill_null(pc.greater(pc.binary_length(t.column("error_codes")), 0), False)
    bad = pc.fill_null(pc.greater(pc.binary_length(t.column("decode_error")), 0), False)
    return np.asarray(pc.and_(answered, pc.invert(pc.or_(err, bad))), dtype=bool)


def _stream_order(r: Frame) -> tuple:
    """Requests of a connection in the order the client sent them: pipelined requests share a
    packet (same time and frame number); clients number them in sending order."""
    return (r.request_ts, r.request_frame or 0, r.correlation_id or 0)


def _ms(ts):
    return None if ts is None else int(ts * 1000)


FOLD = Fold("wire-frames", {"frame": FRAME_COLUMNS, "connection": CONNECTION_COLUMNS,
                            "decode_issue": ISSUE_COLUMNS},
            KEY, ("request_ts",), lambda ctx: KeyedState(KEY, lambda k: ConnectionGroup(k, ctx)),
            prepare=prepare, prepare_by_key=True,
            where={"decode_issue": lambda t: pc.is_valid(t.column("connection"))}, live=ConnectionSettle, per_key=True,
            cost=0.75)
