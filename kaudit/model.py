"""Flat row types and their Arrow schemas (docs/architecture.md §3): the public vocabulary of kaudit.

Every row is a flat mapping of primitive fields. Sources produce rows of one `kind` at a time,
either as a list of dicts (small kinds) or directly as Arrow tables (batches, the hot path);
`table_from_rows` builds the Arrow table for a kind from dicts. Each kind is registered
(`row_kind`) with its tags; `view` makes typed row views of its columns.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

S, I8, I16, I32, I64, U32, B, BIN, F64 = (
    pa.string(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint32(), pa.bool_(),
    pa.binary(), pa.float64(),
)

# Where a row came from; shared by every on-disk kind.
_PLACE = [
    ("source", S),        # file path
    ("position", I64),    # byte offset in the file (frame number on the wire)
    ("replica", S),       # node id from meta.properties, else the log dir path; null on the wire
    ("log_dir", S),
    ("topic", S),
    ("partition", I32),
]

BATCH = pa.schema(
    [("source_kind", S)]
    + _PLACE
    + [
        ("base_offset", I64),
        ("last_offset", I64),
        ("batch_size", I32),
        ("magic", I8),
        ("crc", U32),
        ("crc_ok", B),
        ("attributes", I16),
        ("codec", S),
        ("timestamp_type", S),
        ("is_transactional", B),
        ("is_control", B),
        ("has_delete_horizon", B),
        ("control_type", S),
        ("coordinator_epoch", I32),
        ("producer_id", I64),
        ("producer_epoch", I16),
        ("base_sequence", I32),
        ("last_sequence", I32),
        ("record_count", I32),
        ("base_timestamp_ms", I64),
        ("max_timestamp_ms", I64),
        ("partition_leader_epoch", I32),
        # wire context (null for batches read from segments)
        ("connection", S),
        ("api_version", I16),
        ("correlation_id", I32),
        ("client_id", S),
        ("transactional_id", S),
        ("acks", I16),
        ("request_ts", F64),
        ("response_ts", F64),
        ("response_error", I16),
        ("response_base_offset", I64),
        # KIP-516 topic id (Kafka's base64 form): from Produce v13 / Fetch v13+ on the wire (then
        # `topic` is null until a Metadata, CreateTopics or DescribeTopicPartitions response or a
        # partition.metadata names it), from the partition dir's partition.metadata on disk
        ("topic_id", S),
    ]
)

RECORD = pa.schema(
    _PLACE
    + [
        ("batch_base_offset", I64),
        ("offset", I64),
        ("timestamp_ms", I64),
        ("sequence", I32),
        ("key_size", I32),
        ("value_size", I32),
        ("key", BIN),
        ("value", BIN),
        ("header_keys", S),   # comma-joined header keys (values stay in `headers`)
        ("headers", S),       # JSON list of [key, base64 value]
        ("control_type", S),
        ("coordinator_epoch", I32),
    ]
)

TXN_LOG = pa.schema(
    _PLACE
    + [
        ("offset", I64),
        ("timestamp_ms", I64),
        ("key_version", I16),
        ("transactional_id", S),
        ("value_version", I16),
        ("tombstone", B),
        ("producer_id", I64),
        ("producer_epoch", I16),
        ("previous_producer_id", I64),
        ("next_producer_id", I64),
        ("client_transaction_version", I16),
        ("transaction_timeout_ms", I32),
        ("state", S),
        ("state_id", I8),
        ("partitions", S),    # comma-joined topic-partition names, in stored order
        ("last_update_ms", I64),
        ("start_ms", I64),
    ]
)

OFFSET_COMMIT = pa.schema(
    _PLACE
    + [
        ("offset", I64),
        ("timestamp_ms", I64),
        ("producer_id", I64),
        ("is_transactional", B),
        ("key_version", I16),
        ("group", S),
        ("commit_topic", S),
        ("commit_partition", I32),
        ("tombstone", B),
        ("value_version", I16),
        ("committed_offset", I64),
        ("committed_leader_epoch", I32),
        ("metadata", S),
        ("commit_timestamp_ms", I64),
        ("expire_timestamp_ms", I64),
    ]
)

GROUP_METADATA = pa.schema(
    _PLACE
    + [
        ("offset", I64),
        ("timestamp_ms", I64),
        ("key_version", I16),
        ("group", S),
        ("tombstone", B),
        ("value_version", I16),
        ("protocol_type", S),
        ("generation", I32),
        ("protocol", S),
        ("leader", S),
        ("current_state_timestamp_ms", I64),
        ("member_count", I32),
        ("members", S),        # comma-joined member ids
    ]
)

SNAPSHOT_ENTRY = pa.schema(
    _PLACE
    + [
        ("snapshot_offset", I64),
        ("version", I16),
        ("crc", U32),
        ("crc_ok", B),
        ("producer_id", I64),
        ("producer_epoch", I16),
        ("first_sequence", I32),
        ("last_sequence", I32),
        ("last_offset", I64),
        ("offset_delta", I32),
        ("timestamp_ms", I64),
        ("coordinator_epoch", I32),
        ("current_txn_first_offset", I64),
    ]
)

TXNINDEX_ENTRY = pa.schema(
    _PLACE
    + [
        ("version", I16),
        ("producer_id", I64),
        ("first_offset", I64),
        ("last_offset", I64),
        ("last_stable_offset", I64),
    ]
)

INDEX_ENTRY = pa.schema(
    _PLACE
    + [
        ("index_type", S),          # offset | time
        ("segment_base_offset", I64),
        ("relative_offset", I32),
        ("offset", I64),
        ("file_position", I32),     # offset index only
        ("timestamp_ms", I64),      # time index only
    ]
)

LEADER_EPOCH_ENTRY = pa.schema(
    _PLACE + [("version", I32), ("leader_epoch", I32), ("start_offset", I64)]
)

# One line of a log dir's offset checkpoint; topic/partition are the entry's, not the file's.
CHECKPOINT_ENTRY = pa.schema(
    _PLACE + [("checkpoint", S), ("version", I32), ("offset", I64)]
)

# One KRaft `__cluster_metadata` record (protocol.metadata) - or a `__remote_log_metadata` one -, from the metadata log, a snapshot
# (`<offset>-<epoch>.checkpoint`) or a log dir's bootstrap.checkpoint: the columns of the records
# the audit reads, the whole record as kafka-dump-log's JSON in `data`. Broker lists are
# comma-joined ids; null means "unchanged" in a PartitionChangeRecord, "" an empty list.
METADATA_RECORD = pa.schema(
    _PLACE
    + [
        ("offset", I64),
        ("timestamp_ms", I64),
        ("raft_epoch", I32),          # the batch's partition leader epoch: the KRaft leader's epoch
        ("is_control", B),
        ("record_type", S),           # TOPIC_RECORD, PARTITION_CHANGE_RECORD, LEADER_CHANGE, ...
        ("api_key", I16),
        ("version", I16),
        ("issue", S),                 # unknown-version | unknown-record-type | trailing-bytes | ...
        ("issue_detail", S),
        ("unknown_tags", S),
        ("record_topic_id", S),
        ("record_topic", S),
        ("record_partition", I32),
        ("leader", I32),              # partition leader (-1 none); KRaft leader of a LEADER_CHANGE
        ("leader_epoch", I32),
        ("partition_epoch", I32),
        ("leader_recovery_state", I8),   # 0 recovered, 1 RECOVERING (unclean election)
        ("replicas", S),
        ("isr", S),
        ("elr", S),
        ("last_known_elr", S),
        ("removing_replicas", S),
        ("adding_replicas", S),
        ("directories", S),
        ("broker_id", I32),
        ("broker_epoch", I64),
        ("fenced", I8),
        ("in_controlled_shutdown", I8),
        ("rack", S),
        ("endpoints", S),
        ("incarnation_id", S),
        ("feature", S),
        ("feature_level", I16),
        ("next_producer_id", I64),
        ("config_resource_type", I8),
        ("config_resource", S),
        ("config_name", S),
        ("config_value", S),          # secret values redacted
        ("voters", S),
        ("granting_voters", S),
        ("kraft_version", I16),
        # __remote_log_metadata (KIP-405): one remote segment's metadata or state change
        ("remote_segment_id", S),
        ("start_offset", I64),
        ("end_offset", I64),
        ("remote_state", S),          # COPY_SEGMENT_STARTED ... DELETE_SEGMENT_FINISHED, DELETE_PARTITION_*
        ("segment_leader_epochs", S), # "epoch:start offset,..."
        ("segment_size", I32),
        ("event_timestamp_ms", I64),
        ("data", S),
    ]
)

PARTITION_METADATA = pa.schema(_PLACE + [("version", I32), ("topic_id", S)])

LOG_DIR = pa.schema(
    _PLACE
    + [
        ("node_id", I32),
        ("broker_id", I32),
        ("cluster_id", S),
        ("version", I32),
        ("directory_id", S),
        ("properties", S),   # the whole file as JSON, for keys we do not model
    ]
)

DECODE_ISSUE = pa.schema(
    _PLACE
    + [
        ("issue", S),        # truncated-tail | corrupt | crc-mismatch | limit | zero-fill | ...
        ("length", I64),     # bytes affected (from position)
        ("message", S),
        ("resync_position", I64),
        ("connection", S),   # wire only: "client ip:port -> server ip:port"
        ("stream_offset", I64),  # wire only: byte offset in that direction of the connection
        # wire only, a stream-gap: the frame of the last bytes the stream delivered before the
        # hole (the bytes lost were sent after it; `position` is where the loss was known)
        ("after_position", I64),
    ]
)

# Wire rows. Times are epoch seconds (float) as in the capture; `position` is a frame number.
FRAME = pa.schema([
    ("source", S),
    ("connection", S),
    ("request_frame", I64),
    ("response_frame", I64),
    ("request_ts", F64),
    ("response_ts", F64),
    ("latency_ms", F64),
    ("request_size", I32),
    ("response_size", I32),
    ("api_key", I16),
    ("api_name", S),
    ("api_version", I16),
    ("correlation_id", I32),
    ("client_id", S),
    ("error_codes", S),      # distinct non-zero codes, comma-joined; "" none; null no response
    ("error_names", S),      # the same as Kafka's names (INVALID_PRODUCER_EPOCH, ...)
    ("transactional_id", S),
    ("producer_id", I64),
    ("producer_epoch", I16),
    ("acks", I16),
    ("timeout_ms", I32),
    ("transaction_timeout_ms", I32),
    ("partitions", S),
    ("committed", B),
    ("new_producer_id", I64),
    ("new_producer_epoch", I16),
    ("group_id", S),
    ("coordinator_key", S),
    ("coordinator_key_type", I8),
    ("coordinator", S),
    ("isolation_level", S),
    ("sasl_mechanism", S),
    ("sasl_username", S),
    ("throttle_time_ms", I32),
    ("markers", S),          # JSON lists (see protocol.wire.summary)
    ("partition_errors", S),
    ("producers", S),
    ("transactions", S),
    ("body_decoder", S),     # kio | hand | opaque
    ("complete", B),         # false when the frame spans a capture gap
    ("decode_error", S),
])

TXN_EVENT = pa.schema([
    ("source", S),
    ("connection", S),
    ("position", I64),       # request frame
    ("ts", F64),
    ("event", S),            # INIT_PRODUCER_ID | ADD_PARTITIONS | ADD_OFFSETS | END_TXN | ...
    ("transactional_id", S),
    ("producer_id", I64),
    ("producer_epoch", I16),
    ("state", S),
    ("partitions", S),
    ("result", S),
    ("coordinator_epoch", I32),
    ("timeout_ms", I32),
    ("group_id", S),
    ("new_producer_id", I64),
    ("new_producer_epoch", I16),
    ("error_codes", S),
    # KIP-1228 (WriteTxnMarkers v2): the transaction version the coordinator put on the marker
    ("transaction_version", I8),
    # KIP-939 (InitProducerId v6): two-phase commit with an external transaction manager
    ("enable_2pc", B),
    ("keep_prepared_txn", B),
    # KIP-939 (InitProducerId v6 answer): the transaction the coordinator kept open for a
    # KeepPreparedTxn recovery, its producer id and epoch (-1: none; null: an older version, no
    # answer, or another event). producer_id/_epoch are the recovering session's own.
    ("ongoing_txn_producer_id", I64),
    ("ongoing_txn_producer_epoch", I16),
    # KIP-360 (InitProducerId v3+): the producer id and epoch the client asked with (-1: none; null:
    # an older version or another event). producer_id/_epoch above are the answer's.
    ("request_producer_id", I64),
    ("request_producer_epoch", I16),
])

# Consumer-group coordination (audit/consumers): one row per membership exchange (JoinGroup,
# SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat) and per partition of an offset
# exchange (OffsetCommit, TxnOffsetCommit, OffsetFetch, a consumer's ListOffsets)
GROUP_EVENT = pa.schema([
    ("source", S),
    ("connection", S),
    ("position", I64),       # request frame
    ("ts", F64),             # request time
    ("response_ts", F64),
    ("api_version", I16),
    ("correlation_id", I32),
    ("client_id", S),
    ("event", S),            # JOIN | SYNC | HEARTBEAT | LEAVE | CG_HEARTBEAT | CG_LEAVE | OFFSET_COMMIT | ...
    ("group_id", S),
    ("member_id", S),
    ("instance_id", S),
    ("generation", I32),     # generation id, or the KIP-848 member epoch
    ("request_epoch", I32),  # ConsumerGroupHeartbeat: the epoch the member sent
    ("protocol", S),
    ("leader", S),
    ("timeout_ms", I32),
    ("reason", S),
    ("partitions", S),       # the member's assignment: topic-partition,... (KIP-848: topic id-partition)
    ("topic", S),
    ("topic_id", S),
    ("partition", I32),
    ("offset", I64),         # committed, fetched back, or listed
    ("leader_epoch", I32),
    ("timestamp", I64),      # ListOffsets: the target time (-1 latest, -2 earliest)
    ("isolation_level", I8),
    ("error_code", I16),
    ("transactional_id", S),
    ("producer_id", I64),
    ("producer_epoch", I16),
])

# A consumer's or follower's Fetch, per partition: the response's answer, or (error_code and every
# response field null, batch_count 0) a partition the request named that the response left out
# (KIP-227 incremental fetch sessions omit those with nothing new; summary_batches.omitted_fetch_parts)
FETCH_PARTITION = pa.schema([
    ("source", S),
    ("connection", S),
    ("position", I64),       # response frame
    ("request_ts", F64),
    ("response_ts", F64),
    ("api_version", I16),
    ("correlation_id", I32),
    ("client_id", S),
    ("topic", S),
    ("partition", I32),
    ("isolation_level", S),
    ("replica_id", I32),
    ("fetch_offset", I64),
    ("error_code", I16),
    ("high_watermark", I64),
    ("last_stable_offset", I64),
    ("log_start_offset", I64),
    ("aborted_transactions", S),  # "producer_id@first_offset,..."
    ("preferred_read_replica", I32),
    ("record_set_size", I32),
    ("batch_count", I32),
    ("truncated_bytes", I32),
    ("topic_id", S),
])

# One topic id -> name fact seen on the wire: a topic of a Metadata, CreateTopics or
# DescribeTopicPartitions response (KIP-516; the disk's are partition_metadata rows).
TOPIC_NAME = pa.schema([
    ("source", S),
    ("connection", S),
    ("position", I64),       # response frame
    ("ts", F64),
    ("api_key", I16),
    ("topic_id", S),
    ("topic", S),
    ("cluster_id", S),       # Metadata v2+: the cluster's id (incident ids, audit/stories/clusters.py)
    # Metadata: the brokers the answer lists, "node@host:port" comma-joined, on the answer's first
    # row (a capture of some brokers only: audit/consumers/timeline.py)
    ("brokers", S),
])

CONNECTION = pa.schema([
    ("source", S),
    ("connection", S),
    ("conn_id", I64),
    ("client", S),
    ("server", S),
    ("protocol", S),         # kafka | tls | other
    ("syn_seen", B),
    ("close_reason", S),
    ("first_frame", I64),
    ("last_frame", I64),
    ("first_ts", F64),
    ("last_ts", F64),
    ("packets", I64),
    ("bytes_to_server", I64),
    ("bytes_to_client", I64),
    ("gaps", I32),
    ("gap_bytes", I64),
    ("retransmissions", I32),
    ("conflicts", I32),
    ("requests", I32),
    ("responses", I32),
    ("unanswered", I32),
])

SKIPPED = pa.schema(_PLACE + [("reason", S)])

# One piece of evidence a person can check: a file and byte position, or a capture and frame.
EVIDENCE = pa.struct([("source", S), ("position", I64), ("kind", S), ("note", S)])

FINDING = pa.schema([
    ("id", S),               # stable hash of rule + key + evidence
    ("rule", S),
    ("severity", S),         # critical | error | warning | info
    ("message", S),
    ("topic", S),
    ("partition", I32),
    ("replica", S),
    ("connection", S),
    ("producer_id", I64),
    ("producer_epoch", I16),
    ("transactional_id", S),
    ("first_offset", I64),
    ("last_offset", I64),
    ("base_sequence", I32),
    ("last_sequence", I32),
    ("first_ts_ms", I64),
    ("last_ts_ms", I64),
    ("evidence", pa.list_(EVIDENCE)),
    ("remediation", S),
    ("details", S),          # JSON object of rule-specific facts (expected sequence, outcome, ...)
    ("timeline", pa.list_(S)),  # the producer's batches around the finding, oldest first
    ("topic_id", S),         # the topic's id where a row named it (KIP-516)
    ("client_id", S),        # the client that sent the request (wire findings)
    ("incident", S),         # stable id of the incident the finding belongs to (audit/stories/incidents.py)
])

@dataclass(frozen=True)
class RowKind:
    """A row kind: its schema and its tags - which sources emit it (`disk`: log dirs, `wire`:
    captures) and whether a log dir yields its rows grouped by (replica, topic, partition) in
    file order (`partitioned`: rows of one partition dir's files; not the entries of a log dir's
    own checkpoints, which name any partition). A decoder that emits a new kind and its
    `row_kind` here are all the engines need: they take the kinds from here, and which folds
    read them, streamed or buffered, from the folds' inputs and keys (engine/plan.py)."""

    name: str
    schema: pa.Schema
    disk: bool = False
    wire: bool = False
    partitioned: bool = False


