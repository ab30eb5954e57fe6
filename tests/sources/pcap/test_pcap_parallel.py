"""A capture decoded by several processes gives exactly the chunks of a decode in one process:
the same rows, in the same order, cut at the same places, with the same summary."""

from __future__ import annotations

import os
import signal

import pytest

from kaudit import native
from kaudit.sources import cores, pcap, pcap_parallel, pcap_workers
from kaudit.sources.pcap import PcapOptions, PcapSummary, decode_capture
from tests.sources.pcap import kmsgs
from tests.sources.pcap.craft import Conn, write_capture

PORTS = frozenset({9092, 9093, 9094})
SAMPLES = ["real-kafka-3.0.2/pcap/05-fence-java.pcap", "real-kafka-3.0.2/pcap/09-readcommitted-mixed.pcap",
           "real-kafka-3.0.2/pcap/01-idem-aiokafka.pcapng"]


def _decode(path, jobs, **options):
    summary = PcapSummary()
    chunks = [(kind, t.to_pylist()) for kind, t in decode_capture(str(path), PcapOptions(jobs=jobs, **options),
                                                                  summary)]
    return chunks, vars(summary)


@pytest.fixture
def flush(monkeypatch):
    """Small chunks, so that chunk boundaries fall among the processes' rows."""
    monkeypatch.setattr(pcap, "FLUSH_ROWS", 5)
    monkeypatch.setattr(pcap_parallel, "FLUSH_ROWS", 5)
    return 5


def test_corpus_captures_decode_the_same_in_two_and_three_processes(corpus, flush):
    paths = []
    for pattern in SAMPLES:
        paths.extend(sorted(corpus.glob(pattern)))
    if not paths:
        pytest.skip("no sample captures in the corpus")
    for path in paths:
        one = _decode(path, 1, kafka_ports=PORTS)
        assert len(one[0]) >= 2
        assert _decode(path, 2, kafka_ports=PORTS) == one, path.name


def test_damaged_and_interleaved_connections_decode_the_same(tmp_path, flush):
    """Gaps (issue rows and cut frames from one event), several connections interleaved packet by
    packet, connections left open at the end of the capture."""
    messages, names = kmsgs.conversation()
    fi = names["request fetch"]
    conns = [Conn(messages, client=("10.0.0.%d" % (i + 1), 40000 + i), fin=i != 2) for i in range(5)]
    path = tmp_path / "many.pcap"
    write_capture(path, conns, segment=40, interleave=True,
                  drop=lambda s: s.messages == (fi,) and s.index in (0, 3))
    one = _decode(path, 1)
    assert any(kind == "decode_issue" for kind, _ in one[0])
    assert _decode(path, 2) == one
    assert _decode(path, 3) == one


def _capture(tmp_path, n=4, name="one.pcap"):
    messages, _ = kmsgs.conversation()
    path = tmp_path / name
    write_capture(path, [Conn(messages, client=("10.0.0.%d" % (i + 1), 40000 + i)) for i in range(n)],
                  segment=60, interleave=True)
    return path


@pytest.fixture
def forks(monkeypatch):
    """The workers each decode makes (to check that none is left behind)."""
    made = []
    real = pcap_workers.Worker.__init__

    def init(self, *a, **k):
        real(self, *a, **k)
        made.append(self.pid)

    monkeypatch.setattr(pcap_workers.Worker, "__init__", init)
    return made


def _reaped(pids):
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return True


def test_pure_path_decodes_the_same_in_parallel(tmp_path, flush, forks):
    path = _capture(tmp_path)
    with native.pure(True):
        one = _decode(path, 1)
        assert _decode(path, 2) == one
    assert _decode(path, 2) == one  # and the compiled path gives the pure rows
    assert forks and _reaped(forks)


def test_truncated_captures_decode_the_same_in_parallel(tmp_path, flush, forks):
    """A capture cut anywhere (mid-record, mid-frame): the workers walk the same cut file."""
    whole = _capture(tmp_path).read_bytes()
    for cut in (len(whole) // 3, len(whole) // 2 + 7, len(whole) - 5):
        path = tmp_path / f"cut{cut}.pcap"
        path.write_bytes(whole[:cut])
        assert _decode(path, 2) == _decode(path, 1), cut
    assert _reaped(forks)


def _failing(how):
    def work(*a):
        def run(part, fd):
            if how == "raise":
                raise ValueError("broken on purpose")
            os.kill(os.getpid(), signal.SIGKILL)
        return run
    return work


@pytest.mark.parametrize("how, message", [("raise", "pcap worker 1 failed: ValueError: broken on purpose"),
                                          ("kill", "pcap worker 1 died \\(killed by signal 9\\)")])
def test_worker_failure_is_an_error_not_a_hang(tmp_path, monkeypatch, forks, how, message):
    path = _capture(tmp_path)
    monkeypatch.setattr(pcap_parallel, "_work", _failing(how))
    with pytest.raises(RuntimeError, match=message):
        _decode(path, 2)
    assert _reaped(forks)


def test_stopping_early_leaves_no_worker_behind(tmp_path, flush, forks):
    path = _capture(tmp_path, n=6)
    chunks = decode_capture(str(path), PcapOptions(jobs=3))
    next(chunks)
    chunks.close()
    assert len(forks) == 2 and _reaped(forks)


def test_owner_shares_connections_among_processes():
    assert {pcap_parallel.owner(i, 1) for i in range(10)} == {0}
    two = [pcap_parallel.owner(i, 2) for i in range(700)]
    assert set(two) == {0, 1} and two.count(0) == 200


def test_deep_decode_is_the_same_in_parallel(tmp_path, flush):
    path = _capture(tmp_path, n=5)
    one = _decode(path, 1, deep=True)
    assert _decode(path, 2, deep=True) == one


def test_auto_jobs_one_process_unless_a_deep_compiled_decode(monkeypatch):
    for name in ("KAUDIT_PCAP_JOBS", "KAUDIT_JOBS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cores, "usable_cpus", lambda: 2)
    big = cores.MIN_PARALLEL_BYTES
    assert pcap.auto_jobs(100 * big) == 1  # measured slower in two processes (see auto_jobs)
    if native.module("kaudit.sources._cpcap") is not None:
        assert pcap.auto_jobs(big, deep=True) == 2
        assert pcap.auto_jobs(big - 1, deep=True) == 1
    with native.pure(True):
        assert pcap.auto_jobs(100 * big, deep=True) == 1
    monkeypatch.setenv("KAUDIT_JOBS", "2")
    assert pcap.auto_jobs(1) == 2
    monkeypatch.setenv("KAUDIT_PCAP_JOBS", "3")
    assert pcap.auto_jobs(1) == 3
