"""The TLS half of a Conversation (sources/conversation.py): a connection recognised as TLS gets
the record layer of kaudit/capture/tls, and the application data it decrypts enters the same
splitters and `_frames` as plaintext (same rows, findings, SASL redaction).

A TLS conversation never takes the compiled Kafka path: sources/_cpcap sees protocol "tls",
which is not its Kafka mode, and hands the segments to Conversation.feed (docs/tls.md says what
that costs). Only once the connection is over does a decrypted one say protocol "kafka".
"""

from __future__ import annotations

from kaudit.capture.tls.records import record_chain
from kaudit.protocol.wire import plausible_request, plausible_response

# A capture joined mid-connection on a Kafka port whose first bytes are no Kafka frame start: up
# to this many bytes of a direction are held to look for a chain of TLS records (a record is at
# most 2^14 + 2048 bytes, so two fit) before the bytes are taken for Kafka joined mid-frame.
JOINED_WAIT = 2 * (5 + (1 << 14) + 2048) + 5


class TlsConversation:
    """Mixin of Conversation: its attributes tls, tls_keys, tls_off, tls_other, and the
    splitters, dirs, client_dir, port_client, options, sink of the Conversation."""

    def _tls_joined(self, direction: int, data: bytes, final: bool) -> bool | None:
        """On a Kafka port, joined mid-connection: is this TLS joined mid-record (True: decided),
        Kafka (False), or not known yet (None: wait for more bytes)?"""
        max_size = self.options.max_frame_bytes
        if direction == self.port_client:
            looks = plausible_request(data, 0, max_size)
        else:
            looks = plausible_response(data, 0, None, max_size)
        if looks is True and (final or len(data) >= JOINED_WAIT
                              or int.from_bytes(data[:4], "big") <= JOINED_WAIT):
            return False
        # (a frame claiming more than JOINED_WAIT bytes may be ciphertext read as a length: about
        # one in fifty random starts is a plausible response; its bytes are held like the others)
        if record_chain(data) is not None:
            self.tls_joined = True
            self._decide(self.port_client, "tls")
            return True
        if final or len(data) >= JOINED_WAIT:
            return False
        return None

    def _tls_start(self) -> None:
        from kaudit.capture.tls.session import TlsConnection

        self.tls = TlsConnection(self.tls_keys)
        if self.tls_joined:   # no record boundary known, and no handshake: nothing to decrypt
            self.tls.joined_mid_record()
        for i in (0, 1):  # the bytes held while deciding
            held, self.dirs[i].held = self.dirs[i].held, []
            for kind, off, payload, first_f, last_f, ts in held:
                if kind == "data":
                    self._tls_data(i, payload, first_f, last_f, ts)
                else:
                    self.tls.gap(i, off, payload)
                    self._tls_notes(first_f)

    def _tls_data(self, direction: int, data, first_frame, last_frame, ts) -> None:
        tls = self.tls
        plain = tls.feed(direction, data)
        if plain and not self.tls_other:
            d = self.dirs[direction]
            if d.splitter is None:  # the first application data: the ClientHello named the client
                if tls.client_dir is not None:
                    self.client_dir, self._name = tls.client_dir, None
                if self.port_client is None and not self._kafka_inside(direction, plain[0]):
                    self.tls_other = True   # TLS off the Kafka ports carrying something else
                    return
                self._splitters(self.client_dir, True)
            off = self.tls_off[direction]
            for p in plain:
                n = len(p)
                d.add(off, off + n, first_frame, last_frame, ts)
                off += n
                events = d.splitter.feed(p)
                if events:
                    self._frames(direction, events)
            self.tls_off[direction] = off
        if tls.notes:
            self._tls_notes(last_frame)

    def _kafka_inside(self, direction: int, first: bytes) -> bool:
        """Off the Kafka ports, does a decrypted connection carry Kafka? Its client speaks
        first, with a plausible request header."""
        return (direction == self.client_dir
                and plausible_request(first, 0, self.options.max_frame_bytes) is not False)

    def _tls_notes(self, frame_no) -> None:
        notes, self.tls.notes = self.tls.notes, []
        for _d, pos, kind, message in notes:
            self.sink.issue(self, frame_no, kind, None, pos, message)

    def _tls_finish(self) -> None:
        """Settle the TLS status; a decrypted connection is a Kafka one from here on."""
        tls = self.tls
        tls.finish()
        self._tls_notes(None)
        if self.dirs[0].splitter is not None:  # application data came out (both splitters exist)
            self.protocol = "kafka"
        elif self.tls_other:
            self.protocol = "other"
