"""What the command line says about TLS: the connections decrypted and not (by reason), and how
to obtain key logs. Each recipe below was checked against its project's own documentation
(docs/tls.md cites them); nothing here imports cryptography."""

from __future__ import annotations

from rich.markup import escape

REASONS = {
    "decrypted": "decrypted with the key log",
    "no-keylog": "not decrypted: no key log given (--tls-keylog)",
    "no-key": "not decrypted: the key log has no line for their client random (see the "
              "undecodable-frame findings for each client random)",
    "no-handshake": "not decrypted: their TLS handshake is not in the capture (connections older "
                    "than the capture cannot be decrypted)",
    "unsupported": "not decrypted: TLS version or cipher suite kaudit does not decrypt",
    "failed": "not decrypted: the key log's secrets do not decrypt them",
}

HOWTO = escape("""How to obtain TLS key logs (NSS key log format) for kaudit --tls-keylog:
  - Python clients on the ssl module (3.8+): set SSLContext.keylog_filename = "/path/keys.log",
    or the SSLKEYLOGFILE environment variable when the context comes from ssl.create_default_context().
  - Java clients and brokers (JSSE): a JVM agent that logs the secrets, e.g. extract-tls-secrets
    (github.com/neykov/extract-tls-secrets): java -javaagent:<path>/extract-tls-secrets-<version>.jar=/path/keys.log ...
    (for a broker: add it to KAFKA_OPTS). Check that its version covers SSLEngine connections (Kafka's).
  - OpenSSL-based clients (librdkafka, confluent-kafka): librdkafka's CONFIGURATION.md lists no key
    log property; an application can log keys through OpenSSL's SSL_CTX_set_keylog_callback.
  - pcapng files may carry the secrets themselves (Wireshark's editcap --inject-secrets tls,<keys.log>):
    kaudit reads them without any option.
  Start the key logging before the connections open (the capture must hold their handshakes) and
  keep key logs as secret as private keys: anyone with the file can read the traffic.""")


def summary_lines(by_capture: dict) -> tuple[list[str], bool]:
    """(stderr lines, whether some TLS connection lacked keys) from {capture: {status: n}}."""
    totals: dict[str, int] = {}
    for counts in by_capture.values():
        for status, n in (counts or {}).items():
            totals[status] = totals.get(status, 0) + n
    if not totals:
        return [], False
    lines = [f"TLS: {n} connection{'s' if n != 1 else ''} {REASONS.get(status, status)}"
             for status, n in sorted(totals.items(), key=lambda kv: kv[0] != "decrypted")]
    missing = any(totals.get(s) for s in ("no-keylog", "no-key"))
    return lines, missing
