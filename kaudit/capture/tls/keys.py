"""Cipher suites and key derivation: the TLS 1.2 PRF key block (RFC 5246 5, 6.3) and the TLS 1.3
key schedule's traffic keys and KeyUpdate (RFC 8446 7.1-7.3). Primitives from pyca cryptography
(HMAC, HKDFExpand); nothing cryptographic is written here beyond the RFCs' compositions.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand


@dataclass(frozen=True)
class Suite:
    code: int
    name: str
    cipher: str        # "aes-gcm" | "chacha20" | "aes-cbc"
    key_len: int
    mac: str | None    # CBC suites' HMAC hash ("sha1" | "sha256"); None for AEAD
    prf: str           # "sha256" | "sha384": TLS 1.2 PRF / TLS 1.3 HKDF hash
    tls13: bool = False

    @property
    def mac_len(self) -> int:
        return {"sha1": 20, "sha256": 32, "sha384": 48}.get(self.mac, 0)

    @property
    def fixed_iv_len(self) -> int:  # TLS 1.2 key block IV bytes (RFC 5288, RFC 7905)
        return {"aes-gcm": 4, "chacha20": 12}.get(self.cipher, 16)


def _s(code, name, cipher, key_len, mac, prf, tls13=False):
    return code, Suite(code, name, cipher, key_len, mac, prf, tls13)


SUITES = dict([
    # TLS 1.3 (RFC 8446 B.4)
    _s(0x1301, "TLS_AES_128_GCM_SHA256", "aes-gcm", 16, None, "sha256", True),
    _s(0x1302, "TLS_AES_256_GCM_SHA384", "aes-gcm", 32, None, "sha384", True),
    _s(0x1303, "TLS_CHACHA20_POLY1305_SHA256", "chacha20", 32, None, "sha256", True),
    # TLS 1.2 ECDHE / DHE / RSA with AES-GCM (RFC 5288, 5289)
    _s(0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, None, "sha256"),
    _s(0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, None, "sha384"),
    _s(0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, None, "sha256"),
    _s(0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, None, "sha384"),
    _s(0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, None, "sha256"),
    _s(0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, None, "sha384"),
    _s(0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256", "aes-gcm", 16, None, "sha256"),
    _s(0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384", "aes-gcm", 32, None, "sha384"),
    # TLS 1.2 ChaCha20-Poly1305 (RFC 7905)
    _s(0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha20", 32, None, "sha256"),
    _s(0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "chacha20", 32, None, "sha256"),
    _s(0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha20", 32, None, "sha256"),
    # TLS 1.2 AES-CBC with HMAC-SHA1 / SHA-256 (RFC 4492, 5246, 5289)
    _s(0xC013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "aes-cbc", 16, "sha1", "sha256"),
    _s(0xC014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "aes-cbc", 32, "sha1", "sha256"),
    _s(0xC009, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "aes-cbc", 16, "sha1", "sha256"),
    _s(0xC00A, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "aes-cbc", 32, "sha1", "sha256"),
    _s(0xC027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "aes-cbc", 16, "sha256", "sha256"),
    _s(0xC023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "aes-cbc", 16, "sha256", "sha256"),
    _s(0x002F, "TLS_RSA_WITH_AES_128_CBC_SHA", "aes-cbc", 16, "sha1", "sha256"),
    _s(0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA", "aes-cbc", 32, "sha1", "sha256"),
    _s(0x003C, "TLS_RSA_WITH_AES_128_CBC_SHA256", "aes-cbc", 16, "sha256", "sha256"),
    _s(0x0033, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA", "aes-cbc", 16, "sha1", "sha256"),
    _s(0x0039, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA", "aes-cbc", 32, "sha1", "sha256"),
    _s(0x0067, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", "aes-cbc", 16, "sha256", "sha256"),
])

_HASH = {"sha1": hashes.SHA1, "sha256": hashes.SHA256, "sha384": hashes.SHA384}


def hash_algorithm(name: str):
    return _HASH[name]()


def _hmac(name: str, key: bytes, data: bytes) -> bytes:
    h = hmac.HMAC(key, hash_algorithm(name))
    h.update(data)
    return h.finalize()


def prf12(hash_name: str, secret: bytes, label: bytes, seed: bytes, n: int) -> bytes:
    """TLS 1.2 PRF: P_hash(secret, label + seed) cut to n bytes (RFC 5246 5)."""
    seed = label + seed
    out, a = b"", seed
    while len(out) < n:
        a = _hmac(hash_name, secret, a)
        out += _hmac(hash_name, secret, a + seed)
    return out[:n]


@dataclass(frozen=True)
class DirectionKeys:
    key: bytes
    iv: bytes
    mac_key: bytes = b""


def key_block12(suite: Suite, master: bytes, client_random: bytes, server_random: bytes):
    """(client write keys, server write keys) from the TLS 1.2 master secret (RFC 5246 6.3)."""
    m, k, i = suite.mac_len, suite.key_len, suite.fixed_iv_len
    block = prf12(suite.prf, master, b"key expansion", server_random + client_random, 2 * (m + k + i))
    cm, sm = block[:m], block[m:2 * m]
    ck, sk = block[2 * m:2 * m + k], block[2 * m + k:2 * (m + k)]
    ci, si = block[2 * (m + k):2 * (m + k) + i], block[2 * (m + k) + i:]
    return DirectionKeys(ck, ci, cm), DirectionKeys(sk, si, sm)


def expand_label(hash_name: str, secret: bytes, label: bytes, length: int) -> bytes:
    """HKDF-Expand-Label(secret, label, "", length) (RFC 8446 7.1)."""
    full = b"tls13 " + label
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + b"\x00"
    return HKDFExpand(hash_algorithm(hash_name), length, info).derive(secret)


def traffic_keys13(suite: Suite, secret: bytes) -> DirectionKeys:
    """The write key and IV of a TLS 1.3 traffic secret (RFC 8446 7.3)."""
    return DirectionKeys(expand_label(suite.prf, secret, b"key", suite.key_len),
                         expand_label(suite.prf, secret, b"iv", 12))


def next_secret13(suite: Suite, secret: bytes) -> bytes:
    """application_traffic_secret_N+1 after a KeyUpdate (RFC 8446 7.2)."""
    return expand_label(suite.prf, secret, b"traffic upd", hash_algorithm(suite.prf).digest_size)
