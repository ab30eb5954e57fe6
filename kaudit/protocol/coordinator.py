"""Records of Kafka's internal coordinator topics, sans-IO: `__transaction_state` and
`__consumer_offsets` keys and values, from the record's raw key and value bytes.

Schemas follow Kafka's message specs (TransactionLogKey/Value.json, OffsetCommitKey/Value.json,
GroupMetadataKey/Value.json, ConsumerProtocolAssignment.json). Both topics prefix the key and the
value with an int16 version. In `__consumer_offsets` the key version is really the record type
(0/1 offset commit, 2 group metadata, 3+ the KIP-848/KIP-932 group records of newer brokers).

The record-level helpers return flat dicts whose names are those of `model.TXN_LOG`,
`model.OFFSET_COMMIT` and `model.GROUP_METADATA`, plus a few detail keys (`DETAIL_KEYS`) that the
rows do not carry but that a faithful DumpLogSegments rendering needs; `row_fields` drops them.
A `None` value is a tombstone. Like Kafka's generated readers, bytes after the last field are
ignored (the value-level decoders return the end offset, so a caller can still see them).
"""

from __future__ import annotations

import struct

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.primitives import (
    read_array_len,
    read_bytes,
    read_compact_array_len,
    read_compact_bytes,
    read_compact_string,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_string,
    read_tagged_fields,
)

# TransactionState ids (kafka.coordinator.transaction.TransactionState).
TXN_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)

# Keys added to decoded dicts beyond the model's row fields.
# partition_entries: the stored (topic, [partition ids]) entries of a TransactionLogValue;
# tagged_fields: unknown tags {tag: raw bytes}; member_list: GroupMetadataValue members;
# record_type: "unknown-<key version>" for record types this module does not know.
DETAIL_KEYS = frozenset({"partition_entries", "tagged_fields", "member_list", "record_type"})

KIND_OFFSET_COMMIT = "offset_commit"
KIND_GROUP_METADATA = "group_metadata"
KIND_UNKNOWN = "unknown"


def row_fields(d: dict) -> dict:
    """The dict without the detail keys: ready for `model.table_from_rows`."""
    return {k: v for k, v in d.items() if k not in DETAIL_KEYS}


# ---------------------------------------------------------------------------------------------
# Field readers that switch between classic and compact (flexible-version) encodings.


def _string(buf, offset: int, flexible: bool, what: str, nullable: bool = False):
    start = offset
    if flexible:
        s, offset = read_compact_string(buf, offset)
    else:
        s, offset = read_string(buf, offset)
    if s is None and not nullable:
        # Kafka's generated readers reject this too ("non-nullable field ... serialized as null").
        raise DecodeError(f"{what}: null in a non-nullable string", start)
    return s, offset


def _bytes(buf, offset: int, flexible: bool, what: str):
    start = offset
    if flexible:
        b, offset = read_compact_bytes(buf, offset)
    else:
        b, offset = read_bytes(buf, offset)
    if b is None:
        raise DecodeError(f"{what}: null in non-nullable bytes", start)
    return b, offset


def _array_len(buf, offset: int, flexible: bool, item_min: int, what: str, nullable=False):
    start = offset
    if flexible:
        n, offset = read_compact_array_len(buf, offset, item_min)
    else:
        n, offset = read_array_len(buf, offset, item_min)
    if n < 0 and not nullable:
        raise DecodeError(f"{what}: null in a non-nullable array", start)
    return n, offset


def _int32_array(buf, offset: int, flexible: bool, what: str):
    n, offset = _array_len(buf, offset, flexible, 4, what)
    if n <= 0:
        return [], offset
    # _array_len checked that n int32s fit in what is left: one read of them all
    return list(struct.unpack_from(f">{n}i", buf, offset)), offset + 4 * n


def _tagged(buf, offset: int, flexible: bool):
    if not flexible:
        return {}, offset
    return read_tagged_fields(buf, offset)


def _tag_int(tags: dict, tag: int, size: int, default: int, position: int) -> int:
    """A known tagged field of fixed width; a wrong size would misread every later byte."""
    raw = tags.pop(tag, None)
    if raw is None:
        return default
    if len(raw) != size:
        raise DecodeError(f"tagged field {tag}: {len(raw)} bytes, expected {size}", position)
    return int.from_bytes(raw, "big", signed=True)


# ---------------------------------------------------------------------------------------------
# __transaction_state


