"""TLS secrets: the NSS key log format (SSLKEYLOGFILE) and pcapng Decryption Secrets Blocks.

    keys = KeyLog.from_files(["keys.log"])     # OSError for a file that cannot be read
    keys.add_text(b"CLIENT_RANDOM <64 hex> <96 hex>\n")
    keys.get(client_random) -> {label: secret} or None

A line is `LABEL <client random, 64 hex digits> <secret, hex>`; `#` starts a comment. The labels
kept are TLS 1.2's CLIENT_RANDOM (the master secret) and TLS 1.3's handshake and first application
traffic secrets; others (EXPORTER_SECRET, early data, RSA pre-master) are counted and ignored.
Secrets are key material: this module never prints them, and repr() shows only counts.
"""

from __future__ import annotations

from pathlib import Path

CLIENT_RANDOM = "CLIENT_RANDOM"
CLIENT_HS = "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
SERVER_HS = "SERVER_HANDSHAKE_TRAFFIC_SECRET"
CLIENT_APP = "CLIENT_TRAFFIC_SECRET_0"
SERVER_APP = "SERVER_TRAFFIC_SECRET_0"
LABELS = frozenset({CLIENT_RANDOM, CLIENT_HS, SERVER_HS, CLIENT_APP, SERVER_APP})
TLS13_LABELS = (CLIENT_HS, SERVER_HS, CLIENT_APP, SERVER_APP)
MAX_SECRET = 64   # SHA-384's 48 bytes is the longest secret of the suites decrypted
MAX_KEYLOG_BYTES = 256 << 20  # a key log bigger than this is not a key log
DSB_TLS_KEY_LOG = 0x544C534B  # pcapng Decryption Secrets Block, secrets type "TLSK"


class KeyLog:
    """Secrets by client random. Later lines for the same client random and label win."""

    def __init__(self):
        self._keys: dict[bytes, dict[str, bytes]] = {}
        self.lines = 0      # lines with a kept label
        self.ignored = 0    # comments aside, lines of other labels or malformed
        self.sources: list[str] = []

    def __repr__(self) -> str:  # never the secrets
        return f"KeyLog({len(self._keys)} client randoms from {len(self.sources)} sources)"

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return True  # an empty key log is still a key log that was given

    @classmethod
    def from_files(cls, paths) -> "KeyLog":
        keys = cls()
        for p in paths or ():
            p = Path(p)
            if p.stat().st_size > MAX_KEYLOG_BYTES:
                raise OSError(f"{p}: {p.stat().st_size} bytes is too big for a TLS key log")
            keys.add_text(p.read_bytes(), str(p))
        return keys

    def copy(self) -> "KeyLog":
        k = KeyLog()
        k._keys = {cr: dict(v) for cr, v in self._keys.items()}
        k.lines, k.ignored, k.sources = self.lines, self.ignored, list(self.sources)
        return k

    def add_text(self, text, source: str = "key log") -> int:
        """Add the lines of an NSS key log (bytes or str); the number of lines kept."""
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("ascii", "replace")
        kept = 0
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 3 or parts[0] not in LABELS:
                self.ignored += 1
                continue
            try:
                cr, secret = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
            except ValueError:
                self.ignored += 1
                continue
            if len(cr) != 32 or not 0 < len(secret) <= MAX_SECRET:
                self.ignored += 1
                continue
            self._keys.setdefault(cr, {})[parts[0]] = secret
            kept += 1
        self.lines += kept
        self.sources.append(source)
        return kept

    def add_dsb(self, secrets_type: int, data) -> None:
        """A pcapng Decryption Secrets Block's payload (only TLS key logs are used)."""
        if secrets_type == DSB_TLS_KEY_LOG:
            self.add_text(data, "pcapng decryption secrets block")

    def get(self, client_random: bytes) -> dict[str, bytes] | None:
        return self._keys.get(bytes(client_random))