ROW_KINDS: dict[str, RowKind] = {}
SCHEMAS: dict[str, pa.Schema] = {}
KINDS: list[str] = []
ROWS: dict[str, type] = {}   # every kind's typed row view (all its columns)


def row_kind(name: str, schema: pa.Schema, *, disk: bool = False, wire: bool = False,
             partitioned: bool = False) -> RowKind:
    """Register a row kind (again with the same schema: a no-op) and make its row view."""
    have = ROW_KINDS.get(name)
    if have is not None:
        if have.schema != schema:
            raise ValueError(f"row kind {name} registered twice with different schemas")
        return have
    ROW_KINDS[name] = kind = RowKind(name, schema, disk, wire, partitioned)
    SCHEMAS[name] = schema
    KINDS.append(name)
    ROWS[name] = view(name)
    return kind


def view(kind: str, columns: Iterable[str] | None = None) -> type:
    """A typed row view: a named-tuple class of `columns` (default all) of `kind`, checked
    against its schema when made - a fold makes its own at import, so a misspelt column fails
    then, and its fields are attributes (`r.producer_id`), not dict keys. `View.of(table)`
    reads a table's columns (named as the view's fields) into rows, column by column."""
    schema = SCHEMAS[kind]
    columns = tuple(schema.names if columns is None else columns)
    unknown = [c for c in columns if schema.get_field_index(c) < 0]
    if unknown:
        raise KeyError(f"row kind {kind} has no column {', '.join(unknown)}")
    base = namedtuple("".join(w.title() for w in kind.split("_")) + "Row", columns)
    return type(base.__name__, (base,), {"__slots__": (), "kind": kind, "of": classmethod(_rows_of)})