def decode_txn_log_key(buf, offset: int = 0):
    """TransactionLogKey: `version int16 | transactional_id string` (only version 0 exists).

    Returns ((key_version, transactional_id), new_offset); for an unknown key version the id is
    None and the offset stops after the version (newer brokers skip such keys as UnknownKey).
    """
    version, offset = read_int16(buf, offset)
    if version != 0:
        return (version, None), offset
    tid, offset = _string(buf, offset, False, "transactional_id")
    return (version, tid), offset


_TXN_HEAD = struct.Struct(">qhib")   # producer_id, producer_epoch, transaction_timeout_ms, status
_TXN_TIMES = struct.Struct(">qq")    # last_update_ms, start_ms


def decode_txn_log_value(buf, offset: int = 0):
    """TransactionLogValue v0, or v1 (flexible: compact encodings + tagged fields 0
    PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion). Returns (dict, offset)."""
    start = offset
    version, offset = read_int16(buf, offset)
    if version not in (0, 1):
        raise DecodeError(f"unknown TransactionLogValue version {version}", start)
    flexible = version >= 1
    if offset + _TXN_HEAD.size <= len(buf):   # the fixed fields in one read (cut: one by one, below)
        producer_id, producer_epoch, timeout_ms, status = _TXN_HEAD.unpack_from(buf, offset)
        offset += _TXN_HEAD.size
    else:
        producer_id, offset = read_int64(buf, offset)
        producer_epoch, offset = read_int16(buf, offset)
        timeout_ms, offset = read_int32(buf, offset)
        status, offset = read_int8(buf, offset)
    # Smallest PartitionsSchema entry: empty topic + empty array (+ empty tag section).
    n, offset = _array_len(
        buf, offset, flexible, 3 if flexible else 6, "transaction_partitions", nullable=True
    )
    entries: list[tuple[str, list[int]]] | None = None if n < 0 else []
    for _ in range(max(n, 0)):
        topic, offset = _string(buf, offset, flexible, "topic")
        ids, offset = _int32_array(buf, offset, flexible, "partition_ids")
        _, offset = _tagged(buf, offset, flexible)  # no known tags inside PartitionsSchema
        entries.append((topic, ids))
    if offset + _TXN_TIMES.size <= len(buf):
        last_update_ms, start_ms = _TXN_TIMES.unpack_from(buf, offset)
        offset += _TXN_TIMES.size
    else:
        last_update_ms, offset = read_int64(buf, offset)
        start_ms, offset = read_int64(buf, offset)
    tags_at = offset
    tags, offset = _tagged(buf, offset, flexible)
    d = {
        "value_version": version,
        "tombstone": False,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        # v0 has no such fields (None); in v1 an absent tag means the spec's default.
        "previous_producer_id": _tag_int(tags, 0, 8, -1, tags_at) if flexible else None,
        "next_producer_id": _tag_int(tags, 1, 8, -1, tags_at) if flexible else None,
        "client_transaction_version": _tag_int(tags, 2, 2, 0, tags_at) if flexible else None,
        "transaction_timeout_ms": timeout_ms,
        # An unknown status is kept as its id (state None) rather than failing the record.
        "state": TXN_STATES[status] if 0 <= status < len(TXN_STATES) else None,
        "state_id": status,
        "partitions": None if entries is None else _join_entries(entries),
        "last_update_ms": last_update_ms,
        "start_ms": start_ms,
        "partition_entries": entries,
        "tagged_fields": tags,
    }
    return d, offset


_TXN_VALUE_NONE = dict.fromkeys(
    (
        "value_version", "producer_id", "producer_epoch", "previous_producer_id",
        "next_producer_id", "client_transaction_version", "transaction_timeout_ms", "state",
        "state_id", "partitions", "last_update_ms", "start_ms", "partition_entries",
    )
)


def _join_entries(entries) -> str:
    # Row form: "topic-partition" names in stored order, as kafka's TopicPartition prints them.
    return ",".join(f"{t}-{p}" for t, ids in entries for p in ids)


def decode_txn_log_record(key, value) -> dict:
    """One `__transaction_state` record → a TXN_LOG-shaped dict (+ detail keys).

    `value` None is a tombstone (the transactional id expired). A key version other than 0 gives
    a dict with only `key_version` and `tombstone` filled: the value format is then unknown.
    """
    if key is None:
        raise DecodeError("__transaction_state record without a key", 0)
    (key_version, tid), _ = decode_txn_log_key(key, 0)
    d = {"key_version": key_version, "transactional_id": tid}
    if value is None or key_version != 0:
        d.update(_TXN_VALUE_NONE)
        d["tombstone"] = value is None
        d["tagged_fields"] = {}
        return d
    v, _ = decode_txn_log_value(value, 0)
    d.update(v)
    return d


