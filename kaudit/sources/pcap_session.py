"""One process's share of a capture's decoding, below the decoders that drive it (sources.pcap in
one process, pcap_parallel in several, pcap_stitch across rotated files, live_pcap on a stream):
the options and summary of a capture, the Session that turns capture events into rows, the row
keys a parallel decode orders by, and the capture file's own issues as rows."""

from __future__ import annotations

from dataclasses import dataclass, field

from kaudit.capture import ConnClose, ConnOpen, StreamConflict, StreamData, StreamGap
from kaudit.capture.tls.keylog import KeyLog
from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.wire.headers import DEFAULT_MAX_FRAME
from kaudit.sources.conversation import Conversation

# Rows per chunk: each chunk costs the Parquet writer, the audit's selections and facts a fixed
# amount. Measured on the 500k-packet bench capture (issue 19, interleaved, best of two): 8,192
# decode 1.03 s / audit 1.38 s; 16,384 0.90 / 1.31; 32,768 0.88 / 1.34; 65,536 0.90 / 1.25 s,
# peak RSS +10 MB. A live window holds far fewer rows: it is cut by its bytes (capture/live.py).
FLUSH_ROWS = 65536
# Where rows come from, as sortable keys (a parallel decode puts its processes' rows back in this
# order): the capture event that caused them (its number), then at the end the connection rows
# (by the number of the close event, then of the open event for connections left open), then the
# capture file's issues.
KEY_CLOSED, KEY_OPEN, KEY_ISSUES = 1 << 40, 2 << 40, 3 << 40
DEFAULT_KAFKA_PORTS = frozenset({9092})


@dataclass
class PcapOptions:
    kafka_ports: frozenset = DEFAULT_KAFKA_PORTS
    deep: bool = False
    max_batch_bytes: int = DEFAULT_MAX_BYTES
    max_frame_bytes: int = DEFAULT_MAX_FRAME
    # processes for one capture (None: by its size and the CPUs; 1: this process only). The
    # rows and their order are the same whatever the number.
    jobs: int | None = None
    # TLS key log (capture.tls.KeyLog from --tls-keylog files; None: none given). A pcapng's
    # Decryption Secrets Blocks add to it for that capture.
    tls_keys: object = None


@dataclass
class PcapSummary:
    """What the capture held, for coverage lines and the report header."""

    packets: int = 0
    tcp_packets: int = 0
    connections: int = 0
    kafka_connections: int = 0
    last_ts: float | None = None
    dropped: dict = field(default_factory=dict)
    tls: dict = field(default_factory=dict)  # TLS connections by outcome (decrypted, no-key, ...)


