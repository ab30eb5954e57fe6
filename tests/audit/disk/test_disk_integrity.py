"""Integrity rules on crafted log dirs: crc-mismatch, corrupt-batch, truncated-tail — and what a
damaged batch must not cause in the sequence rules."""

from __future__ import annotations

import os

from diskcraft import audit, brief, details, log_file, logdir, of

from fixtures import kafka_encoder as ke
from fixtures.builder import corrupt_file, preallocate_file, truncate_file

# byte offsets of v2 batch header fields (docs/architecture.md §2)
PRODUCER_ID_AT, BASE_SEQUENCE_AT, LAST_OFFSET_DELTA_AT = 43, 53, 23


def _idempotent(ld, n=4, topic="orders"):
    pb = ld.partition(topic, 0)
    p = pb.producer(7, 0)
    return pb, p, [p.send([b"v%d" % i, b"w%d" % i]) for i in range(n)]


# -- crc-mismatch ----------------------------------------------------------------------------------

def test_crc_mismatch_in_a_value(tmp_path):
    ld = logdir(tmp_path)
    pb, p, infos = _idempotent(ld)
    pb.corrupt_batch(infos[1])
    root = ld.write()
    fs = audit(root)
    assert brief(fs) == [("crc-mismatch", "error", "orders-0", 2, 3)]
    [f] = fs
    assert (f["producer_id"], f["producer_epoch"], f["base_sequence"], f["last_sequence"]) == (7, 0, 2, 3)
    assert f["evidence"] == [{"source": log_file(root, "orders", 0), "position": infos[1].position,
                              "kind": "batch", "note": None}]
    assert f"({infos[1].size} bytes) fails its CRC" in f["message"]
    assert details(f)["batch_size"] == infos[1].size


