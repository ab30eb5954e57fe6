"""Hand-written bodies for the versions kio (generated from Kafka 4 specs) no longer carries but
old clients and brokers still send (KIP-896 removed them in Apache Kafka 4.0).

All of them predate flexible versions: int16-length strings, int32-length arrays and bytes. Field
names follow kio's names for the next version of the same message, so that every version of an
API has one shape. Facts from Kafka's JSON message specs (ProduceRequest.json "Version 1 and 2
are the same as version 0", FetchRequest.json "MaxBytes ... 3+", ...).
"""

from __future__ import annotations

from kaudit.protocol.primitives import (
    read_array_len,
    read_bool,
    read_bytes_view,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_string,
)

# A spec is a tuple of (name, type); a type is a primitive name, ("array", spec or primitive)
# or "records". Minimal sizes bound array counts by the bytes left.
_PRIMS = {
    "i8": (read_int8, 1),
    "i16": (read_int16, 2),
    "i32": (read_int32, 4),
    "i64": (read_int64, 8),
    "bool": (read_bool, 1),
    "str": (read_string, 2),  # nullable or not: null is returned as None
}


def _min_size(t) -> int:
    if isinstance(t, tuple) and t and t[0] == "array":
        return 4
    if isinstance(t, tuple):
        return sum(_min_size(ft) for _, ft in t)
    if t == "records":
        return 4
    return _PRIMS[t][1]




def read_spec(spec, buf, off):
    """Decode a struct spec -> (dict, new offset). Records come back as memoryviews."""
    out = {}
    for name, t in spec:
        out[name], off = _read_type(t, buf, off)
    return out, off


def _read_type(t, buf, off):
    if isinstance(t, str):
        if t == "records":
            return read_bytes_view(buf, off)
        return _PRIMS[t][0](buf, off)
    if t[0] == "array":
        item = t[1]
        n, off = read_array_len(buf, off, _min_size(item))
        if n < 0:
            return None, off
        items = []
        for _ in range(n):
            v, off = _read_type(item, buf, off)
            items.append(v)
        return items, off
    return read_spec(t, buf, off)


def _arr(*fields):
    return ("array", tuple(fields))


# ---- Produce v0-2 --------------------------------------------------------------------------

PRODUCE_REQUEST = (
    ("acks", "i16"),
    ("timeout_ms", "i32"),
    ("topic_data", _arr(("name", "str"),
                        ("partition_data", _arr(("index", "i32"), ("records", "records"))))),
)


def _produce_response(version: int):
    part = [("index", "i32"), ("error_code", "i16"), ("base_offset", "i64")]
    if version >= 2:
        part.append(("log_append_time_ms", "i64"))
    spec = [("responses", _arr(("name", "str"), ("partition_responses", _arr(*part))))]
    if version >= 1:
        spec.append(("throttle_time_ms", "i32"))
    return tuple(spec)


# ---- Fetch v0-3 ----------------------------------------------------------------------------


def _fetch_request(version: int):
    spec = [("replica_id", "i32"), ("max_wait_ms", "i32"), ("min_bytes", "i32")]
    if version >= 3:
        spec.append(("max_bytes", "i32"))
    spec.append(("topics", _arr(("topic", "str"), ("partitions", _arr(
        ("partition", "i32"), ("fetch_offset", "i64"), ("partition_max_bytes", "i32"))))))
    return tuple(spec)


def _fetch_response(version: int):
    spec = [("throttle_time_ms", "i32")] if version >= 1 else []
    spec.append(("responses", _arr(("topic", "str"), ("partitions", _arr(
        ("partition_index", "i32"), ("error_code", "i16"), ("high_watermark", "i64"),
        ("records", "records"))))))
    return tuple(spec)


# ---- ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0 -------------------------------------

