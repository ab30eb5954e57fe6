"""The Kafka wire protocol, sans-IO: framing, headers, bodies, record sets, summaries.

    framing   FrameSplitter (one TCP direction -> Frame / Gap / BadSize / Skipped / Incomplete)
    headers   request header v0-v2, response header v0-v1, plausible_request/_response
    apis      names, known versions, flexible versions, header versions per (key, version)
    bodies    bodies by (key, version): kio's schema (walked here), hand-written, or opaque
    messages  decode_request / decode_response: header + body of one frame payload
    records   record sets of Produce requests and Fetch responses (the record_batch layer)
    sasl      redaction of SASL payloads
    summary   flat facts for frame / batch / txn_event rows
"""

from kaudit.protocol.wire.apis import (
    api_name,
    is_flexible,
    request_header_version,
    response_header_version,
)
from kaudit.protocol.wire.bodies import FULLY_DECODED, body_decoder, decode_body
from kaudit.protocol.wire.framing import BadSize, Frame, FrameSplitter, Gap, Incomplete, Skipped
from kaudit.protocol.wire.headers import (
    RequestHeader,
    ResponseHeader,
    decode_request_header,
    decode_response_header,
    peek_correlation_id,
    plausible_request,
    plausible_response,
)
from kaudit.protocol.wire.messages import Request, Response, decode_request, decode_response
from kaudit.protocol.wire.records import RecordSet, decode_record_set
from kaudit.protocol.wire.sasl import redact_sasl_bytes

__all__ = [
    "FULLY_DECODED", "BadSize", "Frame", "FrameSplitter", "Gap", "Incomplete", "RecordSet",
    "Request", "RequestHeader", "Response", "ResponseHeader", "Skipped", "api_name",
    "body_decoder", "decode_body", "decode_record_set", "decode_request",
    "decode_request_header", "decode_response", "decode_response_header", "is_flexible",
    "peek_correlation_id", "plausible_request", "plausible_response", "redact_sasl_bytes",
    "request_header_version", "response_header_version",
]