def _rows_of(cls, table: pa.Table) -> list:
    return list(map(cls._make, zip(*(table.column(c).to_pylist() for c in cls._fields))))


# tags: d disk, w wire, p partitioned (see RowKind)
for _name, _schema, _tags in (
        ("batch", BATCH, "dwp"), ("record", RECORD, "dp"), ("txn_log", TXN_LOG, "dp"),
        ("offset_commit", OFFSET_COMMIT, "dp"), ("group_metadata", GROUP_METADATA, "dp"),
        ("snapshot_entry", SNAPSHOT_ENTRY, "dp"), ("txnindex_entry", TXNINDEX_ENTRY, "dp"),
        ("index_entry", INDEX_ENTRY, "dp"), ("leader_epoch_entry", LEADER_EPOCH_ENTRY, "dp"),
        ("checkpoint_entry", CHECKPOINT_ENTRY, "d"), ("partition_metadata", PARTITION_METADATA, "dp"),
        ("metadata_record", METADATA_RECORD, "d"),
        ("log_dir", LOG_DIR, "d"), ("frame", FRAME, "w"), ("txn_event", TXN_EVENT, "w"), ("group_event", GROUP_EVENT, "w"),
        ("fetch_partition", FETCH_PARTITION, "w"), ("topic_name", TOPIC_NAME, "w"),
        ("connection", CONNECTION, "w"), ("decode_issue", DECODE_ISSUE, "dwp"), ("skipped", SKIPPED, "d"),
        ("finding", FINDING, "")):
    row_kind(_name, _schema, disk="d" in _tags, wire="w" in _tags, partitioned="p" in _tags)


def kinds_of(side: str) -> list[str]:
    """The row kinds a side's sources emit ("disk" or "wire")."""
    return [k for k, rk in ROW_KINDS.items() if getattr(rk, side)]


def table_from_rows(kind: str, rows: list[dict]) -> pa.Table:
    """Arrow table of one kind from dict rows; missing fields are null, unknown ones rejected."""
    schema = SCHEMAS[kind]
    names = set(schema.names)
    for row in rows:
        extra = set(row) - names
        if extra:
            raise KeyError(f"{kind} row has fields outside its schema: {sorted(extra)}")
    return pa.Table.from_pylist(rows, schema=schema)
