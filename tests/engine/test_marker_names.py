"""Topic ids named by a transaction's markers (sources.marker_names.MarkerNames): a 4.x
producer writes by topic id (Produce v13), the coordinator's WriteTxnMarkers names the same
partitions by name; with no Metadata answer naming the id in the capture, the one partition of
that number the markers name and nothing else claims is the id's. The real corpus's case (a
one-broker capture with packets lost) is in tests/audit/test_one_broker_view.py."""

from __future__ import annotations

import pyarrow as pa

from kaudit.sources.marker_names import MarkerNames

BATCH = pa.schema([("source_kind", pa.string()), ("is_transactional", pa.bool_()), ("producer_id", pa.int64()),
                   ("producer_epoch", pa.int16()), ("topic", pa.string()), ("topic_id", pa.string()),
                   ("partition", pa.int32())])
EVENT = pa.schema([("event", pa.string()), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()),
                   ("partitions", pa.string())])


def data(pid, epoch, topic, tid, partition=0, kind="produce", txn=True):
    return {"source_kind": kind, "is_transactional": txn, "producer_id": pid, "producer_epoch": epoch,
            "topic": topic, "topic_id": tid, "partition": partition}


def marks(pid, epoch, parts, event="WRITE_MARKERS"):
    return {"event": event, "producer_id": pid, "producer_epoch": epoch, "partitions": parts}


def voter(batches=(), events=()):
    m = MarkerNames()
    m.note("batch", pa.Table.from_pylist(list(batches), schema=BATCH))
    m.note("txn_event", pa.Table.from_pylist(list(events), schema=EVENT))
    return m


def test_a_version_2_transaction_names_its_id_partition():
    """Epoch 2's data: j-txn-b-0 by name, ID-A-0 by id; the COMMIT of epoch 3 (version 2: the
    data's epoch + 1) names j-txn-a-0 and j-txn-b-0: ID-A is j-txn-a."""
    m = voter([data(1000, 2, None, "ID-A"), data(1000, 2, "j-txn-b", "ID-B")],
              [marks(1000, 3, "j-txn-a-0,j-txn-b-0")])
    assert m.names({"ID-B": "j-txn-b"}) == {"ID-A": "j-txn-a"}
    assert m.names({"ID-A": "known"}) == {}   # a name the evidence gives stays


def test_a_version_1_transaction_names_it_too():
    """Version 0/1: the marker carries the data's own epoch."""
    m = voter([data(7, 0, None, "ID-A", partition=3)], [marks(7, 0, "orders-3")])
    assert m.names({}) == {"ID-A": "orders"}


def test_no_name_where_the_markers_cannot_say():
    # two unclaimed names of the partition's number: either could be the id's
    assert voter([data(7, 0, None, "ID-A")], [marks(7, 1, "a-0,b-0")]).names({}) == {}
    # the one name of that number is another id's (known), or is written by name in the transaction
    assert voter([data(7, 0, None, "ID-A")], [marks(7, 1, "a-0")]).names({"ID-X": "a"}) == {}
    assert voter([data(7, 0, None, "ID-A"), data(7, 0, "a", None)], [marks(7, 1, "a-0")]).names({}) == {}
    # another partition number; another producer's markers; an epoch two apart; not WRITE_MARKERS
    assert voter([data(7, 0, None, "ID-A", partition=1)], [marks(7, 1, "a-0")]).names({}) == {}
    assert voter([data(7, 0, None, "ID-A")], [marks(8, 1, "a-0")]).names({}) == {}
    assert voter([data(7, 0, None, "ID-A")], [marks(7, 2, "a-0")]).names({}) == {}
    assert voter([data(7, 0, None, "ID-A")], [marks(7, 1, "a-0", event="END_TXN")]).names({}) == {}
    # a fetched batch or a plain (non-transactional) write is no transaction's data
    assert voter([data(7, 0, None, "ID-A", kind="fetch")], [marks(7, 1, "a-0")]).names({}) == {}
    assert voter([data(7, 0, None, "ID-A", txn=False)], [marks(7, 1, "a-0")]).names({}) == {}


def test_votes_that_disagree_or_two_ids_for_one_name_name_nothing():
    """A zombie's write by id to a partition its transaction never registered can meet a
    registered partition whose data the capture lost: the producer's other transactions then
    vote another name, and nothing is named; nor are two ids given one name."""
    m = voter([data(7, 0, None, "ID-A"), data(7, 2, None, "ID-A")], [marks(7, 1, "a-0"), marks(7, 3, "b-0")])
    assert m.names({}) == {}
    m = voter([data(7, 0, None, "ID-A"), data(8, 0, None, "ID-B")], [marks(7, 1, "a-0"), marks(8, 1, "a-0")])
    assert m.names({}) == {}


def test_merged_voters_and_a_bounded_memory():
    mine, other = voter([data(7, 0, None, "ID-A")]), voter(events=[marks(7, 1, "a-0")])
    mine.merge(other)
    assert mine.names({}) == {"ID-A": "a"}
    small = MarkerNames()
    small.MAX = 4
    for e in range(10):
        small.note("txn_event", pa.Table.from_pylist([marks(7, e, "a-0")], schema=EVENT))
    assert len(small.markers) == 4 and (7, 9) in small.markers and (7, 0) not in small.markers


def test_the_transaction_before_and_two_ids_told_apart():
    """Version 2 seen from the middle of a capture: epoch 4 wrote ID-A-0 and ID-B-0 and its
    ABORT (epoch 5) named a-0 and b-0 - either id could be either; epoch 5 wrote ID-A-0 and its
    COMMIT (epoch 6) named a-0 alone: ID-A is a, and then ID-B is b."""
    m = voter([data(1000, 4, None, "ID-A"), data(1000, 4, None, "ID-B"), data(1000, 5, None, "ID-A")],
              [marks(1000, 5, "a-0,b-0"), marks(1000, 6, "a-0")])
    assert m.names({}) == {"ID-A": "a", "ID-B": "b"}
    # a name alone in one epoch's markers but absent from the other's, which names others: none
    m = voter([data(7, 5, None, "ID-A")], [marks(7, 5, "b-0"), marks(7, 6, "a-0")])
    assert m.names({}) == {}


def test_a_version_2_producer_is_told_by_the_markers_that_end_its_data():
    """Version 2 (its data at epochs 3, 4 and 5: every transaction its own epoch), two topics of
    one partition number written by id, the capture's Metadata answers lost: epoch 3 wrote ID-A
    and ID-B (its COMMIT of epoch 4 names a-1 and b-1), epoch 4 ID-A alone (its ABORT of epoch 5
    names a-1), epoch 5 ID-A and ID-B (COMMIT of epoch 6: a-1, b-1); the markers of a data epoch
    E end the transaction before (a COMMIT of epoch 3 naming a-1 alone ended epoch 2's). Read as
    version 0/1 too, those would vote a for ID-B: ID-A is a, then ID-B is b."""
    batches = [data(1000, 3, None, "ID-A", 1), data(1000, 3, None, "ID-B", 1), data(1000, 4, None, "ID-A", 1),
               data(1000, 5, None, "ID-A", 1), data(1000, 5, None, "ID-B", 1)]
    events = [marks(1000, 3, "a-1"), marks(1000, 4, "a-1,b-1"), marks(1000, 5, "a-1"), marks(1000, 6, "a-1,b-1")]
    assert voter(batches, events).names({}) == {"ID-A": "a", "ID-B": "b"}
    # two epochs only: not told apart from version 0/1's reading, which names nothing here
    assert voter(batches[:3], events[:3]).names({}) == {}
