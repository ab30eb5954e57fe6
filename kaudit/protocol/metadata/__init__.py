"""KRaft `__cluster_metadata` records: the schemas as data (schemas.py) and their decode (decode.py)."""

from kaudit.protocol.metadata.decode import (  # noqa: F401
    Decoded, decode_control_value, decode_metadata_record, dump_json, uuid_str,
)
