"""Message bodies by kio's schema, as plain dicts.

kio (https://github.com/Aiven-Open/kio) generates one frozen dataclass per api key, version and
direction from Kafka's JSON message specs: field order, Kafka types (`kafka_type` metadata),
nesting, nullability, tagged fields (`tag` metadata) and flexibility (`__flexible__`). kaudit
walks that schema with its own bounded primitives (`walk_schema`; the plan is built once per
class and cached):

- kio's native reader (`kio.serial.entity_reader(cls)`) is NOT used on captured bytes: on a
  compact array whose length lies (a few random bytes are enough) it asks Rust for hundreds of
  GB and the allocation failure aborts the whole process. It also refuses what Kafka accepts:
  an error code newer than its enum (ValueError) and an unknown tagged field (KeyError).
  `decode_kio_native` keeps it as the test oracle: on every body of the corpus both give the
  same dict, and the walk is faster than kio's reader plus the conversion to dicts.
- Field names are kio's (the JSON names in snake case), except that durations and timestamps
  are integers in milliseconds with an `_ms` suffix (`timeout` -> `timeout_ms`,
  `throttle_time` -> `throttle_time_ms`; -1 stays -1), error codes stay ints (unknown ones
  too), UUIDs are strings in Kafka's own form (base64url, as `partition.metadata` and
  Kafka's tools print them; None for null or all-zero), `records` fields are memoryviews for
  the caller to decode, absent tagged fields take kio's defaults and unknown tags are skipped.
"""
from __future__ import annotations

from kaudit.protocol.errors import DecodeError
from kaudit.protocol.wire.apis import kio_class
from kaudit.protocol.wire.kio_schema import _converter
from kaudit.protocol.wire.kio_walkers import walk_schema


def has_kio(api_key: int, api_version: int, entity: str) -> bool:
    return kio_class(api_key, api_version, entity) is not None


def decode_kio(api_key: int, api_version: int, entity: str, buf, offset: int, end: int):
    """The body between `offset` and `end` -> (dict, offset after the body), by walking kio's
    schema for (key, version, entity). Raises DecodeError subclasses only (Truncated when the
    bytes end early); never reads past `end`; positions are offsets in `buf`."""
    cls = kio_class(api_key, api_version, entity)
    if cls is None:
        raise DecodeError(f"kio has no {entity} schema for api {api_key} v{api_version}", offset)
    return walk_schema(cls, memoryview(buf)[:end], offset)


def decode_kio_native(api_key: int, api_version: int, entity: str, buf, offset: int = 0):
    """kio's own native reader + conversion to the same dicts. FOR TESTS ONLY, on trusted bytes:
    a lying array length aborts the process (see the module docstring)."""
    from kio.serial import entity_reader

    cls = kio_class(api_key, api_version, entity)
    obj, used = entity_reader(cls)(memoryview(buf)[offset:], 0)
    return _converter(cls)(obj), offset + used
