"""Test helper: crafted consumer-group conversations (classic protocol and KIP-848) for the consumer
rules: JoinGroup, SyncGroup (with the consumer protocol's assignment bytes), Heartbeat, LeaveGroup,
ConsumerGroupHeartbeat, OffsetCommit, OffsetFetch, TxnOffsetCommit, ListOffsets and Fetch, written
field by field with the wire tests' primitives (independent of kaudit's decoders)."""

from __future__ import annotations

import uuid

from fixtures import kafka_encoder as ke
from tests.protocol.wire.wirebytes import (
    TAGS0,
    array,
    boolean,
    carray,
    cstring,
    frame,
    i8,
    i16,
    i32,
    i64,
    nbytes,
    request_header,
    response_header,
    string,
)

TOPIC = "orders"
GROUP = "billing"
TOPIC_ID = uuid.UUID("6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f1")


def _x(req: bytes, resp: bytes | None):
    out = [(0, frame(req))]
    if resp is not None:
        out.append((1, frame(resp)))
    return out


def records(base: int, n: int, *, pid: int = -1, epoch: int = -1, txn: bool = False, seq: int = -1) -> bytes:
    recs = [{"value": f"v{base + i}".encode(), "timestamp_delta": i} for i in range(n)]
    return ke.encode_record_batch_v2(base, recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                     is_transactional=txn)


def marker(base: int, kind: str, pid: int, epoch: int = 0) -> bytes:
    return ke.encode_control_batch(base, pid, epoch, kind, 0, ke.DEFAULT_TIMESTAMP)


def fetch(corr: int, client: str, fetch_offset: int, data: bytes, *, hw: int, partition: int = 0,
          isolation: int = 0, error: int = 0, log_start: int = 0, aborted=(), replica: int = -1):
    """Fetch v5 of one partition and its response (records `data`); `replica`: a follower's
    broker id (-1: a consumer's)."""
    req = (request_header(1, 5, corr, client, False) + i32(replica) + i32(500) + i32(1) + i32(52428800)
           + i8(isolation) + array(1) + string(TOPIC) + array(1) + i32(partition) + i64(fetch_offset)
           + i64(0) + i32(1048576))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(TOPIC) + array(1) + i32(partition)
            + i16(error) + i64(hw) + i64(hw) + i64(log_start)
            + array(len(aborted)) + b"".join(i64(p) + i64(o) for p, o in aborted) + nbytes(data))
    return _x(req, resp)


def fetch_session(corr: int, client: str, session_id: int, epoch: int, parts, answers, *, error: int = 0,
                  isolation: int = 0, topic: str = TOPIC):
    """Fetch v7 in a KIP-227 fetch session (`epoch` 0: a full fetch; > 0: incremental). `parts`:
    [(partition, fetch_offset)] the request names; `answers`: [(partition, error, hw, log_start,
    data)] the response holds - an incremental response leaves out the partitions with nothing
    new. `error`: the response's top-level error (FETCH_SESSION_ID_NOT_FOUND 70, ...)."""
    req = (request_header(1, 7, corr, client, False) + i32(-1) + i32(500) + i32(1) + i32(52428800)
           + i8(isolation) + i32(session_id) + i32(epoch) + array(1) + string(topic) + array(len(parts))
           + b"".join(i32(p) + i64(off) + i64(-1) + i32(1048576) for p, off in parts) + array(0))
    topics = [] if not answers else [answers]
    resp = (response_header(corr, False) + i32(0) + i16(error) + i32(session_id) + array(len(topics))
            + b"".join(string(topic) + array(len(a)) + b"".join(
                i32(p) + i16(err) + i64(hw) + i64(hw) + i64(ls) + array(0) + nbytes(data)
                for p, err, hw, ls, data in a) for a in topics))
    return _x(req, resp)


def assignment(parts) -> bytes:
    """ConsumerProtocolAssignment v0: [(topic, [partitions])]."""
    out = i16(0) + array(len(parts))
    for topic, ps in parts:
        out += string(topic) + array(len(ps)) + b"".join(i32(p) for p in ps)
    return out + nbytes(None)


