"""Render decoded coordinator records exactly as Kafka 3.0.2's DumpLogSegments prints them
(`--transaction-log-decoder`: TransactionLog.formatRecordKeyAndValue; `--offsets-decoder`:
GroupMetadataManager.formatRecordKeyAndValue), so tests can compare with Kafka's own tool.

Two parts of that text come out of Scala 2.13 hash collections, not out of the stored order:
the transaction's partitions (a `mutable.HashSet[TopicPartition]`) and a group's members (a
`mutable.HashMap[String, MemberMetadata]`). `_ScalaHashOrder` reproduces their iteration order
from the Java hash codes; see its docstring.

Input dicts are those of kaudit.protocol.coordinator (with their detail keys). Where Kafka 3.0
would throw instead of printing (unknown key or value versions, unknown state, an assignment
that does not parse), these functions raise DecodeError carrying Kafka's message.
"""

from __future__ import annotations

from kaudit.protocol.coordinator import (
    KIND_GROUP_METADATA,
    KIND_OFFSET_COMMIT,
    decode_consumer_assignment,
)
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.primitives import java_string_hashcode

DELETE = "<DELETE>"
CONSUMER_PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def topic_partition_hashcode(topic: str, partition: int) -> int:
    """org.apache.kafka.common.TopicPartition.hashCode: 31 * (31 + partition) + topic.hashCode."""
    return _int32(31 * (31 + partition) + java_string_hashcode(topic))


class _ScalaHashOrder:
    """Iteration order of Scala 2.13's mutable.HashSet / mutable.HashMap.

    Both keep a power-of-two table (16 at first, load factor 0.75) of buckets indexed by
    `improved & (len - 1)` with `improved = h ^ (h >>> 16)`; each bucket is sorted by the
    improved hash (signed), equal hashes in insertion order; growing splits buckets without
    reordering. So iteration is by (bucket, improved hash, insertion), and only the final table
    length has to be tracked: `add` grows first when `size + 1 >= threshold` (even for a
    duplicate), `size_hint(n)` grows to tableSizeFor((n + 1) / 0.75) if that is larger, and
    `add_unchecked` is addAll's path for an immutable.HashSet source (no growth check).
    """

    def __init__(self) -> None:
        self.length = 16
        self.threshold = 12
        self.items: dict = {}  # key -> (improved hash, insertion number)

    def _grow(self, length: int) -> None:
        self.length = length
        self.threshold = int(length * 0.75)

    def size_hint(self, n: int) -> None:
        capacity = int((n + 1) / 0.75)
        target = min(_highest_one_bit(max(capacity - 1, 4)) * 2, 1 << 30)
        if target > self.length:
            self._grow(target)

    def add(self, key, java_hash: int) -> None:
        if len(self.items) + 1 >= self.threshold:
            self._grow(self.length * 2)
        self.add_unchecked(key, java_hash)

    def add_unchecked(self, key, java_hash: int) -> None:
        if key not in self.items:
            h = java_hash & 0xFFFFFFFF
            self.items[key] = (_int32(h ^ (h >> 16)), len(self.items))

    def ordered(self) -> list:
        mask = self.length - 1
        return sorted(self.items, key=lambda k: (self.items[k][0] & mask, *self.items[k]))


def _highest_one_bit(v: int) -> int:
    return 1 << (v.bit_length() - 1) if v > 0 else 0


def txn_partitions_hash_order(entries) -> list[tuple[str, int]]:
    """Partitions as TransactionMetadata.topicPartitions iterates them after
    TransactionLog.readTxnRecordValue: one `++=` per stored entry, each of `ids.toSet`."""
    s = _ScalaHashOrder()
    for topic, ids in entries:
        unique = list(dict.fromkeys(ids))
        s.size_hint(len(unique))
        # immutable.Set1..Set4 go through Growable.addAll (checked adds); larger sets are
        # immutable.HashSets, which mutable.HashSet.addAll inserts without a growth check.
        add = s.add if len(unique) <= 4 else s.add_unchecked
        for p in unique:
            add((topic, p), topic_partition_hashcode(topic, p))
    return s.ordered()


def group_members_hash_order(members: list[dict]) -> list[dict]:
    """Members as GroupMetadata.allMemberMetadata lists them after GroupMetadata.loadGroup
    (`members.put(memberId, member)` into a mutable.HashMap: a repeated id keeps its first
    place and takes the last value)."""
    s = _ScalaHashOrder()
    last: dict[str, dict] = {}
    for m in members:
        mid = m["member_id"]
        s.add(mid, java_string_hashcode(mid))
        last[mid] = m
    return [last[mid] for mid in s.ordered()]


