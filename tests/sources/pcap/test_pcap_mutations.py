"""Mutated real captures through the whole `decode pcap` pipeline: the input is either refused at
once with kaudit's DecodeError (not a capture) or decoded into rows; never another exception."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaudit.model import SCHEMAS
from kaudit.protocol.errors import DecodeError
from kaudit.sources.pcap import PcapOptions, decode_capture

SAMPLES = ["real-kafka-3.0.2/pcap/05-fence-java.pcap", "public/deepflow/*.pcap"]
OPTIONS = [PcapOptions(), PcapOptions(kafka_ports=frozenset({9092, 9093, 9094}), deep=True,
                                      max_frame_bytes=64 * 1024, max_batch_bytes=4096)]


@pytest.fixture(scope="module")
def captures(corpus):
    out = []
    for pattern in SAMPLES:
        out.extend(sorted(p for p in corpus.glob(pattern) if p.suffix == ".pcap"))
    if not out:
        pytest.skip("no sample captures in the corpus")
    return [p.read_bytes() for p in out]


_mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 7)),
    st.tuples(st.just("set"), st.floats(0, 1), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("cut"), st.floats(0, 1), st.none()),
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 300)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("duplicate"), st.floats(0, 1), st.integers(1, 400)),
    st.tuples(st.just("size"), st.floats(0, 1),
              st.sampled_from([b"\xff\xff\xff\xff", b"\0\0\0\0", b"\x7f\xff\xff\xff", b"\0\0\x01\0"])),
)


def mutate(buf: bytes, mutations, keep_header: bool = False) -> bytes:
    """`mutations` applied in turn; with keep_header, the pcap file header (24 bytes) is left
    alone so that the damage reaches the packets and the layers above."""
    b = bytearray(buf)
    low = 24 if keep_header else 0
    for op, where, arg in mutations:
        pos = min(low + int(where * (len(b) - low)), max(len(b) - 1, 0))
        if op == "flip" and b:
            b[pos] ^= 1 << arg
        elif op in ("set", "size"):
            b[pos:pos + len(arg)] = arg
        elif op == "cut":
            del b[pos:]
        elif op == "delete":
            del b[pos:pos + arg]
        elif op == "insert":
            b[pos:pos] = arg
        elif op == "duplicate":
            b[pos:pos] = b[pos:pos + arg]
    return bytes(b)


def run(path, options):
    """Rows by kind, or None when refused; asserts the refusal comes before any row."""
    chunks = decode_capture(str(path), options)
    try:
        first = next(chunks)
    except StopIteration:
        return {}
    except DecodeError:
        return None
    out = {}
    for kind, table in [first, *chunks]:  # after the first chunk: nothing may raise
        assert kind in SCHEMAS and isinstance(table, pa.Table)
        assert table.schema.equals(SCHEMAS[kind])
        out[kind] = out.get(kind, 0) + table.num_rows
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(big=st.booleans(), pick=st.integers(0, 10_000),
       mutations=st.lists(_mutation, min_size=1, max_size=6), header=st.integers(0, 4),
       which=st.integers(0, len(OPTIONS) - 1))
def test_mutated_captures_decode_or_are_refused(captures, tmp_path, big, pick, mutations, header,
                                                which):
    # half of the examples on the largest capture (a whole transactional session), the others
    # on the small ones; one in five may damage the file header too
    sample = max(captures, key=len) if big else captures[pick % len(captures)]
    buf = mutate(sample, mutations, keep_header=header != 0)
    path = tmp_path / "mutated.pcap"
    path.write_bytes(buf)
    out = run(path, OPTIONS[which])
    if out is None:
        return
    # what was decoded is accounted for: every connection has its row
    if out.get("frame"):
        assert out.get("connection")


def test_unmutated_samples_decode(captures, tmp_path):
    for i, buf in enumerate(captures):
        path = tmp_path / f"{i}.pcap"
        path.write_bytes(buf)
        out = run(path, OPTIONS[0])
        assert out and out.get("frame") and out.get("connection"), i


@pytest.mark.parametrize("blob", [b"", b"\0", b"not a capture at all", b"\xd4\xc3\xb2\xa1",
                                  b"\x0a\x0d\x0d\x0a" + b"\0" * 8])
def test_not_a_capture_is_refused_at_once(blob, tmp_path):
    path = tmp_path / "x.pcap"
    path.write_bytes(blob)
    with pytest.raises(DecodeError):
        next(decode_capture(str(path)))
