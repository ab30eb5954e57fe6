"""A decoded metadata or KRaft control record -> the flat fields of a `metadata_record` row
(kaudit.model.METADATA_RECORD), and the records of a buffer of batches (a bootstrap.checkpoint).

Lists are comma-joined broker ids; null keeps its meaning ("unchanged" in a
PartitionChangeRecord) apart from empty (""). The whole record rides along as `data`, kafka-dump-log's
JSON, with secret config values and credential records left out.
"""

from __future__ import annotations

import json
import re

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.metadata.decode import Decoded, decode_control_value, decode_metadata_record, dump_json
from kaudit.protocol.metadata.schemas import PARTITION_DELETE_STATES, REMOTE_BY_KEY, SEGMENT_STATES
from kaudit.protocol.record_batch import CONTROL_TYPES, decode_entry

TOPIC_NAME = "__cluster_metadata"
REMOTE_TOPIC = "__remote_log_metadata"
# Config names whose values are secrets (Kafka's PASSWORD-typed configs and JAAS): never printed.
SECRET_CONFIG = re.compile(r"password|secret|jaas|credential|\.key$|token", re.I)
REDACTED = "[redacted]"


def _ids(v) -> str | None:
    return None if v is None else ",".join(str(x) for x in v)


def _opt(v, skip):
    return None if v == skip else v


def row_fields(d: Decoded) -> dict:
    """The row's record columns (not its place, offset or time)."""
    row = {"record_type": d.record_type, "api_key": d.api_key, "version": d.version,
           "issue": d.issue, "issue_detail": d.detail,
           "unknown_tags": ",".join(map(str, d.unknown_tags)) or None}
    data = d.data
    if data is None:
        return row
    name = d.message.name
    g = data.get
    if "TopicId" in data:
        row["record_topic_id"] = g("TopicId")
    if name == "TopicRecord":
        row["record_topic"] = g("Name")
    elif name in ("PartitionRecord", "PartitionChangeRecord"):
        _partition(row, name, g)
    elif name in ("RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "UnregisterBrokerRecord",
                  "FenceBrokerRecord", "UnfenceBrokerRecord", "ProducerIdsRecord"):
        _broker(row, name, g)
    elif name == "FeatureLevelRecord":
        row.update(feature=g("Name"), feature_level=g("FeatureLevel"))
    elif name == "ConfigRecord":
        secret = SECRET_CONFIG.search(g("Name") or "") is not None
        row.update(config_resource_type=g("ResourceType"), config_resource=g("ResourceName"),
                   config_name=g("Name"), config_value=REDACTED if secret and g("Value") is not None else g("Value"))
    elif name == "LeaderChangeMessage":
        row.update(leader=g("LeaderId"), voters=_ids(v["VoterId"] for v in g("Voters") or ()),
                   granting_voters=_ids(v["VoterId"] for v in g("GrantingVoters") or ()))
    elif name == "VotersRecord":
        row["voters"] = _ids(v["VoterId"] for v in g("Voters") or ())
    elif name == "KRaftVersionRecord":
        row["kraft_version"] = g("KRaftVersion")
    elif name.startswith("Remote"):
        _remote(row, name, data)
    dumped = dump_json(d)
    if name == "ConfigRecord" and row.get("config_value") == REDACTED:
        dumped["value"] = REDACTED
    row["data"] = json.dumps(dumped, separators=(",", ":"))
    return row


def _partition(row: dict, name: str, g) -> None:
    change = name == "PartitionChangeRecord"
    row.update(record_partition=g("PartitionId"), replicas=_ids(g("Replicas")), isr=_ids(g("Isr")),
               removing_replicas=_ids(g("RemovingReplicas")), adding_replicas=_ids(g("AddingReplicas")),
               elr=_ids(g("EligibleLeaderReplicas")), last_known_elr=_ids(g("LastKnownElr")),
               directories=_ids(g("Directories")),
               leader=_opt(g("Leader"), -2) if change else g("Leader"),
               leader_recovery_state=_opt(g("LeaderRecoveryState"), -1))
    if not change:
        row.update(leader_epoch=g("LeaderEpoch"), partition_epoch=g("PartitionEpoch"))


