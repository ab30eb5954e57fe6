"""SASL secrets never leave kaudit: crafted SASL conversations through `kaudit decode pcap` in
every output format; the password (and its base64 and hex) appears nowhere, the user name may."""

from __future__ import annotations

import base64
import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from tests.protocol.wire.wirebytes import i32
from tests.sources.pcap import kmsgs
from tests.sources.pcap.craft import Conn, decode_rows, write_capture

PASSWORD = kmsgs.PASSWORD.encode()
SCRAM_PROOF = b"dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SCRAM_SALT = b"W22ZaJ0SNY7soEsUEjb6gQ=="
SCRAM_SIGNATURE = b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SECRETS = [PASSWORD, SCRAM_PROOF, SCRAM_SALT, SCRAM_SIGNATURE]

runner = CliRunner()


def _forms(secret: bytes) -> list[bytes]:
    """The secret, its hex, and base64 of it at the three alignments a longer base64 blob can
    hold it in (without the characters shared with neighbouring bytes)."""
    out = [secret, secret.hex().encode(), secret.hex().upper().encode()]
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + secret)
        out.append(enc[4 if k else 0:len(enc) - 4])
    return [f for f in out if len(f) >= 8]


FORBIDDEN = [f for s in SECRETS for f in _forms(s)]


def _conversations():
    md = kmsgs.metadata(9, client_id="sasl-client")
    # 1. SaslHandshake v1 + SaslAuthenticate v2 with PLAIN
    hs1 = kmsgs.sasl_handshake(0, 1)
    au = kmsgs.sasl_authenticate(1, b"\0alice\0" + PASSWORD)
    plain_v1 = [(0, hs1[0]), (1, hs1[1]), (0, au[0]), (1, au[1]), (0, md[0]), (1, md[1])]
    # 2. SaslHandshake v0, then the PLAIN token as a bare frame, the broker's empty answer
    hs0 = kmsgs.sasl_handshake(0, 0)
    token = b"\0alice\0" + PASSWORD
    plain_v0 = [(0, hs0[0]), (1, hs0[1]), (0, i32(len(token)) + token), (1, i32(0)),
                (0, md[0]), (1, md[1])]
    # 3. SaslHandshake v0 with SCRAM: two tokens each way
    hs0s = kmsgs.sasl_handshake(0, 0, mechanism="SCRAM-SHA-256")
    c1 = b"n,,n=alice,r=rOprNGfwEbeRWgbNEkqO"
    s1 = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=" + SCRAM_SALT + b",i=4096"
    c2 = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=" + SCRAM_PROOF
    s2 = b"v=" + SCRAM_SIGNATURE
    scram_v0 = [(0, hs0s[0]), (1, hs0s[1])] + [
        (d, i32(len(t)) + t) for d, t in ((0, c1), (1, s1), (0, c2), (1, s2))] + [(0, md[0]), (1, md[1])]
    # 4. SCRAM through SaslAuthenticate v1 (non-flexible)
    hs1s = kmsgs.sasl_handshake(0, 1, mechanism="SCRAM-SHA-256")
    a1, a2 = kmsgs.sasl_authenticate_v1(1, c1), kmsgs.sasl_authenticate_v1(2, c2)
    scram_v1 = [(0, hs1s[0]), (1, hs1s[1]), (0, a1[0]), (1, a1[1]), (0, a2[0]), (1, a2[1])]
    # 5. SaslAuthenticate v2 with a segment lost inside it: cut, not decoded, not leaked
    au5 = kmsgs.sasl_authenticate(1, b"admin\0alice\0" + PASSWORD)
    cut = [(0, hs1[0]), (1, hs1[1]), (0, au5[0]), (1, au5[1]), (0, md[0]), (1, md[1])]
    return [plain_v1, plain_v0, scram_v0, scram_v1, cut]


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("sasl") / "sasl.pcap"
    convs = _conversations()
    conns = [Conn(m, client=("10.0.0.1", 40010 + i)) for i, m in enumerate(convs)]
    au5 = 2  # message index of the cut SaslAuthenticate in conversation 5

    def drop(s):  # bytes 35..42 of conversation 5's SaslAuthenticate: in its auth bytes
        return s.conn == 4 and s.messages == (au5,) and s.index == 5

    write_capture(path, conns, segment=7, drop=drop)
    return path


def _assert_clean(blob: bytes, where: str):
    for f in FORBIDDEN:
        assert f not in blob, (where, f)


def test_rows_hold_user_names_not_passwords(capture):
    rows = decode_rows(capture)
    frames = rows["frame"]
    auth = [f for f in frames if f["api_name"] == "SaslAuthenticate"]
    assert {(f["sasl_mechanism"], f["sasl_username"]) for f in auth if f["complete"]} == {
        ("PLAIN", "alice"), ("SCRAM", "alice"), ("SCRAM", None)}  # client-final names no user
    assert any(f["complete"] is False for f in auth)  # conversation 5
    tokens = [i for i in rows["decode_issue"] if i["issue"] == "sasl-token"]
    # PLAIN v0: one token each way; SCRAM v0: two each way
    assert len(tokens) == 6
    # after the bare tokens, the Kafka requests decode again and pair
    md = [f for f in frames if f["api_name"] == "Metadata"]
    assert len(md) == 4 and all(f["response_frame"] is not None for f in md)
    assert not [i for i in rows["decode_issue"] if i["issue"] not in ("sasl-token", "stream-gap")]
    conns = {c["client"]: c for c in rows["connection"]}
    assert conns["10.0.0.1:40011"]["unanswered"] == 0
    _assert_clean(repr(rows).encode(), "rows")


@pytest.mark.parametrize("fmt", ["ndjson", "json", "table", "parquet"])
def test_no_output_format_leaks_the_password(fmt, capture, tmp_path):
    out = tmp_path / ("out" if fmt == "parquet" else f"out.{fmt}")
    r = runner.invoke(app, ["decode", "pcap", str(capture), "--format", fmt, "--output", str(out)])
    assert r.exit_code == 0, r.output
    _assert_clean(r.output.encode(), f"{fmt} console")
    if fmt == "parquet":
        files = sorted(out.glob("*.parquet"))
        assert {p.stem for p in files} >= {"frame", "connection", "decode_issue"}
        dumped = []
        for p in files:
            _assert_clean(p.read_bytes(), f"{p.name} bytes")
            dumped.append(json.dumps(pq.read_table(p).to_pylist(), default=repr))
        text = "\n".join(dumped).encode()
    else:
        text = out.read_bytes()
    assert text
    _assert_clean(text, fmt)
    if fmt != "table":  # the table view may leave the user name out
        assert b"alice" in text
    if fmt == "ndjson":
        rows = [json.loads(line) for line in text.splitlines()]
        assert any(r.get("sasl_username") == "alice" for r in rows)


@pytest.mark.parametrize("fmt", ["ndjson", "json", "table"])
def test_no_stdout_leak(fmt, capture):
    r = runner.invoke(app, ["decode", "pcap", str(capture), "--format", fmt, "--deep"])
    assert r.exit_code == 0, r.output
    assert "SaslAuthenticate" in r.output or "sasl" in r.output.lower()
    _assert_clean(r.output.encode(), f"{fmt} stdout")
