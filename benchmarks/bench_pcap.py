"""`make bench`: throughput of `kaudit decode pcap --format parquet` on a generated capture, against
tshark's Kafka dissector on the same file in the same run.

The capture (generated once, cached in benchmarks/out/): ≥ 500,000 packets (override with
KAUDIT_BENCH_PACKETS) of Ethernet/IPv4/TCP (MSS 1448 with the timestamp option, as on a real
1500-byte link), 200 clients on three brokers (ports 9092-9094): 120 producers sending Produce v9
with v2 record batches (none/lz4/zstd/snappy/gzip, idempotent or transactional with
AddPartitionsToTxn and EndTxn, a few acks=0) and 80 consumers sending Fetch v12. The brokers keep
each partition's log as Kafka does: the batches the Produce requests carried, at the offsets the
responses acknowledged (base offset and partition leader epoch set by the broker, outside the
CRC), and a COMMIT or ABORT control batch on every partition of a transaction at its EndTxn; a
Fetch is served those stored batches from the consumer's position (max.partition.fetch.bytes
8 KiB, fetch.max.bytes 64 KiB, the first batch even when larger), read_uncommitted up to the high
watermark, read_committed up to the last stable offset with the aborted transactions overlapping
what it is served (the consumers lag: most responses are full); a transaction whose client left
(bench_live.py) is aborted by its coordinator at its timeout. Every connection starts with a
handshake, ApiVersions v3, Metadata v12 and, for producers, InitProducerId v4; Metadata is
refreshed now and then. Frames are cut into segments of at most 1448 bytes, the receiver ACKs
every second segment (delayed ACK) and exchanges of 32 connections are interleaved packet by
packet. Every Kafka message is written by kio's entity
writers; record batches are built from record sections made by fixtures/kafka_encoder.py
(precomputed per codec), with real producer ids, sequences, offsets and CRCs.

kaudit runs in one process (`--jobs 1`), as the command runs by default (`sources/pcap.py:auto_jobs`)
and in two processes (`--jobs 2`), interleaved over KAUDIT_BENCH_ROUNDS rounds (3): the best of
each is reported, with every round's time. Targets (issue 19): one process ≥ 350,000
packets/s and ≥ 8× tshark's packets/s; the default ≥ 1.7× one process on this 2-core machine;
peak RSS ≤ 300 MB. tshark comes from Debian's packages (installed here when missing and possible;
the comparison is skipped with a note otherwise). Results: benchmarks/out/pcap-results.json.
"""

from __future__ import annotations

import bisect
import datetime
import heapq
import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crc32c import crc32c  # noqa: E402
from kio.schema.add_partitions_to_txn.v3 import request as aptreq, response as aptresp  # noqa: E402
from kio.schema.api_versions.v3 import request as avreq, response as avresp  # noqa: E402
from kio.schema.end_txn.v3 import request as etreq, response as etresp  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.schema.fetch.v12 import request as freq, response as fresp  # noqa: E402
from kio.schema.init_producer_id.v4 import request as ipreq, response as ipresp  # noqa: E402
from kio.schema.metadata.v12 import request as mreq, response as mresp  # noqa: E402
from kio.schema.produce.v9 import request as preq, response as presp  # noqa: E402
from kio.schema.request_header.v2.header import RequestHeader  # noqa: E402
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0  # noqa: E402
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1  # noqa: E402
from kio.schema.types import BrokerId, ProducerId, TopicName, TransactionalId  # noqa: E402
from kio.serial import entity_writer  # noqa: E402
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64  # noqa: E402

from fixtures import kafka_encoder as ke  # noqa: E402

OUT = ROOT / "benchmarks" / "out"
PACKETS = int(os.environ.get("KAUDIT_BENCH_PACKETS", "500000"))
GENERATOR_VERSION = 2  # bump when the traffic model changes: the cached capture is rebuilt
SEED = 20240611

CLIENTS = 200
PRODUCERS = 120  # clients 0..119 produce, the others consume
BROKERS = (("10.2.0.1", 9092), ("10.2.0.2", 9093), ("10.2.0.3", 9094))
TOPICS = ("orders", "payments", "clicks", "inventory", "audit-log")
PARTITIONS = 12  # per topic; partition p is led by broker p % 3
MSS = 1448
CONCURRENT = 32  # exchanges in flight at once, interleaved packet by packet
CODECS = (("none", 35), ("lz4", 25), ("zstd", 20), ("snappy", 10), ("gzip", 10))
FETCH_CAP = 64 * 1024  # the consumers' fetch.max.bytes: bytes of batches per Fetch response
PARTITION_CAP = 8 * 1024  # their max.partition.fetch.bytes (the consumers lag: every response is full)
TXN_TIMEOUT_MS = 60000  # the producers' transaction.timeout.ms (InitProducerId says so)
LEADER_EPOCH = 3  # every partition's leader epoch (Metadata says so too)
BASE_TS = 1_718_000_000.0

