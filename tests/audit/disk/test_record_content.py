"""record_content.records_crc: the checksum of a batch's record bytes alone, derived from the batch
columns, equals the CRC of those bytes read from the file (v2 of every codec, magic 0 and 1)."""

from __future__ import annotations

import zlib

import numpy as np
from diskcraft import logdir

from kaudit.audit.producers.record_content import records_crc
from kaudit.protocol.crc import crc32c
from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target


def _check(root) -> int:
    n = 0
    for t in plan([str(root)]).targets:
        if t.kind != "log":
            continue
        data = open(t.path, "rb").read()
        for kind, tab in decode_target(t, Options()):
            if kind != "batch":
                continue
            got = records_crc(tab, np.ones(tab.num_rows, dtype=bool)).tolist()
            for g, p, s, m in zip(got, tab.column("position").to_pylist(), tab.column("batch_size").to_pylist(),
                                  tab.column("magic").to_pylist()):
                want = {2: lambda: crc32c(data[p + 61:p + s]) | 2 << 32,
                        1: lambda: zlib.crc32(data[p + 26:p + s]) | 1 << 32,
                        0: lambda: zlib.crc32(data[p + 16:p + s])}[m]()
                assert g == want, (t.path, p, m)
                n += 1
    return n


def test_records_crc_is_the_crc_of_the_record_bytes(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        pb.append_batch(values=[b"v%d" % i * 7 for i in range(9)], keys=[b"k", None] * 4 + [b""], codec=codec,
                        headers=[[("h", b"x")]] * 9, timestamp=-1 if codec == "none" else 1_700_000_000_000)
    pb.producer(7, 3).send([b"a", b"b"])
    pb.append_legacy([b"old", b"older"], magic=0)
    pb.append_legacy([b"one", b"two"], magic=1, timestamp=5)
    pb.append_legacy([b"wrapped", b"too"], magic=1, codec="gzip", timestamp=9)
    assert _check(ld.write()) == 11


def test_same_records_same_checksum_whatever_the_header(tmp_path):
    """Other producer, sequence, batch timestamp: the same records, the same checksum; another
    record (key, value, header, timestamp delta) changes it."""
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    pb.append_batch(values=[b"x", b"y"], keys=[b"k", b"k"], timestamp=1_000)
    pb.append_batch(values=[b"x", b"y"], keys=[b"k", b"k"], timestamp=99_000)
    pb.producer(5, 1).send([b"x", b"y"], keys=[b"k", b"k"])
    pb.append_batch(values=[b"x", b"z"], keys=[b"k", b"k"], timestamp=1_000)
    pb.append_batch(values=[b"x", b"y"], keys=[b"k", b"j"], timestamp=1_000)
    pb.append_legacy([b"same"], magic=1, timestamp=1)
    pb.append_legacy([b"same"], magic=1, timestamp=2)
    root = ld.write()
    [t] = [t for t in plan([str(root)]).targets if t.kind == "log"]
    c = [x for kind, tab in decode_target(t, Options()) if kind == "batch"
         for x in records_crc(tab, np.ones(tab.num_rows, dtype=bool)).tolist()]
    assert c[0] == c[1] and c[5] == c[6]
    assert len({c[0], c[3], c[4], c[5]}) == 4


def _row(data: bytes) -> dict:
    """The batch columns records_crc reads, parsed from v2 bytes."""
    import struct

    (base, length, _ple, magic, crc, attrs, lod, bts, mts, pid, epoch, seq, count) = struct.unpack_from(
        ">qiibIhiqqqhii", data, 0)
    return {"magic": magic, "crc": crc, "batch_size": length + 12, "base_offset": base, "last_offset": base + lod,
            "attributes": attrs, "base_timestamp_ms": bts, "max_timestamp_ms": mts, "producer_id": pid,
            "producer_epoch": epoch, "base_sequence": seq, "record_count": count}


def _table(rows):
    import pyarrow as pa

    return pa.table({k: [r[k] for r in rows] for k in rows[0]})


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=12)), st.one_of(st.none(), st.binary(max_size=40)),
                              st.integers(0, 5000), st.lists(st.tuples(st.text(max_size=4), st.binary(max_size=6)), max_size=2)),
                    min_size=1, max_size=6)
_header = st.tuples(st.integers(-1, 2**40), st.integers(-1, 2**40), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1),
                    st.integers(0, 2**40), st.booleans())


@settings(max_examples=40, deadline=None)
@given(_records, _header, _header)
def test_generated_batches_compare_by_their_records(recs, h1, h2):
    """For any records and any two batch headers: records_crc is the CRC of the record bytes, and
    the same records under either header compare equal."""
    from fixtures import kafka_encoder as ke

    records = [ke.Record(offset_delta=i, timestamp_delta=td, key=k, value=v, headers=tuple(h))
               for i, (k, v, td, h) in enumerate(recs)]
    out = []
    for pid, bts, epoch, seq, base, txn in (h1, h2):
        data = ke.encode_record_batch_v2(base, records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                         base_timestamp=bts, is_transactional=txn)
        got = records_crc(_table([_row(data)]), np.ones(1, dtype=bool)).tolist()[0]
        assert got == crc32c(data[61:]) | 2 << 32
        out.append(got)
    assert out[0] == out[1]
