"""Live captures (engine/live.py, sources/live_pcap.py, capture/live.py): a capture on a pipe in
small pieces, or a file that grows, gives the findings of the same capture read as a file; a
finding is written before the stream ends once capture time settles it; Ctrl-C and the end of
the stream write the report; what is not a capture exits 3."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kaudit.sources.live_pcap import LiveDecode
from kaudit.sources.pcap import PcapOptions, decode_capture

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
CRAFTED = ROOT / "pcaps" / "11-crafted-sequence-anomalies.pcap"
PORTS = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
CAPTURES = [CRAFTED, ROOT / "pcaps" / "05-fence-java.pcap",
            CORPUS / "real-kafka-3.0.2" / "pcap" / "02-retry-idem-java.pcap",
            CORPUS / "real-kafka-3.0.2" / "pcap" / "01-idem-aiokafka.pcapng",
            CORPUS / "real-kafka-4.1.0" / "v5-fencing-tv2" / "v5-fencing-tv2.pcap",
            CORPUS / "real-kafka-4.1.0" / "v6-codecs" / "v6-codecs.pcapng"]


def _kaudit(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "kaudit", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **kw)


def _same(f: dict) -> tuple:
    """A finding as both paths must give it (the source of evidence aside: '-' on a pipe)."""
    ev = tuple((e["position"], e["kind"], e.get("note")) for e in f["evidence"] or [])
    return (f["rule"], f["severity"], f["message"].replace(str(f.get("_src", "")), ""), ev,
            f["topic"], f["partition"], f["producer_id"], f["first_ts_ms"])


def _file_findings(path: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "kaudit", "pcap", str(path), "--format", "ndjson", *PORTS],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    return [json.loads(x) for x in out.stdout.splitlines()]


def _rows(chunks) -> dict:
    out: dict = {}
    for kind, t in chunks:
        out.setdefault(kind, []).extend(repr(sorted(r.items())) for r in t.to_pylist())
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("path", [p for p in CAPTURES if p.exists()], ids=lambda p: p.name)
def test_rows_in_small_pieces_are_the_files(path):
    """The decoded rows of the capture fed 1 byte to 7 KiB at a time are the file's (the same
    readers and capture loop, window after window)."""
    opt = PcapOptions(kafka_ports=frozenset({9092, 9093, 9094}), jobs=1)
    data = path.read_bytes()
    live = LiveDecode(str(path), opt)
    rnd = random.Random(len(data))
    chunks, i = [], 0
    while i < len(data):
        n = rnd.choice((1, 13, 700, 1024, 4096, 4096, 7168, 7168, 7168, 7168))
        chunks.extend(live.feed(data[i:i + n]))
        i += n
    chunks.extend(live.finish())
    assert _rows(chunks) == _rows(decode_capture(str(path), opt))


def test_rows_in_small_pieces_pure_path():
    """The same on the pure capture loop (KAUDIT_PURE=1: no compiled module)."""
    code = ("import random, sys; sys.path.insert(0, 'tests/engine'); import test_live as t; "
            "t.test_rows_in_small_pieces_are_the_files(t.CRAFTED); "
            "from kaudit import native; assert native.module('kaudit.capture._cstreams') is None")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, KAUDIT_PURE="1"))
    assert out.returncode == 0, out.stderr[-2000:]


def test_cut_and_corrupt_stream_as_a_file(tmp_path):
    """A stream cut inside a record, and one with a corrupt header in the middle: the issues and
    rows of the file with the same bytes."""
    data = CRAFTED.read_bytes()
    for name, damaged in (("cut", data[:len(data) - 37]),
                          ("corrupt", data[:4000] + b"\xff" * 16 + data[4016:])):
        f = tmp_path / f"{name}.pcap"
        f.write_bytes(damaged)
        opt = PcapOptions(jobs=1)
        live = LiveDecode(str(f), opt)
        chunks = []
        for i in range(0, len(damaged), 999):
            chunks.extend(live.feed(damaged[i:i + 999]))
        chunks.extend(live.finish())
        assert _rows(chunks) == _rows(decode_capture(str(f), opt)), name


@pytest.mark.parametrize("path", [CRAFTED, CORPUS / "real-kafka-4.1.0" / "v5-fencing-tv2" / "v5-fencing-tv2.pcap"],
                         ids=lambda p: p.name)
def test_pipe_in_small_chunks_gives_the_files_findings(path):
    if not path.exists():
        pytest.skip(f"{path} not in the corpus")
    want = _file_findings(path)
    proc = _kaudit("pcap", "-", "--format", "ndjson", *PORTS, stdin=subprocess.PIPE)
    data = path.read_bytes()
    rnd = random.Random(7)
    i = 0
    while i < len(data):
        n = rnd.randint(1024, 7 * 1024)
        proc.stdin.write(data[i:i + n])
        proc.stdin.flush()
        i += n
        if rnd.random() < 0.05:
            time.sleep(0.01)
    out, err = proc.communicate(timeout=120)   # closes the pipe: the end of the stream
    got = [json.loads(x) for x in out.decode().splitlines()]
    assert proc.returncode in (0, 1), err
    assert len({f["id"] for f in got}) == len(got)   # none written twice
    assert sorted(map(_same, got)) == sorted(map(_same, want))


def _quiet_record(ts: float) -> bytes:
    """A non-IP Ethernet frame at capture time `ts`: it only moves the capture's clock on."""
    frame = b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb5" + b"\x00" * 46
    sec = int(ts)
    return struct.pack("<IIII", sec, int((ts - sec) * 1e6), len(frame), len(frame)) + frame


