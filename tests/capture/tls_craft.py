"""Real TLS around real Kafka bytes: replays each connection of a plaintext capture through
OpenSSL (Python's `ssl`, two `MemoryBIO` ends per connection, a self-signed certificate made
with `cryptography`, `keylog_filename` set) and writes the TLS records as the TCP packets of a
new capture, at the times and on the 4-tuples of the original.

    python tests/capture/tls_craft.py SRC.pcap OUT.pcap KEYLOG [--tls 1.2|1.3] [--cipher NAME]
        [--no-etm] [--key-update N] [--drop-segment N] [--no-handshake N] [--pcapng-secrets]
        [--mss BYTES]

TLS 1.3 suites cannot be chosen through Python's ssl module: run this script with OPENSSL_CONF
naming a file whose system_default section sets `Ciphersuites` (`openssl_conf_for(suite)`).
Python's SSLObject has no KeyUpdate call: `--key-update N` calls OpenSSL's SSL_key_update on
the client's SSL object through ctypes (checked against SSL_get_version first) before the N-th
client write. Connections whose handshake the original capture did not show (no SYN) are
replayed without their handshake packets: like a TLS connection older than the capture.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import os
import random
import ssl
import struct
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kaudit.capture import CaptureStreams, ConnClose, ConnOpen, StreamData  # noqa: E402
from tests.capture.craft import (  # noqa: E402
    A, F, R, S, Flow, pcapng_block, pcapng_epb, pcapng_idb, pcapng_shb, write_pcap,
)

OP_NO_ENCRYPT_THEN_MAC = 1 << 19   # OpenSSL 3 SSL_OP_NO_ENCRYPT_THEN_MAC (not in Python's ssl)
TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
_CERT = {}


def openssl_conf_for(suite: str, directory) -> str:
    """An OpenSSL config file restricting TLS 1.3 to `suite` (for OPENSSL_CONF)."""
    p = Path(directory) / f"openssl-{suite}.cnf"
    p.write_text("openssl_conf = openssl_init\n[openssl_init]\nssl_conf = ssl_sect\n[ssl_sect]\n"
                 "system_default = sd\n[sd]\nCiphersuites = " + suite + "\n")
    return str(p)


def cert_file() -> str:
    """A self-signed RSA certificate and its key (PEM, one file), made once per process."""
    if "path" not in _CERT:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kafka.test")])
        t = datetime.datetime(2025, 1, 1)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(key.public_key()).serial_number(1).not_valid_before(t)
                .not_valid_after(t + datetime.timedelta(days=3650)).sign(key, hashes.SHA256()))
        fd, path = tempfile.mkstemp(suffix=".pem")
        with os.fdopen(fd, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        _CERT["path"] = path
    return _CERT["path"]


def contexts(version: str, cipher: str | None, etm: bool, keylog: str):
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file())
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    v = ssl.TLSVersion.TLSv1_3 if version == "1.3" else ssl.TLSVersion.TLSv1_2
    for ctx in (server, client):
        ctx.minimum_version = ctx.maximum_version = v
        if cipher and version == "1.2":
            ctx.set_ciphers(cipher)
        if not etm:
            ctx.options |= OP_NO_ENCRYPT_THEN_MAC
    client.keylog_filename = keylog
    return client, server


def _key_update(obj) -> None:
    """SSL_key_update(ssl, SSL_KEY_UPDATE_REQUESTED) on an SSLObject's SSL* (CPython 3.11's
    PySSLSocket: PyObject_HEAD, Socket, ssl)."""
    lib = ctypes.CDLL("libssl.so.3")
    lib.SSL_get_version.restype, lib.SSL_get_version.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    lib.SSL_key_update.argtypes = [ctypes.c_void_p, ctypes.c_int]
    ptr = ctypes.c_void_p.from_address(id(obj._sslobj) + 2 * ctypes.sizeof(ctypes.c_void_p) + 8).value
    if lib.SSL_get_version(ptr).decode() != obj.version():
        raise RuntimeError("cannot reach the SSL object for a KeyUpdate")
    if lib.SSL_key_update(ptr, 1) != 1:
        raise RuntimeError("SSL_key_update failed")


class _Conn:
    """One replayed connection: flow direction 0 is client -> server."""

    def __init__(self, ev: ConnOpen, ctxs, out, visible: bool, mss: int, rng):
        a, b = ev.a, ev.b
        swap = not ev.syn_seen and a[1] < b[1]   # no SYN: the lower port is the broker's
        self.client_dir = 1 if swap else 0
        c, s = (b, a) if swap else (a, b)
        self.flow = Flow(c=c, s=s, isn_c=rng.randrange(1 << 32), isn_s=rng.randrange(1 << 32))
        self.out, self.mss = out, mss
        self.visible = visible   # the handshake's packets are written (else only what follows)
        if ctxs is not None:
            self.bios = [(ssl.MemoryBIO(), ssl.MemoryBIO()) for _ in (0, 1)]
            self.objs = [ctxs[0].wrap_bio(*self.bios[0], server_side=False),
                         ctxs[1].wrap_bio(*self.bios[1], server_side=True)]
        self.writes = 0
        self.drop = None     # the number of the segment to lose, counting this connection's
        self.segments = 0
        ts = ev.ts
        if visible:
            for p in self.flow.handshake():
                out.append((ts, p))
        self.hiding = not visible
        self.plain = ctxs is None
        if not self.plain:
            self._handshake(ts)
        self.hiding = False

    def _handshake(self, ts):
        done = [False, False]
        for _ in range(20):
            for i in (0, 1):
                if not done[i]:
                    try:
                        self.objs[i].do_handshake()
                        done[i] = True
                    except ssl.SSLWantReadError:
                        pass
                self._pump(i, ts)
            if all(done):
                break
        self._pump(1, ts)   # TLS 1.3 session tickets
        self._pump(0, ts)

    def _emit(self, side, data, ts):
        for i in range(0, len(data), self.mss):
            chunk = data[i:i + self.mss]
            self.segments += 1
            pkt = self.flow.send(side, chunk)
            if not self.hiding and self.segments != self.drop:
                self.out.append((ts, pkt))

    def _pump(self, side, ts, depth=0):
        data = self.bios[side][1].read()
        if not data:
            return
        self._emit(side, data, ts)
        peer = 1 - side
        self.bios[peer][0].write(data)
        try:
            while True:
                self.objs[peer].read(1 << 20)
        except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
            pass
        if depth < 4:
            self._pump(peer, ts, depth + 1)

    def send(self, orig_dir, data, ts, key_update_at):
        side = 0 if orig_dir == self.client_dir else 1
        if self.plain:   # the plaintext twin: the same bytes in segments of the same size
            self._emit(side, bytes(data), ts)
            return
        if side == 0:
            self.writes += 1
            if key_update_at and self.writes == key_update_at:
                _key_update(self.objs[0])
        self.objs[side].write(bytes(data))
        self._pump(side, ts)

    def close(self, reason, ts):
        if not self.visible or reason not in ("fin", "rst"):
            return
        f = self.flow
        if reason == "rst":
            self.out.append((ts, f._pkt(0, R | A)))
            return
        self.out.append((ts, f.fin(0)))
        self.out.append((ts, f.fin(1)))
        self.out.append((ts, f.ack(0)))


def replay(src: str, version="1.3", cipher=None, etm=True, keylog="keys.log", key_update=0,
           drop_segment=0, no_handshake=-1, mss=16000, seed=29, all_handshakes=False):
    """[(ts, ethernet frame)] of the TLS twin of capture `src`, the key log written to `keylog`.
    `all_handshakes`: connections the original shows without their SYN get a handshake too
    (at their first packet's time), so that every connection can be decrypted; `drop_segment` N > 0 loses the N-th TLS segment after the handshake of the first connection
    whose handshake is shown; `no_handshake` hides the handshake (and the SYN) of connection number N."""
    ctxs = None if version == "plain" else contexts(version, cipher, etm, keylog)
    rng = random.Random(seed)
    out, conns, dropped = [], {}, []
    sources = [src] if isinstance(src, (str, Path)) else list(src)
    for i, one in enumerate(sources):
        _replay_one(one, i, ctxs, rng, out, conns, dropped, key_update, drop_segment, no_handshake,
                    mss, all_handshakes)
    out.sort(key=lambda p: p[0])  # stable: each connection's packets keep their order
    return out


def _replay_one(src, n, ctxs, rng, out, conns, dropped, key_update, drop_segment, no_handshake, mss,
                all_handshakes):
    cs = CaptureStreams(Path(src).read_bytes())
    for ev in cs.events():
        t = type(ev)
        if t is ConnOpen:
            visible = (ev.syn_seen or all_handshakes) and (n, ev.conn_id) != (0, no_handshake)
            conn = conns[n, ev.conn_id] = _Conn(ev, ctxs, out, visible, mss, rng)
            if drop_segment and visible and not dropped:
                dropped.append(ev.conn_id)
                conn.drop = conn.segments + drop_segment
        elif t is StreamData:
            conns[n, ev.conn_id].send(ev.direction, ev.data, ev.ts, key_update)
        elif t is ConnClose:
            conns[n, ev.conn_id].close(ev.reason, ev.ts)


class _Flights(_Conn):
    """A connection whose TLS bytes are kept as [(direction, bytes)], not as packets."""

    def __init__(self, *a, **kw):
        self.flights = []
        super().__init__(*a, **kw)

    def _emit(self, side, data, ts):
        self.flights.append((side, bytes(data)))


def transcript(messages, version="1.3", cipher=None, etm=True, keylog=None, key_update=0):
    """The TLS bytes of one connection carrying `messages` ([(0 client | 1 server, bytes)]), as
    [(direction, bytes)] (one item per TLS flight), and the key log text."""
    keylog = keylog or tempfile.mktemp(suffix=".keys")
    ctxs = contexts(version, cipher, etm, keylog)
    ev = ConnOpen(0, ("10.0.0.1", 40000), ("10.0.0.2", 9092), True, 0.0, 1)
    conn = _Flights(ev, ctxs, [], True, 1 << 30, random.Random(1))
    for d, data in messages:
        conn.send(d, data, 0.0, key_update)
    flights = conn.flights
    text = Path(keylog).read_text()
    os.unlink(keylog)
    return flights, text


def write_pcapng_with_secrets(packets, secrets: bytes) -> bytes:
    """pcapng: section header, one Ethernet interface, a Decryption Secrets Block (TLSK), packets."""
    dsb = struct.pack("<II", 0x544C534B, len(secrets)) + secrets + b"\0" * (-len(secrets) % 4)
    parts = [pcapng_shb(), pcapng_idb(1), pcapng_block(0x0000000A, dsb)]
    for ts, frame in packets:
        parts.append(pcapng_epb(0, int(round(ts * 1_000_000)), frame))
    return b"".join(parts)


def make(src, out, keylog, *, pcapng_secrets=False, **kw) -> Path:
    """Write the TLS twin of `src` to `out` (and its key log to `keylog`)."""
    keylog = Path(keylog)
    if keylog.exists():
        keylog.unlink()
    packets = replay(src, keylog=str(keylog), **kw)
    out = Path(out)
    if pcapng_secrets:
        out.write_bytes(write_pcapng_with_secrets(packets, keylog.read_bytes()))
    else:
        out.write_bytes(write_pcap(packets))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("keylog")
    ap.add_argument("--tls", default="1.3", choices=("1.2", "1.3", "plain"),
                    help="plain: the plaintext twin (same segments, no TLS)")
    ap.add_argument("--cipher", default=None, help="TLS 1.2: an OpenSSL cipher string")
    ap.add_argument("--no-etm", action="store_true", help="TLS 1.2 CBC: MAC-then-encrypt")
    ap.add_argument("--key-update", type=int, default=0, help="KeyUpdate before the N-th client write")
    ap.add_argument("--drop-segment", type=int, default=0, help="lose the N-th segment after the first shown handshake")
    ap.add_argument("--no-handshake", type=int, default=-1, help="hide connection N's handshake")
    ap.add_argument("--pcapng-secrets", action="store_true", help="pcapng with a Decryption Secrets Block")
    ap.add_argument("--mss", type=int, default=16000)
    ap.add_argument("--all-handshakes", action="store_true",
                    help="give the connections the original shows without a SYN a handshake too")
    a = ap.parse_args(argv)
    make(a.src, a.out, a.keylog, version=a.tls, cipher=a.cipher, etm=not a.no_etm,
         key_update=a.key_update, drop_segment=a.drop_segment, no_handshake=a.no_handshake,
         pcapng_secrets=a.pcapng_secrets, mss=a.mss, all_handshakes=a.all_handshakes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
