"""The compiled capture decode (kaudit/capture/_cstreams, protocol/_cframing, protocol/_cwire,
sources/_cpcap, _crows, _ccolumns) against the pure one on damaged input: every truncation of a
capture, random damage anywhere in the file, and random damage inside the Kafka bytes only
(the TCP packets intact, so that the C walks of Produce, Fetch, Metadata, AddPartitionsToTxn
and EndTxn meet corrupt messages). Both paths must give the same rows, chunk by chunk, and
neither may raise anything but kaudit's DecodeError for input that is no capture."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaudit import native
from kaudit.capture import open_capture
from kaudit.capture.link import tcp_records
from kaudit.protocol.errors import DecodeError
from kaudit.sources import pcap
from kaudit.sources.pcap import PcapOptions, PcapSummary
from tests.sources.pcap import kmsgs
from tests.sources.pcap.craft import Conn, write_capture

needs_core = pytest.mark.skipif(native.module("kaudit.sources._cpcap") is None,
                                reason="the compiled core is not built")
pytestmark = needs_core

PORTS = frozenset({9092, 9093, 9094, 19092, 29092, 39092})
OPTIONS = PcapOptions(kafka_ports=PORTS, jobs=1)
SAMPLES = [
    "real-kafka-3.0.2/pcap/03-txn-java.pcap",            # transactions, markers in Fetch
    "real-kafka-3.0.2/pcap/07-acks0-confluent.pcap",     # acks=0
    "real-kafka-3.0.2/pcap/08-compression-kafkapython.pcap",
    "real-kafka-4.1.0/v2-txn-java-tv2/v2-txn-java-tv2.pcap",  # Produce v12+, Fetch v17, topic ids
    "real-kafka-4.1.0/v6-codecs/v6-codecs.pcapng",
    "librdkafka-mock/pcap/mock-idem-txn-readcommitted.pcap",
]


def decode(buf: bytes, compiled: bool) -> list:
    """[(kind, rows)] chunk by chunk, or the DecodeError for input that is no capture."""
    with native.pure(not compiled):
        try:
            return [(kind, t.to_pylist()) for kind, t in
                    pcap._decode(buf, "capture", OPTIONS, PcapSummary())]
        except DecodeError as e:
            return [("error", e.message)]


def _chunks(buf: bytes, compiled: bool) -> list:
    """decode's chunks as Arrow tables (no rows built: a third of the time of a cut)."""
    with native.pure(not compiled):
        try:
            return list(pcap._decode(buf, "capture", OPTIONS, PcapSummary()))
        except DecodeError as e:
            return [("error", e.message)]


def same(buf: bytes) -> None:
    # Arrow's equality (Table == Table: schemas and values); the rows when they differ
    if _chunks(buf, True) != _chunks(buf, False):
        assert decode(buf, True) == decode(buf, False)
        raise AssertionError("same rows, other Arrow types")


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> bytes:
    """A conversation of every API the C walks take, cut into small segments."""
    messages, names = kmsgs.conversation()
    keep = {i for n, i in names.items() if n.split()[1] not in ("api_versions", "init_producer_id")}
    messages = [m for i, m in enumerate(messages) if i in keep]
    path = tmp_path_factory.mktemp("c") / "conv.pcap"
    write_capture(path, Conn(messages), segment=200)
    return path.read_bytes()


@pytest.fixture(scope="module")
def samples(corpus) -> list[bytes]:
    out = [(corpus / s).read_bytes() for s in SAMPLES if (corpus / s).exists()]
    if not out:
        pytest.skip("no sample captures")
    return out


def payload_ranges(buf: bytes) -> list[tuple[int, int]]:
    """(start, end) of every TCP payload of the capture (the pure link decoder)."""
    out = []
    for *_, tcp in tcp_records(open_capture(buf)):
        if tcp is not None and tcp[6] > tcp[5]:
            out.append((tcp[5], tcp[6]))
    return out


