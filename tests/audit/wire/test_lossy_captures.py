"""Real captures that lost packets, or hold one broker's traffic only, as an SRE's often do
(tcpdump drops under load; a capture taken on one host): the clean 3.0.2 and 4.1.0 scenarios keep
nothing at warning or above. A capture that lost bytes on a connection proves no absence there
(audit.capture_holes): it once gave false out-of-order-sequence errors, hanging and torn
transactions, an unregistered partition and a consumer poll skip; one broker's view gave a false
mixed-epoch error (markers without the coordinator's view) and a nonmonotonic-poll warning (a
group member whose coordinator's traffic is elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap_session import PcapOptions
from tests.audit.wire.pcap_edit import drop, only

PORTS = frozenset({9092, 9093, 9094})
V1 = "real-kafka-4.1.0/v1-idempotent-clean/v1-idempotent-clean.pcap"
V7 = "real-kafka-4.1.0/v7-compacted-eos-changelog/v7-compacted-eos-changelog.pcap"
LOSSY = [(V1, 0.01, 1), (V7, 0.01, 1), (V7, 0.01, 2), ("real-kafka-3.0.2/pcap/03-txn-java.pcap", 0.05, 3)]
ONE_BROKER = [(V7, 9093), ("real-kafka-3.0.2/pcap/04-ctp-java.pcap", 9093)]


def loud(path: Path) -> list[tuple]:
    run = audit_pcaps([str(path)], PcapOptions(kafka_ports=PORTS))
    return [(f["rule"], f["severity"], f["topic"], f["partition"], f["message"][:200]) for f in run.findings
            if f["severity"] in ("warning", "error", "critical")]


@pytest.mark.parametrize("path,rate,seed", LOSSY, ids=[f"{Path(p).stem}-{r}-{s}" for p, r, s in LOSSY])
def test_a_clean_capture_that_lost_packets_stays_clean(corpus, tmp_path, path, rate, seed):
    out = tmp_path / "lossy.pcap"
    assert drop(corpus / path, out, rate, seed) > 0
    assert loud(out) == []


@pytest.mark.parametrize("path,port", ONE_BROKER, ids=[f"{Path(p).stem}-{port}" for p, port in ONE_BROKER])
def test_one_brokers_view_of_a_clean_capture_stays_clean(corpus, tmp_path, path, port):
    out = tmp_path / "one.pcap"
    assert only(corpus / path, out, port) > 0
    assert loud(out) == []


def test_a_lost_request_is_told_at_info_with_where_the_capture_lost_it(corpus, tmp_path):
    """v1 lost the Produce carrying sequences 10-12 of kp-idem-2: the jump the capture shows is
    the capture's loss, said with the connection and the frame after which it lost bytes."""
    out = tmp_path / "lossy.pcap"
    drop(corpus / V1, out, 0.01, 1)
    run = audit_pcaps([str(out)], PcapOptions(kafka_ports=PORTS))
    jumps = [f for f in run.findings if f["rule"] == "out-of-order-sequence"]
    assert jumps and all(f["severity"] == "info" for f in jumps)
    f = next(f for f in jumps if f["topic"] == "kp-idem" and f["partition"] == 2)
    assert "sequences 10-12 may be in a request it lost" in f["message"]
    assert "127.0.0.1:34718 -> 127.0.0.1:9094 after frame 1280" in f["message"]


def test_a_connection_whose_first_request_was_lost_keeps_its_client(corpus, tmp_path):
    """Brokers on ports kaudit was not told of (9093, 9094: default 9092 only), a connection
    whose client's first request the capture lost: its opener (the SYN's sender) is the client
    all the same. The broker's answer, read as a request, was once an unanswered Produce
    "from" the broker (a warning)."""
    out = tmp_path / "lossy.pcap"
    drop(corpus / "real-kafka-4.1.0/v4-idem-retry-java/v4-idem-retry-java.pcap", out, 0.05, 3)
    run = audit_pcaps([str(out)], PcapOptions(kafka_ports=frozenset({9092})))
    assert [f for f in run.findings if f["severity"] in ("warning", "error", "critical")] == []
    assert not any(f.get("connection", "").startswith("127.0.0.1:909") for f in run.findings
                   if f["rule"] == "unanswered-request")


def test_a_zombie_write_whose_rejection_was_lost_is_no_mixed_epoch(corpus, tmp_path):
    """4.1.0 v5 (a fenced TV2 instance's late Produce, rejected PRODUCER_FENCED) with a tenth of
    the data packets lost: the rejection is lost, the write has no answer and its request put it
    in the new instance's transaction - a mixed-epoch error was told. Nothing shows it stored:
    only the rejected zombie requests the whole capture shows are told (fenced-epoch)."""
    out = tmp_path / "lossy.pcap"
    assert drop(corpus / "real-kafka-4.1.0/v5-fencing-tv2/v5-fencing-tv2.pcap", out, 0.1, 12) > 0
    assert {rule for rule, *_ in loud(out)} == {"fenced-epoch"}
