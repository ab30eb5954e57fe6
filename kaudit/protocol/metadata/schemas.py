"""The KRaft metadata records as data, transcribed from Apache Kafka's JSON message specs
(`metadata/src/main/resources/common/metadata/*.json`, and `clients/.../common/message/` for the
KRaft control records; apache/kafka @ 1eb7644, Oct 2024): a record's api key, valid versions,
flexible versions and fields, each field with the versions it exists in, its tag (tagged fields),
the versions it may be null in and its default. The decoder (decode.py) reads nothing else:
a version gate is a line of data here, as in franz-go's kmsg.

Field: (name, type, versions, options) with options `tag`, `nullable` (versions), `default`,
`fields` (a struct's or a struct array's fields). Types: int8 int16 int32 int64 uint16 bool
uuid string, `[]T` arrays, `{}` a single struct (its `fields`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    versions: str = "0+"
    tag: int | None = None
    nullable: str | None = None
    default: object = None
    fields: tuple = ()
    alias: str | None = None   # the name an older Kafka's dump printed (3.0: producerIdsEnd)


@dataclass(frozen=True)
class Message:
    api_key: int | None       # metadata records; None for control records (typed by their key)
    name: str                 # Kafka's class name (PartitionChangeRecord)
    dump_type: str            # MetadataRecordType as kafka-dump-log prints it (PARTITION_CHANGE_RECORD)
    valid: tuple[int, int]
    flexible: str = "0+"
    fields: tuple = field(default_factory=tuple)


def F(name, type, versions="0+", **kw) -> Field:
    if "fields" in kw:
        kw["fields"] = tuple(kw["fields"])
    return Field(name, type, versions, **kw)


def in_versions(spec: str | None, v: int) -> bool:
    """Kafka's version range syntax: "0+", "1-3", "2", "none"."""
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return v >= int(spec[:-1])
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo) <= v <= int(hi)
    return v == int(spec)


_ENDPOINT = (F("Name", "string"), F("Host", "string"), F("Port", "uint16"), F("SecurityProtocol", "int16"))
_FEATURE = (F("Name", "string"), F("MinSupportedVersion", "int16"), F("MaxSupportedVersion", "int16"))
_IDS = dict(nullable="0+", default=None)