ROUNDS = int(os.environ.get("KAUDIT_BENCH_ROUNDS", "3"))  # interleaved rounds of the kaudit runs
TARGET_PPS = 350_000
TARGET_RATIO = 8.0
TARGET_PARALLEL = 1.7
RSS_LIMIT_MB = 300

TSHARK_FIELDS = ("frame.number", "kafka.request_key", "kafka.api_version", "kafka.correlation_id",
                 "kafka.client_id")
TSHARK_PREFS = ("-o", "tcp.desegment_tcp_streams:TRUE", "-d", "tcp.port==9092-9094,kafka")

# ---- Kafka messages (kio's writers) ------------------------------------------------------------

_W = {}


def ser(entity) -> bytes:
    w = _W.get(type(entity))
    if w is None:
        w = _W[type(entity)] = entity_writer(type(entity))
    buf = io.BytesIO()
    w(buf, entity)
    return buf.getvalue()


def request_frame(api_key: int, version: int, corr: int, client_id: str, body: bytes) -> bytes:
    head = ser(RequestHeader(request_api_key=i16(api_key), request_api_version=i16(version),
                             correlation_id=i32(corr), client_id=client_id))
    return struct.pack(">i", len(head) + len(body)) + head + body


def response_frame(corr: int, body: bytes, header_v0: bool = False) -> bytes:
    head = ser((ResponseHeaderV0 if header_v0 else ResponseHeaderV1)(correlation_id=i32(corr)))
    return struct.pack(">i", len(head) + len(body)) + head + body


def ms(n: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=n))


_BATCH_HEAD = struct.Struct(">qiibI")
_BATCH_TAIL = struct.Struct(">hiqqqhii")
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta, at byte 23 of a v2 batch


def record_batch(section, base_offset: int, *, leader_epoch=-1, pid=-1, epoch=-1, base_seq=-1,
                 transactional=False, base_ts: int) -> bytes:
    """A v2 batch around a precomputed (maybe compressed) record section; CRC computed here."""
    codec_id, body, count, max_ts_delta = section
    tail = _BATCH_TAIL.pack(codec_id | (0x10 if transactional else 0), count - 1, base_ts,
                            base_ts + max_ts_delta, pid, epoch, base_seq, count) + body
    return _BATCH_HEAD.pack(base_offset, len(tail) + 9, leader_epoch, 2, crc32c(tail)) + tail


def record_sections(rng: random.Random) -> dict[str, list]:
    """Per codec: (codec id, record section bytes, record count, max timestamp delta), built
    with fixtures/kafka_encoder.py. Sizes follow a producer with batch.size 16384: a third are
    nearly empty (linger expired), most hold 5-30 records, some are full."""
    words = ("express", "standard", "warehouse", "berlin", "paris", "lisbon", "pending", "shipped",
             "widget", "gadget", "sprocket", "gizmo", "blue", "green", "large", "small")
    out = {}
    for codec, _ in CODECS:
        lst = []
        for _ in range(40):
            r = rng.random()
            n = rng.randint(1, 3) if r < 0.3 else rng.randint(5, 30) if r < 0.85 else rng.randint(40, 70)
            recs = []
            for j in range(n):
                items = ",".join(f'{{"sku":"{rng.choice(words)}-{rng.randrange(10000):04d}",'
                                 f'"qty":{rng.randint(1, 9)}}}' for _ in range(rng.randint(1, 6)))
                value = (f'{{"id":{rng.getrandbits(40)},"customer":"c-{rng.randrange(100000):05d}",'
                         f'"amount":{rng.randrange(1000000) / 100},"currency":"EUR",'
                         f'"note":"{" ".join(rng.choice(words) for _ in range(rng.randint(2, 12)))}",'
                         f'"items":[{items}]}}').encode()
                headers = (("traceparent", f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"),) \
                    if rng.random() < 0.3 else ()
                recs.append(ke.Record(offset_delta=j, timestamp_delta=j * rng.randint(0, 3),
                                      key=f"c-{rng.randrange(100000):05d}".encode(), value=value,
                                      headers=headers))
            body = ke.encode_records(recs)
            if codec != "none":
                body = ke.compress(codec, body)
            lst.append((ke.CODEC_IDS[codec], body, n, max(r.timestamp_delta for r in recs)))
        out[codec] = lst
    return out


def api_versions_body() -> bytes:
    ranges = {0: (0, 9), 1: (0, 13), 2: (0, 7), 3: (0, 12), 8: (0, 8), 9: (0, 8), 10: (0, 4),
              11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 4), 17: (0, 1),
              18: (0, 3), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 4), 23: (0, 4), 24: (0, 3),
              25: (0, 3), 26: (0, 3), 27: (0, 1), 28: (0, 3), 29: (0, 3), 30: (0, 3), 31: (0, 3),
              32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4), 36: (0, 2), 37: (0, 3), 38: (0, 3),
              39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 0),
              46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 56: (0, 3),
              57: (0, 1), 60: (0, 0), 61: (0, 0), 65: (0, 0), 66: (0, 0), 67: (0, 0)}
    return ser(avresp.ApiVersionsResponse(
        error_code=ErrorCode.none, throttle_time=ms(0),
        api_keys=tuple(avresp.ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                       for k, (lo, hi) in ranges.items())))


