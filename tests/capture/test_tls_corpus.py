"""Acceptance on real Kafka bytes in real TLS: each connection of a corpus capture replayed
through OpenSSL (tests/capture/tls_craft.py) decrypts with the key log OpenSSL wrote, to the
same rows and findings as the plaintext capture; without keys, with the wrong keys, with a lost
segment or a handshake before the capture, kaudit says what it could not decrypt. Captures are
made at test time in tmp (the corpus: ../shared/corpus, or KAUDIT_CORPUS)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kaudit.capture.tls.keylog import KeyLog
from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions, PcapSummary, decode_capture
from tests.capture import tls_craft
from tests.conftest import CORPUS, ROOT

HERE = CORPUS if CORPUS.is_dir() else Path(os.environ.get("KAUDIT_CORPUS", str(CORPUS)))
FENCE = HERE / "real-kafka-3.0.2" / "pcap" / "05-fence-java.pcap"
FENCE41 = HERE / "real-kafka-4.1.0" / "v5-fencing-tv2" / "v5-fencing-tv2.pcap"
PORTS = frozenset({9092, 9093, 9094})
# row fields that name packets or their places (different in the TLS twin), not Kafka facts
PLACES = {"request_frame", "response_frame", "position", "source", "frame", "first_frame",
          "last_frame", "conn_id", "stream_offset"}

pytestmark = pytest.mark.skipif(not FENCE.is_file(), reason=f"corpus not found at {HERE} (set KAUDIT_CORPUS)")


def _make(tmp, src, name, **kw) -> tuple[Path, Path]:
    out, keys = tmp / f"{name}.pcap{'ng' if kw.get('pcapng_secrets') else ''}", tmp / f"{name}.keys"
    tls_craft.make(src, out, keys, **kw)
    return out, keys


def _make13(tmp, src, suite) -> tuple[Path, Path]:
    """A TLS 1.3 twin with `suite` (OpenSSL chooses it from OPENSSL_CONF: a child process)."""
    out, keys = tmp / f"{suite}.pcap", tmp / f"{suite}.keys"
    env = dict(os.environ, OPENSSL_CONF=tls_craft.openssl_conf_for(suite, tmp), PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(Path(tls_craft.__file__)), str(src), str(out), str(keys),
                    "--tls", "1.3", "--all-handshakes"], check=True, env=env)
    return out, keys


def rows(path, keys=None):
    summary, out = PcapSummary(), {}
    for kind, t in decode_capture(str(path), PcapOptions(kafka_ports=PORTS, tls_keys=keys, jobs=1), summary):
        out.setdefault(kind, []).extend(t.to_pylist())
    return out, summary


def _facts(table):
    return sorted(tuple(sorted((k, repr(round(v, 6) if isinstance(v, float) else v))
                               for k, v in r.items() if k not in PLACES)) for r in table)


def findings(path, keys=None):
    run = audit_pcaps([str(path)], PcapOptions(kafka_ports=PORTS, tls_keys=keys, jobs=1))
    return sorted((f["rule"], f["severity"], f["connection"], re.sub(r"frames? [\d, ]+", "", f["message"]))
                  for f in run.findings)


def keylog(path) -> KeyLog:
    return KeyLog.from_files([path])


def same_as_plaintext(src, tls, keys):
    orig, _ = rows(src)
    got, summary = rows(tls, keys)
    assert summary.tls == {"decrypted": len(orig["connection"])}
    for kind in ("frame", "batch", "fetch_partition", "txn_event", "decode_issue"):
        assert _facts(got.get(kind, [])) == _facts(orig.get(kind, [])), kind
    assert findings(tls, keys) == findings(src)


@pytest.mark.parametrize("version,cipher,etm", [
    ("1.3", None, True),                                  # TLS_AES_256_GCM_SHA384, OpenSSL's choice
    ("1.2", "ECDHE-RSA-AES128-GCM-SHA256", True),
    ("1.2", "ECDHE-RSA-CHACHA20-POLY1305", True),
    ("1.2", "ECDHE-RSA-AES256-SHA", True),                # CBC, encrypt-then-MAC
    ("1.2", "ECDHE-RSA-AES128-SHA256", False),            # CBC, MAC-then-encrypt
])
def test_decrypted_twin_gives_the_same_rows_and_findings(tmp_path, version, cipher, etm):
    tls, keys = _make(tmp_path, FENCE, "twin", version=version, cipher=cipher, etm=etm,
                      all_handshakes=True, mss=9000)
    same_as_plaintext(FENCE, tls, keylog(keys))


@pytest.mark.parametrize("suite", ["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"])
def test_tls13_suites(tmp_path, suite):
    tls, keys = _make13(tmp_path, FENCE, suite)
    same_as_plaintext(FENCE, tls, keylog(keys))


def test_kafka_41_capture_with_key_update(tmp_path):
    if not FENCE41.is_file():
        pytest.skip("no Kafka 4.1.0 corpus")
    tls, keys = _make(tmp_path, FENCE41, "k41", all_handshakes=True, key_update=3)
    same_as_plaintext(FENCE41, tls, keylog(keys))


def test_pcapng_secrets_need_no_option(tmp_path):
    tls, _ = _make(tmp_path, FENCE, "dsb", all_handshakes=True, pcapng_secrets=True)
    same_as_plaintext(FENCE, tls, None)


def test_lost_segment_stops_the_direction_without_garbage(tmp_path):
    tls, keys = _make(tmp_path, FENCE, "lost", drop_segment=2)
    got, summary = rows(tls, keylog(keys))
    issues = [r["issue"] for r in got["decode_issue"]]
    assert "stream-gap" in issues and "tls-stream-gap" in issues
    assert not {"skipped-bytes", "bad-frame-size", "undecodable-request", "undecodable-response"} & set(issues)
    orig, _ = rows(FENCE)
    requests = {(r["connection"], r["correlation_id"], r["api_key"]) for r in orig["frame"]}
    assert {(r["connection"], r["correlation_id"], r["api_key"]) for r in got["frame"]} <= requests


def test_handshake_before_the_capture(tmp_path):
    tls, keys = _make(tmp_path, FENCE, "old")   # connections without a SYN in the original
    got, summary = rows(tls, keylog(keys))
    assert summary.tls["no-handshake"] >= 1 and summary.tls["decrypted"] >= 1
    assert any("handshake is not in the capture" in r["message"] for r in got["decode_issue"])


def _kaudit(*args):
    return subprocess.run([sys.executable, "-m", "kaudit", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_cli_without_and_with_the_wrong_key_log(tmp_path):
    tls, keys = _make(tmp_path, FENCE, "cli", all_handshakes=True)
    _, other = _make(tmp_path, FENCE, "other", all_handshakes=True, seed=7)
    ports = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
    r = _kaudit("pcap", tls, *ports)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr
    assert "11 connections not decrypted: no key log given" in r.stderr
    assert "How to obtain TLS key logs" in r.stderr
    r = _kaudit("pcap", tls, *ports, "--tls-keylog", other, "--format", "json")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr
    msgs = [f["message"] for f in json.loads(r.stdout)["findings"]]
    assert sum("no key for client random" in m for m in msgs) == 11
    assert not any(rule in r.stdout for rule in ("fenced-epoch", "producer-error"))  # no garbage frames
    r = _kaudit("pcap", tls, *ports, "--tls-keylog", keys)
    assert r.returncode in (0, 1) and "TLS: 11 connections decrypted" in r.stderr
    secrets = [line.split()[2] for line in keys.read_text().splitlines() if line and not line.startswith("#")]
    assert not any(s in r.stdout + r.stderr for s in secrets)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_decode_agrees_with_tshark(tmp_path):
    """Every Kafka frame tshark decodes from the TLS twin with the same key log: same api key,
    version, correlation id and client id as kaudit decode pcap's rows."""
    tls, keys = _make(tmp_path, FENCE, "ts", version="1.2", cipher="ECDHE-RSA-AES128-GCM-SHA256",
                      all_handshakes=True)
    decode = [a for p in sorted(PORTS) for a in ("-d", f"tcp.port=={p},tls", "-d", f"tls.port=={p},kafka")]
    r = subprocess.run(["tshark", "-r", str(tls), "-o", f"tls.keylog_file:{keys}", *decode, "-Y", "kafka",
                        "-T", "fields", "-e", "kafka.api_key", "-e", "kafka.api_version",
                        "-e", "kafka.correlation_id", "-e", "kafka.client_id"],
                       capture_output=True, text=True, timeout=120)
    theirs = set()
    for line in r.stdout.splitlines():   # requests: tshark names their api key and client id
        f = line.split("\t")
        if len(f) == 4 and f[0] and f[1] and f[2] and "," not in f[0]:
            theirs.add((int(f[0]), int(f[1]), int(f[2]), f[3] or None))
    got, _ = rows(tls, keylog(keys))
    ours = {(r["api_key"], r["api_version"], r["correlation_id"], r["client_id"]) for r in got["frame"]}
    assert len(theirs) >= 20
    assert theirs <= ours


def test_rotated_tls_capture(tmp_path):
    """A TLS capture rotated into two files (connections across both): stitched, decrypted, the
    same findings as the plaintext capture, and the TLS coverage counted."""
    from tests.capture.craft import write_pcap

    keys = tmp_path / "rot.keys"
    packets = tls_craft.replay(str(FENCE), keylog=str(keys), all_handshakes=True)
    half = len(packets) // 2
    (tmp_path / "rot").mkdir()
    parts = [tmp_path / "rot" / "a-00.pcap", tmp_path / "rot" / "a-01.pcap"]
    parts[0].write_bytes(write_pcap(packets[:half]))
    parts[1].write_bytes(write_pcap(packets[half:]))
    options = PcapOptions(kafka_ports=PORTS, tls_keys=keylog(keys), jobs=1)
    run = audit_pcaps([str(p) for p in parts], options)
    got = sorted((f["rule"], f["severity"], f["connection"], re.sub(r"frames? [\d, ]+", "", f["message"]))
                 for f in run.findings)
    assert got == findings(FENCE)
    tls = {}
    for s in run.coverage["captures"].values():
        for status, n in s.get("tls", {}).items():
            tls[status] = tls.get(status, 0) + n
    assert tls == {"decrypted": 11}
