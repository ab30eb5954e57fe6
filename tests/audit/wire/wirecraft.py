"""Test helper: crafted Produce / transaction conversations for the wire rules, and a one-call
audit of them.

Frames are written field by field with the wire tests' primitives and the test-only batch
encoder (independent of kaudit's decoders); packets with scapy through tests/sources/pcap/craft.py.
`audit(tmp_path, conns)` writes the capture and returns the findings of the local engine.
"""

from __future__ import annotations

from decimal import Decimal

from scapy.utils import EDecimal, PcapWriter

from fixtures import kafka_encoder as ke
from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions
from tests.protocol.wire.wirebytes import (
    TAGS0,
    array,
    boolean,
    carray,
    cstring,
    frame,
    i16,
    i32,
    i64,
    nbytes,
    request_header,
    response_header,
    string,
)
from tests.sources.pcap.craft import Conn, _scapy, packets, write_capture

TS = 1_795_234_917_000
TOPIC = "orders"
T0 = 1_700_000_000.0


# ---- record batches ----------------------------------------------------------------------------

def batch(pid: int, epoch: int, seq: int, n: int = 3, *, tag: str = "", ts: int = TS,
          transactional: bool = False) -> bytes:
    """A v2 batch of `n` records from producer `pid` (-1: non-idempotent) starting at `seq`.
    `tag` changes the payload (same sequences, other records)."""
    recs = [{"key": f"k{i}".encode(), "value": f"v{tag}-{seq}-{i}".encode(), "timestamp_delta": i}
            for i in range(n)]
    return ke.encode_record_batch_v2(
        0, recs, producer_id=pid, producer_epoch=epoch if pid >= 0 else -1,
        base_sequence=seq if pid >= 0 else -1, is_transactional=transactional, base_timestamp=ts)


# ---- frames ------------------------------------------------------------------------------------

def produce(corr: int, parts, *, acks: int = -1, txn_id: str | None = None,
            client_id: str = "wire-producer") -> bytes:
    """Produce v3 request; parts: [(topic, partition, batch bytes)]."""
    by_topic: dict[str, list] = {}
    for topic, partition, data in parts:
        by_topic.setdefault(topic, []).append((partition, data))
    body = string(txn_id) + i16(acks) + i32(30000) + array(len(by_topic))
    for topic, ps in by_topic.items():
        body += string(topic) + array(len(ps))
        for partition, data in ps:
            body += i32(partition) + nbytes(data)
    return frame(request_header(0, 3, corr, client_id, False) + body)


def produce_response(corr: int, answers) -> bytes:
    """Produce v3 response; answers: [(topic, partition, error_code, base_offset)]."""
    by_topic: dict[str, list] = {}
    for topic, partition, err, base in answers:
        by_topic.setdefault(topic, []).append((partition, err, base))
    body = array(len(by_topic))
    for topic, ps in by_topic.items():
        body += string(topic) + array(len(ps))
        for partition, err, base in ps:
            body += i32(partition) + i16(err) + i64(base) + i64(-1)
    return frame(response_header(corr, False) + body + i32(0))


def send(corr: int, data: bytes, *, topic: str = TOPIC, partition: int = 0, acks: int = -1,
         error: int | None = 0, offset: int = -1, **kw):
    """[(direction, bytes)] of one single-batch Produce exchange; error None: no response."""
    out = [(0, produce(corr, [(topic, partition, data)], acks=acks, **kw))]
    if error is not None:
        out.append((1, produce_response(corr, [(topic, partition, error, offset if error == 0 else -1)])))
    return out


def init_producer_id(corr: int, pid: int, epoch: int, *, txn_id: str | None = "tx-wire",
                     error: int = 0, client_id: str = "wire-producer", asked: tuple[int, int] = (-1, -1)):
    """An InitProducerId v4 exchange answered (pid, epoch); `asked`: the producer id and epoch the
    request carries (KIP-360: the client's current ones, -1 none)."""
    req = (request_header(22, 4, corr, client_id, True) + cstring(txn_id) + i32(60000)
           + i64(asked[0]) + i16(asked[1]) + TAGS0)
    resp = response_header(corr, True) + i32(0) + i16(error) + i64(pid) + i16(epoch) + TAGS0
    return [(0, frame(req)), (1, frame(resp))]