class Session:
    """The conversations of the connections one process decodes: capture events in, rows out
    (to `rows`, a WireRows). `event` handles every event but StreamData, which goes straight to
    `convs[conn_id].data` (the hot path); `finish` adds the rows written at the end."""

    def __init__(self, path: str, options: PcapOptions, rows):
        self.path, self.options, self.rows = path, options, rows
        self.convs: dict[int, Conversation] = {}
        self.opened: dict[int, tuple] = {}  # conn_id -> (ConnOpen, event number)
        self.closed: list = []  # (conversation, ConnOpen, ConnClose, event number of the close)
        self.kafka_connections = 0
        self.tls_status: dict[str, int] = {}  # TLS connections by outcome (capture/tls STATUS_*)
        # the key log given, plus the secrets a pcapng carries (Decryption Secrets Blocks):
        # one object that the conversations share, so secrets met later reach them too
        self.tls_keys = options.tls_keys.copy() if options.tls_keys is not None else KeyLog()

    def attach(self, streams) -> None:
        """Take the TLS secrets of the capture's pcapng Decryption Secrets Blocks as the walk
        meets them (they precede the packets they are for)."""
        if getattr(streams.capture, "format", None) == "pcapng":
            streams.capture.on_secrets = self._secrets

    def _secrets(self, secrets_type: int, data) -> None:
        self.tls_keys.add_dsb(secrets_type, data)

    def event(self, ev, number: int = 0) -> None:
        t = type(ev)
        convs, rows = self.convs, self.rows
        if t is StreamData:
            convs[ev.conn_id].data(ev)
        elif t is ConnOpen:
            self.opened[ev.conn_id] = (ev, number)
            conv = convs[ev.conn_id] = Conversation(ev.conn_id, ev.a, ev.b, ev.syn_seen, self.options.kafka_ports,
                                                    self.options, rows)
            conv.tls_keys = self.tls_keys
        elif t is StreamGap:
            conv = convs[ev.conn_id]
            rows.issue(conv, ev.frame, "stream-gap", ev.length, ev.stream_offset,
                       f"{ev.length} bytes missing from the capture ({ev.reason})",
                       conv.delivered_before(ev.direction, ev.stream_offset))
            conv.gap(ev)
        elif t is StreamConflict:
            rows.issue(convs[ev.conn_id], ev.frame, "tcp-conflict", ev.length, ev.stream_offset,
                       "retransmitted bytes differ from the first copy (the first was kept)")
        elif t is ConnClose:
            conv = convs.pop(ev.conn_id)
            conv.finish()
            self.kafka_connections += conv.protocol == "kafka"
            op = self.opened.pop(ev.conn_id)[0]
            if conv.tls is not None and not conv.tls_other:
                self.tls_outcome(conv, op)
            # the row waits for the end: packets after the close (the last ACK) still count
            self.closed.append((conv, op, ev, number))

    def tls_outcome(self, conv, op) -> None:
        """Count a TLS connection's outcome; one that was not decrypted gets a "tls" issue
        saying why (the client random for a missing key)."""
        tls = conv.tls
        # TLS off the Kafka ports counts only once decrypted as Kafka: undecrypted, it may be
        # anything (HTTPS beside the brokers), so it does not make a capture Kafka traffic
        if conv.port_client is not None or conv.protocol == "kafka":
            self.tls_status[tls.status] = self.tls_status.get(tls.status, 0) + 1
        if tls.status != "decrypted":
            self.rows.issue(conv, op.frame, "tls", None, None,
                            f"TLS connection not decrypted ({tls.status}): {tls.detail}")

    def write_closed(self, gone) -> int:
        """A live capture's connection rows, written once `gone(conn_id)`: the reassembler
        forgot the connection, so no later packet can count in its row. The number written."""
        keep, done = [], 0
        for item in self.closed:
            conv, op, close, _ = item
            if gone(close.conn_id):
                self.rows.connection(conv, op, close, close.stats)
                done += 1
            else:
                keep.append(item)
        self.closed = keep
        return done

    def in_flight_since(self, api_keys=(0,)) -> float | None:
        """The send time of the oldest request of `api_keys` (Produce) still waiting for its
        response on any open connection (None: none waits): no row still to come is about an
        earlier request of those."""
        oldest = None
        for conv in self.convs.values():
            for req, _frame, ts, _size, _complete in conv.pending.values():
                if getattr(req, "api_key", None) not in api_keys:
                    continue
                if ts is not None and (oldest is None or ts < oldest):
                    oldest = ts
        return oldest

    def finish(self, mark=None, stats=None) -> None:
        """The connection rows, in the order of the closes, then the connections the capture
        layer left open (a guard). `mark(key)` after each connection's rows (a process of a
        parallel decode: keys place them among the other processes' rows); `stats`: conn_id ->
        final ConnStats where the ConnClose events carry none."""
        rows = self.rows
        for conv, op, close, number in self.closed:
            st = close.stats if stats is None else stats.get(close.conn_id, close.stats)
            rows.connection(conv, op, close, st)
            if mark is not None:
                mark(KEY_CLOSED + number)
        for conv in self.convs.values():  # the capture layer closes every connection; this is a guard
            conv.finish()
            op, number = self.opened[conv.conn_id]
            rows.connection(conv, op, None, None)
            if mark is not None:
                mark(KEY_OPEN + number)


def capture_issues(rows, path: str, streams) -> None:
    """decode_issue rows for the capture file's own problems (cut records, bad blocks)."""
    for issue in streams.issues:
        where = f" (after frame {issue.frame_no})" if issue.frame_no else ""
        rows.add("decode_issue", {"source": path, "position": issue.position, "issue": f"capture-{issue.kind}",
                                  "length": issue.skipped, "message": issue.message + where})
