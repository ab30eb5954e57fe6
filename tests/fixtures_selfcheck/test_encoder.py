"""Self-check of the test-only encoder (fixtures/kafka_encoder.py) against REAL bytes.

Every batch, coordinator record, snapshot and index file written by real Kafka brokers in the
corpus is parsed by a tiny private parser below (with the builder's varint reader; not kaudit's
decoder: the two must stay independent) and re-encoded from its decoded fields; the bytes must
be identical.
Skips cleanly when ../shared/corpus is absent.
"""

from __future__ import annotations

import gzip
import struct
import sys
import zlib
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from fixtures import kafka_encoder as ke  # noqa: E402
from fixtures.builder.scan import read_varint  # noqa: E402

CORPUS = _ROOT.parent / "shared" / "corpus"
KAFKA3 = CORPUS / "real-kafka-3.0.2" / "logdirs-final" / "node1" / "data"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


# ------------------------------------------------------------------ tiny private parser


def _snappy_decompress(data: bytes) -> bytes:
    import cramjam

    if data.startswith(ke.XERIAL_MAGIC):
        out, pos = bytearray(), 16
        while pos < len(data):
            (n,) = struct.unpack_from(">i", data, pos)
            out += bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        return bytes(out)
    return bytes(cramjam.snappy.decompress_raw(data))


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    if codec == 2:
        return _snappy_decompress(data)
    if codec == 3:
        import lz4.frame

        return lz4.frame.decompress(data)
    if codec == 4:
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    raise AssertionError(codec)


def _parse_records(data: bytes, count: int):
    recs, pos = [], 0
    for _ in range(count):
        length, pos = read_varint(data, pos)
        end = pos + length
        attributes = data[pos]
        pos += 1
        ts_delta, pos = read_varint(data, pos)
        off_delta, pos = read_varint(data, pos)
        klen, pos = read_varint(data, pos)
        key = None if klen < 0 else data[pos : pos + klen]
        pos += max(klen, 0)
        vlen, pos = read_varint(data, pos)
        value = None if vlen < 0 else data[pos : pos + vlen]
        pos += max(vlen, 0)
        nh, pos = read_varint(data, pos)
        headers = []
        for _ in range(nh):
            hk, pos = read_varint(data, pos)
            hkey = data[pos : pos + hk].decode()
            pos += hk
            hv, pos = read_varint(data, pos)
            hval = None if hv < 0 else data[pos : pos + hv]
            pos += max(hv, 0)
            headers.append((hkey, hval))
        assert pos == end
        recs.append(
            ke.Record(
                offset_delta=off_delta,
                timestamp_delta=ts_delta,
                key=key,
                value=value,
                headers=tuple(headers),
                attributes=attributes,
            )
        )
    assert pos == len(data)
    return recs


def _parse_batches(buf: bytes):
    pos = 0
    while pos + 61 <= len(buf):
        (base_offset, length, ple, magic, crc, attributes, lod, base_ts, max_ts, pid, epoch, base_seq, count) = (
            ke._HDR_V2.unpack_from(buf, pos)
        )
        assert magic == 2
        raw = buf[pos : pos + 12 + length]
        body = raw[61:]
        codec = attributes & 7
        yield dict(
            position=pos,
            raw=raw,
            base_offset=base_offset,
            partition_leader_epoch=ple,
            crc=crc,
            attributes=attributes,
            codec=codec,
            last_offset_delta=lod,
            base_timestamp=base_ts,
            max_timestamp=max_ts,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=base_seq,
            count=count,
            body=body,
            records=_parse_records(_decompress(codec, body), count),
        )
        pos += 12 + length
    assert pos == len(buf), "trailing bytes"


