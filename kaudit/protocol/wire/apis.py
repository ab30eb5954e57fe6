"""The Kafka API table: names, known version ranges, flexible versions, header versions.

Facts come from kio's generated schema (one class per api key, version and direction, each with
`__flexible__` and `__header_schema__`), completed with what kio 0.6 no longer carries: the
versions Apache Kafka 4.0 removed (KIP-896: Produce v0-2, Fetch v0-3, ListOffsets v0, ...) and the
ZooKeeper-era inter-broker APIs 4-7. Every removed version predates flexible versions, except for
APIs that were flexible from their first version ("flexibleVersions": "0+").
"""

from __future__ import annotations

from functools import lru_cache

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

# api_key -> (snake name, CamelCase name)
_EXTRA_APIS = {
    4: "leader_and_isr",
    5: "stop_replica",
    6: "update_metadata",
    7: "controlled_shutdown",
}
# Versions and first flexible version of the APIs kio does not carry (Kafka 3.x JSON specs).
_EXTRA_VERSIONS = {4: (7, 4), 5: (4, 2), 6: (8, 6), 7: (3, 3)}

# Keys whose oldest kio version is flexible although the versions kio dropped were not.
_FIRST_FLEXIBLE = {27: 1}  # WriteTxnMarkers: "Version 1 enables flexible versions"

SNAKE_NAMES: dict[int, str] = {**dict(api_key_map), **_EXTRA_APIS}


def _camel(snake: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in snake.split("_"))


API_NAMES: dict[int, str] = {k: _camel(v) for k, v in sorted(SNAKE_NAMES.items())}
API_KEYS: dict[str, int] = {v: k for k, v in API_NAMES.items()}

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
CONTROLLED_SHUTDOWN = 7
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
SASL_AUTHENTICATE = 36
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
CONSUMER_GROUP_HEARTBEAT = 68
DESCRIBE_TOPIC_PARTITIONS = 75


def api_name(api_key: int) -> str:
    """CamelCase Kafka name ("Produce", "AddPartitionsToTxn"), or "Unknown(<key>)"."""
    name = API_NAMES.get(api_key)
    return name if name is not None else f"Unknown({api_key})"


def kio_versions(api_key: int) -> range:
    """The versions kio has a schema for (empty range when none)."""
    name = api_key_map.get(api_key)
    if name is None:
        return range(0)
    vs = schema_name_map[name].keys()
    return range(min(vs), max(vs) + 1)


@lru_cache(maxsize=None)
def max_version(api_key: int) -> int:
    """Highest version known for the key, -1 for an unknown key."""
    if api_key in _EXTRA_VERSIONS:
        return _EXTRA_VERSIONS[api_key][0]
    vs = kio_versions(api_key)
    return vs.stop - 1 if vs else -1


def is_known(api_key: int, api_version: int) -> bool:
    """A known api key and a version from 0 to the highest version known for it."""
    return 0 <= api_version <= max_version(api_key)


def has_kio_class(api_key: int, api_version: int, entity: str) -> bool:
    """kio_class(...) is not None, without importing the class's module (~10 ms each)."""
    name = api_key_map.get(api_key)
    return name is not None and schema_name_map[name].get(api_version, {}).get(EntityType[entity]) is not None


@lru_cache(maxsize=None)
def kio_class(api_key: int, api_version: int, entity: str):
    """kio's generated dataclass for ("request" | "response"), or None where kio has none."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    path = schema_name_map[name].get(api_version, {}).get(EntityType[entity])
    if path is None:
        return None
    from pkgutil import resolve_name

    return resolve_name(path)


# First flexible version per key as `_first_flexible_from_kio` finds it with kio 0.6 (None: never
# flexible). Finding it imports kio's schema module of every older version (~0.3 s for the keys of
# a Kafka client's traffic), so the known answers are kept here; a test checks them against kio,
# and keys kio adds later are looked up there.
KNOWN_FIRST_FLEXIBLE = {
    0: 9, 1: 12, 2: 6, 3: 9, 4: 4, 5: 2, 6: 6, 7: 3, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4,
    14: 4, 15: 5, 16: 3, 17: None, 18: 3, 19: 5, 20: 4, 21: 2, 22: 2, 23: 4, 24: 3, 25: 3, 26: 3,
    27: 1, 28: 3, 29: 2, 30: 2, 31: 2, 32: 4, 33: 2, 34: 2, 35: 2, 36: 2, 37: 2, 38: 2, 39: 2,
    40: 2, 41: 2, 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 47: None, 48: 1, 49: 1, 50: 0, 51: 0, 52: 0,
    53: 1, 54: 1, 55: 0, 56: 0, 57: 0, 58: 0, 59: 0, 60: 0, 61: 0, 62: 0, 63: 0, 64: 0, 65: 0,
    66: 0, 67: 0, 68: 0, 69: 0, 70: 0, 71: 0, 72: 0, 73: 0, 74: 0, 75: 0, 76: 0, 77: 0, 78: 0,
    79: 0, 80: 0, 81: 0, 82: 0, 83: 0, 84: 0, 85: 0, 86: 0, 87: 0, 88: 0, 89: 0, 90: 0, 91: 0,
    92: 0,
}


@lru_cache(maxsize=None)
def _first_flexible(api_key: int) -> int | None:
    """First flexible version of the key; None if it has none (or the key is unknown)."""
    if api_key in KNOWN_FIRST_FLEXIBLE and api_key in SNAKE_NAMES:
        return KNOWN_FIRST_FLEXIBLE[api_key]
    return _first_flexible_from_kio(api_key)


def _first_flexible_from_kio(api_key: int) -> int | None:
    if api_key in _EXTRA_VERSIONS:
        return _EXTRA_VERSIONS[api_key][1]
    if api_key in _FIRST_FLEXIBLE:
        return _FIRST_FLEXIBLE[api_key]
    vs = kio_versions(api_key)
    for v in vs:
        cls = kio_class(api_key, v, "request")
        if cls is not None and cls.__flexible__:
            # Versions kio dropped are all older than flexible versions, unless the API was
            # flexible from its first version, which shows as kio's oldest version being flexible.
            return 0 if v == vs.start else v
    return None


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether (key, version) uses compact encodings and tagged fields (KIP-482)."""
    first = _first_flexible(api_key)
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible versions, 0 for ControlledShutdown v0 (no client id), else 1."""
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible versions, except ApiVersions whose responses always use header v0
    (a client that sent a too-new version must still be able to read the error)."""
    if api_key == API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0
