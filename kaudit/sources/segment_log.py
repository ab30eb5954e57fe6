"""Decode one `.log` segment (or KRaft `.checkpoint`) into rows, tolerating whatever the disk holds.

The file is mapped read-only; runs of well-formed v2 batches go through the vectorised hot path,
anything else through the careful decoder. A cut tail becomes a `truncated-tail` issue, a
zero-filled tail a `zero-fill` issue, a corrupt region a `corrupt` issue spanning up to the next
plausible batch (magic, sane length, matching CRC), where decoding resumes. Pages already decoded
are released (`MADV_DONTNEED`) so resident memory stays flat whatever the segment size.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from kaudit.model import table_from_rows
from kaudit.protocol.batch_scan import STOP_END, STOP_LIMIT, plausible_v2, scan_v2
from kaudit.protocol.errors import DecodeError, LimitExceeded, Truncated
from kaudit.protocol.record_batch import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    control_info,
    decode_entry,
    decode_legacy,
)
from kaudit.sources.batch_table import batch_row, v2_table
from kaudit.sources.records import RecordRows

# Batches per chunk: the folds pay a fixed cost per chunk. Measured on 6.3 M one-record batches
# (issue 19, interleaved, best of three): 16,384 decode 2.06 s / audit 2.87 s / audit RSS 174 MB;
# 32,768 1.96 / 2.28 / 188 MB; 65,536 1.68 / 2.28 / 224 MB (the audit no faster, 35 MB more).
CHUNK_BATCHES = 32768
CHUNK_BYTES = 32 << 20  # pages behind this window are released
# with record rows (--deep, internal topics) a window's rows hold its keys and values too
RECORD_CHUNK_BYTES = 8 << 20
_PAGE = mmap.PAGESIZE


def open_readonly(path: str):
    """(fd-less) read-only mapping of `path`, or None for an empty file. Never writable."""
    with open(path, "rb") as f:  # read-only: kaudit never writes to what it audits
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def decode_log(target, *, deep: bool, max_batch_bytes: int, chunk_batches: int = CHUNK_BATCHES,
               start: int = 0, stop: int | None = None) -> Iterator[tuple[str, pa.Table]]:
    """(kind, table) chunks for one segment file: batch rows, record-level rows, issues.

    `start`/`stop` decode one byte range of it (a split, sources/splits.py): the entries that
    start in [start, stop). `start` must be an entry's first byte (an `.index` position), so the
    ranges of one file give, together, the rows of the whole file."""
    place = target.place()
    mm = open_readonly(target.path)
    if mm is None:
        return
    try:
        yield from _decode(mm, place, target, deep, max_batch_bytes, chunk_batches, start, stop)
    finally:
        try:
            mm.close()
        except BufferError:  # an exported view still alive: the GC will unmap it
            pass


def _decode(mm, place, target, deep, max_batch_bytes, chunk_batches, start=0, until=None):
    size = len(mm)
    until = size if until is None else min(until, size)
    mv = memoryview(mm)
    records = RecordRows(place, target.topic, deep, max_batch_bytes)
    batch_place = dict(place, topic_id=target.topic_id)   # only batch rows have a topic_id
    pos = start
    released = start
    window = RECORD_CHUNK_BYTES if records.wanted else CHUNK_BYTES
    try:
        while pos < until:
            # the span bound also stops the scan at the first entry at or after `until`
            positions, oks, stop, reason = scan_v2(mv, pos, size, chunk_batches, max_batch_bytes,
                                                    min(window, until - pos))
            if positions:
                yield "batch", v2_table(mv, positions, oks, batch_place,
                                        lambda p: _control_info(mv, p, max_batch_bytes))
                if records.wanted:
                    records.add_v2_run(mv, positions)
                    yield from records.flush()
            pos = stop
            if reason == STOP_END:
                break
            if reason == STOP_LIMIT:
                released = _release(mm, released, pos)
                continue
            pos, rows, issue = _careful(mv, mm, pos, size, until, deep, max_batch_bytes, records)
            if rows:
                yield "batch", table_from_rows("batch", [batch_row(b, batch_place) for b in rows])
                yield from records.flush()
            if issue:
                issue.update(place)
                yield "decode_issue", table_from_rows("decode_issue", [issue])
            if pos is None:
                break
        yield from records.flush()
    finally:
        mv.release()


def _control_info(mv, p, max_batch_bytes):
    return control_info(mv, p, max_batch_bytes)


def _release(mm, released: int, upto: int) -> int:
    start = released - released % _PAGE
    end = upto - upto % _PAGE
    if end > start and hasattr(mm, "madvise"):
        try:
            mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        except (OSError, ValueError):
            pass
    return max(released, end)


def _careful(mv, mm, pos, size, until, deep, max_batch_bytes, records, max_entries: int = 4096):
    """Decode entries one at a time from `pos`, which the fast scan declined: a run of legacy
    messages (kept together so an old log does not cost one table per message), a batch with a
    CRC mismatch, or a region to report and skip.

    -> (next position or None to stop, [Batch], issue dict or None)
    """
    batches = []
    while pos < until and len(batches) < max_entries:
        if batches and peek_magic_or_none(mv, pos) == 2:
            return pos, batches, None  # back to the fast path
        try:
            batch, nxt = decode_entry(mv, pos, deep=False, max_batch_bytes=max_batch_bytes)
            if batch.crc_ok or nxt >= size or _plausible_header(mv, nxt, size, max_batch_bytes):
                records.add_entry(mv, pos, batch.magic)
                batches.append(batch)
                pos = nxt
                continue
            # CRC fails and what follows is no batch: the length itself is likely corrupt.
            err = DecodeError("CRC mismatch and no batch follows: corrupt length", pos)
        except DecodeError as e:  # Truncated included
            err = e
        if batches:
            return pos, batches, None  # report the bad region on the next call
        return _bad_region(mv, mm, pos, size, max_batch_bytes, err)
    return (pos if pos < size else None), batches, None


def peek_magic_or_none(mv, pos):
    return mv[pos + MAGIC_OFFSET] if pos + MAGIC_OFFSET < len(mv) else None


def _bad_region(mv, mm, pos, size, max_batch_bytes, err):
    if isinstance(err, LimitExceeded):
        # A real batch larger than the bound: skip exactly it when what follows is plausible.
        end = pos + LOG_OVERHEAD + int.from_bytes(mv[pos + 8 : pos + 12], "big", signed=True)
        if pos < end <= size and (end == size or _plausible_header(mv, end, size, size)):
            return (end if end < size else None), [], _issue(
                pos, end - pos, "limit", f"{err.message}: batch skipped, not decoded", end if end < size else None)
    if size - pos >= 61 and _all_zero(mv, pos, size):  # shorter zero runs are just a cut header
        return None, [], _issue(pos, size - pos, "zero-fill",
                                "zero-filled tail (preallocated or never written)", None)
    resync = find_next_entry(mm, pos + 1, size, max_batch_bytes)
    if resync is None:
        if isinstance(err, Truncated):
            return None, [], _issue(pos, size - pos, "truncated-tail",
                                    f"segment ends mid-batch: {err.message}", None)
        return None, [], _issue(pos, size - pos, "corrupt",
                                f"{err.message}; no valid batch after it", None)
    return resync, [], _issue(pos, resync - pos, "corrupt",
                              f"{err.message}; resynced at byte {resync}", resync)


def _issue(position, length, issue, message, resync):
    return {"position": position, "length": length, "issue": issue, "message": message,
            "resync_position": resync}


def _plausible_header(mv, pos, size, max_batch_bytes) -> bool:
    """An entry header (any magic) could start at `pos`: used to trust a CRC-failed length."""
    if pos + MAGIC_OFFSET >= size:
        return pos + LOG_OVERHEAD > size  # a few stray bytes: leave it to the tail handling
    length = int.from_bytes(mv[pos + 8 : pos + 12], "big", signed=True)
    magic = mv[pos + MAGIC_OFFSET]
    return magic in (0, 1, 2) and 14 <= length <= max_batch_bytes


def _all_zero(mv, pos, size) -> bool:
    step = 1 << 24
    for start in range(pos, size, step):
        if np.frombuffer(mv[start : min(size, start + step)], dtype=np.uint8).any():
            return False
    return True


def find_next_entry(mm, start: int, end: int, max_batch_bytes: int):
    """The next position >= start where a v2 batch with a valid CRC (or a legacy message with a
    valid CRC) starts, or None. Candidates are found by their magic byte."""
    mv = memoryview(mm)
    try:
        i = start + MAGIC_OFFSET
        while True:
            i = mm.find(b"\x02", i, end)
            if i < 0:
                break
            p = i - MAGIC_OFFSET
            if plausible_v2(mv, p, end, max_batch_bytes):
                return p
            i += 1
        return _find_legacy(mm, mv, start, end, max_batch_bytes)
    finally:
        mv.release()


def _find_legacy(mm, mv, start, end, max_batch_bytes):
    for magic in (b"\x01", b"\x00"):
        i = start + MAGIC_OFFSET
        tries = 0
        while tries < 100_000:
            i = mm.find(magic, i, end)
            if i < 0:
                break
            tries += 1
            p = i - MAGIC_OFFSET
            try:
                b, _ = decode_legacy(mv, p, max_batch_bytes=max_batch_bytes)
                if b.crc_ok:
                    return p
            except DecodeError:
                pass
            i += 1
    return None
