"""The simulator's consumer traffic: group coordination (classic JoinGroup/SyncGroup/Heartbeat/
LeaveGroup, KIP-848 ConsumerGroupHeartbeat), offsets (OffsetCommit, OffsetFetch, ListOffsets,
AddOffsetsToTxn, TxnOffsetCommit) and Fetch, field by field from Kafka's JSON message specs with
the wire tests' primitives (independent of kaudit's decoders), for any topic and partition.
Each returns [(direction, frame)]: the request, then its response."""

from __future__ import annotations

import uuid

from tests.protocol.wire.wirebytes import (TAGS0, array, boolean, carray, cbytes, cstring, frame, i8, i16, i32, i64,
                                           nbytes, request_header, response_header, string, uvarint)


def _x(req: bytes, resp: bytes | None):
    return [(0, frame(req))] + ([(1, frame(resp))] if resp is not None else [])


def topic_id(topic: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kaudit-sim/{topic}")


def fetch(corr: int, client: str, version: int, isolation: str, asked, answered, *, session=(0, -1),
          answer_session: int = 0, replica_id: int = -1, preferred=None):
    """A consumer Fetch (replica id -1; a follower's: its broker id) and its response, of several partitions: v5 (no fetch
    session), v12 (flexible, topic names), v13 (flexible, topic ids) or v15-v18 (the replica id
    moved into the tagged ReplicaState, KIP-903: a follower's only), with a KIP-227 fetch session
    (`session` (id, epoch) of the request; an incremental request lists only the partitions whose
    position changed, the response only those with something new).
    asked [(topic, partition, fetch offset)]; answered [(topic, partition, error, hw, lso, log start,
    [(pid, first offset)] aborted, records)]; `preferred` {(topic, partition): broker id}: the
    leader's preferred read replica for the partition (KIP-392, v11+), else -1."""
    flex = version >= 12
    arr = carray if flex else array
    tags = TAGS0 if flex else b""

    def name(t):
        return topic_id(t).bytes if version >= 13 else (cstring(t) if flex else string(t))

    def by_topic(rows):
        out: dict = {}
        for r in rows:
            out.setdefault(r[0], []).append(r)
        return sorted(out.items())

    req = (request_header(1, version, corr, client, flex) + (i32(replica_id) if version < 15 else b"")
           + i32(500) + i32(1) + i32(52428800) + i8(1 if isolation == "read_committed" else 0))
    if version >= 7:
        req += i32(session[0]) + i32(session[1])
    topics = by_topic(asked)
    req += arr(len(topics))
    for t, rows in topics:
        req += name(t) + arr(len(rows))
        for _, p, off in rows:
            req += i32(p) + (i32(0) if version >= 9 else b"") + i64(off) + (i32(-1) if version >= 12 else b"") \
                + i64(-1) + i32(1048576) + tags
        req += tags
    if version >= 7:
        req += arr(0)     # forgotten topics (a session drops a partition by not asking it again here)
    if version >= 11:
        req += cstring("") if flex else string("")
    req += replica_state(replica_id) if version >= 15 else tags
    resp = response_header(corr, flex) + i32(0)
    if version >= 7:
        resp += i16(0) + i32(answer_session)
    topics = by_topic(answered)
    resp += arr(len(topics))
    for t, rows in topics:
        resp += name(t) + arr(len(rows))
        for _, p, err, hw, lso, start, aborted, data in rows:
            resp += i32(p) + i16(err) + i64(hw) + i64(lso) + i64(start) + arr(len(aborted)) + b"".join(
                i64(pid) + i64(o) + tags for pid, o in aborted)
            if version >= 11:
                resp += i32((preferred or {}).get((t, p), -1))
            resp += (cbytes(data) if flex else nbytes(data)) + tags
        resp += tags
    resp += tags
    return _x(req, resp)


def replica_state(replica_id: int, epoch: int = 1) -> bytes:
    """A Fetch v15+ request's tagged fields: a follower's ReplicaState (tag 1: its broker id, its
    broker epoch, its own empty tags), none for a consumer (the default: replica id -1)."""
    if replica_id < 0:
        return TAGS0
    state = i32(replica_id) + i64(epoch) + TAGS0
    return uvarint(1) + uvarint(1) + uvarint(len(state)) + state


def assignment(tps) -> bytes:
    """ConsumerProtocolAssignment v0 of [(topic, partition)]."""
    by: dict[str, list] = {}
    for t, p in tps:
        by.setdefault(t, []).append(p)
    out = i16(0) + array(len(by))
    for t, ps in sorted(by.items()):
        out += string(t) + array(len(ps)) + b"".join(i32(p) for p in sorted(ps))
    return out + nbytes(None)


def join(corr: int, client: str, group: str, member: str, generation: int, leader: str, *, error: int = 0,
         instance: str | None = None, asked: str | None = None):
    """JoinGroup v5 (the request with the member id the coordinator gave, as after MEMBER_ID_REQUIRED,
    else `asked`: a static member's first - `instance`: its group.instance.id, KIP-345 - asks with
    none and is given `member`)."""
    req = (request_header(11, 5, corr, client, False) + string(group) + i32(10000) + i32(30000)
           + string(member if asked is None else asked) + string(instance)
           + string("consumer") + array(1) + string("range") + nbytes(b""))
    resp = (response_header(corr, False) + i32(0) + i16(error) + i32(generation) + string("range")
            + string(leader) + string(member) + array(0))
    return _x(req, resp)


def sync(corr: int, client: str, group: str, member: str, generation: int, tps, *, error: int = 0,
         instance: str | None = None):
    """SyncGroup v3; the response assigns `tps`."""
    req = (request_header(14, 3, corr, client, False) + string(group) + i32(generation) + string(member)
           + string(instance) + array(0))
    resp = response_header(corr, False) + i32(0) + i16(error) + nbytes(assignment(tps))
    return _x(req, resp)


def heartbeat(corr: int, client: str, group: str, member: str, generation: int, *, error: int = 0,
              instance: str | None = None):
    req = (request_header(12, 3, corr, client, False) + string(group) + i32(generation) + string(member)
           + string(instance))
    return _x(req, response_header(corr, False) + i32(0) + i16(error))


def leave(corr: int, client: str, group: str, member: str):
    """LeaveGroup v3."""
    req = request_header(13, 3, corr, client, False) + string(group) + array(1) + string(member) + string(None)
    resp = response_header(corr, False) + i32(0) + i16(0) + array(1) + string(member) + string(None) + i16(0)
    return _x(req, resp)


def cg_heartbeat(corr: int, client: str, group: str, member: str, epoch: int, answer_epoch: int, tps=None, *,
                 topics=(), error: int = 0, instance: str | None = None):
    """ConsumerGroupHeartbeat v0 (KIP-848); the response assigns `tps` by topic id (None: no
    assignment in the answer). epoch 0 joins, -1 leaves; `instance`: a static member's id."""
    req = (request_header(68, 0, corr, client, True) + cstring(group) + cstring(member) + i32(epoch)
           + cstring(instance) + cstring(None) + i32(30000) + carray(len(topics)) + b"".join(cstring(t) for t in topics)
           + cstring(None) + carray(None) + TAGS0)
    if tps is None:
        assigned = i8(-1)
    else:
        by: dict[str, list] = {}
        for t, p in tps:
            by.setdefault(t, []).append(p)
        assigned = i8(1) + carray(len(by)) + b"".join(
            topic_id(t).bytes + carray(len(ps)) + b"".join(i32(p) for p in sorted(ps)) + TAGS0
            for t, ps in sorted(by.items())) + TAGS0
    resp = (response_header(corr, True) + i32(0) + i16(error) + cstring(None) + cstring(member if not error else None)
            + i32(answer_epoch) + i32(3000) + assigned + TAGS0)
    return _x(req, resp)


def metadata(corr: int, client: str, parts: dict, nodes):
    """Metadata v10 naming each topic's id (KIP-848 assignments and Fetch v13+ use ids):
    `parts` {topic: {partition: leader}}."""
    req = request_header(3, 10, corr, client, True) + carray(None) + boolean(False) + boolean(False) \
        + boolean(False) + TAGS0
    brokers = b"".join(i32(n) + cstring(f"b{n}") + i32(9092) + cstring(None) + TAGS0 for n in nodes)
    topics = b""
    for t, ps in sorted(parts.items()):
        topics += i16(0) + cstring(t) + topic_id(t).bytes + boolean(False) + carray(len(ps))
        for p, lead in sorted(ps.items()):
            topics += (i16(0) + i32(p) + i32(lead) + i32(0) + carray(len(nodes)) + b"".join(i32(n) for n in nodes)
                       + carray(len(nodes)) + b"".join(i32(n) for n in nodes) + carray(0) + TAGS0)
        topics += i32(-2147483648) + TAGS0
    resp = (response_header(corr, True) + i32(0) + carray(len(nodes)) + brokers + cstring("sim") + i32(nodes[0])
            + carray(len(parts)) + topics + i32(-2147483648) + TAGS0)
    return _x(req, resp)


def commit(corr: int, client: str, group: str, member: str, generation: int, topic: str, partition: int,
           offset: int, *, error: int = 0):
    """OffsetCommit v7 of one partition (generation: the member epoch under KIP-848)."""
    req = (request_header(8, 7, corr, client, False) + string(group) + i32(generation) + string(member)
           + string(None) + array(1) + string(topic) + array(1) + i32(partition) + i64(offset) + i32(-1)
           + string(None))
    resp = response_header(corr, False) + i32(0) + array(1) + string(topic) + array(1) + i32(partition) + i16(error)
    return _x(req, resp)


def offset_fetch(corr: int, client: str, group: str, topic: str, partition: int, offset: int):
    """OffsetFetch v5 of one partition; the group's committed `offset` (-1: none)."""
    req = (request_header(9, 5, corr, client, False) + string(group) + array(1) + string(topic) + array(1)
           + i32(partition))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(topic) + array(1) + i32(partition)
            + i64(offset) + i32(-1) + string(None) + i16(0) + i16(0))
    return _x(req, resp)


