"""SASL payloads are only ever returned redacted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wirebytes import TAGS0, cbytes, nbytes, request_header

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire import decode_request, redact_sasl_bytes

SECRET = "pa55-W0rd!"


@pytest.mark.parametrize("raw,mech,expected,facts", [
    (b"\x00alice\x00" + SECRET.encode(), None, b"\x00alice\x00<redacted>",
     {"mechanism": "PLAIN", "authzid": "", "username": "alice", "redacted": len(SECRET)}),
    (b"admin\x00alice\x00" + SECRET.encode(), "PLAIN", b"admin\x00alice\x00<redacted>",
     {"mechanism": "PLAIN", "authzid": "admin", "username": "alice", "redacted": len(SECRET)}),
    (b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO", None, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
     {"mechanism": "SCRAM", "username": "user", "redacted": 0}),
    (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
     "SCRAM-SHA-256",
     b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=<redacted>", None),
    (b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", None, b"v=<redacted>", None),
    (b"n,,\x01auth=Bearer eyJhbGciOiJIUzI1NiJ9.e30.secret\x01\x01", None,
     b"n,,\x01auth=Bearer <redacted>\x01\x01", {"mechanism": "OAUTHBEARER", "redacted": 31}),
    (b"\x60\x82\x01\x00kerberos-token", "GSSAPI", b"<redacted 18 bytes>", None),
    (b"", None, b"", None),
])
def test_redaction(raw, mech, expected, facts):
    out, got_facts = redact_sasl_bytes(raw, mech)
    assert out == expected
    if facts is not None:
        assert got_facts == facts


def test_plain_with_non_printable_user_is_redacted_whole():
    out, facts = redact_sasl_bytes(b"\x00\xff\xfe\x00" + SECRET.encode())
    assert SECRET.encode() not in out and facts["redacted"] > 0


@given(st.binary(max_size=80), st.sampled_from([None, "PLAIN", "SCRAM-SHA-512", "GSSAPI",
                                                "OAUTHBEARER"]))
def test_a_password_never_survives(prefix, mech):
    for raw in (prefix + b"\x00bob\x00" + SECRET.encode(),
                b"\x00" + prefix.replace(b"\x00", b"") + b"\x00" + SECRET.encode(),
                b"c=biws,r=abc,p=" + SECRET.encode()):
        out, facts = redact_sasl_bytes(raw, mech)
        if SECRET.encode() in out:
            # only possible when the "password" is not where PLAIN/SCRAM keep secrets
            assert SECRET.encode() in raw.split(b"\x00")[0] or SECRET.encode() in prefix
        assert SECRET not in repr(facts) or SECRET in repr(prefix)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_sasl_authenticate_requests_of_every_version(version):
    auth = b"\x00carol\x00" + SECRET.encode()
    if version >= 2:
        payload = request_header(36, version, 4, "c", True) + cbytes(auth) + TAGS0
    else:
        payload = request_header(36, version, 4, "c", False) + nbytes(auth)
    r, _ = decode_request(payload)
    assert r.body["auth_bytes"] == b"\x00carol\x00<redacted>"
    assert SECRET not in repr(r)
    for cut in range(len(payload)):  # cut anywhere: no field ever holds the password
        try:
            r, _ = decode_request(payload[:cut], strict=False)
        except DecodeError as e:  # a cut header
            r = e
        assert SECRET not in repr(r) and SECRET not in str(r)