def join(corr: int, client: str, member: str, generation: int, *, error: int = 0, group: str = GROUP):
    """JoinGroup v5 (the member is its own leader)."""
    req = (request_header(11, 5, corr, client, False) + string(group) + i32(10000) + i32(30000)
           + string(member) + string(None) + string("consumer") + array(1) + string("range") + nbytes(b""))
    resp = (response_header(corr, False) + i32(0) + i16(error) + i32(generation) + string("range")
            + string(member) + string(member) + array(0))
    return _x(req, resp)


def sync(corr: int, client: str, member: str, generation: int, parts, *, error: int = 0, group: str = GROUP):
    """SyncGroup v3; the response assigns `parts` ([(topic, [partitions])])."""
    req = (request_header(14, 3, corr, client, False) + string(group) + i32(generation) + string(member)
           + string(None) + array(0))
    resp = response_header(corr, False) + i32(0) + i16(error) + nbytes(assignment(parts))
    return _x(req, resp)


def heartbeat(corr: int, client: str, member: str, generation: int, *, error: int = 0, group: str = GROUP):
    req = (request_header(12, 3, corr, client, False) + string(group) + i32(generation) + string(member)
           + string(None))
    return _x(req, response_header(corr, False) + i32(0) + i16(error))


def leave(corr: int, client: str, member: str, *, group: str = GROUP):
    """LeaveGroup v3."""
    req = request_header(13, 3, corr, client, False) + string(group) + array(1) + string(member) + string(None)
    resp = (response_header(corr, False) + i32(0) + i16(0) + array(1) + string(member) + string(None) + i16(0))
    return _x(req, resp)


def commit(corr: int, client: str, member: str, generation: int, offset: int, *, partition: int = 0,
           error: int = 0, group: str = GROUP):
    """OffsetCommit v7 of one partition."""
    req = (request_header(8, 7, corr, client, False) + string(group) + i32(generation) + string(member)
           + string(None) + array(1) + string(TOPIC) + array(1) + i32(partition) + i64(offset) + i32(-1)
           + string(None))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(TOPIC) + array(1) + i32(partition)
            + i16(error))
    return _x(req, resp)


def offset_fetch(corr: int, client: str, offset: int, *, partition: int = 0, group: str = GROUP):
    """OffsetFetch v5 of one partition; the group's committed `offset` (-1: none)."""
    req = (request_header(9, 5, corr, client, False) + string(group) + array(1) + string(TOPIC) + array(1)
           + i32(partition))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(TOPIC) + array(1) + i32(partition)
            + i64(offset) + i32(-1) + string(None) + i16(0) + i16(0))
    return _x(req, resp)


def list_offsets(corr: int, client: str, timestamp: int, offset: int, *, partition: int = 0):
    """ListOffsets v1: timestamp -1 latest, -2 earliest."""
    req = (request_header(2, 1, corr, client, False) + i32(-1) + array(1) + string(TOPIC) + array(1)
           + i32(partition) + i64(timestamp))
    resp = (response_header(corr, False) + array(1) + string(TOPIC) + array(1) + i32(partition) + i16(0)
            + i64(-1) + i64(offset))
    return _x(req, resp)


def txn_offset_commit(corr: int, client: str, txn_id: str, pid: int, epoch: int, member: str, offset: int,
                      *, partition: int = 0, generation: int = 1, group: str = GROUP):
    """TxnOffsetCommit v3 (flexible) of one partition."""
    req = (request_header(28, 3, corr, client, True) + cstring(txn_id) + cstring(group) + i64(pid) + i16(epoch)
           + i32(generation) + cstring(member) + cstring(None) + carray(1) + cstring(TOPIC) + carray(1)
           + i32(partition) + i64(offset) + i32(-1) + cstring(None) + TAGS0 + TAGS0 + TAGS0)
    resp = (response_header(corr, True) + i32(0) + carray(1) + cstring(TOPIC) + carray(1) + i32(partition)
            + i16(0) + TAGS0 + TAGS0 + TAGS0)
    return _x(req, resp)