def test_the_crafted_conversation_goes_the_compiled_way(crafted):
    rows = dict(decode(crafted, True))
    assert {r["api_name"] for r in rows["frame"]} >= {"Produce", "Fetch", "Metadata",
                                                      "AddPartitionsToTxn", "EndTxn"}
    # the brokers a Metadata v1 answer lists (no cluster id, no topic id): a row of its own
    assert [(r["api_key"], r["topic_id"], r["cluster_id"], r["brokers"]) for r in rows["topic_name"]] \
        == [(3, None, None, "1@broker-1:9092")]
    assert decode(crafted, True) == decode(crafted, False)


def test_a_metadata_answers_brokers_are_on_its_first_row_only(tmp_path):
    """Metadata v10 naming two topic ids: a row per topic, the brokers (a big cluster's list)
    once per answer - on both paths alike."""
    from tests.sim import wire_group

    msgs = wire_group.metadata(1, "c", {"a": {0: 1}, "b": {0: 2, 1: 3}}, [1, 2, 3])
    path = tmp_path / "m.pcap"
    write_capture(path, Conn(msgs))
    rows = dict(decode(path.read_bytes(), True))["topic_name"]
    assert sorted((r["topic"], r["cluster_id"], r["brokers"]) for r in rows) == [
        ("a", "sim", "1@b1:9092,2@b2:9092,3@b3:9092"), ("b", "sim", None)]
    assert decode(path.read_bytes(), True) == decode(path.read_bytes(), False)


def test_every_truncation_gives_the_same_rows(crafted):
    for cut in range(len(crafted) + 1):
        same(crafted[:cut])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_damage_inside_the_kafka_bytes(crafted, samples, rnd):
    buf = bytearray(rnd.choice([crafted] + samples))
    ranges = payload_ranges(bytes(buf))
    for _ in range(rnd.randint(1, 8)):
        start, end = rnd.choice(ranges)
        at = rnd.randrange(start, end)
        op = rnd.random()
        if op < 0.6:
            buf[at] ^= 1 << rnd.randrange(8)
        elif op < 0.8:  # a length or count read as huge, negative or zero
            buf[at:at + 4] = rnd.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\0\0\0\0",
                                         b"\x80\0\0\0"])[:max(0, end - at)]
        else:
            buf[at] = rnd.randrange(256)
    same(bytes(buf))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_damage_anywhere_in_the_file(samples, rnd):
    buf = bytearray(rnd.choice(samples))
    for _ in range(rnd.randint(1, 4)):
        if not buf:
            break
        at = rnd.randrange(len(buf))
        op = rnd.random()
        if op < 0.5:
            buf[at] ^= 1 << rnd.randrange(8)
        elif op < 0.7:
            del buf[at:at + rnd.randint(1, 300)]
        elif op < 0.85:
            n = rnd.randint(1, 400)
            buf[at:at] = buf[at:at + n]
        else:
            del buf[at:]
    same(bytes(buf))


def test_corpus_samples_with_every_message_byte_flipped_once(samples):
    """One flip in each of the first Kafka payloads, spread over their bytes."""
    rnd = random.Random(7)
    for data in samples:
        ranges = payload_ranges(data)[:12]
        for start, end in ranges:
            buf = bytearray(data)
            buf[rnd.randrange(start, end)] ^= 0xFF
            same(bytes(buf))