def metadata_body() -> bytes:
    brokers = tuple(mresp.MetadataResponseBroker(node_id=BrokerId(b), host=f"broker-{b}.kafka.internal",
                                                 port=i32(BROKERS[b][1]), rack=f"rack-{b}")
                    for b in range(len(BROKERS)))
    topics = []
    for t, name in enumerate(TOPICS):
        parts = tuple(mresp.MetadataResponsePartition(
            error_code=ErrorCode.none, partition_index=i32(p), leader_id=BrokerId(p % 3),
            leader_epoch=i32(3), replica_nodes=tuple(BrokerId((p + k) % 3) for k in range(3)),
            isr_nodes=tuple(BrokerId((p + k) % 3) for k in range(3)), offline_replicas=())
            for p in range(PARTITIONS))
        topics.append(mresp.MetadataResponseTopic(
            error_code=ErrorCode.none, name=TopicName(name), topic_id=uuid.UUID(int=0x5EED0000 + t),
            is_internal=False, partitions=parts, topic_authorized_operations=i32(-2147483648)))
    return ser(mresp.MetadataResponse(throttle_time=ms(0), brokers=brokers, cluster_id="kaudit-bench-cluster",
                                      controller_id=BrokerId(0), topics=tuple(topics)))


# ---- TCP/IP packets ----------------------------------------------------------------------------

ACK, PSH, SYN, FIN = 0x10, 0x08, 0x02, 0x01
# Ethernet + IPv4 (no options) + TCP with the timestamp option (NOP NOP TS): 66 bytes.
_NET = struct.Struct("!14sBBHHHBBH4s4sHHIIBBHHH4sII")
_REC = struct.Struct("<IIII")


def _ip4(a: str) -> bytes:
    return bytes(int(x) for x in a.split("."))


