"""A capture decoded by several processes gives exactly the chunks of a decode in one process:
the same rows, in the same order, cut at the same places, with the same summary."""

from __future__ import annotations

import shutil

import pytest

from kaudit.sources import pcap, pcap_parallel
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


@pytest.mark.skipif(not shutil.which("false"), reason="needs /bin/false")
def test_worker_failure_is_an_error_not_a_hang(tmp_path, monkeypatch):
    messages, _ = kmsgs.conversation()
    path = tmp_path / "one.pcap"
    write_capture(path, [Conn(messages, client=("10.0.0.%d" % (i + 1), 40000 + i)) for i in range(4)])
    monkeypatch.setattr(pcap_parallel.sys, "executable", shutil.which("false"))  # a worker that dies at once
    with pytest.raises(RuntimeError, match="pcap worker"):
        _decode(path, 2)