def test_lying_sizes_allocate_nothing_like_them(tmp_path):
    """Frames and batches whose size fields claim up to the limits but whose bytes never come:
    the compiled splitter gathers what arrives (no allocation sized from the field)."""
    big = (100 * 1024 * 1024 - 16).to_bytes(4, "big")
    messages = [(0, big + b"\x00\x00\x00\x09" + b"x" * 3000), (1, big + b"y" * 3000)] * 20
    path = tmp_path / "lies.pcap"
    write_capture(path, [Conn(messages, client=("10.0.0.1", 40000 + i)) for i in range(10)],
                  segment=1448)
    buf = path.read_bytes()
    tracemalloc.start()
    try:
        rows = decode(buf, True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 40 * 1024 * 1024
    assert rows == decode(buf, False)


def test_a_fetch_v17_followers_replica_id_is_its_replica_state(tmp_path):
    """Fetch v15+ (KIP-903) has no ReplicaId field: a follower's id is in the tagged ReplicaState
    (here after a ClusterId tag: the compiled walk leaves such a request to the pure path), a
    consumer's request has none and is -1 - what Kafka's FetchRequest.replicaId() reads - on
    both paths alike."""
    from tests.protocol.wire.wirebytes import cstring, uvarint
    from tests.sim import wire_group

    answered = [("orders", 0, 0, 10, 10, 0, [], b"")]
    follower = wire_group.fetch(1, "broker-2-fetcher-0", 17, "read_uncommitted", [("orders", 0, 5)], answered,
                                replica_id=2)
    consumer = wire_group.fetch(2, "app", 18, "read_committed", [("orders", 0, 5)], answered)
    # the follower's tags with a ClusterId (tag 0) first
    req = follower[0][1]
    state = wire_group.replica_state(2)
    cluster = cstring("kaudit-cluster")
    tags = uvarint(2) + uvarint(0) + uvarint(len(cluster)) + cluster + state[1:]
    body = req[4:-len(state)] + tags
    follower = [(0, len(body).to_bytes(4, "big") + body)] + follower[1:]
    path = tmp_path / "f.pcap"
    plain = wire_group.fetch(3, "broker-3-fetcher-0", 18, "read_uncommitted", [("orders", 0, 5)], answered,
                             replica_id=3)   # its ReplicaState alone: the compiled walk reads it
    # (a connection's first request takes the pure way: the followers' come after)
    write_capture(path, Conn(consumer + follower + plain))
    rows = dict(decode(path.read_bytes(), True))["fetch_partition"]
    assert [(r["api_version"], r["client_id"], r["replica_id"]) for r in rows] == [
        (18, "app", -1), (17, "broker-2-fetcher-0", 2), (18, "broker-3-fetcher-0", 3)]
    assert decode(path.read_bytes(), True) == decode(path.read_bytes(), False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(version=st.integers(15, 18),
       tags=st.lists(st.tuples(st.integers(0, 6), st.binary(max_size=24), st.booleans()), max_size=4,
                     unique_by=lambda x: x[0]),
       replica=st.integers(-1, 3))
def test_fetch_v15_request_tags_both_paths_alike(tmp_path, version, tags, replica):
    """A Fetch v15+ request's tagged fields as they come - a ClusterId, a ReplicaState (well
    formed, or of any bytes), tags no version defines, in Kafka's ascending order - give the
    same rows on the compiled walk and the pure path."""
    from tests.protocol.wire.wirebytes import cstring, i32, i64, uvarint
    from tests.sim import wire_group

    answered = [("orders", 0, 0, 10, 10, 0, [], b"")]
    asked = [("orders", 0, 5)]
    first = wire_group.fetch(1, "c", version, "read_uncommitted", asked, answered)
    msgs = wire_group.fetch(2, "c", version, "read_uncommitted", asked, answered)
    payloads = []
    for tag, raw, well_formed in sorted(tags):
        if well_formed and tag == 0:
            raw = cstring("cluster-" + raw.hex()[:8])
        elif well_formed and tag == 1:
            raw = i32(replica) + i64(len(raw)) + b"\x00"
        payloads.append(uvarint(tag) + uvarint(len(raw)) + raw)
    body = msgs[0][1][4:-1] + uvarint(len(payloads)) + b"".join(payloads)   # (its empty tags replaced)
    msgs = [(0, len(body).to_bytes(4, "big") + body)] + msgs[1:]
    path = tmp_path / f"t{version}.pcap"
    write_capture(path, Conn(first + msgs))   # (the second request takes the compiled walk)
    buf = path.read_bytes()
    assert decode(buf, True) == decode(buf, False)