def _reencode(b, *, raw_records=None, codec=None):
    a = b["attributes"]
    return ke.encode_record_batch_v2(
        b["base_offset"],
        b["records"],
        partition_leader_epoch=b["partition_leader_epoch"],
        codec=codec or CODECS[b["codec"]],
        timestamp_type="log_append" if a & 8 else "create",
        is_transactional=bool(a & 0x10),
        is_control=bool(a & 0x20),
        has_delete_horizon=bool(a & 0x40),
        producer_id=b["producer_id"],
        producer_epoch=b["producer_epoch"],
        base_sequence=b["base_sequence"],
        base_timestamp=b["base_timestamp"],
        max_timestamp=b["max_timestamp"],
        last_offset_delta=b["last_offset_delta"],
        raw_records=raw_records,
    )


def _all_logs():
    return sorted(
        p
        for p in CORPUS.rglob("*.log")
        if "logdirs" in str(p) and p.parent.name != "client-logs" and p.name[:20].isdigit()
    )


# ------------------------------------------------------------------ record batches


@needs_corpus
def test_j_fence_batches_byte_for_byte():
    path = KAFKA3 / "j-fence-0" / "00000000000000000000.log"
    buf = path.read_bytes()
    batches = list(_parse_batches(buf))
    assert len(batches) == 7
    out = bytearray()
    for b in batches:
        if b["attributes"] & 0x20:
            key = b["records"][0].key
            value = b["records"][0].value
            (ctype,) = struct.unpack(">xxh", key)
            (coord_epoch,) = struct.unpack(">xxi", value)
            enc = ke.encode_control_batch(
                b["base_offset"],
                b["producer_id"],
                b["producer_epoch"],
                {0: "ABORT", 1: "COMMIT"}[ctype],
                coordinator_epoch=coord_epoch,
                timestamp=b["base_timestamp"],
            )
        else:
            enc = _reencode(b)
        assert enc == b["raw"], f"batch at {b['position']}"
        out += enc
    assert bytes(out) == buf
    # known facts of this partition (DumpLogSegments): ABORT by the coordinator with epoch 1
    assert [b["producer_epoch"] for b in batches] == [0, 0, 0, 1, 2, 2, 2]
    assert batches[3]["crc"] == 2031051061


@needs_corpus
def test_every_real_batch_reencodes_byte_for_byte():
    """All uncompressed v2 batches of every corpus log dir (real 3.0.2 cluster, extra
    scenarios, wild log dirs incl. KRaft metadata); compressed ones with their real payload."""
    n = 0
    for path in _all_logs():
        buf = path.read_bytes()
        for b in _parse_batches(buf):
            raw = b["body"] if b["codec"] else None
            assert _reencode(b, raw_records=raw) == b["raw"], f"{path}@{b['position']}"
            n += 1
    assert n > 1000


@needs_corpus
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(codec):
    """comp-<codec>-0/1/2 were written by librdkafka / kafka-python / aiokafka. The records
    encode identically; our own compression round-trips through the standard libraries; the
    framing matches what the Java/kafka-python clients write."""
    for p in range(3):
        buf = (KAFKA3 / f"comp-{codec}-{p}" / "00000000000000000000.log").read_bytes()
        for b in _parse_batches(buf):
            assert b["codec"] == ke.CODEC_IDS[codec]
            inner = _decompress(b["codec"], b["body"])
            assert ke.encode_records(b["records"]) == inner
            assert _reencode(b, raw_records=b["body"]) == b["raw"]
            for variant in ([codec, "snappy-raw"] if codec == "snappy" else [codec]):
                mine = _reencode(b, codec=variant)
                parsed = next(_parse_batches(mine))
                assert parsed["records"] == b["records"]
                assert ke.batch_v2_crc(mine) == parsed["crc"]
    if codec == "snappy":
        # librdkafka (partition 0) sends raw snappy; kafka-python/aiokafka xerial framing
        b0 = next(_parse_batches((KAFKA3 / "comp-snappy-0" / "00000000000000000000.log").read_bytes()))
        b1 = next(_parse_batches((KAFKA3 / "comp-snappy-1" / "00000000000000000000.log").read_bytes()))
        assert not b0["body"].startswith(ke.XERIAL_MAGIC)
        assert b1["body"][:16] == ke.XERIAL_HEADER
        assert ke.snappy_xerial(b"x" * 10)[:16] == b1["body"][:16]
    if codec == "lz4":
        b0 = next(_parse_batches((KAFKA3 / "comp-lz4-0" / "00000000000000000000.log").read_bytes()))
        # librdkafka writes the same frame descriptor as KafkaLZ4BlockOutputStream
        assert ke.lz4_frame_kafka(b"")[:7] == b0["body"][:7]


