"""record_batch.control_info: the control type and coordinator epoch of a control batch read in
place for the broker's own markers agree with the full decode (`decode_batch_v2`, None where
it raises) on every batch - markers of every type and epoch, other record shapes (headers,
null or short keys and values, several records, compression, multi-byte varints), and any
byte of them changed or the batch cut."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.encoder.batches import Record, encode_control_batch, encode_record_batch_v2
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.record_batch import control_info, decode_batch_v2


def _reference(buf, offset, max_batch_bytes=1 << 20):
    try:
        b, _ = decode_batch_v2(buf, offset, max_batch_bytes=max_batch_bytes)
        return b.control_type, b.coordinator_epoch
    except DecodeError:
        return None, None


def test_markers_read_in_place():
    for ctype, epoch in (("COMMIT", 0), ("ABORT", 7), ("COMMIT", -1), ("ABORT", 2**31 - 1)):
        buf = memoryview(b"\0" * 5 + encode_control_batch(100, 42, 3, ctype, epoch))
        assert control_info(buf, 5, 1 << 20) == (ctype, epoch) == _reference(buf, 5)
    buf = encode_control_batch(0, 1, 0, 3, value=b"")   # SNAPSHOT_HEADER: no epoch read
    assert control_info(buf, 0) == ("SNAPSHOT_HEADER", None) == _reference(buf, 0)
    assert control_info(encode_control_batch(0, 1, 0, "COMMIT")[:-1], 0) == (None, None)


_bytes = st.one_of(st.none(), st.binary(max_size=9), st.binary(min_size=60, max_size=80))


@st.composite
def control_batches(draw):
    if draw(st.booleans()):
        batch = encode_control_batch(draw(st.integers(0, 2**40)), 5, 1, draw(st.integers(-3, 8)),
                                     draw(st.integers(-2**31, 2**31 - 1)),
                                     timestamp_type=draw(st.sampled_from(["create", "log_append"])))
    else:
        records = [Record(offset_delta=draw(st.integers(0, 200)), timestamp_delta=draw(st.integers(-100, 100)),
                          key=draw(_bytes), value=draw(_bytes),
                          headers=tuple(draw(st.lists(st.tuples(st.just("h"), _bytes), max_size=2))))
                   for _ in range(draw(st.integers(0, 2)))]
        batch = encode_record_batch_v2(0, records, is_transactional=True, is_control=draw(st.booleans()),
                                       codec=draw(st.sampled_from(["none", "none", "gzip"])),
                                       record_count=draw(st.one_of(st.none(), st.integers(-1, 3))))
    batch = bytearray(batch)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(batch) - 1))
        batch[at] = draw(st.integers(0, 255))
    return bytes(batch[:draw(st.integers(0, len(batch)))] if draw(st.integers(0, 9)) == 0 else batch)


@settings(max_examples=400, deadline=None)
@given(control_batches(), st.sampled_from([1 << 20, 60, 70]))
def test_in_place_agrees_with_the_full_decode(batch, max_batch_bytes):
    buf = memoryview(batch)
    assert control_info(buf, 0, max_batch_bytes) == _reference(buf, 0, max_batch_bytes)
