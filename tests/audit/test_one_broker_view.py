"""A capture taken on one broker: an SRE's tcpdump on the host of the broker in trouble sees
only that broker's traffic - the Metadata answers that name the topics, the coordinator's
requests and the client's AddPartitionsToTxn and EndTxn may all have gone to the others. The
real corpus's captures cut to one broker's port must tell no anomaly the whole capture does not:
a topic id named after another topic by a transactional producer's identical batches
(sources.topics.BatchNames), a write that raced the coordinator's marker told as a torn
transaction (txn_wire_feed._completing)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import TCP
from scapy.utils import PcapReader, PcapWriter

from kaudit.audit import at_or_above
from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions

pytestmark = pytest.mark.corpus
PORTS = PcapOptions(kafka_ports=frozenset((9092, 9093, 9094)))


def _one_broker(src, port: int, out, loss: float = 0.0, seed: int = 0):
    """The packets of `src` to or from `port` (tcpdump's `tcp port N`), written to `out`; `loss`:
    that share of them dropped besides, chosen by Random(`seed`) (a kernel's drops under load)."""
    import random

    kept, rnd = 0, random.Random(seed)
    with PcapReader(str(src)) as r, PcapWriter(str(out), sync=False) as w:
        for p in r:
            if TCP in p and port in (p[TCP].sport, p[TCP].dport) and (not loss or rnd.random() >= loss):
                w.write(p)
                kept += 1
    assert kept > 100, kept   # (the broker's own traffic, not an empty file that proves nothing)
    return out


def _warnings(path) -> list[tuple[str, str]]:
    run = audit_pcaps([str(path)], PORTS)
    assert not run.errors, run.errors
    return sorted((f["rule"], f"{f['topic']}-{f['partition']}") for f in run.findings if at_or_above(f["severity"], "warning"))


@pytest.mark.parametrize("port", [9092, 9093, 9094])
def test_the_clean_41_transactions_seen_from_one_broker(corpus, tmp_path, port):
    """v2-txn-java-tv2 (TV2, topic ids only on Produce v13 and Fetch v18): j-txn-a-0 and
    j-txn-b-0 both lead on node 1, and the producer's first batch to each is the same bytes;
    the Metadata answer naming j-txn-a went to another broker."""
    src = corpus / "real-kafka-4.1.0" / "v2-txn-java-tv2" / "v2-txn-java-tv2.pcap"
    assert _warnings(_one_broker(src, port, tmp_path / f"v2-{port}.pcap")) == []


def test_a_write_racing_the_abort_marker_seen_from_its_leader(corpus, tmp_path):
    """3.0.2's 02-hanging scenario on node 1 (hang-2's leader): the coordinator (node 3) and the
    client's EndTxn are outside the capture; the late write of transaction 2 raced the ABORT
    marker and landed before it (offsets 3-4, the marker at 5): nothing at warning or above."""
    d = corpus / "real-kafka-3.0.2-extra" / "02-hanging-unregistered-and-late-writes"
    assert _warnings(_one_broker(d / f"{d.name}.pcap", 9092, tmp_path / "02-9092.pcap")) == []


def test_a_version_2_producer_seen_from_one_broker_through_a_lossy_capture(corpus, tmp_path):
    """4.1.0 v7 (an exactly-once application, transaction version 2) on node 2's port with a
    tenth of the packets lost besides: the producer's EndTxn is not in the capture, so its
    version shows only in its markers, and where an answer was lost its next transaction's first
    write lands in the previous marker's part (a COMMIT at its data's epoch): "mixed" evidence,
    on which the version 0/1 late-write heuristic told 39 late writes. Nothing at warning."""
    d = corpus / "real-kafka-4.1.0" / "v7-compacted-eos-changelog"
    cut = _one_broker(d / f"{d.name}.pcap", 9093, tmp_path / "v7-9093.pcap", loss=0.1)
    assert _warnings(cut) == []
