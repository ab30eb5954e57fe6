"""Self-check of the test-only log-dir builder (fixtures/builder/).

The builder's index / time-index / transaction-index / producer-snapshot logic is replayed over
every real Kafka 3.0.2 and 4.1.0 partition of the corpus
(but those the log cleaner compacted) and must reproduce the broker's own files byte
for byte; the demo log dir must be deterministic and hold the anomalies its manifest names;
the benchmark writer must produce valid batches and Kafka's sparse index.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from fixtures import builder as fb  # noqa: E402
from fixtures import kafka_encoder as ke  # noqa: E402
from fixtures.builder.scan import read_varint  # noqa: E402

CORPUS = _ROOT.parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")

# topic-level config of the real cluster that is not the broker default
INDEX_INTERVAL = {"seg-txn": 1024}


def _batches(buf: bytes):
    pos = 0
    while pos + 61 <= len(buf):
        (length,) = struct.unpack_from(">i", buf, pos + 8)
        yield pos, buf[pos : pos + 12 + length]
        pos += 12 + length


def _cleaned(d: Path) -> bool:
    """Whether the log cleaner rewrote the partition (its log dir's cleaner-offset-checkpoint
    lists it past offset 0): the builder replays appends, not compaction."""
    ckpt = d.parent / "cleaner-offset-checkpoint"
    if not ckpt.is_file():
        return False
    topic, _, part = d.name.rpartition("-")
    for line in ckpt.read_text().splitlines()[2:]:
        f = line.split()
        if len(f) == 3 and f[0] == topic and f[1] == part and int(f[2]) > 0:
            return True
    return False


def _real_partition_dirs():
    return sorted(
        {
            p.parent
            for p in CORPUS.rglob("*.log")
            if "logdirs" in str(p)
            and "wild-logdirs" not in str(p)  # their active segments' indexes are not in the snapshot
            and p.name[:20].isdigit()
            and not p.parent.name.startswith("__cluster_metadata")
            and not _cleaned(p.parent)
        }
    )


def _replay(d: Path, role: str, tmp: Path) -> Path:
    """Feed a real partition's batches to a PartitionBuilder, one append per batch, rolling
    at the real segment boundaries and restarting where the broker left a stray snapshot."""
    segs = sorted(d.glob("*.log"))
    bases = [int(s.name[:20]) for s in segs]
    snaps = sorted(int(s.name[:20]) for s in d.glob("*.snapshot"))
    restarts = {o for o in snaps[:-1] if o not in bases}
    topic, _, part = d.name.rpartition("-")
    ld = fb.LogDirBuilder(tmp, checkpoints=False)
    pb = ld.partition(topic, int(part), role=role, start_offset=bases[0],
                      index_interval_bytes=INDEX_INTERVAL.get(topic, 4096))
    done = set()
    for i, seg in enumerate(segs):
        if i:
            assert pb.next_offset == bases[i]
            pb.roll_segment()
        buf = seg.read_bytes()
        for _, raw in _batches(buf):
            if pb.next_offset in restarts and pb.next_offset not in done:
                done.add(pb.next_offset)
                pb.restart()
            pb.append_raw(raw)
    out = pb.write(tmp)
    assert not snaps or pb.next_offset == snaps[-1]
    return out


@needs_corpus
def test_replay_reproduces_real_index_txnindex_and_snapshots(tmp_path):
    dirs = _real_partition_dirs()
    assert len(dirs) > 200
    counts = {"index": 0, "timeindex": 0, "txnindex": 0, "snapshot": 0}
    for n, d in enumerate(dirs):
        outs = {role: _replay(d, role, tmp_path / f"{n}-{role}") for role in ("leader", "follower")}
        for seg in sorted(d.glob("*.log")):
            for suffix in (".index", ".txnindex"):
                real = seg.with_suffix(suffix)
                mine = outs["leader"] / real.name
                assert real.exists() == mine.exists(), real
                if real.exists():
                    assert mine.read_bytes() == real.read_bytes(), real
                    counts[suffix[1:]] += 1
            # a leader stores the offset of the first record with the max timestamp
            # (LogValidator), a follower the batch's last offset: this replica was one of them
            real = seg.with_suffix(".timeindex")
            assert any((o / real.name).read_bytes() == real.read_bytes() for o in outs.values()), real
            counts["timeindex"] += 1
        for snap in sorted(d.glob("*.snapshot")):
            # snapshots at roll/restart/shutdown: every one the broker kept is reproduced
            assert (outs["leader"] / snap.name).read_bytes() == snap.read_bytes(), snap
            counts["snapshot"] += 1
    assert counts["index"] > 250 and counts["txnindex"] > 50 and counts["snapshot"] > 250


@needs_corpus
def test_replay_j_fence_matches_dumplogsegments(tmp_path):
    d = CORPUS / "real-kafka-3.0.2" / "logdirs-final" / "node1" / "data" / "j-fence-0"
    out = _replay(d, "leader", tmp_path)
    txn = (out / "00000000000000000000.txnindex").read_bytes()
    assert txn == ke.encode_txnindex_entry(2003, 0, 3, 4)  # the coordinator's fencing ABORT
    snap = (out / "00000000000000000007.snapshot").read_bytes()
    assert snap == ke.encode_producer_snapshot([ke.ProducerSnapshotEntry(2003, 2, 1, 5, 0, 1795234918110, 0, -1)])


def test_index_interval_rule(tmp_path):
    ld = fb.LogDirBuilder(tmp_path, checkpoints=False)
    pb = ld.partition("t", 0, index_interval_bytes=150)
    infos = [pb.append_batch(values=[b"x" * 20]) for _ in range(8)]
    size = infos[0].size
    assert size == 88
    # an entry is added when MORE than 150 bytes were appended since the last one
    seg = pb.active
    assert seg.index == [(2, 2 * size), (4, 4 * size), (6, 6 * size)]
    assert [o for _, o in seg.timeindex] == [2, 4, 6]
    pb.write(tmp_path)
    idx = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    assert idx == ke.encode_index([(2, 176), (4, 352), (6, 528)])
    tix = (tmp_path / "t-0" / "00000000000000000000.timeindex").read_bytes()
    assert len(tix) == 4 * 12  # + the entry appended when the segment is closed
    assert struct.unpack_from(">qi", tix, 36) == (infos[-1].max_timestamp, 7)


def test_producers_sequences_markers_and_txnindex(tmp_path):
    ld = fb.LogDirBuilder(tmp_path, checkpoints=False)
    txs = ld.partition("__transaction_state", 0)
    a, b = ld.partition("t", 0), ld.partition("t", 1)
    idem = a.producer(7, 0)
    i1 = idem.send([b"1", b"2"])
    i2 = idem.send([b"3"])
    assert (i1.base_sequence, i2.base_sequence, i2.last_sequence) == (0, 2, 2)
    idem.sequences[("t", 0)] = (1 << 31) - 1
    w = idem.send([b"4", b"5"])
    assert w.base_sequence == (1 << 31) - 1 and w.last_sequence == 0  # wraps to 0
    idem.bump_epoch()
    assert idem.send([b"6"]).base_sequence == 0
    t1 = ld.producer(100, 3, transactional_id="tx1", txn_state=txs)
    t2 = ld.producer(200, 0, transactional_id="tx2")
    d1 = t1.send([b"a"], partition=a)
    d2 = t2.send([b"b"], partition=a)
    t1.send([b"c"], partition=b)
    m1 = t1.abort(marker_epoch=4, coordinator_epoch=2)  # a coordinator abort: epoch + 1
    m2 = t2.abort()
    assert [m.partition for m in m1] == [0, 1] and m1[0].producer_epoch == 4 and m1[0].coordinator_epoch == 2
    # first abort: tx2 still open at d2 -> LSO = d2; second: nothing open -> marker + 1
    assert a.active.txnindex == [(100, d1.base_offset, m1[0].base_offset, d2.base_offset),
                                 (200, d2.base_offset, m2[0].base_offset, m2[0].base_offset + 1)]
    # an empty transaction's marker does not reach the txnindex (ProducerAppendInfo)
    a.append_control(300, 0, "ABORT")
    assert len(a.active.txnindex) == 2
    key = ke.encode_txn_log_key("tx1")
    statuses = []
    for info in txs.active.batches:
        raw = bytes(txs.active.data[info.position : info.position + info.size])
        _, i = read_varint(raw, raw.index(key) + len(key))  # value length
        statuses.append(struct.unpack_from(">hqhib", raw, i)[4])
    S = ke.TXN_STATUS
    assert statuses == [S["Empty"], S["Ongoing"], S["Ongoing"], S["PrepareAbort"], S["CompleteAbort"]]
    ld.write()
    snap = (tmp_path / "t-0" / ke.segment_file_name(a.next_offset, ".snapshot")).read_bytes()
    count = struct.unpack_from(">i", snap, 6)[0]
    entries = [ke._SNAP_ENTRY.unpack_from(snap, 10 + 46 * i) for i in range(count)]
    assert [e[0] for e in entries] == [7, 100, 200, 300]
    e100 = entries[1]
    assert e100[1] == 4 and e100[2] == -1 and e100[3] == -1 and e100[6] == 2 and e100[7] == -1  # epoch bump cleared
    assert ke.crc32c(snap[6:]) == struct.unpack_from(">I", snap, 2)[0]


def test_legacy_and_raw_appends(tmp_path):
    ld = fb.LogDirBuilder(tmp_path, checkpoints=False)
    pb = ld.partition("old", 0)
    infos = pb.append_legacy([(b"k", b"v0"), (b"k", b"v1")], magic=1)
    assert [i.base_offset for i in infos] == [0, 1]
    w = pb.append_legacy([(None, b"a"), (None, b"b"), (None, b"c")], magic=1, codec="gzip")
    assert len(w) == 1 and w[0].base_offset == w[0].last_offset == 4 and pb.next_offset == 5
    w0 = pb.append_legacy([(None, b"a"), (None, b"b")], magic=0, codec="lz4")
    assert w0[0].last_offset == 6 and w0[0].max_timestamp == -1
    junk = pb.append_raw(b"\x00" * 5)
    assert junk == [] and pb.next_offset == 7
    assert pb.epochs == []  # no v2 batch, no leader epoch entry


def test_anomaly_helpers(tmp_path):
    ld = fb.LogDirBuilder(tmp_path, checkpoints=False)
    pb = ld.partition("x", 0, index_interval_bytes=10)
    infos = [pb.append_batch(values=[b"v%d" % i]) for i in range(4)]
    pos = pb.corrupt_batch(infos[1])
    last = infos[-1]
    pb.unclean_shutdown(index_bytes=100, timeindex_bytes=100)
    new_size = pb.truncate_tail(10)
    with pytest.raises(RuntimeError):
        pb.append_batch(values=[b"no"])
    ld.write()
    d = tmp_path / "x-0"
    log = (d / "00000000000000000000.log").read_bytes()
    assert len(log) == new_size == last.position + last.size - 10
    stored = {p: raw for p, raw in _batches(log[: last.position])}
    b1 = stored[infos[1].position]
    assert ke.batch_v2_crc(b1) != struct.unpack_from(">I", b1, 17)[0]
    assert pos == infos[1].position + infos[1].size - 2
    for i in (0, 2):
        raw = stored[infos[i].position]
        assert ke.batch_v2_crc(raw) == struct.unpack_from(">I", raw, 17)[0]
    idx = (d / "00000000000000000000.index").read_bytes()
    tix = (d / "00000000000000000000.timeindex").read_bytes()
    assert len(idx) == 96 and len(tix) == 96
    entries = [struct.unpack_from(">ii", idx, i) for i in range(0, 96, 8)]
    valid = [e for e in entries if e != (0, 0)]
    assert valid and all(p < new_size for _, p in valid) and idx.endswith(bytes(8))
    assert not list(d.glob("*.snapshot"))  # no shutdown snapshot after a crash
    # file-level helpers
    f = tmp_path / "f.bin"
    f.write_bytes(b"\x00\x01\x02\x03")
    fb.corrupt_file(f, 1)
    assert f.read_bytes() == b"\x00\xfe\x02\x03"
    assert fb.truncate_file(f, 1) == 3
    fb.preallocate_file(f, 20, 8)
    assert f.read_bytes() == b"\x00\xfe\x02" + bytes(13)


# ------------------------------------------------------------------ demo


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_demo_is_deterministic_and_matches_committed(tmp_path):
    m1 = fb.build_demo(tmp_path / "a")
    fb.build_demo(tmp_path / "b")
    ta, tb = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert ta == tb
    assert sum(len(v) for v in ta.values()) < 16 * 1024  # a few KB
    committed = fb.DEMO_ROOT
    if committed.is_dir():
        assert _tree(committed) == ta, "fixtures/logdirs/demo is stale: run `python -m fixtures.builder demo`"
    with pytest.raises(FileExistsError):
        fb.build_demo(tmp_path / "a")
    assert m1["transactional_id"] == "demo-txn-21"


def test_demo_anomalies(tmp_path):
    m = fb.build_demo(tmp_path)
    root = tmp_path
    assert (root / "meta.properties").read_bytes().splitlines()[2] == b"node.id=1"
    # CRC mismatch: exactly one batch in demo-corrupt-0, at the stated position
    c = m["crc_mismatch"]
    log = (root / c["path"]).read_bytes()
    bad = [p for p, raw in _batches(log) if ke.batch_v2_crc(raw) != struct.unpack_from(">I", raw, 17)[0]]
    assert bad == [c["batch_position"]]
    # every other batch of every live segment is intact
    for seg in root.glob("*/*.log"):
        buf = seg.read_bytes()
        for p, raw in _batches(buf):
            if len(raw) < 12 + struct.unpack_from(">i", raw, 8)[0]:
                continue  # the torn tail
            if seg == root / c["path"] and p == c["batch_position"]:
                continue
            assert ke.batch_v2_crc(raw) == struct.unpack_from(">I", raw, 17)[0], (seg, p)
    # truncated tail
    t = m["truncated_tail"]
    buf = (root / t["path"]).read_bytes()
    assert len(buf) == t["file_size"] == t["torn_batch_position"] + t["torn_batch_size"] - t["missing_bytes"]
    positions = [p for p, _ in _batches(buf)]
    assert positions[-1] == t["torn_batch_position"]
    # preallocated zero-filled index on the active segment
    pi = m["preallocated_index"]
    idx = (root / pi["path"]).read_bytes()
    assert len(idx) == pi["size"] and pi["valid_entries"] >= 1
    assert idx[8 * pi["valid_entries"] :] == bytes(len(idx) - 8 * pi["valid_entries"])
    tix = (root / pi["timeindex_path"]).read_bytes()
    assert len(tix) == 1020 and tix[12 * pi["timeindex_valid_entries"] :].count(0) == 1020 - 12 * pi["timeindex_valid_entries"]
    # skipped entries
    for rel in m["skipped"]:
        assert (root / rel).exists()
    assert (root / "demo-plain-0" / "00000000000000000003.log").exists()
    assert b"demo-gone" not in (root / "recovery-point-offset-checkpoint").read_bytes()
    assert (root / "log-start-offset-checkpoint").read_bytes() == b"0\n1\ndemo-plain 0 3\n"
    # transactions: commit and abort on both partitions, abort in the txnindex
    tx = m["transactions"]
    for p in (0, 1):
        d = root / f"demo-txn-{p}"
        first, last = tx["aborted"][f"demo-txn-{p}"]
        marker = tx["aborted"]["markers"][f"demo-txn-{p}"]
        assert (d / "00000000000000000000.txnindex").read_bytes() == ke.encode_txnindex_entry(2000, first, marker, marker + 1)
    # the coordinator's records for demo-txn-21, in order
    statuses = []
    buf = (root / "__transaction_state-0" / "00000000000000000000.log").read_bytes()
    key = ke.encode_txn_log_key("demo-txn-21")
    for _, raw in _batches(buf):
        _, i = read_varint(raw, raw.index(key) + len(key))  # value length
        ver, pid, epoch, timeout, status = struct.unpack_from(">hqhib", raw, i)
        assert (ver, pid, epoch, timeout) == (0, 2000, 0, 60000)
        statuses.append(status)
    S = ke.TXN_STATUS
    assert statuses == [S[s] for s in ("Empty", "Ongoing", "Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit",
                                       "Ongoing", "Ongoing", "PrepareAbort", "CompleteAbort")]
    # offsets: group metadata, txn offset commit + COMMIT marker, two plain commits
    co = (root / "__consumer_offsets-0" / "00000000000000000000.log").read_bytes()
    kinds = []
    for _, raw in _batches(co):
        attrs, = struct.unpack_from(">h", raw, 21)
        pid, = struct.unpack_from(">q", raw, 43)
        seq, = struct.unpack_from(">i", raw, 53)
        kinds.append((attrs & 0x30, pid, seq))
    assert kinds == [(0, -1, -1), (0x10, 2000, 0), (0x30, 2000, -1), (0, -1, -1), (0, -1, -1)]


def test_demo_committed_copy_is_present():
    if not fb.DEMO_ROOT.is_dir():
        pytest.skip("fixtures/logdirs/demo not generated")
    assert (fb.DEMO_ROOT / "meta.properties").is_file()


# ------------------------------------------------------------------ benchmark writer


@pytest.mark.parametrize("shape,pid", [("16k", -1), ("small", -1), ("small", 42)])
def test_bench_segment(tmp_path, shape, pid):
    path = tmp_path / "00000000000000001000.log"
    st = fb.write_bench_segment(path, target_bytes=2 << 20, shape=shape, base_offset=1000, producer_id=pid,
                                chunk_bytes=300_000)
    buf = path.read_bytes()
    assert len(buf) == st["bytes"] and abs(st["bytes"] - (2 << 20)) < st["batch_size"]
    expect = 1000
    seen_ts = set()
    ld = fb.LogDirBuilder(tmp_path / "replay", checkpoints=False)
    pb = ld.partition("bench", 0, start_offset=1000)
    for p, raw in _batches(buf):
        base, = struct.unpack_from(">q", raw, 0)
        assert base == expect
        assert ke.batch_v2_crc(raw) == struct.unpack_from(">I", raw, 17)[0]
        lod, bts = struct.unpack_from(">iq", raw, 23)
        seq, = struct.unpack_from(">i", raw, 53)
        assert seq == ((base - 1000) if pid >= 0 else -1)
        seen_ts.add(bts)
        expect = base + lod + 1
        pb.append_raw(raw)
    assert expect - 1 == st["last_offset"] and len(seen_ts) == st["batches"]
    pb.write(tmp_path / "replay")
    replayed = tmp_path / "replay" / "bench-0"
    real_index = (replayed / path.with_suffix(".index").name).read_bytes()
    assert path.with_suffix(".index").read_bytes() == real_index
    assert st["index_entries"] == len(real_index) // 8 > 0
    assert path.with_suffix(".timeindex").read_bytes() == (replayed / path.with_suffix(".timeindex").name).read_bytes()


def test_segment_bytes_rolls_and_snapshots(tmp_path):
    ld = fb.LogDirBuilder(tmp_path, checkpoints=True)
    pb = ld.partition("r", 0, segment_bytes=200)
    p = pb.producer(5, 0)
    for i in range(5):
        p.send([b"x" * 20])
    assert [s.base_offset for s in pb.segments] == [0, 2, 4]
    ld.write()
    d = tmp_path / "r-0"
    assert sorted(f.name for f in d.glob("*.snapshot")) == [ke.segment_file_name(o, ".snapshot") for o in (2, 4, 5)]
    assert (tmp_path / "replication-offset-checkpoint").read_bytes() == b"0\n1\nr 0 5\n"
    assert (d / "leader-epoch-checkpoint").read_bytes() == b"0\n1\n0 0\n"
