"""Coordinator records (`__transaction_state`, `__consumer_offsets`): golden bytes per version,
truncation at every position, fuzzing. Agreement with Kafka 3.0.2's DumpLogSegments text over the
corpus: test_coordinator_corpus.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaudit.protocol.coordinator import (
    DETAIL_KEYS,
    decode_consumer_assignment,
    decode_group_metadata_value,
    decode_offset_commit_value,
    decode_offsets_key,
    decode_offsets_record,
    decode_txn_log_key,
    decode_txn_log_record,
    decode_txn_log_value,
    row_fields,
)
from kaudit.protocol.coordinator_text import (
    format_offsets_like_dump,
    format_txn_log_like_dump,
    group_members_hash_order,
    txn_partitions_hash_order,
)
from kaudit.protocol.errors import DecodeError


def hx(*parts: str) -> bytes:
    return bytes.fromhex("".join(parts))


# ---------------------------------------------------------- golden bytes: __transaction_state

TXN_KEY_V0 = hx(
    "0000",                  # key version 0
    "0008",                  # transactional_id: int16 length 8
    "636b2d74786e2d31",      # "ck-txn-1"
)

# The real record at __transaction_state-1 offset 1 of real-kafka-3.0.2 node 1.
TXN_VALUE_V0 = hx(
    "0000",                  # value version 0
    "0000000000000005",      # ProducerId 5
    "0000",                  # ProducerEpoch 0
    "0000ea60",              # TransactionTimeoutMs 60000
    "01",                    # TransactionStatus 1 = Ongoing
    "00000002",              # TransactionPartitions: int32 count 2
    "0008636b2d74786e2d62",  #   Topic "ck-txn-b"
    "00000001",              #   PartitionIds: count 1
    "00000000",              #     0
    "0008636b2d74786e2d61",  #   Topic "ck-txn-a"
    "00000002",              #   PartitionIds: count 2
    "00000001",              #     1
    "00000000",              #     0
    "000001a1fc55a20f",      # TransactionLastUpdateTimestampMs 1795234832911
    "000001a1fc55a20f",      # TransactionStartTimestampMs 1795234832911
)

TXN_VALUE_V1 = hx(
    "0001",                  # value version 1 (flexible)
    "00000000000007d0",      # ProducerId 2000
    "0003",                  # ProducerEpoch 3
    "00001388",              # TransactionTimeoutMs 5000
    "03",                    # TransactionStatus 3 = PrepareAbort
    "02",                    # TransactionPartitions: compact count 1 (+1)
    "086b782d68616e67",      #   Topic: compact length 7 (+1) "kx-hang"
    "03",                    #   PartitionIds: compact count 2 (+1)
    "00000004",              #     4
    "00000000",              #     0
    "00",                    #   PartitionsSchema tagged fields: none
    "000001a1fc55a20f",      # TransactionLastUpdateTimestampMs 1795234832911
    "000001a1fc55a000",      # TransactionStartTimestampMs 1795234832384
    "04",                    # tagged fields: 4
    "0008" "0000000000000007",  # tag 0 PreviousProducerId, 8 bytes: 7
    "0108" "ffffffffffffffff",  # tag 1 NextProducerId, 8 bytes: -1
    "0202" "0002",              # tag 2 ClientTransactionVersion, 2 bytes: 2
    "0501" "ab",                # tag 5 (unknown to this reader), 1 byte, kept raw
)

TXN_VALUE_V1_NO_TAGS = hx(
    "0001",                  # value version 1
    "0000000000000009",      # ProducerId 9
    "0000",                  # ProducerEpoch 0
    "0000ea60",              # TransactionTimeoutMs 60000
    "00",                    # TransactionStatus 0 = Empty
    "01",                    # TransactionPartitions: compact count 0 (+1)
    "0000000000000064",      # TransactionLastUpdateTimestampMs 100
    "ffffffffffffffff",      # TransactionStartTimestampMs -1
    "00",                    # tagged fields: none -> spec defaults
)

# ---------------------------------------------------------- golden bytes: __consumer_offsets

OC_KEY_V1 = hx(
    "0001",                  # key version 1 = OffsetCommitKey
    "0003677270",            # group "grp"
    "000174",                # topic "t"
    "00000002",              # partition 2
)
OC_KEY_V0 = hx(
    "0000",                  # key version 0 = OffsetCommitKey
    "0003677270",            # group "grp"
    "000174",                # topic "t"
    "00000002",              # partition 2
)
GM_KEY_V2 = hx(
    "0002",                  # key version 2 = GroupMetadataKey
    "0003677270",            # group "grp"
)

OC_VALUE_V0 = hx(
    "0000",                  # value version 0
    "000000000000000c",      # offset 12
    "00026d64",              # metadata "md"
    "000001a1fc55a20f",      # timestamp 1795234832911
)
OC_VALUE_V1 = hx(
    "0001",                  # value version 1
    "000000000000000c",      # offset 12
    "0000",                  # metadata ""
    "000001a1fc55a20f",      # commit_timestamp 1795234832911
    "000001a2463e880f",      # expire_timestamp 1796474832911
)
OC_VALUE_V2 = hx(
    "0002",                  # value version 2
    "000000000000000c",      # offset 12
    "0000",                  # metadata ""
    "000001a1fc55a20f",      # commit_timestamp 1795234832911
)
OC_VALUE_V3 = hx(
    "0003",                  # value version 3
    "000000000000000c",      # offset 12
    "00000005",              # leader_epoch 5
    "0000",                  # metadata ""
    "000001a1fc55a20f",      # commit_timestamp 1795234832911
)
OC_VALUE_V4 = hx(
    "0004",                  # value version 4 (flexible)
    "000000000000000c",      # offset 12
    "ffffffff",              # leader_epoch -1 (none)
    "036d64",                # metadata: compact length 2 (+1) "md"
    "000001a1fc55a20f",      # commit_timestamp 1795234832911
    "00",                    # tagged fields: none
)

# ConsumerProtocolSubscription v0 (13 bytes): the group value carries it opaque.
SUBSCRIPTION = hx(
    "0000",                  # version 0
    "00000001",              # topics: count 1
    "000174",                #   "t"
    "ffffffff",              # user_data: null
)
# ConsumerProtocolAssignment v0 (25 bytes).
ASSIGNMENT = hx(
    "0000",                  # version 0
    "00000001",              # assigned_partitions: count 1
    "000174",                #   topic "t"
    "00000002",              #   partitions: count 2
    "00000000",              #     0
    "00000001",              #     1
    "ffffffff",              # user_data: null
)
# ConsumerProtocolAssignment v1 with user data (24 bytes).
ASSIGNMENT_UD = hx(
    "0001",                  # version 1
    "00000001",              # assigned_partitions: count 1
    "000174",                #   topic "t"
    "00000001",              #   partitions: count 1
    "00000003",              #     3
    "00000003",              # user_data: int32 length 3
    "000a0b",                #   bytes 00 0a 0b
)

GM_VALUE_V0 = hx(
    "0000",                  # value version 0
    "0008636f6e73756d6572",  # protocol_type "consumer"
    "00000001",              # generation 1
    "000572616e6765",        # protocol "range"
    "00026d31",              # leader "m1"
    "00000001",              # members: count 1
    "00026d31",              #   member_id "m1"
    "0003636964",            #   client_id "cid"
    "00022f68",              #   client_host "/h"
    "00002710",              #   session_timeout 10000
    "0000000d", SUBSCRIPTION.hex(),  # subscription: 13 bytes
    "00000019", ASSIGNMENT.hex(),    # assignment: 25 bytes
)
GM_VALUE_V1 = hx(
    "0001",                  # value version 1
    "0008636f6e73756d6572",  # protocol_type "consumer"
    "00000002",              # generation 2
    "000572616e6765",        # protocol "range"
    "00026d31",              # leader "m1"
    "00000001",              # members: count 1
    "00026d31",              #   member_id "m1"
    "0003636964",            #   client_id "cid"
    "00022f68",              #   client_host "/h"
    "0000ea60",              #   rebalance_timeout 60000
    "00002710",              #   session_timeout 10000
    "0000000d", SUBSCRIPTION.hex(),  # subscription: 13 bytes
    "00000018", ASSIGNMENT_UD.hex(), # assignment: 24 bytes
)
GM_VALUE_V2 = hx(
    "0002",                  # value version 2
    "0008636f6e73756d6572",  # protocol_type "consumer"
    "00000003",              # generation 3
    "ffff",                  # protocol null
    "ffff",                  # leader null
    "000001a1fc55a20f",      # current_state_timestamp 1795234832911
    "00000000",              # members: count 0
)
GM_VALUE_V3 = hx(
    "0003",                  # value version 3
    "0008636f6e73756d6572",  # protocol_type "consumer"
    "00000004",              # generation 4
    "000572616e6765",        # protocol "range"
    "00026d31",              # leader "m1"
    "ffffffffffffffff",      # current_state_timestamp -1
    "00000001",              # members: count 1
    "00026d31",              #   member_id "m1"
    "00026931",              #   group_instance_id "i1"
    "0003636964",            #   client_id "cid"
    "00022f68",              #   client_host "/h"
    "0000ea60",              #   rebalance_timeout 60000
    "00002710",              #   session_timeout 10000
    "0000000d", SUBSCRIPTION.hex(),  # subscription: 13 bytes
    "00000019", ASSIGNMENT.hex(),    # assignment: 25 bytes
)
GM_VALUE_V4 = hx(
    "0004",                  # value version 4 (flexible)
    "09636f6e73756d6572",    # protocol_type: compact length 8 (+1) "consumer"
    "00000005",              # generation 5
    "0672616e6765",          # protocol: compact "range"
    "00",                    # leader: compact null
    "000001a1fc55a20f",      # current_state_timestamp 1795234832911
    "03",                    # members: compact count 2 (+1)
    "036d32",                #   member_id "m2"
    "00",                    #   group_instance_id null
    "04636964",              #   client_id "cid"
    "032f68",                #   client_host "/h"
    "0000ea60",              #   rebalance_timeout 60000
    "00002710",              #   session_timeout 10000
    "0e", SUBSCRIPTION.hex(),        #   subscription: compact 13 (+1) bytes
    "19", ASSIGNMENT_UD.hex(),       #   assignment: compact 24 (+1) bytes
    "00",                    #   member tagged fields: none
    "036d31",                #   member_id "m1"
    "00",                    #   group_instance_id null
    "04636964",              #   client_id "cid"
    "032f68",                #   client_host "/h"
    "0000ea60",              #   rebalance_timeout 60000
    "00002710",              #   session_timeout 10000
    "0e", SUBSCRIPTION.hex(),        #   subscription
    "1a", ASSIGNMENT.hex(),          #   assignment: compact 25 (+1) bytes
    "00",                    #   member tagged fields: none
    "00",                    # tagged fields: none
)

# The real group record at __consumer_offsets-0 offset 0 of real-kafka-3.0.2 node 1.
REAL_GM_KEY = bytes.fromhex("0002000c636b2d6374702d67726f7570")
REAL_GM_VALUE = bytes.fromhex(
    "00030008636f6e73756d657200000001000572616e67650034636b2d6374702d636f6e73756d65722d3735"
    "3465376564662d336533652d346531352d613065382d303764643866633831313133000001a1fc55f08c0000"
    "00010034636b2d6374702d636f6e73756d65722d37353465376564662d336533652d346531352d613065382d"
    "303764643866633831313133ffff000f636b2d6374702d636f6e73756d6572000a2f3132372e302e302e3100"
    "0493e00000afc80000001f0003000000010009636b2d6374702d696e0000000000000000ffffffff00000000"
    "00210000000000010009636b2d6374702d696e00000002000000000000000100000000"
)

# ------------------------------------------------------------------ decoding goldens


def test_txn_key_v0():
    assert decode_txn_log_key(TXN_KEY_V0) == ((0, "ck-txn-1"), len(TXN_KEY_V0))


def test_txn_value_v0_real_record():
    d = decode_txn_log_record(TXN_KEY_V0, TXN_VALUE_V0)
    assert row_fields(d) == {
        "key_version": 0, "transactional_id": "ck-txn-1", "value_version": 0,
        "tombstone": False, "producer_id": 5, "producer_epoch": 0,
        "previous_producer_id": None, "next_producer_id": None,
        "client_transaction_version": None, "transaction_timeout_ms": 60000,
        "state": "Ongoing", "state_id": 1,
        "partitions": "ck-txn-b-0,ck-txn-a-1,ck-txn-a-0",  # stored order
        "last_update_ms": 1795234832911, "start_ms": 1795234832911,
    }
    # Kafka's own text for this record (DumpLogSegments 3.0.2): hash-set order, not stored order.
    assert format_txn_log_like_dump(d) == (
        "transaction_metadata::transactionalId=ck-txn-1",
        "producerId:5,producerEpoch:0,state=Ongoing,partitions=[ck-txn-a-1,ck-txn-a-0,ck-txn-b-0],"
        "txnLastUpdateTimestamp=1795234832911,txnTimeoutMs=60000",
    )


def test_txn_value_v1_tagged_fields():
    d, end = decode_txn_log_value(TXN_VALUE_V1)
    assert end == len(TXN_VALUE_V1)
    assert d["value_version"] == 1 and d["state"] == "PrepareAbort" and d["state_id"] == 3
    assert (d["producer_id"], d["producer_epoch"], d["transaction_timeout_ms"]) == (2000, 3, 5000)
    assert d["previous_producer_id"] == 7
    assert d["next_producer_id"] == -1
    assert d["client_transaction_version"] == 2
    assert d["partitions"] == "kx-hang-4,kx-hang-0"
    assert d["partition_entries"] == [("kx-hang", [4, 0])]
    assert (d["last_update_ms"], d["start_ms"]) == (1795234832911, 1795234832384)
    assert d["tagged_fields"] == {5: b"\xab"}


def test_txn_value_v1_defaults_and_empty_state():
    d = decode_txn_log_record(TXN_KEY_V0, TXN_VALUE_V1_NO_TAGS)
    assert (d["previous_producer_id"], d["next_producer_id"], d["client_transaction_version"]) == (
        -1, -1, 0)
    assert d["state"] == "Empty" and d["partitions"] == "" and d["start_ms"] == -1
    assert format_txn_log_like_dump(d)[1] == (
        "producerId:9,producerEpoch:0,state=Empty,partitions=[],txnLastUpdateTimestamp=100,"
        "txnTimeoutMs=60000")


def test_txn_tombstone_and_unknown_key_version():
    d = decode_txn_log_record(TXN_KEY_V0, None)
    assert d["tombstone"] is True and d["transactional_id"] == "ck-txn-1"
    assert d["producer_id"] is None and d["state"] is None
    assert format_txn_log_like_dump(d) == (
        "transaction_metadata::transactionalId=ck-txn-1", "<DELETE>")
    d = decode_txn_log_record(hx("0001", "0003616263"), b"\x00\x00whatever")
    assert d["key_version"] == 1 and d["transactional_id"] is None and d["tombstone"] is False
    with pytest.raises(DecodeError):
        format_txn_log_like_dump(d)


def test_txn_empty_state_hides_stored_partitions():
    # readTxnRecordValue only adds partitions when the state is not Empty.
    d = decode_txn_log_record(TXN_KEY_V0, TXN_VALUE_V0[:16] + b"\x00" + TXN_VALUE_V0[17:])
    assert d["state"] == "Empty" and d["partitions"] == "ck-txn-b-0,ck-txn-a-1,ck-txn-a-0"
    assert "partitions=[]" in format_txn_log_like_dump(d)[1]


def test_txn_unknown_state_is_kept_not_fatal():
    d = decode_txn_log_record(TXN_KEY_V0, TXN_VALUE_V0[:16] + b"\x09" + TXN_VALUE_V0[17:])
    assert d["state"] is None and d["state_id"] == 9
    with pytest.raises(DecodeError):
        format_txn_log_like_dump(d)


def test_txn_tag_with_wrong_width_is_an_error():
    bad = TXN_VALUE_V1_NO_TAGS[:-1] + hx("01", "0004", "00000001")  # tag 0 with 4 bytes
    with pytest.raises(DecodeError):
        decode_txn_log_value(bad)


def test_offsets_keys():
    assert decode_offsets_key(OC_KEY_V1)[0] == {
        "kind": "offset_commit", "key_version": 1, "group": "grp", "topic": "t", "partition": 2}
    assert decode_offsets_key(OC_KEY_V0)[0]["key_version"] == 0
    assert decode_offsets_key(GM_KEY_V2)[0] == {
        "kind": "group_metadata", "key_version": 2, "group": "grp", "topic": None,
        "partition": None}


@pytest.mark.parametrize(
    "value, version, leader_epoch, metadata, expire",
    [
        (OC_VALUE_V0, 0, None, "md", None),
        (OC_VALUE_V1, 1, None, "", 1796474832911),
        (OC_VALUE_V2, 2, None, "", None),
        (OC_VALUE_V3, 3, 5, "", None),
        (OC_VALUE_V4, 4, -1, "md", None),
    ],
)
def test_offset_commit_values(value, version, leader_epoch, metadata, expire):
    kind, d = decode_offsets_record(OC_KEY_V1, value)
    assert kind == "offset_commit"
    assert row_fields(d) == {
        "key_version": 1, "group": "grp", "commit_topic": "t", "commit_partition": 2,
        "tombstone": False, "value_version": version, "committed_offset": 12,
        "committed_leader_epoch": leader_epoch, "metadata": metadata,
        "commit_timestamp_ms": 1795234832911, "expire_timestamp_ms": expire,
    }
    key_text, payload = format_offsets_like_dump(kind, d)
    assert key_text == "offset_commit::group=grp,partition=t-2"
    assert payload == ("offset=12,metadata=md" if metadata else "offset=12")


def test_offset_commit_tombstone():
    kind, d = decode_offsets_record(OC_KEY_V0, None)
    assert kind == "offset_commit" and d["tombstone"] is True and d["committed_offset"] is None
    assert format_offsets_like_dump(kind, d) == (
        "offset_commit::group=grp,partition=t-2", "<DELETE>")


def test_group_metadata_v0():
    kind, d = decode_offsets_record(GM_KEY_V2, GM_VALUE_V0)
    assert kind == "group_metadata"
    assert row_fields(d) == {
        "key_version": 2, "group": "grp", "tombstone": False, "value_version": 0,
        "protocol_type": "consumer", "generation": 1, "protocol": "range", "leader": "m1",
        "current_state_timestamp_ms": None, "member_count": 1, "members": "m1",
    }
    assert d["member_list"] == [{
        "member_id": "m1", "group_instance_id": None, "client_id": "cid", "client_host": "/h",
        "rebalance_timeout_ms": None, "session_timeout_ms": 10000,
        "subscription": SUBSCRIPTION, "assignment": ASSIGNMENT,
    }]
    assert format_offsets_like_dump(kind, d) == (
        "group_metadata::group=grp",
        '{"protocolType":"consumer","protocol":"range","generationId":1,'
        '"assignment":"{m1=[t-0, t-1]}"}',
    )


def test_group_metadata_v1_user_data_hex():
    kind, d = decode_offsets_record(GM_KEY_V2, GM_VALUE_V1)
    assert d["member_list"][0]["rebalance_timeout_ms"] == 60000
    # "%X".format(BigInt(1, bytes)): the leading zero byte and nibble vanish.
    assert '"assignment":"{m1=[t-3]:A0B}"' in format_offsets_like_dump(kind, d)[1]


def test_group_metadata_v2_empty_group():
    kind, d = decode_offsets_record(GM_KEY_V2, GM_VALUE_V2)
    assert (d["protocol"], d["leader"], d["current_state_timestamp_ms"]) == (
        None, None, 1795234832911)
    assert (d["member_count"], d["members"]) == (0, "")
    assert format_offsets_like_dump(kind, d)[1] == (
        '{"protocolType":"consumer","protocol":null,"generationId":3,"assignment":"{}"}')


def test_group_metadata_v3_instance_id():
    _, d = decode_offsets_record(GM_KEY_V2, GM_VALUE_V3)
    assert d["current_state_timestamp_ms"] == -1
    assert d["member_list"][0]["group_instance_id"] == "i1"


def test_group_metadata_v4_flexible():
    kind, d = decode_offsets_record(GM_KEY_V2, GM_VALUE_V4)
    assert (d["value_version"], d["generation"], d["leader"]) == (4, 5, None)
    assert (d["member_count"], d["members"]) == (2, "m2,m1")  # row: stored order
    # Text: HashMap order ("m1" hashes to bucket 4, "m2" to bucket 5).
    assert format_offsets_like_dump(kind, d)[1] == (
        '{"protocolType":"consumer","protocol":"range","generationId":5,'
        '"assignment":"{m1=[t-0, t-1],m2=[t-3]:A0B}"}')


def test_group_metadata_real_record():
    kind, d = decode_offsets_record(REAL_GM_KEY, REAL_GM_VALUE)
    assert d["member_list"][0]["rebalance_timeout_ms"] == 300000
    assert d["member_list"][0]["session_timeout_ms"] == 45000
    assert format_offsets_like_dump(kind, d) == (
        "group_metadata::group=ck-ctp-group",
        '{"protocolType":"consumer","protocol":"range","generationId":1,"assignment":'
        '"{ck-ctp-consumer-754e7edf-3e3e-4e15-a0e8-07dd8fc81113=[ck-ctp-in-0, ck-ctp-in-1]}"}',
    )


def test_group_metadata_non_consumer_protocol_and_json_escapes():
    _, d = decode_offsets_record(GM_KEY_V2, GM_VALUE_V0)
    d = dict(d, protocol_type="connect", protocol='a"b\\c\n\x01é')
    assert format_offsets_like_dump("group_metadata", d)[1] == (
        '{"protocolType":"connect","protocol":"a\\"b\\\\c\\n\\u0001é","generationId":1,'
        '"assignment":"{m1=' + ASSIGNMENT.hex().upper().lstrip("0") + '}"}')


def test_group_metadata_unparsable_assignment_is_reported():
    _, d = decode_offsets_record(GM_KEY_V2, GM_VALUE_V0)
    d["member_list"][0]["assignment"] = b""  # what a member missing from the leader's plan gets
    with pytest.raises(DecodeError):
        format_offsets_like_dump("group_metadata", d)


def test_group_tombstone_and_unknown_record_types():
    kind, d = decode_offsets_record(GM_KEY_V2, None)
    assert kind == "group_metadata" and d["tombstone"] and d["member_count"] is None
    assert format_offsets_like_dump(kind, d) == ("group_metadata::group=grp", "<DELETE>")
    # Key version 3 = a newer coordinator's record (ConsumerGroupMetadataKey: group id).
    kind, d = decode_offsets_record(hx("0003", "0003677270"), hx("0000", "00000001", "00"))
    assert kind == "unknown"
    assert d == {"key_version": 3, "group": "grp", "tombstone": False, "value_version": 0,
                 "record_type": "unknown-3"}
    kind, d = decode_offsets_record(hx("0011", "ff"), None)
    assert kind == "unknown" and d["group"] is None and d["tombstone"] is True
    with pytest.raises(DecodeError):
        format_offsets_like_dump(kind, d)


def test_consumer_assignment():
    assert decode_consumer_assignment(ASSIGNMENT) == ((0, [("t", 0), ("t", 1)], None), 25)
    assert decode_consumer_assignment(ASSIGNMENT_UD)[0] == (1, [("t", 3)], b"\x00\x0a\x0b")
    with pytest.raises(DecodeError):
        decode_consumer_assignment(hx("ffff", "00000000", "ffffffff"))  # negative version


def test_detail_keys_are_outside_the_row_model():
    model = pytest.importorskip("kaudit.model")
    for kind, key, value in [("offset_commit", OC_KEY_V1, OC_VALUE_V4),
                             ("group_metadata", GM_KEY_V2, GM_VALUE_V4)]:
        got_kind, d = decode_offsets_record(key, value)
        assert got_kind == kind
        assert set(row_fields(d)) <= set(model.SCHEMAS[kind].names)
        assert not DETAIL_KEYS & set(model.SCHEMAS[kind].names)
    assert set(row_fields(decode_txn_log_record(TXN_KEY_V0, TXN_VALUE_V1))) <= set(
        model.TXN_LOG.names)


# ------------------------------------------------------------------ Scala hash order


def test_txn_partition_order_real_case():
    # From the corpus: stored [ck-txn-b-0, ck-txn-a-1, ck-txn-a-0] prints in this order.
    assert txn_partitions_hash_order([("ck-txn-b", [0]), ("ck-txn-a", [1, 0])]) == [
        ("ck-txn-a", 1), ("ck-txn-a", 0), ("ck-txn-b", 0)]


def test_hash_order_dedupes_and_keeps_everything():
    entries = [("t", list(range(30))), ("t", [3, 3]), ("u", [1])]
    got = txn_partitions_hash_order(entries)
    assert sorted(got) == sorted({("t", p) for p in range(30)} | {("u", 1)})
    members = [{"member_id": f"m{i}", "v": i} for i in (2, 1, 2)]
    assert [(m["member_id"], m["v"]) for m in group_members_hash_order(members)] == [
        ("m1", 1), ("m2", 2)]


# ------------------------------------------------------------------ truncation and fuzz

GOLDENS = [
    ("txn_key_v0", decode_txn_log_key, TXN_KEY_V0),
    ("txn_value_v0", decode_txn_log_value, TXN_VALUE_V0),
    ("txn_value_v1", decode_txn_log_value, TXN_VALUE_V1),
    ("txn_value_v1_no_tags", decode_txn_log_value, TXN_VALUE_V1_NO_TAGS),
    ("oc_key_v0", decode_offsets_key, OC_KEY_V0),
    ("oc_key_v1", decode_offsets_key, OC_KEY_V1),
    ("gm_key_v2", decode_offsets_key, GM_KEY_V2),
    ("oc_value_v0", decode_offset_commit_value, OC_VALUE_V0),
    ("oc_value_v1", decode_offset_commit_value, OC_VALUE_V1),
    ("oc_value_v2", decode_offset_commit_value, OC_VALUE_V2),
    ("oc_value_v3", decode_offset_commit_value, OC_VALUE_V3),
    ("oc_value_v4", decode_offset_commit_value, OC_VALUE_V4),
    ("gm_value_v0", decode_group_metadata_value, GM_VALUE_V0),
    ("gm_value_v1", decode_group_metadata_value, GM_VALUE_V1),
    ("gm_value_v2", decode_group_metadata_value, GM_VALUE_V2),
    ("gm_value_v3", decode_group_metadata_value, GM_VALUE_V3),
    ("gm_value_v4", decode_group_metadata_value, GM_VALUE_V4),
    ("gm_value_real", decode_group_metadata_value, REAL_GM_VALUE),
    ("assignment_v0", decode_consumer_assignment, ASSIGNMENT),
    ("assignment_v1", decode_consumer_assignment, ASSIGNMENT_UD),
]


@pytest.mark.parametrize("name, decoder, data", GOLDENS, ids=[g[0] for g in GOLDENS])
def test_truncated_at_every_position(name, decoder, data):
    assert decoder(data)[1] == len(data)
    # From an offset inside a bigger buffer too: positions are absolute.
    assert decoder(b"\xee" * 3 + data, 3)[1] == len(data) + 3
    for cut in range(len(data)):
        with pytest.raises(DecodeError) as info:
            decoder(memoryview(data)[:cut])
        assert 0 <= info.value.position <= cut, (name, cut, info.value.position)


@pytest.mark.parametrize("key, value", [
    (TXN_KEY_V0, TXN_VALUE_V0), (TXN_KEY_V0, TXN_VALUE_V1)])
def test_txn_record_truncated(key, value):
    for cut in range(len(key)):
        with pytest.raises(DecodeError):
            decode_txn_log_record(key[:cut], value)
    for cut in range(len(value)):
        with pytest.raises(DecodeError):
            decode_txn_log_record(key, value[:cut])


def _exercise_txn(key: bytes, value: bytes | None) -> None:
    try:
        d = decode_txn_log_record(key, value)
    except DecodeError:
        return
    try:
        k, p = format_txn_log_like_dump(d)
        assert isinstance(k, str) and isinstance(p, str)
    except DecodeError:
        pass


def _exercise_offsets(key: bytes, value: bytes | None) -> None:
    try:
        kind, d = decode_offsets_record(key, value)
    except DecodeError:
        return
    assert kind in ("offset_commit", "group_metadata", "unknown")
    try:
        k, p = format_offsets_like_dump(kind, d)
        assert isinstance(k, str) and isinstance(p, str)
    except DecodeError:
        pass


_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=200)))
def test_fuzz_random_bytes(key, value):
    _exercise_txn(key, value)
    _exercise_offsets(key, value)
    for _, decoder, _ in GOLDENS:
        try:
            _, end = decoder(value or b"")
            assert end <= len(value or b"")
        except DecodeError:
            pass


_PAIRS = [
    ("txn", TXN_KEY_V0, TXN_VALUE_V0), ("txn", TXN_KEY_V0, TXN_VALUE_V1),
    ("off", OC_KEY_V1, OC_VALUE_V3), ("off", OC_KEY_V1, OC_VALUE_V4),
    ("off", GM_KEY_V2, GM_VALUE_V3), ("off", GM_KEY_V2, GM_VALUE_V4),
    ("off", REAL_GM_KEY, REAL_GM_VALUE),
]


@_FUZZ
@given(st.sampled_from(_PAIRS), st.data())
def test_fuzz_mutated_goldens(pair, data):
    """Overwrite a few bytes of a valid record: lengths and counts then lie."""
    which, key, value = pair
    buf = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    exercise = _exercise_txn if which == "txn" else _exercise_offsets
    exercise(key, bytes(buf[:cut]))
    exercise(key, bytes(buf))
