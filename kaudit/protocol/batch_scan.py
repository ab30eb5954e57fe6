"""The hot path: walk a run of well-formed magic 2 batches, verifying CRCs, without decoding.

`scan_v2` returns the byte positions of the batches it walked and stops at the first entry that
is not a plausible v2 batch (legacy magic, a cut tail, a corrupt length, a control batch is fine);
the caller decodes headers of the walked batches in bulk (vectorised) and hands the stop position
to the careful decoder in `record_batch`. Sans-IO: works on any buffer.
"""

from __future__ import annotations

import struct

from kaudit import native
from kaudit.protocol.crc import crc32c
from kaudit.protocol.record_batch import CRC_START, LOG_OVERHEAD, V2_MIN_LENGTH

_C = "kaudit.protocol._cbatch"  # the compiled twins of plausible_v2 and scan_v2

_PREFIX = struct.Struct(">qiibI")  # base_offset, batch_length, leader epoch, magic, crc

STOP_END = "end"              # walked to `end` exactly
STOP_LIMIT = "limit"          # `max_batches` reached
STOP_OTHER = "other"          # next entry needs the careful decoder (magic, length, cut tail)


def plausible_v2(buf, pos: int, end: int, max_batch_bytes: int) -> bool:
    """A v2 batch starts at `pos`: magic 2, sane length within `end`, and a matching CRC."""
    c = native.module(_C)
    if c is not None:
        return c.plausible_v2(buf, pos, end, max_batch_bytes)
    if pos + 61 > end:
        return False
    _, length, _, magic, crc = _PREFIX.unpack_from(buf, pos)
    if magic != 2 or length < V2_MIN_LENGTH or length > max_batch_bytes:
        return False
    stop = pos + LOG_OVERHEAD + length
    if stop > end:
        return False
    return crc32c(memoryview(buf)[pos + CRC_START : stop]) == crc


def scan_v2(buf, start: int, end: int, max_batches: int, max_batch_bytes: int,
            max_span: int = 1 << 62):
    """-> (positions, crc_ok, stop_position, stop_reason).

    Stops with STOP_LIMIT after `max_batches` batches or once `max_span` bytes were walked.

    A batch whose CRC fails is still walked when the entry after it is plausible (a flipped
    payload byte is data: `crc_ok` False); when it is not, the scan stops there so the caller
    can treat the region as corrupt and resync.
    """
    c = native.module(_C)
    if c is not None:
        return c.scan_v2(buf, start, end, max_batches, max_batch_bytes, max_span)
    mv = memoryview(buf)
    unpack = _PREFIX.unpack_from
    positions = []
    oks = []
    append_p = positions.append
    append_ok = oks.append
    pos = start
    limit = end - 61
    span_end = start + max_span
    n = 0
    while pos <= limit:
        if n >= max_batches or pos >= span_end:
            return positions, oks, pos, STOP_LIMIT
        _, length, _, magic, crc = unpack(mv, pos)
        nxt = pos + LOG_OVERHEAD + length
        if magic != 2 or length < V2_MIN_LENGTH or length > max_batch_bytes or nxt > end:
            return positions, oks, pos, STOP_OTHER
        ok = crc32c(mv[pos + CRC_START : nxt]) == crc
        if not ok and nxt != end and not plausible_v2(mv, nxt, end, max_batch_bytes):
            return positions, oks, pos, STOP_OTHER
        append_p(pos)
        append_ok(ok)
        n += 1
        pos = nxt
    return positions, oks, pos, (STOP_END if pos == end else STOP_OTHER)