class Conn:
    """One client connection: its TCP state (both directions) and its Kafka client state."""

    def __init__(self, i: int, rng: random.Random, clock: list):
        self.i = i
        self.rng = rng
        self.clock = clock
        self.broker = i % len(BROKERS)
        cip = f"10.1.{i // 250}.{i % 250 + 1}"
        sip, sport = BROKERS[self.broker]
        cport = 32768 + rng.randrange(28000)
        cmac, smac = b"\x02\x00\x00\x01" + struct.pack("!H", i), b"\x02\x00\x00\x02\x00" + bytes([self.broker])
        self.eth = (smac + cmac + b"\x08\x00", cmac + smac + b"\x08\x00")
        self.addr = ((_ip4(cip), _ip4(sip)), (_ip4(sip), _ip4(cip)))
        self.ports = ((cport, sport), (sport, cport))
        words = sum(struct.unpack("!HHHH", _ip4(cip) + _ip4(sip)))
        self.csum_base = 0x4500 + 0x4000 + 0x4006 + words
        self.seq = [rng.getrandbits(32), rng.getrandbits(32)]
        self.ident = [rng.getrandbits(16), rng.getrandbits(16)]
        self.tsval = [rng.getrandbits(31), rng.getrandbits(31)]
        # Kafka client state
        self.producer = i < PRODUCERS
        self.corr = 0
        self.client_id = f"{'producer' if self.producer else 'consumer'}-{i}"
        self.topic = TOPICS[i % len(TOPICS)]
        self.parts = [p for p in range(PARTITIONS) if p % len(BROKERS) == self.broker]
        self.codec = rng.choices([c for c, _ in CODECS], [w for _, w in CODECS])[0]
        self.transactional = self.producer and i % 4 == 3
        self.acks = 0 if self.producer and i % 40 == 1 else -1 if i % 3 else 1
        self.txn_id = f"txn-{i}" if self.transactional else None
        self.pid, self.epoch = -1, -1
        self.seqs = {}
        self.positions = {}  # consumer: partition -> next offset
        self.read_committed = not self.producer and i % 2 == 0
        self.plan = deque()
        self.started = False

    # -- packets --

    def pkt(self, d: int, flags: int, payload: bytes = b"") -> bytes:
        n = len(payload)
        total = 52 + n
        ident = self.ident[d] = (self.ident[d] + 1) & 0xFFFF
        s = self.csum_base + total + ident
        s = (s & 0xFFFF) + (s >> 16)
        s = (s & 0xFFFF) + (s >> 16)
        src, dst = self.addr[d]
        sport, dport = self.ports[d]
        seq = self.seq[d]
        ack = self.seq[1 - d] if flags & ACK else 0
        self.tsval[d] = tsval = (self.tsval[d] + 1) & 0xFFFFFFFF
        h = _NET.pack(self.eth[d], 0x45, 0, total, ident, 0x4000, 64, 6, ~s & 0xFFFF, src, dst,
                      sport, dport, seq, ack, 0x80, flags, 502, 0, 0, b"\x01\x01\x08\x0a", tsval,
                      self.tsval[1 - d])
        self.seq[d] = (seq + n + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF
        return h + payload

    def send(self, d: int, data: bytes):
        """Data segments of one direction; the receiver ACKs every second full segment."""
        pkt = self.pkt
        last = len(data) - 1
        for k, off in enumerate(range(0, len(data), MSS)):
            end = off + MSS
            yield pkt(d, ACK | PSH if end > last else ACK, data[off:end])
            if k & 1:
                yield pkt(1 - d, ACK)

    def exchange(self, req: bytes, resp: bytes | None):
        yield from self.send(0, req)
        if resp is None:
            yield self.pkt(1, ACK)
            return
        if self.rng.random() < 0.3:  # the delayed ACK fires before the response is ready
            yield self.pkt(1, ACK)
        yield from self.send(1, resp)
        if self.rng.random() < 0.5:  # otherwise piggybacked on the next request
            yield self.pkt(0, ACK)

    def handshake(self):
        yield self.pkt(0, SYN)
        yield self.pkt(1, SYN | ACK)
        yield self.pkt(0, ACK)

    def close(self):
        yield self.pkt(0, FIN | ACK)
        yield self.pkt(1, FIN | ACK)
        yield self.pkt(0, ACK)

    # -- Kafka --

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr

    def next_exchange(self, k: "Kafka"):
        k.expire(int(self.clock[0] * 1000))
        if not self.started:
            self.started = True
            return self._start(k)
        if not self.plan:
            if self.rng.random() < 0.004:
                self.plan.append(self._metadata)
            if not self.producer:
                self.plan.append(self._fetch)
            elif self.transactional:
                self.plan.append(self._add_partitions)
                self.plan.extend([self._produce] * self.rng.randint(2, 8))
                self.plan.append(self._end_txn)
            else:
                self.plan.append(self._produce)
        return self.plan.popleft()(k)

    def _start(self, k):
        yield from self.handshake()
        corr = self.next_corr()
        yield from self.exchange(
            request_frame(18, 3, corr, self.client_id, ser(avreq.ApiVersionsRequest(
                client_software_name="apache-kafka-java", client_software_version="3.7.0"))),
            response_frame(corr, k.api_versions, header_v0=True))
        yield from self._metadata(k)
        if self.producer and self.acks != 0:
            corr = self.next_corr()
            self.pid, self.epoch = k.new_producer()
            yield from self.exchange(
                request_frame(22, 4, corr, self.client_id, ser(ipreq.InitProducerIdRequest(
                    transactional_id=TransactionalId(self.txn_id) if self.txn_id else None,
                    transaction_timeout=ms(60000)))),
                response_frame(corr, ser(ipresp.InitProducerIdResponse(
                    throttle_time=ms(0), error_code=ErrorCode.none, producer_id=ProducerId(self.pid),
                    producer_epoch=i16(self.epoch)))))

    def _metadata(self, k):
        corr = self.next_corr()
        req = ser(mreq.MetadataRequest(topics=(mreq.MetadataRequestTopic(topic_id=None, name=TopicName(self.topic)),),
                                       allow_auto_topic_creation=True, include_topic_authorized_operations=False))
        yield from self.exchange(request_frame(3, 12, corr, self.client_id, req), response_frame(corr, k.metadata))

    def _add_partitions(self, k):
        corr = self.next_corr()
        k.begin_txn(self.pid, self.epoch, self.topic, self.parts, int(self.clock[0] * 1000))
        parts = tuple(i32(p) for p in self.parts)
        req = ser(aptreq.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(self.txn_id),
            v3_and_below_producer_id=ProducerId(self.pid), v3_and_below_producer_epoch=i16(self.epoch),
            v3_and_below_topics=(aptreq.AddPartitionsToTxnTopic(name=TopicName(self.topic), partitions=parts),)))
        resp = ser(aptresp.AddPartitionsToTxnResponse(throttle_time=ms(0), results_by_topic_v3_and_below=(
            aptresp.AddPartitionsToTxnTopicResult(name=TopicName(self.topic), results_by_partition=tuple(
                aptresp.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=ErrorCode.none)
                for p in parts)),)))
        yield from self.exchange(request_frame(24, 3, corr, self.client_id, req), response_frame(corr, resp))

    def _end_txn(self, k):
        corr = self.next_corr()
        commit = self.rng.random() < 0.95
        req = ser(etreq.EndTxnRequest(transactional_id=TransactionalId(self.txn_id), producer_id=ProducerId(self.pid),
                                      producer_epoch=i16(self.epoch), committed=commit))
        k.end_txn(self.pid, commit, int(self.clock[0] * 1000))
        yield from self.exchange(request_frame(26, 3, corr, self.client_id, req),
                                 response_frame(corr, ser(etresp.EndTxnResponse(throttle_time=ms(0),
                                                                                 error_code=ErrorCode.none))))

    def _produce(self, k):
        rng = self.rng
        corr = self.next_corr()
        now_ms = int(self.clock[0] * 1000)
        chosen = sorted(rng.sample(self.parts, rng.choice((1, 1, 1, 2, 2, 3))))
        parts, results = [], []
        for p in chosen:
            section = rng.choice(k.sections[self.codec])
            count = section[2]
            base_seq = -1
            if self.pid >= 0:
                base_seq = self.seqs.get(p, 0)
                self.seqs[p] = (base_seq + count) & 0x7FFFFFFF
            batch = record_batch(section, 0, pid=self.pid, epoch=self.epoch, base_seq=base_seq,
                                 transactional=self.transactional, base_ts=now_ms - rng.randint(0, 20))
            parts.append(preq.PartitionProduceData(index=i32(p), records=Records(batch)))
            results.append(presp.PartitionProduceResponse(
                index=i32(p), error_code=ErrorCode.none,
                base_offset=i64(k.produce(self.topic, p, batch, count, self.pid, self.transactional)),
                log_start_offset=i64(0), record_errors=()))
        req = ser(preq.ProduceRequest(transactional_id=TransactionalId(self.txn_id) if self.txn_id else None,
                                      acks=i16(self.acks), timeout=ms(30000),
                                      topic_data=(preq.TopicProduceData(name=TopicName(self.topic),
                                                                        partition_data=tuple(parts)),)))
        resp = None
        if self.acks != 0:
            resp = response_frame(corr, ser(presp.ProduceResponse(throttle_time=ms(0), responses=(
                presp.TopicProduceResponse(name=TopicName(self.topic), partition_responses=tuple(results)),))))
        yield from self.exchange(request_frame(0, 9, corr, self.client_id, req), resp)

    def _fetch(self, k):
        rng = self.rng
        corr = self.next_corr()
        chosen = sorted(rng.sample(self.parts, rng.randint(1, len(self.parts))))
        req = ser(freq.FetchRequest(
            replica_id=BrokerId(-1), max_wait=ms(500), min_bytes=i32(1), max_bytes=i32(FETCH_CAP),
            isolation_level=i8(1 if self.read_committed else 0), session_id=i32(0), session_epoch=i32(-1),
            topics=(freq.FetchTopic(topic=TopicName(self.topic), partitions=tuple(
                freq.FetchPartition(partition=i32(p), current_leader_epoch=i32(3),
                                    fetch_offset=i64(self.positions.get(p, 0)), last_fetched_epoch=i32(-1),
                                    log_start_offset=i64(-1), partition_max_bytes=i32(PARTITION_CAP))
                for p in chosen)),),
            forgotten_topics_data=(), rack_id=""))
        # The leader serves its stored batches from the fetch offset: read_uncommitted up to the high
        # watermark, read_committed up to the last stable offset with the aborted transactions
        # overlapping what it serves; each partition up to max.partition.fetch.bytes, the response
        # up to fetch.max.bytes, the first batch even over them (minOneMessage).
        budget = FETCH_CAP
        parts = []
        for p in chosen:
            lg = k.log(self.topic, p)
            pos = self.positions.get(p, 0)
            lso = lg.lso()
            bound = lso if self.read_committed else lg.end
            batches = lg.read(pos, bound, min(budget, PARTITION_CAP), budget == FETCH_CAP) if budget > 0 else []
            size = sum(map(len, batches))
            budget -= size
            end = pos
            if batches:
                last = batches[-1]
                end = _OFFSET.unpack_from(last)[0] + _LAST_DELTA.unpack_from(last, 23)[0] + 1
                self.positions[p] = end
            aborted = None
            if self.read_committed:
                aborted = tuple(fresp.AbortedTransaction(producer_id=ProducerId(a), first_offset=i64(f))
                                for a, f in lg.aborted_within(pos, end)) if batches else ()
            parts.append(fresp.PartitionData(
                partition_index=i32(p), error_code=ErrorCode.none, high_watermark=i64(lg.end),
                last_stable_offset=i64(lso), log_start_offset=i64(0),
                aborted_transactions=aborted, preferred_read_replica=BrokerId(-1),
                records=Records(b"".join(batches))))
        resp = ser(fresp.FetchResponse(throttle_time=ms(0), error_code=ErrorCode.none, session_id=i32(0),
                                       responses=(fresp.FetchableTopicResponse(topic=TopicName(self.topic),
                                                                               partitions=tuple(parts)),)))
        yield from self.exchange(request_frame(1, 12, corr, self.client_id, req), response_frame(corr, resp))