LIST_OFFSETS_REQUEST_V0 = (
    ("replica_id", "i32"),
    ("topics", _arr(("name", "str"), ("partitions", _arr(
        ("partition_index", "i32"), ("timestamp", "i64"), ("max_num_offsets", "i32"))))),
)
LIST_OFFSETS_RESPONSE_V0 = (
    ("topics", _arr(("name", "str"), ("partitions", _arr(
        ("partition_index", "i32"), ("error_code", "i16"), ("old_style_offsets", ("array", "i64")))))),
)


def _offset_commit_request(version: int):
    spec = [("group_id", "str")]
    if version >= 1:
        spec += [("generation_id_or_member_epoch", "i32"), ("member_id", "str")]
    part = [("partition_index", "i32"), ("committed_offset", "i64")]
    if version == 1:
        part.append(("commit_timestamp", "i64"))
    part.append(("committed_metadata", "str"))
    spec.append(("topics", _arr(("name", "str"), ("partitions", _arr(*part)))))
    return tuple(spec)


OFFSET_COMMIT_RESPONSE = (
    ("topics", _arr(("name", "str"), ("partitions", _arr(
        ("partition_index", "i32"), ("error_code", "i16"))))),
)
OFFSET_FETCH_REQUEST_V0 = (
    ("group_id", "str"),
    ("topics", _arr(("name", "str"), ("partition_indexes", ("array", "i32")))),
)
OFFSET_FETCH_RESPONSE_V0 = (
    ("topics", _arr(("name", "str"), ("partitions", _arr(
        ("partition_index", "i32"), ("committed_offset", "i64"), ("metadata", "str"),
        ("error_code", "i16"))))),
)

# ---- WriteTxnMarkers v0 (v1 = the same, flexible) ------------------------------------------

WRITE_TXN_MARKERS_REQUEST_V0 = (
    ("markers", _arr(("producer_id", "i64"), ("producer_epoch", "i16"),
                     ("transaction_result", "bool"),
                     ("topics", _arr(("name", "str"), ("partition_indexes", ("array", "i32")))),
                     ("coordinator_epoch", "i32"))),
)
WRITE_TXN_MARKERS_RESPONSE_V0 = (
    ("markers", _arr(("producer_id", "i64"), ("topics", _arr(("name", "str"), ("partitions", _arr(
        ("partition_index", "i32"), ("error_code", "i16"))))))),
)

# (api_key, version) -> spec
REQUESTS: dict = {}
RESPONSES: dict = {}
for _v in range(3):
    REQUESTS[(0, _v)] = PRODUCE_REQUEST
    RESPONSES[(0, _v)] = _produce_response(_v)
for _v in range(4):
    REQUESTS[(1, _v)] = _fetch_request(_v)
    RESPONSES[(1, _v)] = _fetch_response(_v)
REQUESTS[(2, 0)] = LIST_OFFSETS_REQUEST_V0
RESPONSES[(2, 0)] = LIST_OFFSETS_RESPONSE_V0
for _v in range(2):
    REQUESTS[(8, _v)] = _offset_commit_request(_v)
    RESPONSES[(8, _v)] = OFFSET_COMMIT_RESPONSE
REQUESTS[(9, 0)] = OFFSET_FETCH_REQUEST_V0
RESPONSES[(9, 0)] = OFFSET_FETCH_RESPONSE_V0
REQUESTS[(27, 0)] = WRITE_TXN_MARKERS_REQUEST_V0
RESPONSES[(27, 0)] = WRITE_TXN_MARKERS_RESPONSE_V0


def has_hand(api_key: int, api_version: int, entity: str) -> bool:
    return (api_key, api_version) in (REQUESTS if entity == "request" else RESPONSES)


def decode_hand(api_key: int, api_version: int, entity: str, buf, offset: int, end: int):
    """-> (dict, offset after the body); reads never pass `end`."""
    spec = (REQUESTS if entity == "request" else RESPONSES)[(api_key, api_version)]
    view = memoryview(buf)[:end]
    body, off = read_spec(spec, view, offset)
    if api_key == 0 and entity == "request":
        body = {"transactional_id": None, **body}
    return body, off
