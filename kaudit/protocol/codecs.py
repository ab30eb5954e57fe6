"""Decompression for Kafka's codecs, always bounded by `max_bytes` of output.

Codec ids are the record-batch attribute bits 0-2: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
Snappy arrives xerial-framed from Java clients and raw from librdkafka; both are accepted.
A compressed payload that would expand past `max_bytes` raises `LimitExceeded` before the
output is materialised (no decompression bomb can exhaust memory).
"""

from __future__ import annotations

import io
import zlib

import cramjam
import lz4.block
import lz4.frame
import zstandard

from kaudit.protocol.errors import DecodeError, LimitExceeded, Truncated
from kaudit.protocol.primitives import read_uvarint

CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
XERIAL_MAGIC = b"\x82SNAPPY\x00"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

_zstd = zstandard.ZstdDecompressor()


def codec_name(codec_id: int) -> str:
    return CODEC_NAMES[codec_id] if 0 <= codec_id < len(CODEC_NAMES) else f"unknown-{codec_id}"


def decompress(codec_id: int, data, max_bytes: int = DEFAULT_MAX_BYTES, position: int = -1) -> bytes:
    """Decompress `data` (any buffer) with the codec; output never exceeds `max_bytes`."""
    if codec_id == 0:
        return bytes(data)
    try:
        if codec_id == 1:
            return _gunzip(data, max_bytes, position)
        if codec_id == 2:
            return _unsnappy(data, max_bytes, position)
        if codec_id == 3:
            return _unlz4(data, max_bytes, position)
        if codec_id == 4:
            return _unzstd(data, max_bytes, position)
    except DecodeError:
        raise
    except Exception as e:  # the codec libraries raise their own types on bad input
        raise DecodeError(f"{codec_name(codec_id)} decompression failed: {e}", position) from None
    raise DecodeError(f"unknown compression codec {codec_id}", position)


def _too_big(codec: str, max_bytes: int, position: int):
    return LimitExceeded(f"{codec} payload expands past --max-batch-bytes ({max_bytes})", position)


def _gunzip(data, max_bytes: int, position: int) -> bytes:
    d = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, auto-detected
    out = d.decompress(data, max_bytes + 1)
    if len(out) > max_bytes:
        raise _too_big("gzip", max_bytes, position)
    if not d.eof:
        raise Truncated("gzip stream ends early", position)
    return out


def _unsnappy(data, max_bytes: int, position: int) -> bytes:
    mv = memoryview(data)
    if bytes(mv[:8]) == XERIAL_MAGIC:
        # xerial framing: magic(8) version(4) compat(4), then [int32 length, raw block]*
        off = 16
        parts = []
        total = 0
        while off < len(mv):
            if off + 4 > len(mv):
                raise Truncated("xerial snappy block length cut", position)
            n = int.from_bytes(mv[off : off + 4], "big")
            off += 4
            if n > len(mv) - off:
                raise Truncated(f"xerial snappy block of {n} bytes cut", position)
            block = mv[off : off + n]
            off += n
            total += _raw_snappy_len(block, position)
            if total > max_bytes:
                raise _too_big("snappy", max_bytes, position)
            parts.append(bytes(cramjam.snappy.decompress_raw(block)))
        return b"".join(parts)
    if _raw_snappy_len(mv, position) > max_bytes:
        raise _too_big("snappy", max_bytes, position)
    return bytes(cramjam.snappy.decompress_raw(mv))


def _raw_snappy_len(block, position: int) -> int:
    # Raw snappy starts with the uncompressed length as a uvarint: checked before inflating.
    n, _ = read_uvarint(block, 0)
    return n


def _unlz4(data, max_bytes: int, position: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    try:
        out = d.decompress(bytes(data), max_length=max_bytes + 1)
    except RuntimeError:
        # Magic-0 writers put a wrong header checksum in the frame (KAFKA-3160) and Kafka's
        # reader ignores it; walk the frame's blocks ourselves, as Kafka does.
        return _unlz4_blocks(memoryview(data), max_bytes, position)
    if len(out) > max_bytes:
        raise _too_big("lz4", max_bytes, position)
    if not d.eof:
        raise Truncated("lz4 frame ends early", position)
    return out


_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _unlz4_blocks(mv, max_bytes: int, position: int) -> bytes:
    """An LZ4 frame decoded block by block, header checksum not verified (KafkaLZ4BlockInputStream)."""
    if len(mv) < 7 or bytes(mv[:4]) != b"\x04\x22\x4d\x18":
        raise DecodeError("not an lz4 frame", position)
    flg, bd = mv[4], mv[5]
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
    if block_max is None:
        raise DecodeError(f"lz4 frame block size code {(bd >> 4) & 7}", position)
    off = 6 + (8 if flg & 0x08 else 0) + 1  # optional content size, then the header checksum
    parts, total = [], 0
    while True:
        if off + 4 > len(mv):
            raise Truncated("lz4 frame ends early", position)
        size = int.from_bytes(mv[off : off + 4], "little")
        off += 4
        if size == 0:
            return b"".join(parts)
        raw, size = bool(size & 0x80000000), size & 0x7FFFFFFF
        if size > block_max or off + size > len(mv):
            raise DecodeError(f"lz4 block of {size} bytes", position)
        block = mv[off : off + size]
        off += size + (4 if flg & 0x10 else 0)
        out = bytes(block) if raw else lz4.block.decompress(block, uncompressed_size=block_max)
        total += len(out)
        if total > max_bytes:
            raise _too_big("lz4", max_bytes, position)
        parts.append(out)


def _unzstd(data, max_bytes: int, position: int) -> bytes:
    # stream_reader never trusts the frame's declared content size for allocation.
    parts = []
    total = 0
    with _zstd.stream_reader(io.BytesIO(bytes(data)), read_across_frames=True) as r:
        while True:
            chunk = r.read(min(max_bytes + 1 - total, 1 << 20))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise _too_big("zstd", max_bytes, position)
    return b"".join(parts)