def _broker(row: dict, name: str, g) -> None:
    row["broker_id"] = g("BrokerId", g("Id"))
    row["broker_epoch"] = g("BrokerEpoch", g("Epoch"))
    if name == "RegisterBrokerRecord":
        row.update(fenced=int(bool(g("Fenced"))), in_controlled_shutdown=int(bool(g("InControlledShutdown"))),
                   rack=g("Rack"), incarnation_id=g("IncarnationId"),
                   endpoints=",".join(f"{e['Name']}://{e['Host']}:{e['Port']}" for e in g("EndPoints") or ()))
    elif name == "BrokerRegistrationChangeRecord":
        # 1 fenced, -1 unfenced, 0 unchanged (the spec's encoding), as 1 / 0 / null here
        f = g("Fenced")
        row.update(fenced=None if f == 0 else int(f == 1),
                   in_controlled_shutdown=None if g("InControlledShutdown") == 0 else 1)
    elif name in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
        row["fenced"] = int(name == "FenceBrokerRecord")
    elif name == "ProducerIdsRecord":
        row["next_producer_id"] = g("NextProducerId")


def _remote(row: dict, name: str, data: dict) -> None:
    seg = data.get("RemoteLogSegmentId")
    tip = seg["TopicIdPartition"] if seg else data["TopicIdPartition"]
    row.update(record_topic=tip["Name"], record_topic_id=tip["Id"], record_partition=tip["Partition"],
               broker_id=data["BrokerId"], event_timestamp_ms=data["EventTimestampMs"],
               remote_segment_id=seg["Id"] if seg else None)
    if name == "RemotePartitionDeleteMetadataRecord":
        s = data["RemotePartitionDeleteState"]
        row["remote_state"] = PARTITION_DELETE_STATES.get(s, f"UNKNOWN({s})")
        return
    s = data["RemoteLogSegmentState"]
    row["remote_state"] = SEGMENT_STATES.get(s, f"UNKNOWN({s})")
    if name == "RemoteLogSegmentMetadataRecord":
        row.update(start_offset=data["StartOffset"], end_offset=data["EndOffset"], segment_size=data["SegmentSizeInBytes"],
                   segment_leader_epochs=",".join(f"{e['LeaderEpoch']}:{e['Offset']}" for e in data["SegmentLeaderEpochs"]))


def decode_record(batch, record, topic: str = TOPIC_NAME) -> Decoded | None:
    """A record of a __cluster_metadata batch: a metadata record, or a KRaft control record
    (None: a transaction marker or a control type with no KRaft meaning); of a
    __remote_log_metadata batch, a remote log metadata record."""
    if topic == REMOTE_TOPIC:
        return None if batch.is_control else decode_metadata_record(record.value, REMOTE_BY_KEY)
    if batch.is_control:
        key = record.key
        if key is None or len(key) < 4:
            return Decoded(None, None, None, None, "corrupt", "control record key shorter than 4 bytes")
        ctype = int.from_bytes(bytes(key[2:4]), "big", signed=True)
        return decode_control_value(CONTROL_TYPES.get(ctype, f"UNKNOWN({ctype})"), record.value)
    return decode_metadata_record(record.value)


def buffer_rows(data, max_batch_bytes: int = 64 << 20) -> tuple[list[dict], list[dict]]:
    """The metadata_record rows (without their place) and decode issues of a whole buffer of
    record batches: a bootstrap.checkpoint, small by nature."""
    rows, issues, pos = [], [], 0
    while pos < len(data):
        try:
            batch, end = decode_entry(data, pos, deep=True, max_batch_bytes=max_batch_bytes)
        except DecodeError as e:
            issues.append({"position": pos, "length": len(data) - pos, "issue": e.kind,
                           "message": f"batch at {pos}: {e.message}", "resync_position": None})
            break
        for r in batch.records or ():
            d = decode_record(batch, r)
            if d is not None:
                rows.append(dict(row_fields(d), position=pos, offset=r.offset, timestamp_ms=r.timestamp_ms,
                                 raft_epoch=batch.partition_leader_epoch, is_control=batch.is_control))
        pos = end
    return rows, issues
