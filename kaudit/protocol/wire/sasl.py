"""SASL payload redaction: raw credentials never leave the decoder.

SaslAuthenticate carries the SASL mechanism's own messages in `auth_bytes` (and, after a
SaslHandshake v0, the same messages travel as bare size-prefixed frames). What is kept:
- PLAIN (RFC 4616) `authzid \\0 authcid \\0 passwd`: authzid and user kept, password replaced;
- SCRAM (RFC 5802) `n,,n=user,r=nonce` / `r=..,s=salt,i=4096` / `c=..,r=..,p=proof` / `v=..`:
  attributes kept except the proof `p`, the server signature `v` and the salt `s`;
- OAUTHBEARER (RFC 7628) `n,,\\x01auth=Bearer <token>\\x01\\x01`: the token replaced;
- anything else (GSSAPI tokens, unknown bytes): replaced whole, only its length kept.
"""

from __future__ import annotations

REDACTED = "<redacted>"
_R = REDACTED.encode()
_SCRAM_SECRET = {b"p", b"v", b"s"}


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _printable(b: bytes) -> bool:
    return all(0x20 <= c <= 0x7E for c in b)


def redact_sasl_bytes(raw, mechanism: str | None = None) -> tuple[bytes | None, dict]:
    """-> (redacted bytes, facts) where facts has "mechanism" ("PLAIN", "SCRAM", "OAUTHBEARER"
    or None when unrecognised) and, when known, "authzid", "username", "redacted" (bytes
    replaced). `mechanism` (from the connection's SaslHandshake) only helps recognition."""
    if raw is None:
        return None, {}
    raw = bytes(raw)
    if not raw:
        return b"", {"mechanism": mechanism, "redacted": 0}
    mech = (mechanism or "").upper()
    if (mech == "PLAIN" or not mech) and raw.count(b"\x00") == 2:
        authzid, user, password = raw.split(b"\x00", 2)
        if mech == "PLAIN" or _printable(authzid + user):
            return (authzid + b"\x00" + user + b"\x00" + _R,
                    {"mechanism": "PLAIN", "authzid": _text(authzid), "username": _text(user),
                     "redacted": len(password)})
    if b"\x01auth=" in raw and (mech in ("", "OAUTHBEARER")):
        return _redact_oauth(raw)
    if (mech.startswith("SCRAM") or not mech) and _printable(raw) and _looks_scram(raw):
        return _redact_scram(raw)
    return f"<redacted {len(raw)} bytes>".encode(), {"mechanism": mechanism, "redacted": len(raw)}


def _looks_scram(raw: bytes) -> bool:
    return raw[:2] in (b"n,", b"y,", b"p=") or raw[:2] in (b"r=", b"c=", b"v=", b"e=")


def _redact_scram(raw: bytes):
    parts = raw.split(b",")
    out = []
    hidden = 0
    facts: dict = {"mechanism": "SCRAM"}
    for part in parts:
        key, eq, value = part.partition(b"=")
        if eq and len(key) == 1 and key in _SCRAM_SECRET:
            out.append(key + b"=" + _R)
            hidden += len(value)
        else:
            if eq and key == b"n" and "username" not in facts:
                facts["username"] = _text(value).replace("=2C", ",").replace("=3D", "=")
            elif eq and key == b"a":
                facts["authzid"] = _text(value)
            out.append(part)
    facts["redacted"] = hidden
    return b",".join(out), facts


def _redact_oauth(raw: bytes):
    out = []
    hidden = 0
    for part in raw.split(b"\x01"):
        if part.startswith(b"auth="):
            scheme, _, token = part[5:].partition(b" ")
            out.append(b"auth=" + (scheme + b" " if token else b"") + _R)
            hidden += len(token or scheme)
        elif b"=" in part and not part.startswith((b"n,", b"y,", b"p=")):
            key = part.split(b"=", 1)[0]
            out.append(key + b"=" + _R)  # host/port/extension values may carry secrets too
            hidden += len(part) - len(key) - 1
        else:
            out.append(part)
    return b"\x01".join(out), {"mechanism": "OAUTHBEARER", "redacted": hidden}
