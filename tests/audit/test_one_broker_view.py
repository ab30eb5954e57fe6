"""A capture taken on one broker: an SRE's tcpdump on the host of the broker in trouble sees
only that broker's traffic - the Metadata answers that name the topics, the coordinator's
requests and the client's AddPartitionsToTxn and EndTxn may all have gone to the others. The
real corpus's captures cut to one broker's port must tell no anomaly the whole capture does not:
a topic id named after another topic by a transactional producer's identical batches
(sources.topics.BatchNames), a write that raced the coordinator's marker told as a torn
transaction (txn_wire_feed._completing). And the same cuts with packets lost besides: a topic id
whose Metadata answer was lost named by the transaction's markers (sources.marker_names), a
write whose answer was lost placed against the marker it raced by its epoch
(txn_wire_order)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import TCP
from scapy.utils import PcapReader, PcapWriter

from kaudit.audit import at_or_above
from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions

pytestmark = pytest.mark.corpus
PORTS = PcapOptions(kafka_ports=frozenset((9092, 9093, 9094)))


def _one_broker(src, port: int, out, loss: float = 0.0, seed: int = 0, data_only: bool = False,
                window: tuple[float, float] = (0.0, 1.0)):
    """The packets of `src` to or from `port` (tcpdump's `tcp port N`), written to `out`; `loss`:
    that share of them dropped besides, chosen by Random(`seed`) (a kernel's drops under load);
    `data_only`: only packets carrying bytes are dropped (the connections' handshakes kept);
    `window`: only that share of the port's packets kept, by their rank (a capture started
    late and stopped early)."""
    import random

    kept, rnd = 0, random.Random(seed)
    with PcapReader(str(src)) as r:
        mine = [p for p in r if TCP in p and port in (p[TCP].sport, p[TCP].dport)]
    mine = mine[int(window[0] * len(mine)):int(window[1] * len(mine))]
    with PcapWriter(str(out), sync=False) as w:
        for p in mine:
            if loss and (not data_only or len(p[TCP].payload)) and rnd.random() < loss:
                continue
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


@pytest.mark.parametrize("seed", [2])
def test_a_topic_id_named_by_its_transactions_markers(corpus, tmp_path, seed):
    """v2-txn-java-tv2 on node 1's port with 8% of the data packets lost: the Metadata answer
    naming j-txn-a's id is lost with the COMMIT markers served for it, so the producer's writes
    there carry only an id while the coordinator's WriteTxnMarkers names j-txn-a-0: a critical
    torn transaction was told (the id's partition "got no marker"). The transactions' markers
    name the id (coverage `topic_ids_named_by_markers`): nothing at warning."""
    src = corpus / "real-kafka-4.1.0" / "v2-txn-java-tv2" / "v2-txn-java-tv2.pcap"
    cut = _one_broker(src, 9092, tmp_path / "v2-9092.pcap", loss=0.08, seed=seed, data_only=True)
    run = audit_pcaps([str(cut)], PORTS)
    assert run.coverage.get("topic_ids_named_by_markers") == {"4UX5S_5ZS3i2HNwLJ5agIw": "j-txn-a"}
    assert [f["rule"] for f in run.findings if at_or_above(f["severity"], "warning")] == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_raced_write_whose_answer_was_lost_is_placed_by_its_epoch(corpus, tmp_path, seed):
    """v7 (transaction version 2, EndTxn outside the capture) on node 2's port with 8% of the
    data packets lost: a transaction's first write, sent just before the coordinator's COMMIT
    of the one before and its answer lost, has no offset; by its request it fell before the
    marker, in the previous transaction's part - a part of two epochs, told as a critical
    write after its epoch's end, a mixed-epoch transaction or a torn one. The marker ends data
    of an older epoch answered before it was sent: the write of the marker's epoch is of the
    next transaction and lands after it. Nothing at warning."""
    d = corpus / "real-kafka-4.1.0" / "v7-compacted-eos-changelog"
    cut = _one_broker(d / f"{d.name}.pcap", 9093, tmp_path / "v7-9093.pcap", loss=0.08, seed=seed, data_only=True)
    assert _warnings(cut) == []


def test_a_late_write_whose_transactions_data_was_lost(corpus, tmp_path):
    """3.0.2's 02-hanging scenario on node 2 (hang-4's leader) with 8% of the data packets lost:
    the aborted transaction's write to hang-4 (offsets 0-1) is lost, so the coordinator's ABORT
    markers there (offset 2, fetched by a consumer) ended no transaction of the capture; the
    late write at offsets 3-4 was then told "aborted" by them (a critical torn transaction). The
    markers end a transaction begun unseen and take the fetched offset: the late write is told
    as the whole capture tells it."""
    d = corpus / "real-kafka-3.0.2-extra" / "02-hanging-unregistered-and-late-writes"
    cut = _one_broker(d / f"{d.name}.pcap", 9093, tmp_path / "02-9093.pcap", loss=0.08, seed=1, data_only=True)
    run = audit_pcaps([str(cut)], PORTS)
    (f,) = [f for f in run.findings if at_or_above(f["severity"], "warning")]
    assert (f["rule"], f["topic"], f["partition"], f["severity"]) == ("late-transactional-write", "hang", 4, "critical")
    assert "after its previous ABORT marker at offset 2: it was committed by the next transaction's COMMIT at offset 7" \
        in f["message"]


def test_a_late_write_whose_answer_was_lost_is_placed_by_its_fetched_copy(corpus, tmp_path):
    """The same with 15% of the data packets lost (seed 5): the late write's answer and the next
    write are lost too, so its offset showed nowhere; placed by its request before the ABORT
    marker (offset 2, fetched), the aborted transaction's data was told torn (critical). A
    consumer's Fetch serves the write's batch (same epoch and first sequence) at offset 3: the
    broker stored it there - the late write, as the whole capture tells it."""
    d = corpus / "real-kafka-3.0.2-extra" / "02-hanging-unregistered-and-late-writes"
    cut = _one_broker(d / f"{d.name}.pcap", 9093, tmp_path / "02-9093.pcap", loss=0.15, seed=5, data_only=True)
    run = audit_pcaps([str(cut)], PORTS)
    (f,) = [f for f in run.findings if at_or_above(f["severity"], "warning")]
    assert (f["rule"], f["topic"], f["partition"], f["severity"]) == ("late-transactional-write", "hang", 4, "critical")
    assert "data at offsets 3-4 reached the partition after its previous ABORT marker at offset 2" in f["message"]
    assert any("serves hang-4 epoch 0 seq 2-3 at offset 3: stored" in line for line in f["timeline"])


def test_a_capture_begun_inside_a_transaction_on_one_broker(corpus, tmp_path):
    """3.0.2's 03-txn-java (clean) on node 3's port, the middle half of it: the capture begins
    inside a committed transaction whose AddPartitionsToTxn of j-txn-a-0 came before it; its
    EndTxn, the coordinator's COMMIT to j-txn-a-0 and the next (aborted) transaction follow. The
    COMMIT is that transaction's (it began before the capture shows every registration), not a
    marker of nothing: no critical torn transaction of the next one."""
    d = corpus / "real-kafka-3.0.2" / "pcap"
    cut = _one_broker(d / "03-txn-java.pcap", 9094, tmp_path / "03-9094.pcap", window=(0.3, 0.8))
    assert _warnings(cut) == []