def end_txn(corr: int, client: str, txn_id: str, pid: int, epoch: int, committed: bool):
    req = (request_header(26, 3, corr, client, True) + cstring(txn_id) + i64(pid) + i16(epoch)
           + boolean(committed) + TAGS0)
    return _x(req, response_header(corr, True) + i32(0) + i16(0) + TAGS0)


def metadata_ids(corr: int, client: str):
    """Metadata v10 naming TOPIC_ID as TOPIC (one partition, broker 1)."""
    req = request_header(3, 10, corr, client, True) + carray(None) + boolean(False) + boolean(False) \
        + boolean(False) + TAGS0
    resp = (response_header(corr, True) + i32(0) + carray(1) + i32(1) + cstring("b1") + i32(9092)
            + cstring(None) + TAGS0 + cstring("cluster") + i32(1)
            + carray(1) + i16(0) + cstring(TOPIC) + TOPIC_ID.bytes + boolean(False)
            + carray(1) + i16(0) + i32(0) + i32(1) + i32(0) + carray(1) + i32(1) + carray(1) + i32(1)
            + carray(0) + TAGS0 + i32(-2147483648) + TAGS0 + i32(-2147483648) + TAGS0)
    return _x(req, resp)


def metadata_brokers(corr: int, client: str, nodes=(1, 2, 3)):
    """Metadata v1 of TOPIC (one partition, led by the first node) listing the brokers `nodes`
    (b<n>:9092): no cluster id, no topic id."""
    req = request_header(3, 1, corr, client, False) + array(1) + string(TOPIC)
    resp = (response_header(corr, False) + array(len(nodes))
            + b"".join(i32(n) + string(f"b{n}") + i32(9092) + string(None) for n in nodes) + i32(nodes[0])
            + array(1) + i16(0) + string(TOPIC) + boolean(False)
            + array(1) + i16(0) + i32(0) + i32(nodes[0]) + array(1) + i32(nodes[0]) + array(1) + i32(nodes[0]))
    return _x(req, resp)


def cg_heartbeat(corr: int, client: str, member: str, epoch: int, *, answer_epoch: int | None = None,
                 partitions=None, error: int = 0, group: str = GROUP):
    """ConsumerGroupHeartbeat v0 (KIP-848); the response assigns `partitions` of TOPIC_ID (None: no
    assignment in the answer). epoch -1: the member leaves."""
    req = (request_header(68, 0, corr, client, True) + cstring(group) + cstring(member) + i32(epoch)
           + cstring(None) + cstring(None) + i32(30000) + carray(1) + cstring(TOPIC) + cstring(None)
           + carray(None) + TAGS0)
    if partitions is None:
        assigned = i8(-1)
    else:
        assigned = (i8(1) + carray(1) + TOPIC_ID.bytes + carray(len(partitions))
                    + b"".join(i32(p) for p in partitions) + TAGS0 + TAGS0)
    resp = (response_header(corr, True) + i32(0) + i16(error) + cstring(None) + cstring(member)
            + i32(epoch if answer_epoch is None else answer_epoch) + i32(3000) + assigned + TAGS0)
    return _x(req, resp)


def txn_offset_commit_v2(corr: int, client: str, txn_id: str, pid: int, epoch: int, offset: int,
                         *, partition: int = 0, group: str = GROUP):
    """TxnOffsetCommit v2: no member id, no generation (before KIP-447)."""
    req = (request_header(28, 2, corr, client, False) + string(txn_id) + string(group) + i64(pid) + i16(epoch)
           + array(1) + string(TOPIC) + array(1) + i32(partition) + i64(offset) + i32(-1) + string(None))
    resp = response_header(corr, False) + i32(0) + array(1) + string(TOPIC) + array(1) + i32(partition) + i16(0)
    return _x(req, resp)