class Partition:
    """One partition's log as the leader keeps it: the stored batches (bytes as the producers
    sent them, base offset and partition leader epoch set by the broker - neither is covered by
    the CRC - and the coordinator's control batches), its open transactions and aborted ones."""

    __slots__ = ("bases", "blobs", "end", "open", "aborted")

    def __init__(self):
        self.bases: list[int] = []  # base offset of each stored batch, ascending
        self.blobs: list[bytes] = []
        self.end = 0  # log end offset = the high watermark (acks=all, every replica in sync)
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction here
        self.aborted: list[tuple[int, int, int]] = []  # (producer id, first offset, marker offset)

    def append(self, batch: bytes, count: int) -> int:
        base = self.end
        self.bases.append(base)
        # the broker sets base offset and partition leader epoch (bytes 0-8 and 12-16, outside the CRC)
        self.blobs.append(_OFFSET.pack(base) + batch[8:12] + _EPOCH.pack(LEADER_EPOCH) + batch[16:])
        self.end = base + count
        return base

    def lso(self) -> int:
        """Last stable offset: the first offset of the earliest open transaction, else the log end."""
        return min(self.open.values()) if self.open else self.end

    def read(self, pos: int, bound: int, budget: int, first: bool) -> list[bytes]:
        """Stored batches from `pos` below `bound`, within `budget` bytes; the first batch even
        over budget when nothing was read yet (Kafka's minOneMessage)."""
        out = []
        i = bisect.bisect_left(self.bases, pos)
        bases, blobs = self.bases, self.blobs
        while i < len(bases) and bases[i] < bound:
            b = blobs[i]
            if len(b) > budget and not (first and not out):
                break
            out.append(b)
            budget -= len(b)
            i += 1
        return out

    def aborted_within(self, start: int, end: int):
        """Aborted transactions overlapping [start, end) (Kafka's collectAbortedTxns)."""
        return [(pid, first) for pid, first, last in self.aborted if first < end and last >= start]


