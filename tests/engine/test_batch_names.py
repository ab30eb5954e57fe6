"""Topic ids named by the batches themselves (sources.topics.BatchNames): a batch seen under a
topic name (a Produce v3-v12) and again under a topic id (a follower's Fetch v18), with no
Metadata answer in the capture to map the id."""

from __future__ import annotations

import pyarrow as pa

from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap_session import PcapOptions
from kaudit.sources.topics import BatchNames
from tests.sim import wire_group
from tests.sources.pcap import kmsgs
from tests.sources.pcap.craft import Conn, write_capture

OPTIONS = PcapOptions(kafka_ports=frozenset({9092}), jobs=1)


def rows(topic, tid, crc, pid=7, seq=0, ok=True, partition=0):
    return {"topic": topic, "topic_id": tid, "partition": partition, "producer_id": pid, "producer_epoch": 1,
            "base_sequence": seq, "crc": crc, "crc_ok": ok}


def table(*rs):
    return pa.Table.from_pylist(list(rs), schema=pa.schema([
        ("topic", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()), ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()), ("base_sequence", pa.int32()), ("crc", pa.uint32()), ("crc_ok", pa.bool_())]))


def test_the_same_batch_by_name_and_by_id_names_the_id():
    b = BatchNames()
    b.note(table(rows("orders", None, 11), rows("orders", None, 12, seq=5), rows("audit", None, 13, partition=1)))
    b.note(table(rows(None, "ID-A", 12, seq=5), rows(None, "ID-B", 99)))
    assert b.names({}) == {"ID-A": "orders"}           # ID-B: no batch of its seen by name
    assert b.names({"ID-A": "orders-known"}) == {}     # a name the evidence gives stays


def test_a_row_named_through_its_own_id_names_no_other_id():
    """A transactional producer's first batch to a-0 and to b-0: the same producer, epoch,
    sequence 0 and records (so the same CRC). b's id is named by a Metadata answer, a's by
    nothing (its answer went to a broker outside the capture): a's id is not b."""
    b = BatchNames()
    b.note(table(rows("b", "ID-B", 11), rows(None, "ID-A", 11)))
    assert b.names({"ID-B": "b"}) == {}
    b.note(table(rows("a", None, 11)))                   # a Produce v12 by name: that names it
    assert b.names({"ID-B": "b"}) == {"ID-A": "a"}


def test_no_name_where_the_batches_disagree_or_cannot_say():
    b = BatchNames()
    b.note(table(rows("orders", None, 11), rows("payments", None, 21, seq=9),
                 rows("x", None, 31, pid=-1), rows("y", None, 41, ok=False)))
    b.note(table(rows(None, "ID-A", 11), rows(None, "ID-A", 21, seq=9),   # two names for one id
                 rows(None, "ID-C", 31, pid=-1), rows(None, "ID-D", 41, ok=False)))
    assert b.names({}) == {}
    other = BatchNames()
    other.note(table(rows("orders", None, 11)))
    mine = BatchNames()
    mine.note(table(rows(None, "ID-E", 11)))
    mine.merge(other)
    assert mine.names({}) == {"ID-E": "orders"}


def test_a_followers_fetch_by_id_is_named_by_the_produce_it_copies(tmp_path):
    """Produce v3 of producer 2003's batch to orders-0 (stored at offset 100), then broker 2's
    Fetch v18 of orders-0 by topic id returning that batch: the id is named "orders"."""
    produced = kmsgs.produce(1, client_id="app")
    stored = (100).to_bytes(8, "big") + kmsgs.PRODUCE_BATCH_PLAIN[8:]   # (the offset is outside the CRC)
    follower = wire_group.fetch(1, "broker-2-fetcher-0", 18, "read_uncommitted", [("orders", 0, 100)],
                                [("orders", 0, 0, 102, 102, 0, [], stored)], replica_id=2)
    path = tmp_path / "c.pcap"
    write_capture(path, [Conn([(0, produced[0]), (1, produced[1])]),
                         Conn(follower, client=("10.0.0.3", 40002))])
    run = audit_pcaps([str(path)], OPTIONS)
    named = run.coverage.get("topic_ids_named_by_batches") or {}
    assert list(named.values()) == ["orders"] and run.topic_names == named


def test_the_keys_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(BatchNames, "MAX_KEYS", 2)
    b = BatchNames()
    for seq in range(5):
        b.note(table(rows("orders", None, 11, seq=seq)))
    assert sum(len(k) for k, _, _ in b.named) == 2   # the two newest chunks
    b.note(table(rows(None, "ID-A", 11, seq=0), rows(None, "ID-B", 11, seq=4)))
    assert b.names({}) == {"ID-B": "orders"}


def test_chunks_gathered_name_as_the_chunks_did(monkeypatch):
    """A live capture's thousands of chunks are gathered GATHER at a time into one part (one
    list of names): the names are those of the chunks one by one, and the bound still holds."""
    chunks = [table(rows(f"t{i % 3}", None, 100 + i, seq=i)) for i in range(7)] + \
        [table(rows(None, f"ID-{i}", 100 + i, seq=i)) for i in range(7)] + [table(rows(None, "ID-X", 999))]
    one = BatchNames()
    for c in chunks:
        one.note(c)
    monkeypatch.setattr(BatchNames, "GATHER", 3)
    gathered = BatchNames()
    for c in chunks:
        gathered.note(c)
    assert len(gathered.named) == 3 and len(gathered.ids) == 4     # two parts of 3 chunks, then the loose ones
    assert gathered.names({}) == one.names({}) == {f"ID-{i}": f"t{i % 3}" for i in range(7)}
    monkeypatch.setattr(BatchNames, "MAX_KEYS", 4)
    bounded = BatchNames()
    for c in chunks:
        bounded.note(c)
    assert bounded.kept["named"] <= 4 + 3 and bounded.kept["ids"] <= 4 + 3