def _hex(b: bytes) -> str:
    # GroupMetadataManager.hex: "%X".format(BigInt(1, bytes)) — no leading zeros, "" if empty.
    return "%X" % int.from_bytes(b, "big") if b else ""


def _json_string(s: str) -> str:
    """A JSON string as Jackson writes it: only '"', '\\' and control characters escaped,
    the latter short (\\b \\t \\n \\f \\r) or as uppercase \\u00XX."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif o < 0x20:
            short = {8: "b", 9: "t", 10: "n", 12: "f", 13: "r"}.get(o)
            out.append("\\" + short if short else "\\u%04X" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_txn_log_like_dump(d: dict) -> tuple[str, str]:
    """(key_text, payload_text) of a `__transaction_state` record, as in
    `key: transaction_metadata::transactionalId=X payload: producerId:...`."""
    if d["key_version"] != 0:
        raise DecodeError(f"Unknown version {d['key_version']} from the transaction log message")
    key_text = f"transaction_metadata::transactionalId={d['transactional_id']}"
    if d["tombstone"]:
        return key_text, DELETE
    if d["state"] is None:
        raise DecodeError(f"Unknown transaction state id {d['state_id']}")
    # readTxnRecordValue only adds the stored partitions when the state is not Empty.
    entries = (d["partition_entries"] or []) if d["state"] != "Empty" else []
    parts = ",".join(f"{t}-{p}" for t, p in txn_partitions_hash_order(entries))
    payload = (
        f"producerId:{d['producer_id']},producerEpoch:{d['producer_epoch']},"
        f"state={d['state']},partitions=[{parts}],"
        f"txnLastUpdateTimestamp={d['last_update_ms']},txnTimeoutMs={d['transaction_timeout_ms']}"
    )
    return key_text, payload


def _member_assignment_text(m: dict, protocol_type: str) -> str:
    mid = m["member_id"]
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return f"{mid}={_hex(m['assignment'])}"
    try:
        (_, partitions, user_data), _ = decode_consumer_assignment(m["assignment"], 0)
    except DecodeError as e:
        # ConsumerProtocol.deserializeAssignment throws here and Kafka 3.0's tool stops.
        raise DecodeError(f"member {mid}: assignment does not parse: {e.message}") from None
    # Java's List.toString of TopicPartitions: "[t-0, t-1]".
    text = f"{mid}=[{', '.join(f'{t}-{p}' for t, p in partitions)}]"
    hexed = _hex(user_data) if user_data is not None else ""
    return f"{text}:{hexed}" if hexed else text


def format_offsets_like_dump(kind: str, d: dict) -> tuple[str, str]:
    """(key_text, payload_text) of a `__consumer_offsets` record, as in
    `key: offset_commit::group=G,partition=T-P payload: offset=N` or
    `key: group_metadata::group=G payload: {"protocolType":...}`."""
    if kind == KIND_OFFSET_COMMIT:
        key_text = (
            f"offset_commit::group={d['group']},partition={d['commit_topic']}-"
            f"{d['commit_partition']}"
        )
        if d["tombstone"]:
            return key_text, DELETE
        payload = f"offset={d['committed_offset']}"
        if d["metadata"]:
            payload += f",metadata={d['metadata']}"
        return key_text, payload
    if kind == KIND_GROUP_METADATA:
        key_text = f"group_metadata::group={d['group']}"
        if d["tombstone"]:
            return key_text, DELETE
        protocol_type = d["protocol_type"] or ""
        assignment = ",".join(
            _member_assignment_text(m, protocol_type)
            for m in group_members_hash_order(d["member_list"])
        )
        protocol = "null" if d["protocol"] is None else _json_string(d["protocol"])
        # Json.encodeAsString of a 4-entry Scala Map: insertion order, no spaces.
        payload = (
            f'{{"protocolType":{_json_string(protocol_type)},"protocol":{protocol},'
            f'"generationId":{d["generation"]},'
            f'"assignment":{_json_string("{" + assignment + "}")}}}'
        )
        return key_text, payload
    raise DecodeError(f"Unknown group metadata message version: {d['key_version']}")


__all__ = [
    "DELETE", "format_offsets_like_dump", "format_txn_log_like_dump",
    "group_members_hash_order", "topic_partition_hashcode", "txn_partitions_hash_order",
]
