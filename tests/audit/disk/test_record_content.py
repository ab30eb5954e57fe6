"""record_content.records_crc: the checksum of a batch's record bytes alone, derived from the batch
columns, equals the CRC of those bytes read from the file (v2 of every codec, magic 0 and 1)."""

from __future__ import annotations

import zlib

import numpy as np
from diskcraft import logdir

from kaudit.audit.record_content import records_crc
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