class Kafka:
    """Cluster-side state shared by the connections: the partitions' logs, producer ids."""

    def __init__(self, rng):
        self.sections = record_sections(rng)
        self.api_versions = api_versions_body()
        self.metadata = metadata_body()
        self.logs: dict[tuple[str, int], Partition] = {}
        self.txns: dict[int, tuple] = {}  # producer id -> (topic, partitions, epoch, start ms) of its open transaction
        self.abandoned: list[tuple[int, int]] = []  # heap of (abort deadline ms, producer id)
        self.next_pid = 4000

    def log(self, topic, partition) -> Partition:
        lg = self.logs.get((topic, partition))
        if lg is None:
            lg = self.logs[(topic, partition)] = Partition()
        return lg

    def produce(self, topic, partition, batch: bytes, count: int, pid: int, transactional: bool) -> int:
        lg = self.log(topic, partition)
        base = lg.append(batch, count)
        if transactional:
            lg.open.setdefault(pid, base)
        return base

    def begin_txn(self, pid: int, epoch: int, topic: str, parts, now_ms: int) -> None:
        self.txns[pid] = (topic, tuple(parts), epoch, now_ms)

    def end_txn(self, pid: int, commit: bool, ts: int, bump: int = 0) -> None:
        """The coordinator's markers: a control batch (COMMIT or ABORT) on every partition added to
        the transaction, closing it there; `bump` 1 when it aborts on timeout (the epoch is bumped,
        fencing the producer: TransactionCoordinator.abortTimedOutTransactions)."""
        topic, parts, epoch, _ = self.txns.pop(pid)
        epoch += bump
        for p in parts:
            lg = self.log(topic, p)
            marker = ke.encode_control_batch(0, pid, epoch, "COMMIT" if commit else "ABORT", coordinator_epoch=0,
                                             timestamp=ts, partition_leader_epoch=LEADER_EPOCH)
            at = lg.append(marker, 1)
            first = lg.open.pop(pid, None)
            if first is not None and not commit:
                lg.aborted.append((pid, first, at))

    def abandon(self, pid: int) -> None:
        """The producer's connection closed inside a transaction: the coordinator aborts it when
        transaction.timeout.ms has passed since it began (bench_live.py's short-lived clients)."""
        if pid in self.txns:
            heapq.heappush(self.abandoned, (self.txns[pid][3] + TXN_TIMEOUT_MS, pid))

    def expire(self, now_ms: int) -> None:
        while self.abandoned and self.abandoned[0][0] <= now_ms:
            deadline, pid = heapq.heappop(self.abandoned)
            if pid in self.txns:
                self.end_txn(pid, False, deadline, bump=1)

    def new_producer(self):
        self.next_pid += 1
        return self.next_pid, 0


class PcapWriter:
    """Packets into a classic pcap file, buffered; each stamped `advance(previous time)` (the
    generators' own pace), the time kept in `clock[0]`."""

    def __init__(self, f, clock: list, advance):
        self.f, self.clock, self.advance = f, clock, advance
        self.out: list[bytes] = []
        self.written = 0
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))

    def emit(self, data: bytes) -> None:
        t = self.clock[0] = self.advance(self.clock[0])
        sec = int(t)
        self.out.append(_REC.pack(sec, int((t - sec) * 1e6), len(data), len(data)))
        self.out.append(data)
        self.written += 1
        if len(self.out) >= 20000:
            self.flush()

    def flush(self) -> None:
        self.f.write(b"".join(self.out))
        self.out.clear()


