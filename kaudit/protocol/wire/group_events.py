"""The `group_event` facts of a consumer's group-coordination exchange: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, ConsumerGroupHeartbeat (KIP-848), OffsetCommit, TxnOffsetCommit,
OffsetFetch and the consumers' ListOffsets (replica id -1).

These frames are rare next to Produce and Fetch, so they are read here from the decoded kio
bodies (dicts) on the Python path. One dict per exchange for the membership APIs (the member's
assignment as "topic-partition,..." in `partitions`), one per partition for the offset APIs.
The consumer protocol's assignment bytes (ConsumerProtocolAssignment v0-v3, never flexible:
int16 version, [topic string, [int32]], user data) are read with bounded primitives.
"""

from __future__ import annotations

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.primitives import read_array_len, read_int16, read_int32, read_string
from kaudit.protocol.wire import apis

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
GROUP_APIS = frozenset({apis.OFFSET_COMMIT, apis.OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP,
                        SYNC_GROUP, apis.TXN_OFFSET_COMMIT, apis.CONSUMER_GROUP_HEARTBEAT, apis.LIST_OFFSETS})
MAX_ASSIGNED = 100_000   # partitions one assignment may name (a lying length stops here)


def consumer_assignment(raw) -> list[tuple[str, int]] | None:
    """ConsumerProtocolAssignment bytes -> [(topic, partition)]; None when they do not parse."""
    if raw is None:
        return None
    buf = bytes(raw)
    if not buf:
        return []   # the leader gave this member nothing
    try:
        _, o = read_int16(buf, 0)
        n, o = read_array_len(buf, o)
        out = []
        for _ in range(max(n or 0, 0)):
            topic, o = read_string(buf, o)
            m, o = read_array_len(buf, o)
            for _ in range(max(m or 0, 0)):
                p, o = read_int32(buf, o)
                out.append((topic, p))
                if len(out) > MAX_ASSIGNED:
                    return None
        return out
    except (DecodeError, IndexError, ValueError, UnicodeDecodeError):
        return None


def _tps(pairs) -> str:
    return ",".join(f"{t}-{p}" for t, p in pairs)


def _base(request, response, event: str, **kw) -> dict:
    req = request.body or {}
    row = {"event": event, "api_version": request.api_version, "correlation_id": request.correlation_id,
           "client_id": getattr(request, "client_id", None), "group_id": req.get("group_id"),
           "member_id": req.get("member_id"), "instance_id": req.get("group_instance_id"),
           "error_code": None}
    resp = response.body if response is not None else None
    if resp is not None:
        row["error_code"] = resp.get("error_code", 0)
    row.update(kw)
    return row


def group_events(request, response=None) -> list[dict]:
    """The group_event facts of one exchange (keys of model.GROUP_EVENT but the place and times)."""
    if request is None or not request.body or request.api_key not in GROUP_APIS:
        return []
    key, req = request.api_key, request.body
    resp = response.body if response is not None else None
    if key == JOIN_GROUP:
        r = resp or {}
        return [_base(request, response, "JOIN", member_id=r.get("member_id") or req.get("member_id"),
                      generation=r.get("generation_id"), protocol=r.get("protocol_name"),
                      timeout_ms=req.get("session_timeout_ms"), leader=r.get("leader"),
                      reason=req.get("reason"))]
    if key == SYNC_GROUP:
        parts = consumer_assignment((resp or {}).get("assignment"))
        return [_base(request, response, "SYNC", generation=req.get("generation_id"),
                      protocol=(resp or {}).get("protocol_name") or req.get("protocol_name"),
                      partitions=None if parts is None else _tps(parts))]
    if key == HEARTBEAT:
        return [_base(request, response, "HEARTBEAT", generation=req.get("generation_id"))]
    if key == LEAVE_GROUP:
        return _leave(request, response, req, resp)
    if key == apis.CONSUMER_GROUP_HEARTBEAT:
        return [_cg_heartbeat(request, response, req, resp)]
    if key == apis.LIST_OFFSETS:
        return _list_offsets(request, response, req, resp)
    if key == apis.OFFSET_FETCH:
        return _offset_fetch(request, response, req, resp)
    return _commit(request, response, req, resp)