def test_findings_before_the_stream_ends():
    """A sequence gap the broker answered is written once the capture's clock is past it (and
    past the requests in flight), while the writer keeps the pipe open."""
    data = CRAFTED.read_bytes()
    last = 1795235217.839742
    proc = _kaudit("pcap", "-", "--format", "ndjson", stdin=subprocess.PIPE)
    try:
        proc.stdin.write(data + _quiet_record(last + 120))
        proc.stdin.flush()
        early, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline and not any(f["rule"] == "out-of-order-sequence" for f in early):
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                early.append(json.loads(proc.stdout.readline()))
        assert proc.poll() is None   # still running: the stream is open
        assert any(f["rule"] == "out-of-order-sequence" for f in early)
    finally:
        proc.stdin.close()
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(60)
    rest = [json.loads(x) for x in out.decode().splitlines()]
    got = early + rest
    assert len({f["id"] for f in got}) == len(got)
    assert sorted(map(_same, got)) == sorted(map(_same, _file_findings(CRAFTED)))
    assert proc.returncode == subprocess.run([sys.executable, "-m", "kaudit", "pcap", str(CRAFTED)], cwd=ROOT,
                                             capture_output=True).returncode   # as for the file


def test_follow_a_growing_file(tmp_path):
    path = CORPUS / "real-kafka-3.0.2" / "pcap" / "02-retry-idem-java.pcap"
    if not path.exists():
        pytest.skip("corpus missing")
    data = path.read_bytes()
    grow = tmp_path / "growing.pcap"
    grow.write_bytes(data[:100])
    proc = _kaudit("pcap", "--follow", str(grow), "--follow-idle", "2", "--format", "ndjson", *PORTS)
    step = len(data) // 4 + 1
    with open(grow, "ab") as f:
        for i in range(100, len(data), step):
            time.sleep(0.3)
            f.write(data[i:i + step])
            f.flush()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 1), err
    got = [json.loads(x) for x in out.decode().splitlines()]
    want = _file_findings(path)
    assert len({f["id"] for f in got}) == len(got)
    assert sorted(map(_same, got)) == sorted(map(_same, want))


