"""The wire source for a live capture: a pcap or pcapng stream (standard input, or a file still
being written) decoded as its bytes arrive, into the rows of a capture file (sources/pcap.py).

`LiveDecode.feed(data)` walks what has arrived (capture/live.py: windows walked by the file's own
readers and capture loop, the compiled one when it is built) and yields (kind, table) chunks;
`finish()` walks the rest as the end of a file and yields the last chunks. The rows are those
of the same capture read as a file, apart from what the bounds on live state change (a
connection silent for capture.live.CONN_IDLE_S is closed "idle"), and for their order: a
connection's row comes once the reassembler forgets it (its linger after the close), not at the
end.
"""

from __future__ import annotations

from collections.abc import Iterator

from kaudit import native
from kaudit.capture import CaptureStreams, LinkDecoder, Reassembler
from kaudit.capture.live import IDLE_SWEEP_S, LiveCapture, detach, expire_idle
from kaudit.sources.pcap import _events_loop
from kaudit.sources.pcap_session import FLUSH_ROWS, PcapOptions, PcapSummary, Session
from kaudit.sources.wire_rows import WireRows

_C = "kaudit.sources._cpcap"


class LiveDecode:
    """One live capture named `source` (`-` for standard input): bytes in, row chunks out.
    `summary` is kept up to date; `last_ts` is the capture time (the last packet's)."""

    def __init__(self, source: str, options: PcapOptions | None = None, summary: PcapSummary | None = None):
        self.source = source
        self.options = options or PcapOptions()
        self.summary = summary if summary is not None else PcapSummary()
        self.live = LiveCapture()
        self.link = LinkDecoder()
        self.reassembler = Reassembler()
        self.rows = WireRows(source)
        self.session = Session(source, self.options, self.rows)
        self.seen: dict = {}
        self.activity: dict = {}
        self.swept_at: float | None = None
        self.last_ts: float | None = None
        self.idle_closed = 0   # connections closed after CONN_IDLE_S without a packet
        self.finished = False

    def feed(self, data) -> Iterator[tuple[str, "object"]]:
        """The chunks the bytes `data` complete (raises DecodeError if the stream is no capture)."""
        self.live.push(data)
        yield from self._walk(final=False)

    def finish(self) -> Iterator[tuple[str, "object"]]:
        """The end of the stream: the rest walked as the end of a file, every connection closed."""
        if self.finished:
            return
        self.finished = True
        yield from self._walk(final=True)
        self._events(self.reassembler.flush())   # when the last window had nothing to walk
        self.session.finish()
        self.session.closed = []
        for issue in self.live.issues:
            where = f" (after frame {issue.frame_no})" if issue.frame_no else ""
            self.rows.add("decode_issue", {"source": self.source, "position": issue.position,
                                           "issue": f"capture-{issue.kind}", "length": issue.skipped,
                                           "message": issue.message + where})
        if self.live.dead and self.live.skipped:
            self.rows.add("decode_issue", {"source": self.source, "position": self.live.base,
                                           "issue": "capture-corrupt", "length": self.live.skipped,
                                           "message": f"{self.live.skipped} bytes after the capture's last "
                                                      "plausible record were not decoded"})
        self._summarise()
        yield from self.rows.tables()

    @property
    def started(self) -> bool:
        """Has the stream shown its capture header (is it a capture at all)?"""
        return self.live.format is not None

    def in_flight_since(self) -> float | None:
        return self.session.in_flight_since()

    def _walk(self, final: bool):
        w = self.live.window(final)
        if w is None:
            return
        win, plen = w
        live = self.live
        streams = CaptureStreams(win, reassembler=self.reassembler, link=self.link, final=final,
                                 frame_base=live.frames, prev_sec=live.prev_sec)
        self.session.attach(streams)
        c = native.module(_C)
        if c is not None and streams.compiled:
            yield from c.events_loop(streams, self.session, self.rows, None, self.summary, FLUSH_ROWS)
        else:
            yield from _events_loop(streams, self.session, self.rows, None, self.summary)
        if streams.last_ts is not None:
            self.last_ts = streams.last_ts
        live.walked(streams.capture, plen, streams.last_ts)
        live.frames = streams.packets
        if not final:
            detach(self.reassembler, self.seen)
            self._sweep()
        self._summarise()
        yield from self.rows.tables()

    def _sweep(self) -> None:
        """Every IDLE_SWEEP_S of capture time: idle connections closed, closed ones forgotten
        after their linger, and their connection rows written."""
        now = self.last_ts
        if now is None or (self.swept_at is not None and now - self.swept_at < IDLE_SWEEP_S):
            return
        self.swept_at = now
        events = expire_idle(self.reassembler, self.activity, self.seen, now, self.live.frames)
        self.idle_closed += sum(1 for e in events if getattr(e, "reason", None) == "idle")
        self._events(events)
        closed = self.reassembler._closed
        self.session.write_closed(lambda cid: cid not in closed)

    def _events(self, events) -> None:
        for ev in events:
            self.session.event(ev)

    def _summarise(self) -> None:
        s, live = self.summary, self.live
        s.packets = live.frames
        s.tcp_packets = live.frames - sum(self.link.dropped.values())
        s.last_ts = self.last_ts
        s.dropped = dict(self.link.dropped)
        s.kafka_connections = self.session.kafka_connections
        s.tls = dict(self.session.tls_status)