def end_txn(corr: int, pid: int, epoch: int, *, error: int = 0, committed: bool = True,
            txn_id: str = "tx-wire", client_id: str = "wire-producer"):
    req = (request_header(26, 3, corr, client_id, True) + cstring(txn_id) + i64(pid) + i16(epoch)
           + boolean(committed) + TAGS0)
    resp = response_header(corr, True) + i32(0) + i16(error) + TAGS0
    return [(0, frame(req)), (1, frame(resp))]


def add_partitions(corr: int, pid: int, epoch: int, *, error: int = 0, topic: str = TOPIC,
                   partition: int = 0, txn_id: str = "tx-wire", client_id: str = "wire-producer"):
    req = (request_header(24, 3, corr, client_id, True) + cstring(txn_id) + i64(pid) + i16(epoch)
           + cstring_array([(topic, [partition])]) + TAGS0)
    resp = (response_header(corr, True) + i32(0) + carray(1) + cstring(topic) + carray(1)
            + i32(partition) + i16(error) + TAGS0 + TAGS0 + TAGS0)
    return [(0, frame(req)), (1, frame(resp))]


def cstring_array(topics) -> bytes:
    out = carray(len(topics))
    for topic, parts in topics:
        out += cstring(topic) + carray(len(parts)) + b"".join(i32(p) for p in parts) + TAGS0
    return out


def metadata(corr: int, *, answered: bool = True, error: int = 0, client_id: str = "wire-producer"):
    """Metadata v1 of TOPIC; `error` is the topic's error code."""
    req = request_header(3, 1, corr, client_id, False) + array(1) + string(TOPIC)
    resp = (response_header(corr, False)
            + array(1) + i32(1) + string("broker-1") + i32(9092) + string(None)
            + i32(1)
            + array(1) + i16(error) + string(TOPIC) + boolean(False)
            + array(1) + i16(0) + i32(0) + i32(1) + array(1) + i32(1) + array(1) + i32(1))
    out = [(0, frame(req))]
    if answered:
        out.append((1, frame(resp)))
    return out


# ---- captures ----------------------------------------------------------------------------------

def write_timed(path, conns, *, delay=None, step: float = 0.001, t0: float = T0, **opts):
    """Like craft.write_capture, with `delay(i, Pkt) -> seconds` added before packet i (and all
    the packets after it): long silences without thousands of packets."""
    if isinstance(conns, Conn):
        conns = [conns]
    pkts = packets(conns, **opts)
    t = Decimal(str(t0))
    w = PcapWriter(str(path), sync=False)
    with w:
        for i, (p, conn) in enumerate(pkts):
            if delay is not None:
                t += Decimal(str(delay(i, p)))
            sp = _scapy(p, conn, link="ether", vlan=None, ipv6=False)
            sp.time = EDecimal(t)
            w.write(sp)
            t += Decimal(str(step))
    return pkts


def audit(tmp_path, conns, *, name: str = "wire.pcap", now_ms=None, select=(), ignore=(),
          timed: dict | None = None, **opts):
    """Findings of `kaudit pcap` (local engine) on the crafted connections."""
    path = tmp_path / name
    if timed is not None:
        write_timed(path, conns, **timed, **opts)
    else:
        write_capture(path, conns, **opts)
    run = audit_pcaps([str(path)], PcapOptions(), now_ms=now_ms, select=select, ignore=ignore)
    assert not run.errors, run.errors
    return run.findings


def by_rule(findings, rule: str) -> list[dict]:
    return [f for f in findings if f["rule"] == rule]


def rules_of(findings) -> list[tuple[str, str]]:
    """[(rule, severity)] sorted: a compact view for equality asserts."""
    return sorted((f["rule"], f["severity"]) for f in findings)


def details(f: dict) -> dict:
    import json

    return json.loads(f["details"]) if f.get("details") else {}