def test_batch_flags_and_crc():
    recs = ke.records_from_values([b"a", b"bb"], keys=[b"k", None])
    b = ke.encode_record_batch_v2(5, recs, producer_id=7, producer_epoch=1, base_sequence=3, is_transactional=True)
    parsed = next(_parse_batches(b))
    assert parsed["attributes"] == 0x10 and parsed["last_offset_delta"] == 1 and parsed["count"] == 2
    assert ke.batch_v2_crc(b) == parsed["crc"]
    bad = ke.encode_record_batch_v2(5, recs, corrupt_crc=True)
    assert ke.batch_v2_crc(bad) != struct.unpack_from(">I", bad, 17)[0]
    moved = ke.with_base_offset(b, 1000)
    assert struct.unpack_from(">q", moved)[0] == 1000 and moved[8:] == b[8:]
    la = ke.encode_record_batch_v2(0, recs, timestamp_type="log_append", has_delete_horizon=True, codec="zstd")
    assert struct.unpack_from(">h", la, 21)[0] == 4 | 8 | 0x40
    ctl = ke.encode_control_batch(9, 7, 2, "ABORT", coordinator_epoch=5, timestamp=123)
    p = next(_parse_batches(ctl))
    assert p["attributes"] == 0x30 and p["base_sequence"] == -1 and p["count"] == 1
    assert p["records"][0].key == b"\x00\x00\x00\x00" and p["records"][0].value == b"\x00\x00\x00\x00\x00\x05"


def test_lz4_frame_and_kafka_3160():
    import lz4.frame

    data = bytes(range(256)) * 600  # > 64 KiB: two blocks
    assert lz4.frame.decompress(ke.lz4_frame_kafka(data)) == data
    assert lz4.frame.decompress(ke.lz4_frame_kafka(data, block_checksum=True)) == data
    broken = ke.lz4_frame_kafka(data, broken_header_checksum=True)
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(broken)
    # Kafka's magic-0 reader ignores HC: with the correct HC patched in, the frame decodes
    fixed = broken[:6] + bytes([(ke.xxh32(broken[4:6]) >> 8) & 0xFF]) + broken[7:]
    assert lz4.frame.decompress(fixed) == data
    assert ke.xxh32(b"abc") == 0x32D153FF


# ------------------------------------------------------------------ legacy magic 0/1


@needs_corpus
def test_legacy_messages_real_bytes():
    """A magic 1 message (deepflow Produce v2 capture) and a magic 0 message (go-sniffer
    Produce v1 capture from kafka-python): found by CRC in the raw pcap, re-encoded."""
    found = 0
    for rel in ("public/deepflow/00-produce-v2.pcap", "public/go-sniffer/kafka.pcap"):
        buf = (CORPUS / rel).read_bytes()
        for p in range(len(buf) - 26):
            off, size, crc, magic = struct.unpack_from(">qiIb", buf, p)
            if magic not in (0, 1) or not 14 <= size < 5000 or p + 12 + size > len(buf):
                continue
            if zlib.crc32(buf[p + 16 : p + 12 + size]) != crc:
                continue
            attrs = buf[p + 17]
            q = p + 18
            ts = None
            if magic == 1:
                (ts,) = struct.unpack_from(">q", buf, q)
                q += 8
            (klen,) = struct.unpack_from(">i", buf, q)
            key = None if klen < 0 else buf[q + 4 : q + 4 + klen]
            q += 4 + max(klen, 0)
            (vlen,) = struct.unpack_from(">i", buf, q)
            value = None if vlen < 0 else buf[q + 4 : q + 4 + vlen]
            enc = ke.encode_legacy_message(off, key, value, magic=magic, timestamp=ts, attributes=attrs)
            assert enc == buf[p : p + 12 + size]
            found += 1
    assert found == 2


