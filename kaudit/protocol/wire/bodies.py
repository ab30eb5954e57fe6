"""Message bodies by (api_key, api_version), sans-IO.

Which decoder: kio's schema (walked by `kio_bodies`) for the versions kio carries, the
hand-written `legacy` specs for the older versions kio dropped. Only the APIs in `FULLY_DECODED`
get a body; every other api key stays opaque (header, size and timing only). Record sets
(Produce requests, Fetch responses) become `RecordSet`s decoded with the record layer; SASL bytes
are redacted before they are returned.
"""

from __future__ import annotations

from functools import lru_cache

from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire import apis
from kaudit.protocol.wire.kio_bodies import decode_kio, has_kio
from kaudit.protocol.wire.legacy import decode_hand, has_hand
from kaudit.protocol.wire.records import decode_record_set
from kaudit.protocol.wire.sasl import redact_sasl_bytes

FULLY_DECODED = frozenset({
    apis.PRODUCE, apis.FETCH, apis.LIST_OFFSETS, apis.METADATA, apis.OFFSET_COMMIT,
    apis.OFFSET_FETCH, apis.FIND_COORDINATOR, apis.INIT_PRODUCER_ID, apis.ADD_PARTITIONS_TO_TXN,
    apis.ADD_OFFSETS_TO_TXN, apis.END_TXN, apis.WRITE_TXN_MARKERS, apis.TXN_OFFSET_COMMIT,
    apis.DESCRIBE_PRODUCERS, apis.DESCRIBE_TRANSACTIONS, apis.LIST_TRANSACTIONS,
    apis.API_VERSIONS, apis.SASL_HANDSHAKE, apis.SASL_AUTHENTICATE,
    # a topic-id response the rows are named from, and KIP-848's group heartbeat
    apis.DESCRIBE_TOPIC_PARTITIONS, apis.CONSUMER_GROUP_HEARTBEAT,
})

# Decoded where kio knows the version, opaque (not an error) where it does not: CreateTopics names
# topic ids from v7 on; its versions 0-1, removed in Kafka 4.0, carry none. The classic group
# protocol's membership APIs feed the consumers' timelines (protocol/wire/group_events.py).
DECODED_WHEN_KNOWN = frozenset({apis.CREATE_TOPICS, 11, 12, 13, 14})   # JoinGroup, Heartbeat, LeaveGroup, SyncGroup

KIO, HAND, OPAQUE = "kio", "hand", "opaque"


@lru_cache(maxsize=4096)
def body_decoder(api_key: int, api_version: int, entity: str) -> str:
    """"kio", "hand" or "opaque": who decodes this body (`entity`: "request" | "response")."""
    if api_key not in FULLY_DECODED and api_key not in DECODED_WHEN_KNOWN:
        return OPAQUE
    if has_hand(api_key, api_version, entity):
        return HAND
    if has_kio(api_key, api_version, entity):
        return KIO
    return OPAQUE


class UnsupportedVersion(DecodeError):
    """A fully decoded API at a version no decoder knows (newer than kio's schemas)."""

    kind = "unsupported"


def decode_body(api_key: int, api_version: int, entity: str, buf, offset: int,
                end: int | None = None, *, deep: bool = False,
                max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """The body between `offset` and `end` (default: the end of `buf`) -> (body, new_offset).

    body: a dict (see `kio_bodies` for the field names), or None for an opaque body (then
    new_offset = end). Raises DecodeError subclasses only: Truncated when the bytes end early,
    UnsupportedVersion for an unknown version of a decoded API. Bytes left after a decoded
    body are not an error here (`decode_request` reports them)."""
    body, off, _ = decode_body_with(api_key, api_version, entity, buf, offset, end, deep=deep,
                                    max_batch_bytes=max_batch_bytes)
    return body, off


def decode_body_with(api_key: int, api_version: int, entity: str, buf, offset: int,
                     end: int | None = None, *, deep: bool = False,
                     max_batch_bytes: int = DEFAULT_MAX_BYTES):
    """`decode_body`, also returning which decoder did it: (body, new_offset, decoder) with
    decoder "kio" (kio's schema), "hand" or "opaque"."""
    if end is None:
        end = len(buf)
    if not 0 <= offset <= end <= len(buf):
        raise DecodeError(f"body bounds {offset}..{end} outside the buffer", offset)
    how = body_decoder(api_key, api_version, entity)
    if how == OPAQUE:
        if api_key in FULLY_DECODED:
            top = apis.max_version(api_key)
            newer = (f"newer than kaudit knows (it decodes up to v{top}, Kafka 4.2's message specs); "
                     "its header was read, its body was not" if api_version > top else "no decoder for this version")
            raise UnsupportedVersion(f"{apis.api_name(api_key)} v{api_version} {entity}: {newer}", offset)
        return None, end, OPAQUE
    if how == HAND:
        body, off = decode_hand(api_key, api_version, entity, buf, offset, end)
    else:
        body, off = decode_kio(api_key, api_version, entity, buf, offset, end)
    post_process(api_key, entity, body, deep, max_batch_bytes)
    return body, off, how


def post_process(api_key: int, entity: str, body: dict, deep: bool, max_batch_bytes: int) -> None:
    """Record sets decoded in place; SASL bytes redacted in place."""
    if api_key == apis.PRODUCE and entity == "request":
        for topic in body.get("topic_data") or ():
            for part in topic.get("partition_data") or ():
                part["records"] = decode_record_set(part.get("records"), tail_may_be_cut=False,
                                                    deep=deep, max_batch_bytes=max_batch_bytes)
    elif api_key == apis.FETCH and entity == "request" and "replica_id" not in body:
        # Fetch v15+ (KIP-903): the follower's id is in the tagged ReplicaState, -1 (a consumer)
        # where the request has none - what Kafka's FetchRequest.replicaId() reads
        body["replica_id"] = (body.get("replica_state") or {}).get("replica_id", -1)
    elif api_key == apis.FETCH and entity == "response":
        for topic in body.get("responses") or ():
            for part in topic.get("partitions") or ():
                part["records"] = decode_record_set(part.get("records"), tail_may_be_cut=True,
                                                    deep=deep, max_batch_bytes=max_batch_bytes)
    elif api_key == apis.SASL_AUTHENTICATE and "auth_bytes" in body:
        body["auth_bytes"], body["sasl"] = redact_sasl_bytes(body["auth_bytes"])