# ---------------------------------------------------------------------------------------------
# __consumer_offsets


def decode_offsets_key(buf, offset: int = 0):
    """`__consumer_offsets` key → ({kind, key_version, group, topic, partition}, new_offset).

    Versions 0/1: OffsetCommitKey (group, topic, partition); 2: GroupMetadataKey (group);
    3+: record types of newer group coordinators, returned as kind "unknown" (their keys all
    start with the group id, which is read when it decodes).
    """
    version, offset = read_int16(buf, offset)
    if version in (0, 1):
        group, offset = _string(buf, offset, False, "group")
        topic, offset = _string(buf, offset, False, "topic")
        partition, offset = read_int32(buf, offset)
        k = {"kind": KIND_OFFSET_COMMIT, "key_version": version, "group": group,
             "topic": topic, "partition": partition}
        return k, offset
    if version == 2:
        group, offset = _string(buf, offset, False, "group")
        k = {"kind": KIND_GROUP_METADATA, "key_version": version, "group": group,
             "topic": None, "partition": None}
        return k, offset
    if version < 0:
        raise DecodeError(f"negative __consumer_offsets key version {version}", offset - 2)
    group = None
    try:
        group, offset = read_string(buf, offset)
    except DecodeError:
        pass  # forward-compatible: an unreadable group is just not reported
    k = {"kind": KIND_UNKNOWN, "key_version": version, "group": group,
         "topic": None, "partition": None}
    return k, offset


def decode_offset_commit_value(buf, offset: int = 0):
    """OffsetCommitValue v0..v4 → (dict with OFFSET_COMMIT value names, new_offset).

    v0: offset, metadata, commit_timestamp; v1: + expire_timestamp; v2: drops it again;
    v3: + leader_epoch (after offset); v4: v3 made flexible (compact string, tagged fields).
    """
    start = offset
    version, offset = read_int16(buf, offset)
    if not 0 <= version <= 4:
        raise DecodeError(f"unknown OffsetCommitValue version {version}", start)
    flexible = version >= 4
    committed, offset = read_int64(buf, offset)
    leader_epoch = None
    if version >= 3:
        leader_epoch, offset = read_int32(buf, offset)
    metadata, offset = _string(buf, offset, flexible, "metadata")
    commit_ts, offset = read_int64(buf, offset)
    expire_ts = None
    if version == 1:
        expire_ts, offset = read_int64(buf, offset)
    tags, offset = _tagged(buf, offset, flexible)
    d = {
        "tombstone": False,
        "value_version": version,
        "committed_offset": committed,
        "committed_leader_epoch": leader_epoch,
        "metadata": metadata,
        "commit_timestamp_ms": commit_ts,
        "expire_timestamp_ms": expire_ts,
        "tagged_fields": tags,
    }
    return d, offset


def decode_group_metadata_value(buf, offset: int = 0):
    """GroupMetadataValue v0..v4 → (dict with GROUP_METADATA value names, new_offset).

    v1 adds rebalance_timeout per member, v2 current_state_timestamp, v3 group_instance_id per
    member, v4 is v3 made flexible. `member_list` keeps each member's fields in stored order,
    with the subscription and assignment as raw bytes (ConsumerProtocol-encoded for
    protocol_type "consumer"; see `decode_consumer_assignment`).
    """
    start = offset
    version, offset = read_int16(buf, offset)
    if not 0 <= version <= 4:
        raise DecodeError(f"unknown GroupMetadataValue version {version}", start)
    flexible = version >= 4
    protocol_type, offset = _string(buf, offset, flexible, "protocol_type")
    generation, offset = read_int32(buf, offset)
    protocol, offset = _string(buf, offset, flexible, "protocol", nullable=True)
    leader, offset = _string(buf, offset, flexible, "leader", nullable=True)
    state_ts = None
    if version >= 2:
        state_ts, offset = read_int64(buf, offset)
    # Smallest member: three empty strings, one timeout, two empty bytes (+ an empty tag section).
    item_min = 10 if flexible else 18
    n, offset = _array_len(buf, offset, flexible, item_min, "members")
    members = []
    for _ in range(n):
        m = {}
        m["member_id"], offset = _string(buf, offset, flexible, "member_id")
        m["group_instance_id"] = None
        if version >= 3:
            m["group_instance_id"], offset = _string(
                buf, offset, flexible, "group_instance_id", nullable=True
            )
        m["client_id"], offset = _string(buf, offset, flexible, "client_id")
        m["client_host"], offset = _string(buf, offset, flexible, "client_host")
        m["rebalance_timeout_ms"] = None
        if version >= 1:
            m["rebalance_timeout_ms"], offset = read_int32(buf, offset)
        m["session_timeout_ms"], offset = read_int32(buf, offset)
        m["subscription"], offset = _bytes(buf, offset, flexible, "subscription")
        m["assignment"], offset = _bytes(buf, offset, flexible, "assignment")
        _, offset = _tagged(buf, offset, flexible)
        members.append(m)
    tags, offset = _tagged(buf, offset, flexible)
    d = {
        "tombstone": False,
        "value_version": version,
        "protocol_type": protocol_type,
        "generation": generation,
        "protocol": protocol,
        "leader": leader,
        "current_state_timestamp_ms": state_ts,
        "member_count": len(members),
        "members": ",".join(m["member_id"] for m in members),
        "member_list": members,
        "tagged_fields": tags,
    }
    return d, offset