METADATA: tuple[Message, ...] = (
    Message(0, "RegisterBrokerRecord", "REGISTER_BROKER_RECORD", (0, 3), fields=(
        F("BrokerId", "int32"),
        F("IsMigratingZkBroker", "bool", "2+", default=False),
        F("IncarnationId", "uuid"),
        F("BrokerEpoch", "int64"),
        F("EndPoints", "[]BrokerEndpoint", fields=_ENDPOINT),
        F("Features", "[]BrokerFeature", fields=_FEATURE),
        F("Rack", "string", nullable="0+"),
        F("Fenced", "bool", default=True),
        F("InControlledShutdown", "bool", "1+", default=False),
        F("LogDirs", "[]uuid", "3+", tag=0, default=()),
    )),
    Message(1, "UnregisterBrokerRecord", "UNREGISTER_BROKER_RECORD", (0, 0), fields=(
        F("BrokerId", "int32"), F("BrokerEpoch", "int64"))),
    Message(2, "TopicRecord", "TOPIC_RECORD", (0, 0), fields=(
        F("Name", "string"), F("TopicId", "uuid"))),
    Message(3, "PartitionRecord", "PARTITION_RECORD", (0, 2), fields=(
        F("PartitionId", "int32", default=-1),
        F("TopicId", "uuid"),
        F("Replicas", "[]int32"),
        F("Isr", "[]int32"),
        F("RemovingReplicas", "[]int32"),
        F("AddingReplicas", "[]int32"),
        F("Leader", "int32", default=-1),
        F("LeaderRecoveryState", "int8", tag=0, default=0),
        F("LeaderEpoch", "int32", default=-1),
        F("PartitionEpoch", "int32", default=-1),
        F("Directories", "[]uuid", "1+"),
        F("EligibleLeaderReplicas", "[]int32", "2+", tag=1, nullable="2+"),
        F("LastKnownElr", "[]int32", "2+", tag=2, nullable="2+"),
    )),
    Message(4, "ConfigRecord", "CONFIG_RECORD", (0, 0), fields=(
        F("ResourceType", "int8"), F("ResourceName", "string"), F("Name", "string"),
        F("Value", "string", nullable="0+"))),
    Message(5, "PartitionChangeRecord", "PARTITION_CHANGE_RECORD", (0, 2), fields=(
        F("PartitionId", "int32", default=-1),
        F("TopicId", "uuid"),
        # tagged and null (the default) when the change leaves it as it was
        F("Isr", "[]int32", tag=0, **_IDS),
        F("Leader", "int32", tag=1, default=-2),   # -1: no leader now; -2: unchanged
        F("Replicas", "[]int32", tag=2, **_IDS),
        F("RemovingReplicas", "[]int32", tag=3, **_IDS),
        F("AddingReplicas", "[]int32", tag=4, **_IDS),
        F("LeaderRecoveryState", "int8", tag=5, default=-1),   # -1 unchanged, 0 recovered, 1 RECOVERING
        F("Directories", "[]uuid", "1+", tag=8, nullable="1+"),
        F("EligibleLeaderReplicas", "[]int32", "2+", tag=6, nullable="2+"),
        F("LastKnownElr", "[]int32", "2+", tag=7, nullable="2+"),
    )),
    Message(18, "AccessControlEntryRecord", "ACCESS_CONTROL_ENTRY_RECORD", (0, 0), fields=(
        F("Id", "uuid"), F("ResourceType", "int8"), F("ResourceName", "string"),
        F("PatternType", "int8"), F("Principal", "string"), F("Host", "string"),
        F("Operation", "int8"), F("PermissionType", "int8"))),
    Message(7, "FenceBrokerRecord", "FENCE_BROKER_RECORD", (0, 0), fields=(
        F("Id", "int32"), F("Epoch", "int64"))),
    Message(8, "UnfenceBrokerRecord", "UNFENCE_BROKER_RECORD", (0, 0), fields=(
        F("Id", "int32"), F("Epoch", "int64"))),
    Message(9, "RemoveTopicRecord", "REMOVE_TOPIC_RECORD", (0, 0), fields=(F("TopicId", "uuid"),)),
    Message(10, "DelegationTokenRecord", "DELEGATION_TOKEN_RECORD", (0, 0), fields=()),   # not modelled
    Message(11, "UserScramCredentialRecord", "USER_SCRAM_CREDENTIAL_RECORD", (0, 0), fields=()),  # secrets: never decoded
    Message(12, "FeatureLevelRecord", "FEATURE_LEVEL_RECORD", (0, 0), fields=(
        F("Name", "string"), F("FeatureLevel", "int16"))),
    Message(14, "ClientQuotaRecord", "CLIENT_QUOTA_RECORD", (0, 0), fields=(
        F("Entity", "[]EntityData", fields=(F("EntityType", "string"), F("EntityName", "string", nullable="0+"))),
        F("Key", "string"), F("Value", "float64"), F("Remove", "bool"))),
    Message(15, "ProducerIdsRecord", "PRODUCER_IDS_RECORD", (0, 0), fields=(
        F("BrokerId", "int32"), F("BrokerEpoch", "int64", default=-1),
        F("NextProducerId", "int64", alias="producerIdsEnd"))),
    Message(17, "BrokerRegistrationChangeRecord", "BROKER_REGISTRATION_CHANGE_RECORD", (0, 2), fields=(
        F("BrokerId", "int32"), F("BrokerEpoch", "int64"),
        F("Fenced", "int8", tag=0, default=0),                      # 1 fenced, -1 unfenced, 0 unchanged
        F("InControlledShutdown", "int8", "1+", tag=1, default=0),  # 1 in controlled shutdown
        F("LogDirs", "[]uuid", "2+", tag=2, default=()))),
    Message(22, "RemoveUserScramCredentialRecord", "REMOVE_USER_SCRAM_CREDENTIAL_RECORD", (0, 0), fields=()),
    Message(20, "NoOpRecord", "NO_OP_RECORD", (0, 0), fields=()),
    Message(21, "ZkMigrationStateRecord", "ZK_MIGRATION_STATE_RECORD", (0, 0), fields=(F("ZkMigrationState", "int8"),)),
    Message(19, "RemoveAccessControlEntryRecord", "REMOVE_ACCESS_CONTROL_ENTRY_RECORD", (0, 0), fields=(F("Id", "uuid"),)),
    Message(23, "BeginTransactionRecord", "BEGIN_TRANSACTION_RECORD", (0, 0), fields=(
        F("Name", "string", tag=0, nullable="0+"),)),
    Message(24, "EndTransactionRecord", "END_TRANSACTION_RECORD", (0, 0), fields=()),
    Message(25, "AbortTransactionRecord", "ABORT_TRANSACTION_RECORD", (0, 0), fields=(
        F("Reason", "string", tag=0, nullable="0+"),)),
    Message(26, "RemoveDelegationTokenRecord", "REMOVE_DELEGATION_TOKEN_RECORD", (0, 0), fields=()),
    Message(27, "RegisterControllerRecord", "REGISTER_CONTROLLER_RECORD", (0, 0), fields=(
        F("ControllerId", "int32"), F("IncarnationId", "uuid"), F("ZkMigrationReady", "bool"),
        F("EndPoints", "[]ControllerEndpoint", fields=_ENDPOINT),
        F("Features", "[]ControllerFeature", fields=_FEATURE))),
)
# Records whose fields kaudit does not read (credentials, tokens): named, their bytes never
# decoded or printed.
OPAQUE = {10, 11, 22, 26}

