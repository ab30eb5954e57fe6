"""`kaudit segments` never writes to what it audits: on a read-only copy of log dirs, every output
format leaves the files' bytes, modification times and modes unchanged."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat

import pytest
from typer.testing import CliRunner

from kaudit.cli import app

runner = CliRunner()


def _snapshot(tree) -> dict:
    state = {}
    for dirpath, dirs, files in os.walk(tree):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            state[p] = (digest, st.st_mtime_ns, st.st_mode, st.st_size)
    return state


def _read_only_copy(src, dst):
    shutil.copytree(src, dst)
    for dirpath, dirs, files in os.walk(dst, topdown=False):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o444)
        os.chmod(dirpath, 0o555)


def _crafted(tmp_path):
    """A log dir with something for every disk rule (and a preallocated index)."""
    from diskcraft import logdir

    ld = logdir(tmp_path, "crafted")
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    infos = [p.send([b"v%d" % i]) for i in range(4)]
    p.send([b"v0"], base_sequence=0)
    pb.corrupt_batch(infos[2])
    pb.append_raw(b"\x13" * 70)
    p.send([b"x"])
    pb.append_batch(values=[b"anon"], timestamp=9)
    pb.append_batch(values=[b"anon"], timestamp=9)
    pb.unclean_shutdown(index_bytes=1024)
    return ld.write()


@pytest.fixture
def writable_again():
    roots = []
    yield roots.append
    for root in roots:  # let pytest clean its temporary folders
        for dirpath, dirs, files in os.walk(root):
            os.chmod(dirpath, 0o755)


def _check(tree, tmp_path):
    before = _snapshot(tree)
    for fmt in ("table", "json", "ndjson", "sarif"):
        r = runner.invoke(app, ["segments", str(tree), "--format", fmt, "--fail-on", "critical"])
        assert r.exit_code == 0, (fmt, r.output)
        assert r.stdout.strip(), fmt
        out = tmp_path / f"report.{fmt}"
        r = runner.invoke(app, ["segments", str(tree), "--format", fmt, "--output", str(out),
                                "--fail-on", "critical"])
        assert r.exit_code == 0, (fmt, r.output)
        assert out.stat().st_size > 0
    r = runner.invoke(app, ["segments", str(tree), "--output", str(tree / "report.json")])
    assert r.exit_code == 2                       # an output inside the input is refused
    assert _snapshot(tree) == before


def test_crafted_log_dir_is_left_untouched(tmp_path, writable_again):
    tree = tmp_path / "ro"
    _read_only_copy(_crafted(tmp_path), tree)
    writable_again(tree)
    _check(tree, tmp_path)


def test_corpus_log_dir_is_left_untouched(tmp_path, corpus, writable_again):
    tree = tmp_path / "ro"
    _read_only_copy(corpus / "real-kafka-3.0.2-extra/01-idempotent-state-expiry/logdirs", tree)
    writable_again(tree)
    _check(tree, tmp_path)