def decode_consumer_assignment(buf, offset: int = 0):
    """ConsumerProtocolAssignment (the embedded `consumer` protocol's member assignment):
    `version int16 | [topic string, [partition int32]] | user_data nullable bytes`.

    Returns ((version, [(topic, partition), ...], user_data or None), new_offset). All versions
    (0..3) share this layout; like Kafka's ConsumerProtocol, newer versions are read as the
    newest known one and a negative version is an error.
    """
    start = offset
    version, offset = read_int16(buf, offset)
    if version < 0:
        raise DecodeError(f"unsupported assignment version {version}", start)
    n, offset = _array_len(buf, offset, False, 6, "assigned_partitions")
    partitions: list[tuple[str, int]] = []
    for _ in range(n):
        topic, offset = _string(buf, offset, False, "topic")
        ids, offset = _int32_array(buf, offset, False, "partitions")
        partitions.extend((topic, p) for p in ids)
    user_data, offset = read_bytes(buf, offset)
    return (version, partitions, user_data), offset


_OFFSET_VALUE_NONE = dict.fromkeys(
    ("value_version", "committed_offset", "committed_leader_epoch", "metadata",
     "commit_timestamp_ms", "expire_timestamp_ms")
)
_GROUP_VALUE_NONE = dict.fromkeys(
    ("value_version", "protocol_type", "generation", "protocol", "leader",
     "current_state_timestamp_ms", "member_count", "members", "member_list")
)


def decode_offsets_record(key, value) -> tuple[str, dict]:
    """One `__consumer_offsets` record → (kind, dict).

    kind "offset_commit": OFFSET_COMMIT names (key_version, group, commit_topic,
    commit_partition, tombstone, value_version, committed_offset, ...); "group_metadata":
    GROUP_METADATA names; "unknown" (key version 3+): key_version, group (if readable),
    tombstone, value_version (if readable) and record_type "unknown-<version>".
    """
    if key is None:
        raise DecodeError("__consumer_offsets record without a key", 0)
    k, _ = decode_offsets_key(key, 0)
    kind = k["kind"]
    tombstone = value is None
    if kind == KIND_OFFSET_COMMIT:
        d = {"key_version": k["key_version"], "group": k["group"], "commit_topic": k["topic"],
             "commit_partition": k["partition"]}
        if tombstone:
            d.update(_OFFSET_VALUE_NONE, tombstone=True, tagged_fields={})
        else:
            d.update(decode_offset_commit_value(value, 0)[0])
        return kind, d
    if kind == KIND_GROUP_METADATA:
        d = {"key_version": k["key_version"], "group": k["group"]}
        if tombstone:
            d.update(_GROUP_VALUE_NONE, tombstone=True, tagged_fields={})
        else:
            d.update(decode_group_metadata_value(value, 0)[0])
        return kind, d
    value_version = None
    if value is not None and len(value) >= 2:
        value_version = read_int16(value, 0)[0]
    d = {"key_version": k["key_version"], "group": k["group"], "tombstone": tombstone,
         "value_version": value_version, "record_type": f"unknown-{k['key_version']}"}
    return kind, d


__all__ = [
    "DETAIL_KEYS", "KIND_GROUP_METADATA", "KIND_OFFSET_COMMIT", "KIND_UNKNOWN", "TXN_STATES",
    "decode_consumer_assignment", "decode_group_metadata_value",
    "decode_offset_commit_value", "decode_offsets_key", "decode_offsets_record",
    "decode_txn_log_key", "decode_txn_log_record", "decode_txn_log_value", "row_fields",
]