def _parse_legacy(buf):
    out, pos = [], 0
    while pos < len(buf):
        off, size, crc, magic, attrs = struct.unpack_from(">qiIbb", buf, pos)
        msg = buf[pos + 12 : pos + 12 + size]
        assert zlib.crc32(msg[4:]) == crc
        q = 6
        ts = None
        if magic == 1:
            (ts,) = struct.unpack_from(">q", msg, q)
            q += 8
        (klen,) = struct.unpack_from(">i", msg, q)
        key = None if klen < 0 else msg[q + 4 : q + 4 + klen]
        q += 4 + max(klen, 0)
        (vlen,) = struct.unpack_from(">i", msg, q)
        value = None if vlen < 0 else msg[q + 4 : q + 4 + vlen]
        out.append(dict(offset=off, magic=magic, attrs=attrs, ts=ts, key=key, value=value))
        pos += 12 + size
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_legacy_wrapper(magic, codec):
    msgs = [ke.LegacyMessage(key=b"k%d" % i, value=b"v%d" % i * 20, timestamp=1000 + i) for i in range(3)]
    if magic == 0:
        msgs = [ke.LegacyMessage(key=m.key, value=m.value) for m in msgs]
    w = ke.encode_legacy_wrapper(msgs, magic=magic, codec=codec, wrapper_offset=12)
    (wrapper,) = _parse_legacy(w)
    assert wrapper["offset"] == 12 and wrapper["key"] is None
    assert wrapper["attrs"] & 7 == ke.CODEC_IDS[codec]
    payload = wrapper["value"]
    if codec == "lz4" and magic == 0:
        import lz4.frame

        with pytest.raises(RuntimeError):  # KAFKA-3160 reproduced
            lz4.frame.decompress(payload)
        payload = payload[:6] + bytes([(ke.xxh32(payload[4:6]) >> 8) & 0xFF]) + payload[7:]
    inner = _parse_legacy(_decompress(ke.CODEC_IDS[codec], payload))
    assert [m["value"] for m in inner] == [m.value for m in msgs]
    if magic == 1:
        assert [m["offset"] for m in inner] == [0, 1, 2]
        assert wrapper["ts"] == 1002 and [m["ts"] for m in inner] == [1000, 1001, 1002]
    else:
        assert [m["offset"] for m in inner] == [10, 11, 12]
    la = ke.encode_legacy_wrapper(msgs, magic=1, codec=codec, wrapper_offset=2, timestamp_type="log_append", timestamp=5)
    (wla,) = _parse_legacy(la)
    assert wla["attrs"] & 8 and wla["ts"] == 5


# ------------------------------------------------------------------ coordinator records


def _str(buf, pos):
    (n,) = struct.unpack_from(">h", buf, pos)
    if n < 0:
        return None, pos + 2
    return buf[pos + 2 : pos + 2 + n].decode(), pos + 2 + n


def _coordinator_records(dirname):
    for path in sorted(KAFKA3.glob(f"{dirname}-*/*.log")):
        for b in _parse_batches(path.read_bytes()):
            if b["attributes"] & 0x20:
                continue
            for r in b["records"]:
                yield r


@needs_corpus
def test_transaction_state_records():
    n = 0
    for r in _coordinator_records("__transaction_state"):
        (kver,) = struct.unpack_from(">h", r.key)
        tid, _ = _str(r.key, 2)
        assert ke.encode_txn_log_key(tid, version=kver) == r.key
        if r.value is None:
            continue
        v = r.value
        ver, pid, epoch, timeout, status, nparts = struct.unpack_from(">hqhibi", v)
        assert ver == 0
        pos = 21
        parts = None
        if nparts >= 0:
            parts = []
            for _ in range(nparts):
                topic, pos = _str(v, pos)
                (np_,) = struct.unpack_from(">i", v, pos)
                ids = list(struct.unpack_from(f">{np_}i", v, pos + 4))
                pos += 4 + 4 * np_
                parts.append((topic, ids))
        last_update, start = struct.unpack_from(">qq", v, pos)
        enc = ke.encode_txn_log_value(pid, epoch, timeout, status, parts, last_update, start)
        assert enc == v
        n += 1
    assert n > 50