def generate(path: Path, npackets: int) -> dict:
    """Write the capture; returns what it holds."""
    rng = random.Random(SEED)
    clock = [BASE_TS]
    kafka = Kafka(rng)
    conns = [Conn(i, rng, clock) for i in range(CLIENTS)]
    idle = deque(conns)
    active = []  # [conn, generator]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        w = PcapWriter(f, clock, lambda t: t + 0.00001 + rng.random() * 0.00005)
        while w.written < npackets or active:
            while w.written < npackets and len(active) < CONCURRENT and idle:
                c = idle.popleft()
                active.append([c, c.next_exchange(kafka)])
            k = rng.randrange(len(active))
            c, g = active[k]
            data = next(g, None)
            if data is None:
                active[k] = active[-1]
                active.pop()
                idle.append(c)
                continue
            w.emit(data)
        for c in conns:
            if c.started:
                for data in c.close():
                    w.emit(data)
        w.flush()
    tmp.rename(path)
    return {"packets": w.written, "connections": sum(c.started for c in conns)}


def capture(npackets: int) -> Path:
    path = OUT / f"bench-kafka-v{GENERATOR_VERSION}-{npackets}.pcap"
    if not path.exists():
        t = time.perf_counter()
        info = generate(path, npackets)
        print(f"generated {path.name}: {info['packets']:,} packets, {path.stat().st_size / 1e6:.0f} MB, "
              f"{info['connections']} connections in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return path


def count_packets(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        f.seek(24)
        hdr = struct.Struct("<IIII")
        while True:
            h = f.read(16)
            if len(h) < 16:
                return n
            f.seek(hdr.unpack(h)[2], 1)
            n += 1


def warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


# ---- the runs ----------------------------------------------------------------------------------

def timed(cmd: list[str], stdout=None, stderr=None) -> tuple[float, int, float]:
    """(seconds, exit code, peak RSS in MB) of one child process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=stderr)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - t, os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024


KAUDIT_OUT = OUT / "parquet-pcap"
SAMPLE = 20_000  # packets of the tshark agreement check


def run_kaudit(path: Path, packets: int, extra=()) -> dict:
    out = KAUDIT_OUT
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "kaudit", "decode", "pcap", str(path), "--format", "parquet", "--output", str(out),
           *extra]
    elapsed, code, rss = timed(cmd)
    if code != 0:
        raise SystemExit(f"kaudit failed: exit {code}")
    header = json.loads((out / "_kaudit.json").read_text())
    cov = next(iter(header["coverage"].values()))
    if cov["packets"] != packets:
        raise SystemExit(f"kaudit read {cov['packets']} packets, the file holds {packets}")
    return {"command": " ".join(["kaudit"] + cmd[3:]), "seconds": round(elapsed, 3),
            "packets/s": round(packets / elapsed), "peak_rss_mb": round(rss, 1),
            "kafka_connections": cov["kafka_connections"], "rows": header["counts"]}


def kaudit_requests_within(frames: int) -> dict:
    """Requests of the last kaudit run that end within the first `frames` packets, by api key."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(KAUDIT_OUT / "frame.parquet", columns=["api_key", "request_frame"])
    t = t.filter(pc.less_equal(t["request_frame"], frames))
    keys = t["api_key"].to_pylist()
    return {str(k): keys.count(k) for k in sorted(set(keys))}


def ensure_tshark() -> tuple[str | None, str | None]:
    """(tshark path, None) or (None, why the comparison is skipped). Installs Debian's package."""
    exe = shutil.which("tshark")
    if exe:
        return exe, None
    if not shutil.which("apt-get"):
        return None, "tshark is not installed and there is no apt-get to install it"
    if os.geteuid() == 0:
        prefix = []
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        prefix = ["sudo", "-n"]
    else:
        return None, "tshark is not installed and installing it needs root (apt-get install tshark)"
    print("installing tshark from Debian's packages ...", file=sys.stderr)
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    # wireshark-common asks whether non-root users may capture: answer no, without a prompt
    subprocess.run(prefix + ["debconf-set-selections"], input=b"wireshark-common wireshark-common/install-setuid boolean false\n",
                   capture_output=True)
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "tshark"]):
        r = subprocess.run(prefix + env + cmd, capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
            return None, f"tshark could not be installed ({' '.join(cmd)}: exit {r.returncode}: {tail[0]})"
    exe = shutil.which("tshark")
    return (exe, None) if exe else (None, "apt-get install tshark succeeded but no tshark is on PATH")


def tshark_cmd(exe: str, path: Path, extra=()) -> list[str]:
    fields = [a for f in TSHARK_FIELDS for a in ("-e", f)]
    return [exe, "-n", "-r", str(path), *extra, "-T", "fields", *fields, *TSHARK_PREFS]


def run_tshark(exe: str, path: Path, packets: int) -> dict:
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    # Agreement check on the first packets: tshark dissects the requests of all three ports
    # (the same ones kaudit finds), so its timing is of real Kafka dissection.
    sample = subprocess.run(tshark_cmd(exe, path, ("-c", str(SAMPLE))), capture_output=True, text=True, cwd=ROOT)
    keys = [ln.split("\t")[1] for ln in sample.stdout.splitlines() if "\t" in ln]
    requests = {}
    for k in keys:
        for one in filter(None, k.split(",")):  # several PDUs in one packet: comma-separated
            requests[one] = requests.get(one, 0) + 1
    err = OUT / "tshark.stderr"
    with open(os.devnull, "wb") as null, open(err, "wb") as errors:  # stderr: "running as root"
        elapsed, code, rss = timed(tshark_cmd(exe, path), stdout=null, stderr=errors)
    if code != 0:
        tail = err.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        return {"version": version, "skipped": f"tshark failed: exit {code}: {tail[0]}"}
    return {"version": version, "command": " ".join(["tshark"] + tshark_cmd(exe, path)[1:]) + " > /dev/null",
            "seconds": round(elapsed, 3), "packets/s": round(packets / elapsed), "peak_rss_mb": round(rss, 1),
            "sample": {"packets": SAMPLE,
                       "requests_by_api_key": dict(sorted(requests.items(), key=lambda kv: int(kv[0])))}}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = capture(PACKETS)
    packets = count_packets(path)
    tshark, note = ensure_tshark()
    warm(path)
    run_kaudit(path, packets)  # warm-up: imports and page cache
    # one process, the default and two processes, interleaved round by round (the machine is
    # shared: its load drifts); the best of each, and the spread
    runs: dict[str, list] = {"one": [], "default": [], "two": []}
    for _ in range(ROUNDS):
        runs["one"].append(run_kaudit(path, packets, ("--jobs", "1")))
        runs["default"].append(run_kaudit(path, packets))
        runs["two"].append(run_kaudit(path, packets, ("--jobs", "2")))
    k, default, two = (max(runs[n], key=lambda r: r["packets/s"]) for n in ("one", "default", "two"))
    parallel = round(default["packets/s"] / k["packets/s"], 2)
    rows = k["rows"]
    result = {"capture": str(path.relative_to(ROOT)), "packets": packets, "bytes": path.stat().st_size,
              "exchanges": rows.get("frame", 0), "batches": rows.get("batch", 0),
              "packets_per_exchange": round(packets / max(rows.get("frame", 0), 1), 2),
              "kaudit": k, "kaudit_default": default, "kaudit_two_processes": two,
              "default_vs_one_process": parallel,
              "two_vs_one_process": round(two["packets/s"] / k["packets/s"], 2),
              "seconds_by_round": {n: [r["seconds"] for r in rs] for n, rs in runs.items()}}
    print(json.dumps({"kaudit": k, "kaudit_default": default, "kaudit_two_processes": two}))
    if tshark:
        t = run_tshark(tshark, path, packets)
        if "sample" in t:
            ours = kaudit_requests_within(SAMPLE)
            t["sample"]["kaudit_requests_by_api_key"] = ours
            t["sample"]["agree"] = ours == t["sample"]["requests_by_api_key"]
        result["tshark"] = t
        print(json.dumps({"tshark": t}))
    else:
        result["tshark"] = {"skipped": note}
        print(f"tshark comparison skipped: {note}", file=sys.stderr)
    ratio = None
    if "packets/s" in result["tshark"]:
        ratio = round(k["packets/s"] / result["tshark"]["packets/s"], 2)
    result["ratio_vs_tshark"] = ratio
    result["targets"] = {
        f"packets/s >= {TARGET_PPS:,}": k["packets/s"] >= TARGET_PPS,
        f">= {TARGET_RATIO:g}x tshark packets/s": None if ratio is None else ratio >= TARGET_RATIO,
        f"default (processes on every core) >= {TARGET_PARALLEL:g}x one process": parallel >= TARGET_PARALLEL,
        f"peak RSS <= {RSS_LIMIT_MB} MB": max(k["peak_rss_mb"], default["peak_rss_mb"], two["peak_rss_mb"]) <= RSS_LIMIT_MB,
    }
    (OUT / "pcap-results.json").write_text(json.dumps(result, indent=1))
    print(f"kaudit, one process: {packets:,} packets in {k['seconds']:.2f} s = {k['packets/s']:,} packets/s, "
          f"peak RSS {k['peak_rss_mb']:.0f} MB")
    print(f"kaudit, default: {default['seconds']:.2f} s = {default['packets/s']:,} packets/s "
          f"({parallel:g}x one process), peak RSS {default['peak_rss_mb']:.0f} MB")
    print(f"kaudit, two processes: {two['seconds']:.2f} s = {two['packets/s']:,} packets/s "
          f"({result['two_vs_one_process']:g}x one process), peak RSS {two['peak_rss_mb']:.0f} MB; "
          f"seconds by round: {result['seconds_by_round']}")
    if ratio is not None:
        t = result["tshark"]
        print(f"tshark ({t['version']}): {t['seconds']:.2f} s = {t['packets/s']:,} packets/s, "
              f"peak RSS {t['peak_rss_mb']:.0f} MB; ratio {ratio:g}x")
        if "sample" in t:
            print(f"  first {SAMPLE:,} packets: tshark and kaudit find the same requests: {t['sample']['agree']}")
    for name, met in result["targets"].items():
        print(f"  {name}: {'met' if met else 'skipped (no tshark)' if met is None else 'NOT met'}")
    if not all(m for m in result["targets"].values() if m is not None):
        print("some targets were not met", file=sys.stderr)


if __name__ == "__main__":
    main()
