"""The compiled record-batch core against its pure-Python twin on bad input: every truncation,
every single-byte change and random mutations of real-looking batches give the same scan, the
same record rows and the same issues on both paths - never a crash, never a read past the end."""

from __future__ import annotations

import random

import crc32c
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.encoder.batches import Record, encode_record_batch_v2
from kaudit import native
from kaudit.protocol import batch_scan
from kaudit.sources.records import RecordRows

C = native.module("kaudit.protocol._cbatch")
pytestmark = pytest.mark.skipif(C is None, reason="the compiled core is not built")
PLACE = {"source": "s", "replica": "1", "log_dir": "d", "topic": "t", "partition": 0}


def _log() -> bytes:
    recs = [Record(offset_delta=i, timestamp_delta=i * 3, key=b"k%d" % i if i % 3 else None,
                   value=b"v" * (i * 7) if i % 4 else b"",
                   headers=(("h", b"x"), ("tr\u00e9", None)) if i == 2 else ())
            for i in range(6)]
    parts = [encode_record_batch_v2(0, recs, producer_id=5, producer_epoch=1, base_sequence=2147483646),
             encode_record_batch_v2(6, recs[:2], codec="lz4", timestamp_type="log_append"),
             encode_record_batch_v2(8, recs[:1], codec="gzip", is_transactional=True),
             encode_record_batch_v2(9, [Record(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x07")],
                                    is_transactional=True, is_control=True, producer_id=5)]
    return b"".join(parts)


LOG = _log()


def _records(buf: bytes) -> dict:
    """record/decode_issue rows of every plausible entry start in `buf` (as segment_log does)."""
    rows = RecordRows(PLACE, "t", deep=True, max_batch_bytes=1 << 20)
    for p in range(0, max(len(buf) - 16, 0)):
        if buf[p + 16] == 2:
            rows.add_v2(buf, p)
    out = {}
    for kind, t in rows.flush():
        out.setdefault(kind, []).append(t)
    return {k: pa.concat_tables(v).to_pylist() for k, v in out.items()}


def _same(buf: bytes) -> None:
    with native.pure(False):
        a = (batch_scan.scan_v2(buf, 0, len(buf), 1000, 1 << 20), _records(buf),
             [batch_scan.plausible_v2(buf, p, len(buf), 1 << 20) for p in range(0, len(buf), 5)])
    with native.pure(True):
        b = (batch_scan.scan_v2(buf, 0, len(buf), 1000, 1 << 20), _records(buf),
             [batch_scan.plausible_v2(buf, p, len(buf), 1 << 20) for p in range(0, len(buf), 5)])
    assert a == b


def test_crc32c_is_the_packages():
    rng = random.Random(7)
    for n in (0, 1, 7, 8, 9, 61, 1000, 16411):
        data = rng.randbytes(n)
        assert C.crc32c(data) == crc32c.crc32c(data)


def test_the_corpus_like_log_agrees():
    _same(LOG)
    with native.pure(False):
        assert len(_records(LOG)["record"]) == 10


def test_truncated_at_every_byte():
    for n in range(len(LOG) + 1):
        _same(LOG[:n])


def test_every_single_byte_change_of_the_first_batch():
    first = len(encode_record_batch_v2(0, []))  # only the header; records follow
    for i in range(first + 120):
        for v in (0x00, 0x7F, 0x80, 0xFF):
            b = bytearray(LOG)
            b[i] = v
            _same(bytes(b))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(LOG) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       st.booleans())
def test_random_mutations(changes, fix_crc):
    b = bytearray(LOG)
    for i, v in changes:
        b[i] = v
    if fix_crc:  # reach the record walk: the first batch's CRC made to match again
        length = int.from_bytes(b[8:12], "big", signed=True)
        if 49 <= length <= len(b) - 12:
            b[17:21] = crc32c.crc32c(bytes(b[21:12 + length])).to_bytes(4, "big")
    _same(bytes(b))


def _headers_both(buf: bytes, positions: list[int], oks: list[bool]):
    from kaudit.sources import batch_table
    a = batch_table.v2_table(buf, positions, oks, PLACE, lambda p: ("COMMIT", 0))
    with native.pure(True):
        b = batch_table.v2_table(buf, positions, oks, PLACE, lambda p: ("COMMIT", 0))
    return a, b


def test_header_columns_agree_on_the_log_and_every_mutation():
    """v2_headers (one C pass) and the numpy gather give the same batch table: on the log as
    scanned and with any byte of the first header changed (the headers are data, not checked)."""
    positions, oks, _, _ = batch_scan.scan_v2(LOG, 0, len(LOG), 100, 1 << 20)
    a, b = _headers_both(LOG, positions, oks)
    assert a.equals(b) and a.num_rows == 4
    for i in range(61):
        buf = bytearray(LOG)
        buf[i] ^= 0xA5
        a, b = _headers_both(bytes(buf), positions, oks)
        assert a.equals(b), i


@given(st.lists(st.integers(-70, len(LOG) + 70), max_size=8))
@settings(max_examples=200, deadline=None)
def test_header_positions_are_bounds_checked(positions):
    """A position whose 61 bytes are not all in the buffer is refused, never read."""
    fits = all(0 <= p and p + 61 <= len(LOG) for p in positions)
    if fits:
        hdr, pos, oks = C.v2_headers(LOG, positions, [True] * len(positions))
        assert len(hdr) == 61 * len(positions) and list(memoryview(pos).cast("q")) == positions
    else:
        with pytest.raises(ValueError):
            C.v2_headers(LOG, positions, [True] * len(positions))


def _run_records(buf: bytes, positions: list[int]) -> dict:
    """As _records, with the positions handed over as one run (RecordRows.add_v2_run)."""
    rows = RecordRows(PLACE, "t", deep=True, max_batch_bytes=1 << 20)
    rows.add_v2_run(buf, positions)
    out = {}
    for kind, t in rows.flush():
        out.setdefault(kind, []).append(t)
    return {k: pa.concat_tables(v).to_pylist() for k, v in out.items()}


@pytest.mark.parametrize("flush_bytes", [1, 60, 1 << 22])
def test_a_run_of_batches_gives_the_rows_of_one_call_each(monkeypatch, flush_bytes):
    """add_batches walks a run in one call: with declined batches inside the run (control,
    corrupt, mid-batch positions) and record tables cut anywhere (FLUSH_RECORD_BYTES), the rows
    are those of one call per batch, and those of the pure path."""
    from kaudit.sources import records
    monkeypatch.setattr(records, "FLUSH_RECORD_BYTES", flush_bytes)
    rng = random.Random(7)
    for trial in range(60):
        buf = bytearray(LOG)
        if trial:
            buf[rng.randrange(len(buf))] ^= rng.randrange(1, 256)
        buf = bytes(buf)
        positions = [p for p in range(0, max(len(buf) - 16, 0)) if buf[p + 16] == 2]
        with native.pure(False):
            run = _run_records(buf, positions)
            one = _records(buf)
        with native.pure(True):
            pure = _run_records(buf, positions)
        assert run == one == pure, trial