def test_transaction_log_value_v1_layout():
    v = ke.encode_txn_log_value(
        7, 1, 60000, "Ongoing", {"t": [0, 2]}, 10, 9, version=1, next_producer_id=8, client_transaction_version=2
    )
    exp = (
        struct.pack(">hqhib", 1, 7, 1, 60000, 1)
        + b"\x02"  # compact array: 1 entry
        + b"\x02t"  # compact string "t"
        + b"\x03" + struct.pack(">ii", 0, 2)  # compact int32 array
        + b"\x00"  # entry tagged fields
        + struct.pack(">qq", 10, 9)
        + b"\x02" + b"\x01\x08" + struct.pack(">q", 8) + b"\x02\x02" + struct.pack(">h", 2)
    )
    assert v == exp
    assert ke.encode_txn_log_value(7, 1, 60000, "Empty", None, 1, -1, version=1)[17] == 0  # null array
    assert ke.encode_txn_log_value(7, 1, 60000, 0, None, 1, -1)[17:21] == b"\xff\xff\xff\xff"


@needs_corpus
def test_consumer_offsets_records():
    kinds = set()
    for r in _coordinator_records("__consumer_offsets"):
        (kver,) = struct.unpack_from(">h", r.key)
        if kver in (0, 1):
            group, pos = _str(r.key, 2)
            topic, pos = _str(r.key, pos)
            (part,) = struct.unpack_from(">i", r.key, pos)
            assert ke.encode_offset_commit_key(group, topic, part, version=kver) == r.key
            if r.value is None:
                continue
            v = r.value
            vver, offset = struct.unpack_from(">hq", v)
            assert vver == 3
            (leader_epoch,) = struct.unpack_from(">i", v, 10)
            meta, pos = _str(v, 14)
            (commit_ts,) = struct.unpack_from(">q", v, pos)
            enc = ke.encode_offset_commit_value(
                offset, metadata=meta, commit_timestamp=commit_ts, version=3, leader_epoch=leader_epoch
            )
            assert enc == v
            kinds.add("offset")
        elif kver == 2:
            group, _ = _str(r.key, 2)
            assert ke.encode_group_metadata_key(group) == r.key
            if r.value is None:
                continue
            v = r.value
            (vver,) = struct.unpack_from(">h", v)
            ptype, pos = _str(v, 2)
            (gen,) = struct.unpack_from(">i", v, pos)
            proto, pos = _str(v, pos + 4)
            leader, pos = _str(v, pos)
            cst = -1
            if vver >= 2:
                (cst,) = struct.unpack_from(">q", v, pos)
                pos += 8
            (nm,) = struct.unpack_from(">i", v, pos)
            pos += 4
            members = []
            for _ in range(nm):
                m = {}
                m["member_id"], pos = _str(v, pos)
                if vver >= 3:
                    m["group_instance_id"], pos = _str(v, pos)
                m["client_id"], pos = _str(v, pos)
                m["client_host"], pos = _str(v, pos)
                if vver >= 1:
                    (m["rebalance_timeout"],) = struct.unpack_from(">i", v, pos)
                    pos += 4
                (m["session_timeout"],) = struct.unpack_from(">i", v, pos)
                pos += 4
                for f in ("subscription", "assignment"):
                    (n,) = struct.unpack_from(">i", v, pos)
                    m[f] = v[pos + 4 : pos + 4 + n]
                    pos += 4 + n
                members.append(m)
            assert pos == len(v)
            enc = ke.encode_group_metadata_value(
                ptype, gen, proto, leader, members, version=vver, current_state_timestamp=cst
            )
            assert enc == v
            kinds.add("group")
    assert kinds == {"offset", "group"}


