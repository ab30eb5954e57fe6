"""The compiled core against the pure-Python reference (kaudit/native.py): the same rows and the
same findings on every corpus capture and log dir (Kafka 3.0.2 and 4.1.0, the public ones too),
decoded with and without --deep; and the loader's rules (KAUDIT_PURE, the one warning)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from kaudit import native
from kaudit.engine import local
from kaudit.sources.pcap import PcapOptions

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
PORTS = frozenset({9092, 9093, 9094, 19092, 29092, 39092})


def _log_roots():
    """Every log-dir root of the corpus (a folder holding brokers' log dirs), plus the demo."""
    roots = {ROOT / "fixtures" / "logdirs" / "demo"}
    for meta in CORPUS.rglob("meta.properties"):
        roots.add(meta.parent.parent.parent if meta.parent.name in ("data", "meta") else meta.parent)
    return sorted(roots)


def _captures():
    return sorted(p for p in CORPUS.rglob("*") if p.suffix in (".pcap", ".pcapng")) + sorted(
        (ROOT / "pcaps").glob("*.pcap"))


def _tables(chunks) -> dict:
    by_kind: dict = {}
    for kind, t in chunks:
        by_kind.setdefault(kind, []).append(t)
    return {k: pa.concat_tables(v) for k, v in by_kind.items()}


def _both(run):
    with native.pure(False):
        compiled = run()
    with native.pure(True):
        reference = run()
    return compiled, reference


needs_core = pytest.mark.skipif(native.module("kaudit.protocol._cbatch") is None and not native._pure,
                                reason="the compiled core is not built")


@needs_core
@pytest.mark.parametrize("deep", [False, True])
def test_log_dirs_decode_to_the_same_rows(corpus, deep):
    for root in _log_roots():
        a, b = _both(lambda: _tables(local.decode_segments([str(root)], deep=deep, jobs=1)[1]))
        assert a.keys() == b.keys(), root
        for kind in a:
            assert a[kind].equals(b[kind]), (root, kind)
        if deep and "record" in a:
            assert a["record"].num_rows > 0


@needs_core
def test_log_dirs_audit_to_the_same_findings(corpus):
    for root in _log_roots():
        a, b = _both(lambda: local.audit_segments([str(root)], jobs=1))
        assert a.findings == b.findings and a.coverage == b.coverage, root


@needs_core
@pytest.mark.parametrize("deep", [False, True])
def test_captures_decode_to_the_same_rows_and_findings(corpus, deep):
    options = PcapOptions(kafka_ports=PORTS, deep=deep, jobs=1)
    for cap in _captures():
        a, b = _both(lambda: _tables(local.decode_pcaps([str(cap)], options, {})[1]))
        assert a.keys() == b.keys(), cap
        for kind in a:
            assert a[kind].equals(b[kind]), (cap, kind)
        if not deep:
            fa, fb = _both(lambda: local.audit_pcaps([str(cap)], options).findings)
            assert fa == fb, cap


def _run(code: str, **env) -> subprocess.CompletedProcess:
    import os

    e = dict(os.environ)
    e.pop("KAUDIT_PURE", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd=ROOT)


def test_kaudit_pure_forces_the_reference_path():
    code = "from kaudit import native; print(native.active(), native.module('kaudit.protocol._cbatch'))"
    r = _run(code, KAUDIT_PURE="1")
    assert r.stdout.split() == ["False", "None"] and r.stderr == ""


@needs_core
def test_the_compiled_core_is_active_by_default():
    r = _run("from kaudit import native; print(native.active())")
    assert r.stdout.strip() == "True" and r.stderr == ""


def test_a_missing_extension_is_said_once_and_the_pure_path_runs():
    code = ("from kaudit import native\n"
            "native.EXTENSIONS = ('kaudit.protocol._nonexistent',)\n"
            "for _ in range(3): native.module('kaudit.protocol._nonexistent')\n"
            "print(native.active())\n")
    r = _run(code)
    assert r.stdout.strip() == "False"
    assert r.stderr.count("compiled core is not available") == 1
