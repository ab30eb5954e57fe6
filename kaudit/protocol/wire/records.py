"""Record sets inside Produce requests and Fetch responses, decoded with the one record layer
(`kaudit.protocol.record_batch.decode_entry`: v2 batches and magic 0/1 message sets).

A broker fills a Fetch response up to the byte limits, so its last entry may be cut: that is
normal (`truncated` > 0, no error). Anywhere else a cut entry, or any corrupt entry, stops the
decoding of that record set with `error` set; the batches before it are kept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from crc32c import crc32c

from kaudit.protocol.codecs import DEFAULT_MAX_BYTES
from kaudit.protocol.errors import DecodeError, Truncated
from kaudit.protocol.record_batch import (
    ATTR_CONTROL,
    CRC_START,
    LOG_OVERHEAD,
    V2_HEADER,
    V2_HEADER_SIZE,
    V2_MIN_LENGTH,
    Batch,
    decode_entry,
)

_LEN = struct.Struct(">i")


@dataclass(slots=True)
class RecordSet:
    size: int  # bytes of the record set field
    batches: list = field(default_factory=list)  # [record_batch.Batch]; positions are
    #                                              offsets from the start of the record set
    truncated: int = 0  # bytes of a cut last entry (normal in Fetch responses)
    error: DecodeError | None = None  # decoding stopped here (position: from the set's start)

    @property
    def partial(self) -> bool:
        return self.truncated > 0


def decode_record_set(data, *, tail_may_be_cut: bool, deep: bool = False,
                      max_batch_bytes: int = DEFAULT_MAX_BYTES) -> RecordSet | None:
    """A record set's bytes (None for a null record set) -> RecordSet."""
    if data is None:
        return None
    view = memoryview(data)
    end = len(view)
    rs = RecordSet(end)
    batches = rs.batches
    off = 0
    header = V2_HEADER.unpack_from
    while off < end:
        if not deep and end - off >= V2_HEADER_SIZE:
            # the common case, inline: a whole v2 data batch (decode_batch_v2 gives the same)
            h = header(view, off)
            length = h[1]
            nxt = off + LOG_OVERHEAD + length
            if (h[3] == 2 and V2_MIN_LENGTH <= length <= max_batch_bytes and nxt <= end
                    and not h[5] & ATTR_CONTROL):
                batches.append(Batch(off, h[0], length, h[2], 2, h[4],
                                     crc32c(view[off + CRC_START : nxt]) == h[4], *h[5:]))
                off = nxt
                continue
        if end - off < LOG_OVERHEAD:
            cut = True
        else:
            length = _LEN.unpack_from(view, off + 8)[0]
            cut = 0 <= length <= max_batch_bytes and off + LOG_OVERHEAD + length > end
        if cut:
            rs.truncated = end - off
            if not tail_may_be_cut:
                rs.error = Truncated(f"record set entry cut after {end - off} bytes", off)
            break
        try:
            batch, off = decode_entry(view, off, deep=deep, max_batch_bytes=max_batch_bytes)
        except DecodeError as e:
            rs.error = e
            break
        batches.append(batch)
    return rs
