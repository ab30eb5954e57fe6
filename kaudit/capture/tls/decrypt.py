"""Record protection, one direction at a time: `RecordCipher.open(type, version, fragment)` ->
(content type, plaintext), or DecryptError. AEAD records (RFC 5288 AES-GCM, RFC 7905
ChaCha20-Poly1305, RFC 8446 5.2-5.3) and TLS 1.2 AES-CBC with HMAC, MAC-then-encrypt (RFC 5246
6.2.3.2) or encrypt-then-MAC (RFC 7366). The primitives are pyca cryptography's.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from kaudit.capture.tls.keys import DirectionKeys, Suite, hash_algorithm

TAG = 16
AES_BLOCK = 16


class DecryptError(Exception):
    """A record that does not authenticate (wrong keys, lost records, corrupt bytes)."""


class RecordCipher:
    """The read state of one direction: keys and the record sequence number."""

    __slots__ = ("suite", "keys", "tls13", "etm", "seq", "_aead", "_int_iv")

    def __init__(self, suite: Suite, keys: DirectionKeys, tls13: bool, etm: bool = False):
        self.suite, self.keys, self.tls13 = suite, keys, tls13
        self.etm = etm and suite.cipher == "aes-cbc"
        self.seq = 0
        self._aead = None
        if suite.cipher == "aes-gcm":
            self._aead = AESGCM(keys.key)
        elif suite.cipher == "chacha20":
            self._aead = ChaCha20Poly1305(keys.key)
        self._int_iv = int.from_bytes(keys.iv, "big")

    def open(self, ctype: int, version: int, fragment) -> tuple[int, bytes]:
        seq = self.seq
        if self.tls13:
            out = self._open13(ctype, version, fragment, seq)
        elif self._aead is not None:
            out = ctype, self._open12_aead(ctype, version, fragment, seq)
        else:
            out = ctype, self._open12_cbc(ctype, version, fragment, seq)
        self.seq = seq + 1
        return out

    def _xor_nonce(self, seq: int) -> bytes:
        return (self._int_iv ^ seq).to_bytes(12, "big")

    def _open13(self, ctype, version, fragment, seq):
        n = len(fragment)
        if n < TAG + 1:
            raise DecryptError(f"record of {n} bytes is shorter than its tag")
        aad = bytes((ctype, version >> 8, version & 0xFF, n >> 8, n & 0xFF))
        try:
            inner = self._aead.decrypt(self._xor_nonce(seq), bytes(fragment), aad)
        except InvalidTag:
            raise DecryptError("authentication failed") from None
        # TLSInnerPlaintext: content, the real type, zero padding (RFC 8446 5.2)
        end = len(inner.rstrip(b"\x00"))
        if end == 0:
            raise DecryptError("inner plaintext without a content type")
        return inner[end - 1], inner[:end - 1]

    def _aad12(self, seq, ctype, version, n):
        return seq.to_bytes(8, "big") + bytes((ctype, version >> 8, version & 0xFF)) + n.to_bytes(2, "big")

    def _open12_aead(self, ctype, version, fragment, seq):
        frag = bytes(fragment)
        if self.suite.cipher == "aes-gcm":  # 8-byte explicit nonce (RFC 5288 3)
            if len(frag) < 8 + TAG:
                raise DecryptError(f"record of {len(frag)} bytes is shorter than nonce and tag")
            nonce, ct = self.keys.iv + frag[:8], frag[8:]
        else:
            if len(frag) < TAG:
                raise DecryptError(f"record of {len(frag)} bytes is shorter than its tag")
            nonce, ct = self._xor_nonce(seq), frag
        try:
            return self._aead.decrypt(nonce, ct, self._aad12(seq, ctype, version, len(ct) - TAG))
        except InvalidTag:
            raise DecryptError("authentication failed") from None

    def _mac(self, data: bytes) -> bytes:
        h = hmac.HMAC(self.keys.mac_key, hash_algorithm(self.suite.mac))
        h.update(data)
        return h.finalize()

    def _check(self, data: bytes, mac: bytes) -> None:
        h = hmac.HMAC(self.keys.mac_key, hash_algorithm(self.suite.mac))
        h.update(data)
        try:
            h.verify(mac)
        except InvalidSignature:
            raise DecryptError("record MAC does not verify") from None

    def _cbc(self, body: bytes) -> bytes:
        """IV-prefixed CBC ciphertext -> plaintext without its padding."""
        if len(body) < 2 * AES_BLOCK or len(body) % AES_BLOCK:
            raise DecryptError(f"CBC record of {len(body)} bytes is not whole blocks")
        dec = Cipher(algorithms.AES(self.keys.key), modes.CBC(body[:AES_BLOCK])).decryptor()
        pt = dec.update(body[AES_BLOCK:]) + dec.finalize()
        pad = pt[-1]
        if pad + 1 > len(pt) or pt[-1 - pad:] != bytes([pad]) * (pad + 1):
            raise DecryptError("CBC padding does not check")
        return pt[:-1 - pad]

    def _open12_cbc(self, ctype, version, fragment, seq):
        frag, m = bytes(fragment), self.suite.mac_len
        if self.etm:  # MAC over the IV and ciphertext, then decrypt (RFC 7366 3)
            if len(frag) < m:
                raise DecryptError("record shorter than its MAC")
            body, mac = frag[:-m], frag[-m:]
            self._check(self._aad12(seq, ctype, version, len(body)) + body, mac)
            return self._cbc(body)
        pt = self._cbc(frag)
        if len(pt) < m:
            raise DecryptError("CBC record shorter than its MAC")
        content, mac = pt[:len(pt) - m], pt[len(pt) - m:]
        self._check(self._aad12(seq, ctype, version, len(content)) + content, mac)
        return content