def list_offsets(corr: int, client: str, topic: str, partition: int, timestamp: int, offset: int,
                 isolation: str = "read_uncommitted"):
    """ListOffsets v2 (replica id -1): timestamp -1 latest, -2 earliest."""
    req = (request_header(2, 2, corr, client, False) + i32(-1) + i8(1 if isolation == "read_committed" else 0)
           + array(1) + string(topic) + array(1) + i32(partition) + i64(timestamp))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(topic) + array(1) + i32(partition) + i16(0)
            + i64(-1) + i64(offset))
    return _x(req, resp)


def add_offsets(corr: int, client: str, txn_id: str, pid: int, epoch: int, group: str):
    """AddOffsetsToTxn v1."""
    req = request_header(25, 1, corr, client, False) + string(txn_id) + i64(pid) + i16(epoch) + string(group)
    return _x(req, response_header(corr, False) + i32(0) + i16(0))


def txn_offset_commit(corr: int, client: str, txn_id: str, group: str, pid: int, epoch: int, topic: str,
                      partition: int, offset: int, *, member: str | None = None, generation: int = -1,
                      version: int = 3):
    """TxnOffsetCommit of one partition: v3 (KIP-447: member id and generation) with `member` -
    or v5, its schema, from a transaction version 2 producer (KIP-890: the group coordinator adds
    the offsets partition itself, no AddOffsetsToTxn) -, else v2 (no member: the pre-KIP-447 API,
    not fenced by the group)."""
    if member is not None:
        req = (request_header(28, version, corr, client, True) + cstring(txn_id) + cstring(group) + i64(pid)
               + i16(epoch) + i32(generation) + cstring(member) + cstring(None) + carray(1) + cstring(topic) + carray(1)
               + i32(partition) + i64(offset) + i32(-1) + cstring(None) + TAGS0 + TAGS0 + TAGS0)
        resp = (response_header(corr, True) + i32(0) + carray(1) + cstring(topic) + carray(1) + i32(partition)
                + i16(0) + TAGS0 + TAGS0 + TAGS0)
        return _x(req, resp)
    req = (request_header(28, 2, corr, client, False) + string(txn_id) + string(group) + i64(pid) + i16(epoch)
           + array(1) + string(topic) + array(1) + i32(partition) + i64(offset) + i32(-1) + string(None))
    resp = response_header(corr, False) + i32(0) + array(1) + string(topic) + array(1) + i32(partition) + i16(0)
    return _x(req, resp)
