"""One TLS connection's record layer, sans-IO: bytes of each direction in (as TCP delivered
them), application data out, in order.

    tls = TlsConnection(keylog)            # keylog: KeyLog or None (none given)
    plain = tls.feed(direction, data)      # [bytes]: the application data those bytes completed
    tls.gap(direction)                     # bytes were lost: this direction stops decrypting
    tls.notes                              # [(direction, stream offset, kind, message)] to report
    tls.status, tls.detail                 # coverage (STATUS_*), when the connection is over

The direction that sends the ClientHello is the client. TLS 1.2: a direction's records are
protected after its ChangeCipherSpec, with the key block from the CLIENT_RANDOM master secret.
TLS 1.3: type-23 records are protected after the ServerHello, first with the handshake traffic
secrets, after the direction's Finished with the application traffic secret, which a KeyUpdate
replaces. A record that does not authenticate stops its direction: no garbage goes on.
"""

from __future__ import annotations

from kaudit.capture.tls import keylog as kl
from kaudit.capture.tls.decrypt import DecryptError, RecordCipher
from kaudit.capture.tls.handshake import TLS12, TLS13, client_hello, server_hello
from kaudit.capture.tls.keys import SUITES, key_block12, next_secret13, traffic_keys13
from kaudit.capture.tls.records import (
    ALERT, APPLICATION_DATA, CHANGE_CIPHER_SPEC, CLIENT_HELLO, FINISHED, HANDSHAKE, HEADER,
    KEY_UPDATE, MAX_FRAGMENT, SERVER_HELLO, HandshakeReader, read_record,
)
from kaudit.protocol.errors import DecodeError, Truncated

STATUS_DECRYPTED = "decrypted"
STATUS_NO_KEY = "no-key"              # the key log has no line for the client random
STATUS_NO_KEYLOG = "no-keylog"        # TLS, and no key log was given at all
STATUS_NO_HANDSHAKE = "no-handshake"  # the handshake is not in the capture
STATUS_UNSUPPORTED = "unsupported"    # version or cipher suite not decrypted by kaudit
STATUS_FAILED = "failed"              # the keys given do not authenticate the records
MAX_HELD = 1 << 20  # records held while the other direction's hello is awaited
MAX_SKIPPED = 16    # TLS 1.3 handshake records passed over without the handshake secrets