def _leave(request, response, req, resp) -> list[dict]:
    members = req.get("members")
    if not members:   # v0-v2: one member
        return [_base(request, response, "LEAVE", reason=req.get("reason"))]
    answers = {m.get("member_id"): m for m in (resp or {}).get("members") or ()}
    out = []
    for m in members:
        row = _base(request, response, "LEAVE", member_id=m.get("member_id"),
                    instance_id=m.get("group_instance_id"), reason=m.get("reason"))
        a = answers.get(m.get("member_id"))
        if a is not None and a.get("error_code"):
            row["error_code"] = a.get("error_code")
        out.append(row)
    return out


def _cg_heartbeat(request, response, req, resp) -> dict:
    """KIP-848: member epoch -1 leaves, -2 leaves a static member; the response's assignment is
    the member's target (topic ids, named by the engines' topic names later)."""
    r = resp or {}
    epoch = req.get("member_epoch")
    event = "CG_LEAVE" if epoch is not None and epoch < 0 else "CG_HEARTBEAT"
    parts = None
    a = r.get("assignment")
    if a is not None:
        parts = _tps((t.get("topic_id"), p) for t in a.get("topic_partitions") or ()
                     for p in t.get("partitions") or ())
    return _base(request, response, event, member_id=r.get("member_id") or req.get("member_id"),
                 instance_id=req.get("instance_id"),
                 generation=r.get("member_epoch") if r.get("member_epoch") is not None else epoch,
                 request_epoch=epoch, partitions=parts)


def _parts(topics, key="partitions"):
    for t in topics or ():
        for p in t.get(key) or ():
            yield t, p


def _commit(request, response, req, resp) -> list[dict]:
    txn = request.api_key == apis.TXN_OFFSET_COMMIT
    answers = {}
    for t, p in _parts((resp or {}).get("topics")):
        answers[(t.get("name") or t.get("topic_id"), p.get("partition_index"))] = p.get("error_code")
    gen = req.get("generation_id_or_member_epoch", req.get("generation_id"))
    out = []
    for t, p in _parts(req.get("topics")):
        name = t.get("name")
        key = (name or t.get("topic_id"), p.get("partition_index"))
        out.append(_base(
            request, response, "TXN_OFFSET_COMMIT" if txn else "OFFSET_COMMIT", generation=gen,
            topic=name, topic_id=t.get("topic_id"), partition=p.get("partition_index"),
            offset=p.get("committed_offset"), leader_epoch=p.get("committed_leader_epoch"),
            error_code=answers.get(key) if resp is not None else None,
            transactional_id=req.get("transactional_id") if txn else None,
            producer_id=req.get("producer_id") if txn else None,
            producer_epoch=req.get("producer_epoch") if txn else None))
    return out


def _offset_fetch(request, response, req, resp) -> list[dict]:
    """Positions read back: one row per (group, partition) the response answers (v8+: several groups)."""
    out = []
    if resp is None:
        return out
    groups = resp.get("groups")
    if groups is None:
        groups = [{"group_id": req.get("group_id"), "topics": resp.get("topics"),
                   "error_code": resp.get("error_code", 0)}]
    for g in groups:
        for t, p in _parts(g.get("topics")):
            out.append(_base(request, response, "OFFSET_FETCH", group_id=g.get("group_id"),
                             member_id=req.get("member_id"), topic=t.get("name"), topic_id=t.get("topic_id"),
                             partition=p.get("partition_index"), offset=p.get("committed_offset"),
                             leader_epoch=p.get("committed_leader_epoch"),
                             error_code=p.get("error_code") or g.get("error_code") or 0))
    return out


def _list_offsets(request, response, req, resp) -> list[dict]:
    """A consumer's (replica id -1) offset lookups: timestamp -1 latest, -2 earliest."""
    if (req.get("replica_id") if req.get("replica_id") is not None else -1) >= 0:
        return []
    answers = {}
    for t, p in _parts((resp or {}).get("topics")):
        answers[(t.get("name"), p.get("partition_index"))] = p
    out = []
    for t, p in _parts(req.get("topics")):
        a = answers.get((t.get("name"), p.get("partition_index")), {})
        off = a.get("offset")
        if off is None and a.get("old_style_offsets"):
            off = a["old_style_offsets"][0]
        out.append(_base(request, response, "LIST_OFFSETS", topic=t.get("name"),
                         partition=p.get("partition_index"), timestamp=p.get("timestamp"),
                         offset=off, error_code=a.get("error_code") if a else None,
                         isolation_level=req.get("isolation_level")))
    return out