_VOTER = (F("VoterId", "int32"), F("VoterDirectoryId", "uuid", "1+"))
# KRaft control records (control batches of __cluster_metadata), by ControlRecordType; Kafka
# reads their value at its CURRENT_VERSION constant (ControlRecordUtils): each begins with its own
# int16 Version field, which kaudit reads first and gates on.
CONTROL: dict[str, Message] = {
    "LEADER_CHANGE": Message(None, "LeaderChangeMessage", "LEADER_CHANGE", (0, 1), fields=(
        F("Version", "int16"), F("LeaderId", "int32"),
        F("Voters", "[]Voter", fields=_VOTER), F("GrantingVoters", "[]Voter", fields=_VOTER))),
    "SNAPSHOT_HEADER": Message(None, "SnapshotHeaderRecord", "SNAPSHOT_HEADER", (0, 0), fields=(
        F("Version", "int16"), F("LastContainedLogTimestamp", "int64"))),
    "SNAPSHOT_FOOTER": Message(None, "SnapshotFooterRecord", "SNAPSHOT_FOOTER", (0, 0), fields=(
        F("Version", "int16"),)),
    "KRAFT_VERSION": Message(None, "KRaftVersionRecord", "KRAFT_VERSION", (0, 0), fields=(
        F("Version", "int16"), F("KRaftVersion", "int16"))),
    "KRAFT_VOTERS": Message(None, "VotersRecord", "KRAFT_VOTERS", (0, 0), fields=(
        F("Version", "int16"),
        F("Voters", "[]Voter", fields=(
            F("VoterId", "int32"), F("VoterDirectoryId", "uuid"),
            F("Endpoints", "[]Endpoint", fields=(F("Name", "string"), F("Host", "string"), F("Port", "uint16"))),
            F("KRaftVersionFeature", "{}", fields=(F("MinSupportedVersion", "int16"),
                                                   F("MaxSupportedVersion", "int16"))))))),
}

BY_KEY: dict[int, Message] = {m.api_key: m for m in METADATA}


# Tiered storage (KIP-405): the records of `__remote_log_metadata`, written by the default
# TopicBasedRemoteLogMetadataManager with the same frame (RemoteLogMetadataSerde), from
# storage/src/main/resources/message/*.json.
_TIP = (F("Name", "string"), F("Id", "uuid"), F("Partition", "int32"))
_SEGMENT_ID = F("RemoteLogSegmentId", "{}", fields=(F("TopicIdPartition", "{}", fields=_TIP), F("Id", "uuid")))
REMOTE: tuple[Message, ...] = (
    Message(0, "RemoteLogSegmentMetadataRecord", "REMOTE_LOG_SEGMENT_METADATA_RECORD", (0, 0), fields=(
        _SEGMENT_ID, F("StartOffset", "int64"), F("EndOffset", "int64"), F("BrokerId", "int32"),
        F("MaxTimestampMs", "int64"), F("EventTimestampMs", "int64"),
        F("SegmentLeaderEpochs", "[]SegmentLeaderEpochEntry", fields=(F("LeaderEpoch", "int32"), F("Offset", "int64"))),
        F("SegmentSizeInBytes", "int32"), F("CustomMetadata", "bytes", nullable="0+"),
        F("RemoteLogSegmentState", "int8"))),
    Message(1, "RemoteLogSegmentMetadataUpdateRecord", "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD", (0, 0), fields=(
        _SEGMENT_ID, F("BrokerId", "int32"), F("EventTimestampMs", "int64"),
        F("CustomMetadata", "bytes", nullable="0+"), F("RemoteLogSegmentState", "int8"))),
    Message(2, "RemotePartitionDeleteMetadataRecord", "REMOTE_PARTITION_DELETE_METADATA_RECORD", (0, 0), fields=(
        F("TopicIdPartition", "{}", fields=_TIP), F("BrokerId", "int32"), F("EventTimestampMs", "int64"),
        F("RemotePartitionDeleteState", "int8"))),
)
REMOTE_BY_KEY: dict[int, Message] = {m.api_key: m for m in REMOTE}
SEGMENT_STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED", 2: "DELETE_SEGMENT_STARTED",
                  3: "DELETE_SEGMENT_FINISHED"}
PARTITION_DELETE_STATES = {0: "DELETE_PARTITION_MARKED", 1: "DELETE_PARTITION_STARTED", 2: "DELETE_PARTITION_FINISHED"}