def test_crc_mismatch_of_a_non_idempotent_batch_has_no_sequences(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    info = pb.append_batch(values=[b"a", b"b"])
    pb.corrupt_batch(info)
    [f] = audit(ld.write())
    assert (f["rule"], f["producer_id"], f["producer_epoch"], f["base_sequence"]) == ("crc-mismatch", -1, None, None)


def test_crc_mismatch_in_the_header_gives_no_sequence_finding(tmp_path):
    """A flipped bit in the sequence, producer id or last offset delta of a batch: its header
    is not trusted, so neither it nor the batches around it give sequence or offset findings."""
    for field_at, xor in ((BASE_SEQUENCE_AT + 3, 0x10), (PRODUCER_ID_AT + 7, 0x01),
                          (LAST_OFFSET_DELTA_AT + 3, 0x40)):
        ld = logdir(tmp_path, f"b{field_at}")
        pb, p, infos = _idempotent(ld)
        root = ld.write()
        corrupt_file(log_file(root, "orders", 0), infos[1].position + field_at, xor=xor)
        fs = audit(root)
        assert [f["rule"] for f in fs] == ["crc-mismatch"], (field_at, fs)


def test_crc_mismatch_of_the_last_batches_of_chunks(tmp_path, monkeypatch):
    """The left-out batch ends a chunk; the gap it leaves is carried into the next chunk."""
    from diskcraft import small_chunks

    ld = logdir(tmp_path)
    pb, p, infos = _idempotent(ld, n=12)
    for i in (3, 4, 7):               # chunk of 4: rows 3 and 7 end a chunk, 4 starts one
        pb.corrupt_batch(infos[i])
    root = ld.write()
    with small_chunks(monkeypatch, 4):
        fs = audit(root)
    assert sorted(f["first_offset"] for f in fs) == [6, 8, 14]
    assert {f["rule"] for f in fs} == {"crc-mismatch"}


def test_crc_mismatch_of_a_producer_snapshot(tmp_path):
    ld = logdir(tmp_path)
    _idempotent(ld)
    root = ld.write()
    [snap] = [n for n in os.listdir(root / "orders-0") if n.endswith(".snapshot")]
    corrupt_file(root / "orders-0" / snap, 30)
    fs = audit(root)
    assert [(f["rule"], f["severity"]) for f in fs] == [("crc-mismatch", "error")]
    assert snap in fs[0]["message"] and fs[0]["evidence"][0]["source"].endswith(snap)


# -- corrupt-batch ---------------------------------------------------------------------------------

def test_garbage_in_the_middle_is_reported_with_its_resync_position(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    a = p.send([b"a", b"b"])
    pb.append_raw(b"\x13\x37" * 50)          # 100 bytes that are no batch
    b = p.send([b"c"])
    p.send([b"d"])
    root = ld.write()
    fs = audit(root)
    assert brief(fs) == [("corrupt-batch", "error", "orders-0", None, None)]
    [f] = fs
    at, resync = a.size, b.position
    assert resync == at + 100
    assert f["evidence"][0]["source"] == log_file(root, "orders", 0)
    assert f["evidence"][0]["position"] == at
    assert f"at byte {at} (100 bytes)" in f["message"]
    assert f["message"].count(f"byte {resync}") == 1 and "resynced" in f["message"]
    assert details(f) == {"issue": "corrupt", "position": at, "length": 100, "resync_position": resync}


def test_garbage_to_the_end_of_a_closed_segment(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    pb.append_batch(values=[b"a"])
    pb.append_raw(b"\xee" * 80)
    pb.roll_segment()
    pb.append_batch(values=[b"b"], base_offset=1)
    fs = audit(ld.write())
    assert brief(fs) == [("corrupt-batch", "error", "orders-0", None, None)]
    assert "no valid batch after it" in fs[0]["message"]


# -- truncated-tail --------------------------------------------------------------------------------

def test_truncated_tail_active_is_info_older_is_warning(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a"])
    p.send([b"b"])
    root = ld.write()
    ld2 = logdir(tmp_path, "two-segments")
    pb2 = ld2.partition("orders", 0)
    q = pb2.producer(7, 0)
    q.send([b"a"])
    q.send([b"b"])
    pb2.roll_segment()
    q.send([b"c"])
    q.send([b"d"])
    root2 = ld2.write()
    truncate_file(log_file(root, "orders", 0), 10)
    truncate_file(log_file(root2, "orders", 0, 0), 10)
    truncate_file(log_file(root2, "orders", 0, 2), 30)
    fs = audit(root, rules=("truncated-tail",))
    assert [(f["severity"], f["evidence"][0]["position"]) for f in fs] == [("info", 69)]
    assert "active segment" in fs[0]["message"]
    fs2 = sorted(audit(root2, rules=("truncated-tail",)), key=lambda f: f["evidence"][0]["source"])
    assert [(os.path.basename(f["evidence"][0]["source"]), f["severity"]) for f in fs2] == [
        ("00000000000000000000.log", "warning"), ("00000000000000000002.log", "info")]
    assert "closed segment" in fs2[0]["message"]
    # the sequence rules see the batches that are there, nothing else
    assert of(audit(root2), "out-of-order-sequence") == []


def test_zero_filled_tail_and_preallocated_indexes(tmp_path):
    """An unclean shutdown leaves the active segment's indexes preallocated (zeros): normal, no
    finding. A .log ending in zeros is reported as a truncated tail (info when active)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    for i in range(3):
        pb.append_batch(values=[b"v%d" % i])
    pb.unclean_shutdown(index_bytes=4096)
    root = ld.write()
    assert audit(root) == []
    preallocate_file(log_file(root, "orders", 0), 8192)
    fs = audit(root)
    assert [(f["rule"], f["severity"]) for f in fs] == [("truncated-tail", "info")]
    assert "ends in zero bytes" in fs[0]["message"]


def test_truncated_index_and_snapshot_are_warnings(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    for i in range(3):
        p.send([b"v%d" % i])
    pb.roll_segment()
    p.send([b"w"])
    root = ld.write()
    d = root / "orders-0"
    truncate_file(d / "00000000000000000000.timeindex", 3)
    truncate_file(d / "00000000000000000003.snapshot", 5)
    fs = sorted(audit(root, rules=("truncated-tail",)), key=lambda f: f["evidence"][0]["source"])
    assert [(os.path.basename(f["evidence"][0]["source"]), f["severity"]) for f in fs] == [
        ("00000000000000000000.timeindex", "warning"), ("00000000000000000003.snapshot", "warning")]
    assert all("ends mid-entry" in f["message"] for f in fs)


# -- KRaft snapshots -------------------------------------------------------------------------------

def test_kraft_snapshot_offsets_are_not_the_logs(tmp_path):
    """A KRaft snapshot (`<offset>-<epoch>.checkpoint`) numbers its batches from 0
    (RecordsSnapshotWriter): not an offset overlap with the metadata log."""
    ld = logdir(tmp_path)
    pb = ld.partition("__cluster_metadata", 0)
    for i in range(5):
        pb.append_batch(values=[b"rec%d" % i])
    pb.roll_segment()
    for i in range(5):
        pb.append_batch(values=[b"rec%d" % (i + 5)])
    snap = b"".join(ke.encode_record_batch_v2(o, ke.records_from_values([b"s%d" % o]), base_timestamp=5)
                    for o in range(3))
    pb.add_file("00000000000000000005-0000000001.checkpoint", snap)
    assert audit(ld.write()) == []