class _Stop(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status, self.message = status, message


class _Half:
    __slots__ = ("buf", "need", "skip", "off", "cipher", "hs", "ehs", "ccs", "stopped", "held", "held_bytes",
                 "secret", "records", "plain")

    def __init__(self):
        self.buf = bytearray()  # bytes of an incomplete record
        self.need = 0           # the length buf must reach before a record can complete
        self.skip = 0           # protected handshake records that may still be passed over
        self.off = 0            # stream offset of the next byte fed
        self.cipher = None      # RecordCipher once protected records come
        self.hs = HandshakeReader()    # plaintext handshake messages
        self.ehs = HandshakeReader()   # protected handshake messages
        self.ccs = False        # TLS 1.2: ChangeCipherSpec seen, records are protected
        self.stopped = False
        self.held = []          # protected records waiting for the hellos
        self.held_bytes = 0
        self.secret = None      # TLS 1.3 current traffic secret
        self.records = 0        # protected records opened
        self.plain = 0          # application data bytes out


class TlsConnection:
    def __init__(self, keys):
        self.keys = keys
        self.halves = (_Half(), _Half())
        self.client_dir = None
        self.client_random = None
        self.server_random = None
        self.version = None
        self.suite = None
        self.suite_code = None
        self.etm = False
        self.status = None
        self.detail = None
        self.notes: list[tuple[int, int, str, str]] = []
        self.key_updates = 0
        self._secrets = None

    # ---- bytes in ------------------------------------------------------------------------
    def feed(self, d: int, data) -> list:
        h = self.halves[d]
        n = len(data)
        if h.stopped:
            h.off += n
            return []
        if h.buf:
            # most segments only add to a record that is not complete yet: no parsing, and the
            # bytes are appended (not re-joined) until the record's length is there
            h.buf += data
            h.off += n
            if len(h.buf) < h.need:
                return []
            buf = h.buf
        else:
            buf = data
            h.off += n
        start = h.off - len(buf)
        out, off, n = [], 0, len(buf)
        try:
            while n - off >= HEADER:
                (ctype, version, frag), end = read_record(buf, off)
                self._record(d, h, ctype, version, frag, start + off, out)
                off = end
                if h.stopped:
                    return out
        except Truncated as e:
            h.need = n - off + e.needed   # bytes the cut record still needs, counted from its start
        except DecodeError as e:
            self._stop_dir(d, start + off, "tls-not-records", f"{e.message} at stream offset "
                           f"{start + off}: the rest of this direction is not read")
            return out
        except _Stop as s:
            self._finish_with(s.status, s.message, d, start + off)
            return out
        if off < n:
            h.buf = bytearray(buf[off:])
            if n - off < HEADER:
                h.need = HEADER
        else:
            h.buf, h.need = bytearray(), 0
        return out

    def gap(self, d: int, offset: int, length: int) -> None:
        h = self.halves[d]
        h.off = offset + length
        if h.stopped:
            return
        if self.status is None and self.client_random is None:
            self._finish_with(STATUS_NO_HANDSHAKE, "the TLS handshake is not in the capture", d, offset)
            return
        self._stop_dir(d, offset, "tls-stream-gap",
                       f"{length} bytes lost at stream offset {offset}: the TLS records after it "
                       "cannot be decrypted (their sequence numbers are unknown); decryption of this "
                       "direction stopped")

    def joined_mid_record(self) -> None:
        """The bytes start inside a record, after the handshake: nothing can be decrypted."""
        self._finish_with(STATUS_NO_HANDSHAKE, "the capture joined this TLS connection mid-stream: "
                          "its handshake is not in the capture, it cannot be decrypted", 0, 0)

    def finish(self) -> None:
        """The connection is over: settle the coverage status."""
        if self.status is not None:
            return
        if self.client_random is None:
            self.status, self.detail = STATUS_NO_HANDSHAKE, "the TLS handshake is not in the capture"
        elif self.suite is None:
            self.status, self.detail = STATUS_NO_HANDSHAKE, "the ServerHello is not in the capture"
        else:
            try:
                self._check_keys()
                self.status, self.detail = STATUS_DECRYPTED, None
            except _Stop as s:
                self.status, self.detail = s.status, s.message

    # ---- records -------------------------------------------------------------------------
    def _record(self, d, h, ctype, version, frag, pos, out):
        tls13 = self.version == TLS13
        protected = h.ccs or (tls13 and ctype == APPLICATION_DATA and h.cipher is not None)
        if not protected and ctype == APPLICATION_DATA:
            protected = self._ready(d, h)
            if protected is None:  # the hellos are not both seen yet
                self._hold(d, h, ctype, version, frag, pos)
                return
        if not protected:
            if ctype == HANDSHAKE:
                for mtype, body in h.hs.feed(frag):
                    self._hello(d, mtype, body, pos)
            elif ctype == CHANGE_CIPHER_SPEC and not tls13:
                h.ccs = True
            return
        if h.cipher is None:
            h.cipher = self._cipher(d, h)
            if h.cipher is None:
                self._hold(d, h, ctype, version, frag, pos)
                return
        try:
            inner, plain = h.cipher.open(ctype, version, frag)
        except DecryptError as e:
            if h.skip and not h.records:
                h.skip -= 1   # a handshake record, under keys the key log did not give
                return
            self._failed(d, h, pos, str(e))
            return
        h.records += 1
        if self.status is None:
            self.status = STATUS_DECRYPTED
        if inner == APPLICATION_DATA:
            if plain:
                h.plain += len(plain)
                out.append(plain)
        elif inner == HANDSHAKE:
            for mtype, body in h.ehs.feed(plain):
                self._protected_handshake(d, h, mtype, body)

    def _hello(self, d, mtype, body, pos):
        try:
            if mtype == CLIENT_HELLO and self.client_random is None:
                ch = client_hello(body)
                self.client_dir, self.client_random = d, ch.random
            elif mtype == SERVER_HELLO and self.suite_code is None:
                sh = server_hello(body)
                if sh.retry:
                    return
                self.server_random, self.version, self.suite_code = sh.random, sh.version, sh.cipher_suite
                self.suite = SUITES.get(sh.cipher_suite)
                self.etm = sh.encrypt_then_mac
                if self.client_dir is None:
                    self.client_dir = 1 - d
                self._release_held()
        except DecodeError as e:
            what = "ClientHello" if mtype == CLIENT_HELLO else "ServerHello"
            self._finish_with(STATUS_UNSUPPORTED, f"the {what} at stream offset {pos} does not decode "
                              f"({e.message})", d, pos)

    def _protected_handshake(self, d, h, mtype, body):
        if self.version != TLS13:
            return
        if mtype == FINISHED and h.secret is None:
            secrets = self._secrets
            h.secret = secrets[kl.CLIENT_APP if d == self.client_dir else kl.SERVER_APP]
            h.cipher = RecordCipher(self.suite, traffic_keys13(self.suite, h.secret), True)
        elif mtype == KEY_UPDATE and h.secret is not None:
            self.key_updates += 1
            h.secret = next_secret13(self.suite, h.secret)
            h.cipher = RecordCipher(self.suite, traffic_keys13(self.suite, h.secret), True)

    # ---- keys ----------------------------------------------------------------------------
    def _ready(self, d, h):
        """Is a type-23 record before any protection state protected (True), plaintext
        (False: impossible in TLS, so the handshake was missed) or to hold (None)?"""
        if self.client_random is None:
            raise _Stop(STATUS_NO_HANDSHAKE, "the TLS handshake is not in the capture "
                        "(the connection is older than the capture): it cannot be decrypted")
        if self.suite_code is None:
            return None
        return True

    def _check_keys(self):
        if self.client_random is None:
            raise _Stop(STATUS_NO_HANDSHAKE, "the ClientHello is not in the capture: the connection "
                        "cannot be decrypted")
        cr = self.client_random.hex()
        if self.version not in (TLS12, TLS13):
            raise _Stop(STATUS_UNSUPPORTED, f"TLS version {self.version:#06x} is not decrypted by kaudit "
                        f"(TLS 1.2 and 1.3 are); client random {cr}")
        if self.suite is None or self.suite.tls13 != (self.version == TLS13):
            raise _Stop(STATUS_UNSUPPORTED, f"cipher suite {self.suite_code:#06x} is not decrypted by "
                        f"kaudit; client random {cr}")
        if self.keys is None or not self.keys.sources:
            raise _Stop(STATUS_NO_KEYLOG, f"TLS, no key log given (--tls-keylog); client random {cr}")
        entry = self.keys.get(self.client_random) or {}
        # TLS 1.3: the application traffic secrets suffice (the handshake records are then
        # skipped, see _cipher); some key loggers write only those
        need = (kl.CLIENT_RANDOM,) if self.version == TLS12 else (kl.CLIENT_APP, kl.SERVER_APP)
        missing = [n for n in need if n not in entry]
        if missing:
            what = "no key" if len(missing) == len(need) else f"no {', '.join(missing)}"
            raise _Stop(STATUS_NO_KEY, f"{what} for client random {cr} in the key log")
        return entry

    def _cipher(self, d, h):
        if self.suite_code is None:
            return None
        entry = self._check_keys()
        client = d == self.client_dir
        if self.version == TLS12:
            ck, sk = key_block12(self.suite, entry[kl.CLIENT_RANDOM], self.client_random, self.server_random)
            return RecordCipher(self.suite, ck if client else sk, False, self.etm)
        self._secrets = entry
        hs = entry.get(kl.CLIENT_HS if client else kl.SERVER_HS)
        if hs is None:
            # no handshake secret: start with the application secret and pass over the
            # protected handshake records, which do not authenticate under it (AEAD: a record
            # that does is the first application record, never a misread one)
            h.skip = MAX_SKIPPED
            h.secret = entry[kl.CLIENT_APP if client else kl.SERVER_APP]
            return RecordCipher(self.suite, traffic_keys13(self.suite, h.secret), True)
        return RecordCipher(self.suite, traffic_keys13(self.suite, hs), True)

    def _hold(self, d, h, ctype, version, frag, pos):
        h.held.append((ctype, version, bytes(frag), pos))
        h.held_bytes += len(frag)
        if h.held_bytes > MAX_HELD:
            self._finish_with(STATUS_NO_HANDSHAKE, "protected records but no ServerHello in the capture", d, pos)

    def _release_held(self):
        for d in (0, 1):
            h = self.halves[d]
            held, h.held, h.held_bytes = h.held, [], 0
            for ctype, version, frag, pos in held:
                if not h.stopped:
                    out = []
                    self._record(d, h, ctype, version, frag, pos, out)
                    if out:  # application data before the ServerHello: not TLS as specified
                        self._stop_dir(d, pos, "tls-not-records", "application data before the handshake")

    # ---- endings -------------------------------------------------------------------------
    def _failed(self, d, h, pos, why):
        if h.records == 0 and self.status in (None, STATUS_DECRYPTED) and not self.halves[1 - d].records:
            cr = self.client_random.hex() if self.client_random else "?"
            self._finish_with(STATUS_FAILED, f"the key log's secrets for client random {cr} do not "
                              f"decrypt this connection ({why})", d, pos)
            return
        self._stop_dir(d, pos, "tls-decrypt-failed",
                       f"TLS record at stream offset {pos} does not decrypt ({why}) after {h.records} "
                       "records: decryption of this direction stopped")

    def _stop_dir(self, d, pos, kind, message):
        h = self.halves[d]
        if not h.stopped:
            h.stopped, h.buf, h.held = True, bytearray(), []
            self.notes.append((d, pos, kind, message))

    def _finish_with(self, status, message, d, pos):
        """The whole connection cannot be decrypted: both directions stop."""
        if self.status not in (None, STATUS_DECRYPTED) or any(h.records for h in self.halves):
            self._stop_dir(d, pos, "tls-decrypt-failed", message)
            return
        self.status, self.detail = status, message
        for h in self.halves:
            h.stopped, h.buf, h.held = True, bytearray(), []


__all__ = ["TlsConnection", "MAX_FRAGMENT"]
