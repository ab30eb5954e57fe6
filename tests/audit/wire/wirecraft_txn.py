"""Test helper: the transaction requests of Kafka 4.x (KIP-890, KIP-1228), field by field from
Kafka's JSON message specs (clients/src/main/resources/common/message/*.json), with the wire
tests' primitives - independent of kaudit's decoders.

- `end_txn_v5`: EndTxn v5, whose answer carries the producer id and the bumped epoch;
- `leader_add`: a partition leader's AddPartitionsToTxn v5 (client id AddPartitionsManager-client-N),
  verifyOnly=false for a version-2 producer (it registers the partition), true for 0/1;
- `markers`: WriteTxnMarkers v1/v2 from a sender (the coordinator's broker-N-txn-marker-sender,
  or an admin client: kafka-transactions.sh abort), v2 with KIP-1228's TransactionVersion;
- `describe_producers`: DescribeProducers v0 from an admin client.
"""

from __future__ import annotations

from tests.protocol.wire.wirebytes import (
    TAGS0, boolean, carray, cstring, frame, i8, i16, i32, i64, request_header, response_header,
)

COORDINATOR = dict(client=("10.0.0.3", 50001), server=("10.0.0.2", 9093))   # coordinator -> leader
LEADER = dict(client=("10.0.0.2", 50002), server=("10.0.0.3", 9094))        # leader -> coordinator
ADMIN = dict(client=("10.0.0.9", 51001), server=("10.0.0.2", 9093))         # admin -> leader


def end_txn_v5(corr: int, pid: int, epoch: int, *, committed: bool = True, new_epoch: int | None = None,
               new_pid: int | None = None, error: int = 0, txn_id: str = "tx-wire",
               client_id: str = "wire-producer"):
    """EndTxn v5; the answer gives (new_pid or pid, new_epoch or epoch + 1), or -1/-1 on an error."""
    req = (request_header(26, 5, corr, client_id, True) + cstring(txn_id) + i64(pid) + i16(epoch)
           + boolean(committed) + TAGS0)
    if error:
        out_pid, out_epoch = -1, -1
    else:
        out_pid = pid if new_pid is None else new_pid
        out_epoch = epoch + 1 if new_epoch is None else new_epoch
    resp = response_header(corr, True) + i32(0) + i16(error) + i64(out_pid) + i16(out_epoch) + TAGS0
    return [(0, frame(req)), (1, frame(resp))]


def leader_add(corr: int, pid: int, epoch: int, *, topic: str = "orders", partition: int = 0,
               verify_only: bool = False, error: int = 0, txn_id: str = "tx-wire", node: int = 1):
    """AddPartitionsToTxn v5 from a partition leader: one transaction, one partition."""
    req = (request_header(24, 5, corr, f"AddPartitionsManager-client-{node}", True)
           + carray(1) + cstring(txn_id) + i64(pid) + i16(epoch) + boolean(verify_only)
           + carray(1) + cstring(topic) + carray(1) + i32(partition) + TAGS0 + TAGS0 + TAGS0)
    resp = (response_header(corr, True) + i32(0) + i16(0)
            + carray(1) + cstring(txn_id)
            + carray(1) + cstring(topic) + carray(1) + i32(partition) + i16(error) + TAGS0 + TAGS0
            + TAGS0 + TAGS0)
    return [(0, frame(req)), (1, frame(resp))]


def markers(corr: int, pid: int, epoch: int, *, committed: bool, parts=(("orders", 0),),
            coordinator_epoch: int = 0, client_id: str = "broker-1-txn-marker-sender", version: int = 1,
            transaction_version: int = 2, error: int = 0):
    """WriteTxnMarkers v1 or v2 of one producer to `parts` [(topic, partition)], answered."""
    by_topic: dict[str, list[int]] = {}
    for t, p in parts:
        by_topic.setdefault(t, []).append(p)
    topics = carray(len(by_topic)) + b"".join(
        cstring(t) + carray(len(ps)) + b"".join(i32(p) for p in ps) + TAGS0 for t, ps in by_topic.items())
    marker = i64(pid) + i16(epoch) + boolean(committed) + topics + i32(coordinator_epoch)
    if version >= 2:
        marker += i8(transaction_version)
    req = request_header(27, version, corr, client_id, True) + carray(1) + marker + TAGS0 + TAGS0
    answers = carray(len(by_topic)) + b"".join(
        cstring(t) + carray(len(ps)) + b"".join(i32(p) + i16(error) + TAGS0 for p in ps) + TAGS0
        for t, ps in by_topic.items())
    resp = response_header(corr, True) + carray(1) + i64(pid) + answers + TAGS0 + TAGS0
    return [(0, frame(req)), (1, frame(resp))]


def describe_producers(corr: int, *, topic: str = "orders", partition: int = 0, client_id: str = "adminclient-1",
                       pid: int = -1, epoch: int = -1, start_offset: int = -1):
    """DescribeProducers v0 of one partition, answered with one active producer (or none)."""
    req = (request_header(61, 0, corr, client_id, True) + carray(1) + cstring(topic)
           + carray(1) + i32(partition) + TAGS0 + TAGS0)
    active = carray(0)
    if pid >= 0:
        active = (carray(1) + i64(pid) + i32(epoch) + i32(-1) + i64(-1) + i32(0) + i64(start_offset) + TAGS0)
    resp = (response_header(corr, True) + i32(0) + carray(1) + cstring(topic)
            + carray(1) + i32(partition) + i16(0) + cstring(None) + active + TAGS0 + TAGS0 + TAGS0)
    return [(0, frame(req)), (1, frame(resp))]


def write_ordered(path, conns: list, order: list[tuple[int, int]], *, t0: float = 1_700_000_000.0,
                  step: float = 0.001) -> None:
    """Write connections whose messages interleave in time: `order` lists (connection index,
    message index) in the order they happened. A connection opens just before its first
    message and closes after everything; each data packet takes the place of the first message
    it carries, its acknowledgement right after it."""
    from decimal import Decimal

    from scapy.utils import EDecimal, PcapWriter

    from tests.sources.pcap.craft import _scapy, conn_packets

    rank = {key: i for i, key in enumerate(order)}
    ranked = []
    for ci, conn in enumerate(conns):
        first = min(rank[(ci, i)] for i in range(len(conn.messages)))
        last = first - 0.5
        for p in conn_packets(ci, conn):
            if p.kind == "data":
                last = rank[(ci, p.seg.messages[0])]
            elif p.kind == "fin":
                last = len(order) + ci
            ranked.append((last, len(ranked), p))
    ranked.sort(key=lambda x: (x[0], x[1]))
    t = Decimal(str(t0))
    with PcapWriter(str(path), sync=False) as w:
        for i, (_, _, p) in enumerate(ranked):
            sp = _scapy(p, conns[p.conn], link="ether", vlan=None, ipv6=False)
            sp.time = EDecimal(t + i * Decimal(str(step)))
            w.write(sp)