def test_offset_commit_value_versions():
    assert len(ke.encode_offset_commit_value(1, version=0)) == 2 + 8 + 2 + 8
    assert len(ke.encode_offset_commit_value(1, version=1)) == 2 + 8 + 2 + 8 + 8
    assert len(ke.encode_offset_commit_value(1, version=2)) == 2 + 8 + 2 + 8
    assert len(ke.encode_offset_commit_value(1, version=3)) == 2 + 8 + 4 + 2 + 8
    v4 = ke.encode_offset_commit_value(1, metadata="m", version=4)
    assert v4 == struct.pack(">hqi", 4, 1, -1) + b"\x02m" + struct.pack(">q", ke.DEFAULT_TIMESTAMP) + b"\x00"


# ------------------------------------------------------------------ state and index files


@needs_corpus
def test_producer_snapshots():
    n = 0
    for path in sorted(CORPUS.rglob("*.snapshot")):
        if path.parent.name.startswith("__cluster_metadata"):
            continue  # KRaft metadata snapshots are a different format
        buf = path.read_bytes()
        ver, crc, count = struct.unpack_from(">hIi", buf)
        entries = [ke.ProducerSnapshotEntry(*ke._SNAP_ENTRY.unpack_from(buf, 10 + 46 * i)) for i in range(count)]
        assert ke.encode_producer_snapshot(entries, version=ver) == buf, path
        n += 1
    assert n > 100
    # the j-fence-0 snapshot, as DumpLogSegments prints it
    buf = (KAFKA3 / "j-fence-0" / "00000000000000000007.snapshot").read_bytes()
    e = ke.ProducerSnapshotEntry(2003, 2, 1, 5, 0, 1795234918110, 0, -1)
    assert ke.encode_producer_snapshot([e]) == buf


@needs_corpus
def test_index_files():
    n = 0
    for path in sorted(KAFKA3.glob("*/*")):
        buf = path.read_bytes()
        if path.suffix == ".index":
            entries = [struct.unpack_from(">ii", buf, i) for i in range(0, len(buf), 8)]
            assert ke.encode_index(entries) == buf
        elif path.suffix == ".timeindex":
            entries = [struct.unpack_from(">qi", buf, i) for i in range(0, len(buf), 12)]
            assert ke.encode_timeindex(entries) == buf
        elif path.suffix == ".txnindex":
            entries = [struct.unpack_from(">hqqqq", buf, i) for i in range(0, len(buf), 34)]
            assert b"".join(ke.encode_txnindex_entry(*e[1:], version=e[0]) for e in entries) == buf
        elif path.name == "leader-epoch-checkpoint":
            lines = buf.decode().splitlines()
            pairs = [tuple(map(int, ln.split())) for ln in lines[2:]]
            assert ke.encode_leader_epoch_checkpoint(pairs, version=int(lines[0])) == buf
        elif path.name == "partition.metadata":
            tid = buf.decode().split("topic_id: ")[1]
            assert ke.encode_partition_metadata(tid) == buf
            import base64

            raw = base64.urlsafe_b64decode(tid + "==")
            assert ke.topic_id_str(raw) == tid
        else:
            continue
        n += 1
    assert n > 200
    txn = (KAFKA3 / "j-fence-0" / "00000000000000000000.txnindex").read_bytes()
    assert ke.encode_txnindex_entry(2003, 0, 3, 4) == txn


@needs_corpus
def test_meta_properties():
    buf = (KAFKA3 / "meta.properties").read_bytes()
    assert ke.encode_meta_properties(1, "wqYxKaaARWaocUfAyeKUqg", date_comment="Sat Nov 21 04:19:40 UTC 2026") == buf


def test_hashcode_and_coordinator_partition():
    assert ke.java_string_hashcode("") == 0
    assert ke.java_string_hashcode("hello") == 99162322
    assert ke.java_string_hashcode("polygenelubricants") == -(1 << 31)
    assert ke.coordinator_partition("polygenelubricants", 50) == 0
    assert ke.zigzag_varint(-1) == b"\x01" and ke.zigzag_varint(300) == b"\xd8\x04"