def _wait_drained(pipe, proc, limit_s: float = 120.0) -> None:
    """Until the child has read every byte written to its stdin: it reads only after its Ctrl-C
    handler is in place, so a SIGINT from then on is the handled one (a fixed sleep raced the
    imports on a loaded machine)."""
    import fcntl
    import termios

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        left = struct.unpack("i", fcntl.ioctl(pipe.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        if left == 0:
            return
        time.sleep(0.05)


def test_ctrl_c_writes_the_report():
    proc = _kaudit("pcap", "-", "--format", "json", stdin=subprocess.PIPE)
    proc.stdin.write(CRAFTED.read_bytes())
    proc.stdin.flush()
    _wait_drained(proc.stdin, proc)
    proc.send_signal(signal.SIGINT)   # the pipe stays open: only Ctrl-C ends the stream
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(60)
    proc.stdin.close()
    report = json.loads(out)
    assert report["summary"]["findings"] == len(_file_findings(CRAFTED))
    assert proc.returncode == subprocess.run([sys.executable, "-m", "kaudit", "pcap", str(CRAFTED)], cwd=ROOT,
                                             capture_output=True).returncode, err


@pytest.mark.parametrize("data", [b"", b"hello, this is not a capture at all" * 10, b"\xd4\xc3\xb2"])
def test_not_a_capture_exits_3(data):
    proc = _kaudit("pcap", "-", stdin=subprocess.PIPE)
    out, err = proc.communicate(data, timeout=60)
    assert proc.returncode == 3
    assert b"unreadable input" in err


@pytest.mark.parametrize("path", [CORPUS / "real-kafka-4.1.0" / "v2-txn-java-tv2" / "v2-txn-java-tv2.pcap",
                                  CORPUS / "real-kafka-3.0.2" / "pcap" / "03-txn-java.pcap"], ids=lambda p: p.name)
def test_settled_early_as_the_file(path, tmp_path, monkeypatch):
    """A capture followed by 20 quiet minutes: connections close idle, producers' transactions
    and sequences settle before the end, and their findings are the file's (id, severity,
    evidence), each once."""
    from kaudit.engine import live
    from kaudit.engine.live import audit_live
    from kaudit.engine.local import audit_pcaps

    monkeypatch.setattr(live, "CHECK_EVERY_S", 0.0)   # a checkpoint after every chunk
    from kaudit.capture import iter_packets

    if not path.exists():
        pytest.skip("corpus missing")
    data = path.read_bytes()
    if data[:4] != b"\xd4\xc3\xb2\xa1" or struct.unpack_from("<I", data, 20)[0] != 1:
        pytest.skip("the quiet tail is written as a little-endian Ethernet pcap record")
    last = max(p.ts for p in iter_packets(data))
    data += b"".join(_quiet_record(last + 60 * k) for k in range(1, 21))
    f = tmp_path / path.name
    f.write_bytes(data)
    opt = PcapOptions(kafka_ports=frozenset({9092, 9093, 9094}), jobs=1)
    early = []
    run = audit_live(str(f), (data[i:i + 5000] for i in range(0, len(data), 5000)), opt, emit=early.append)
    want = audit_pcaps([str(f)], opt).findings
    key = lambda x: (x["id"], x["rule"], x["severity"], json.dumps(x["evidence"]))
    assert sorted(map(key, run.findings)) == sorted(map(key, want))
    assert len({x["id"] for x in early}) == len(early) and early
    assert run.coverage["live"]["findings_before_end"] == len(early)


def test_live_is_local_without_parquet(tmp_path):
    proc = _kaudit("pcap", "-", "--parquet", str(tmp_path / "rows"), stdin=subprocess.PIPE)
    out, err = proc.communicate(CRAFTED.read_bytes(), timeout=60)
    assert proc.returncode == 2 and b"local engine" in err


@pytest.mark.parametrize("path", [CORPUS / "real-kafka-4.1.0" / "v2-txn-java-tv2" / "v2-txn-java-tv2.pcap",
                                  CORPUS / "real-kafka-4.1.0" / "v7-compacted-eos-changelog" /
                                  "v7-compacted-eos-changelog.pcap",
                                  CORPUS / "real-kafka-3.0.2" / "pcap" / "03-txn-java.pcap"], ids=lambda p: p.name)
def test_kept_selections_made_smaller_as_they_come_give_the_files_findings(path, monkeypatch):
    """Every settler that keeps a selection to the end makes it smaller at every checkpoint (the
    consumers' plain batches merged, wire-acked's fetched batches that can no longer tell a
    write lost or committed let go, the readers' compacted, the batches' topic-id keys
    gathered, the kept tables gathered): the findings are the file's (rule, severity, message,
    evidence)."""
    from kaudit.audit import folds
    from kaudit.audit.consumers.settle import ConsumersSettle
    from kaudit.audit.producers.acked_settle import AckedSettle
    from kaudit.audit.wire import live_settle
    from kaudit.engine import live
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.topics import BatchNames

    if not path.exists():
        pytest.skip(f"{path} not in the corpus")
    monkeypatch.setattr(live, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(ConsumersSettle, "COMPACT_ROWS", 1)
    monkeypatch.setattr(AckedSettle, "COMPACT_ROWS", 1)
    monkeypatch.setattr(live_settle, "COMPACT_ROWS", 1)
    monkeypatch.setattr(BatchNames, "GATHER", 2)
    monkeypatch.setattr(folds, "GATHER_CHUNKS", 1)
    opt = PcapOptions(kafka_ports=frozenset({9092, 9093, 9094}), jobs=1)
    data = path.read_bytes()
    run = live.audit_live(str(path), (data[i:i + 20000] for i in range(0, len(data), 20000)), opt)
    want = audit_pcaps([str(path)], opt).findings
    key = lambda x: (x["rule"], x["severity"], x["message"], json.dumps(x["evidence"]))
    assert sorted(map(key, run.findings)) == sorted(map(key, want)) and want
    assert run.coverage["live"]["acked_rows_dropped"] > 0   # (and merges: 6 batch rows of v2-txn-java-tv2)
