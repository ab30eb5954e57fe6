"""txnindex-mismatch and snapshot-mismatch on disk (audit/consistency/state_files.py, producer_replay.py,
txnindex_check.py): a replica's .txnindex and .snapshot files against its own log."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from diskcraft import audit, logdir, small_chunks

from fixtures import kafka_encoder as ke

TXN = ("txnindex-mismatch",)
SNAP = ("snapshot-mismatch",)
BOTH = TXN + SNAP


def _txns(tmp_path, *, roll: bool = True):
    """orders-0: producer 7 commits, aborts, then opens a transaction that stays open; producer 9
    (idempotent) writes between; a roll after the abort (snapshot at the new segment's base)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = ld.producer(7, 2, transactional_id="t", partition=pb)
    q = ld.producer(9, 0, partition=pb)
    p.send([b"a", b"b"])
    q.send([b"i"])
    p.commit()
    p.send([b"c"])
    q.send([b"j", b"k"])
    p.send([b"d"])
    p.abort()
    if roll:
        pb.roll_segment()
    q.send([b"l"])
    p.send([b"e"])
    return ld, pb


def _files(root, ext: str) -> list[str]:
    d = root / "orders-0"
    return sorted(str(d / n) for n in os.listdir(d) if n.endswith(ext))


def _brief(fs):
    return sorted((f["rule"], f["severity"], f["producer_id"], f["first_offset"], f["last_offset"]) for f in fs)


@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_the_broker_files_agree(tmp_path, monkeypatch, chunk):
    """The builder writes .txnindex and .snapshot as Kafka does (checked against 3.0.2's files)."""
    ld, _ = _txns(tmp_path)
    root = ld.write()
    assert len(_files(root, ".snapshot")) == 2 and len(_files(root, ".txnindex")) == 1
    if chunk is None:
        assert audit(root, rules=BOTH) == []
    else:
        with small_chunks(monkeypatch, chunk):
            assert audit(root, rules=BOTH) == []


# ---- .txnindex ------------------------------------------------------------------------------------

def test_missing_entry(tmp_path):
    ld, _ = _txns(tmp_path)
    root = ld.write()
    os.remove(_files(root, ".txnindex")[0])
    (f,) = audit(root, rules=TXN)
    assert _brief([f]) == [("txnindex-mismatch", "error", 7, 4, 8)]
    assert "read_committed consumers deliver" in f["message"]


def _entry(tmp_path, entry):
    """The .txnindex of the first segment replaced by `entry` (pid, first, last, lso) tuples."""
    ld, pb = _txns(tmp_path)
    pb.segments[0].txnindex[:] = entry
    return ld.write()


def test_entry_over_a_commit(tmp_path):
    """An entry that names producer 7's COMMIT (offset 3): consumers drop committed records.
    (The real abort is then missing too.)"""
    fs = audit(_entry(tmp_path, [(7, 0, 3, 4)]), rules=TXN)
    assert _brief(fs) == [("txnindex-mismatch", "error", 7, 0, 3), ("txnindex-mismatch", "error", 7, 4, 8)]


@pytest.mark.parametrize("first,severity", [(5, "error"), (3, "warning")])
def test_entry_first_offset(tmp_path, first, severity):
    """Starting after the transaction's first batch (4): its batch at 4 is delivered (error);
    starting before it, where no batch is missing: inconsistent but harmless (warning)."""
    (f,) = audit(_entry(tmp_path, [(7, first, 8, 9)]), rules=TXN)
    assert (f["severity"], f["producer_id"], f["first_offset"], f["last_offset"]) == (severity, 7, 4, 8)


def test_last_stable_offset_too_high(tmp_path):
    """Producer 9's transaction is open from offset 1 when producer 7 aborts at 4: the entry's
    last stable offset must be at most 1; a lower one is harmless."""
    def build(t, lso):
        ld = logdir(t)
        pb = ld.partition("orders", 0)
        p = ld.producer(7, 0, transactional_id="t7", partition=pb)
        q = ld.producer(9, 0, transactional_id="t9", partition=pb)
        p.send([b"a"])
        q.send([b"b"])
        p.abort()
        q.commit()
        assert pb.segments[0].txnindex == [(7, 0, 2, 1)]
        if lso is not None:
            pb.segments[0].txnindex[0] = (7, 0, 2, lso)
        return ld.write()

    assert audit(build(tmp_path / "ok", None), rules=TXN) == []
    assert audit(build(tmp_path / "low", 0), rules=TXN) == []
    (f,) = audit(build(tmp_path / "high", 3), rules=TXN)
    assert (f["severity"], f["first_offset"], f["last_offset"]) == ("warning", 0, 2)
    assert "last stable offset 3, above 1" in f["message"]


def test_compaction_keeps_the_entry_of_removed_data(tmp_path):
    """The cleaner removed the aborted transaction's data (offsets 4-7 missing) but kept its
    marker and index entry, as Kafka does until a later cleaning (4.1.0 v7 holds one such)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    pb.append_batch(values=[b"x"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    pb.append_control(7, 0, "COMMIT")
    pb.next_offset = 6   # offsets 2-5: the aborted data, compacted away
    pb.append_control(7, 0, "ABORT")
    pb.segments[0].txnindex[:] = [(7, 2, 6, 7)]
    assert audit(ld.write(), rules=TXN) == []
    # without the gap, the entry names a transaction with no data
    ld = logdir(tmp_path / "nogap")
    pb = ld.partition("orders", 0)
    pb.append_batch(values=[b"x"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    pb.append_control(7, 0, "COMMIT")
    pb.append_control(7, 0, "ABORT")
    pb.segments[0].txnindex[:] = [(7, 2, 2, 3)]
    (f,) = audit(ld.write(), rules=TXN)
    assert f["severity"] == "warning" and "has no data" in f["message"]


# ---- .snapshot ------------------------------------------------------------------------------------

def _snapshot(root, offset: int, entries) -> None:
    path = root / "orders-0" / f"{offset:020d}.snapshot"
    path.write_bytes(ke.encode_producer_snapshot(entries))


def _entries(pb) -> dict:
    return {pid: ke.ProducerSnapshotEntry(pid, st.epoch, st.last_sequence, st.last_offset, st.offset_delta,
                                          st.timestamp, st.coordinator_epoch, st.txn_first_offset)
            for pid, st in pb.producers.items()}


def test_snapshot_field_mismatches(tmp_path):
    ld, pb = _txns(tmp_path)
    good = _entries(pb)
    root = ld.write()
    end = pb.next_offset
    _snapshot(root, end, [replace(good[7], current_txn_first_offset=-1), replace(good[9], last_sequence=9)])
    fs = audit(root, rules=SNAP)
    assert [(f["severity"], f["producer_id"], f["first_offset"]) for f in fs] == [("error", 7, end), ("warning", 9, end)]
    assert "current_txn_first_offset -1 (the log gives 10)" in fs[0]["message"]
    assert "last_sequence 9 (the log gives 3)" in fs[1]["message"]


def test_snapshot_omits_an_open_transaction_and_invents_a_producer(tmp_path):
    ld, pb = _txns(tmp_path)
    good = _entries(pb)
    root = ld.write()
    end = pb.next_offset
    _snapshot(root, end, [good[9], ke.ProducerSnapshotEntry(42, 0, 4, 3, 0, 1)])
    fs = audit(root, rules=SNAP)
    assert sorted((f["severity"], f["producer_id"]) for f in fs) == [("error", 7), ("warning", 42)]
    assert any("omits producer 7, whose transaction is open from offset 10" in f["message"] for f in fs)


def test_snapshot_of_a_segment_base_and_expiry(tmp_path):
    """The roll snapshot is compared with the batches below it only; a producer missing from it
    without an open transaction may have expired: not reported."""
    ld, pb = _txns(tmp_path)
    root = ld.write()
    roll = pb.segments[1].base_offset
    path = root / "orders-0" / f"{roll:020d}.snapshot"
    assert path.exists()
    from kaudit.engine.local import decode_segments

    _, chunks = decode_segments([str(path)])
    rows = [r for k, t in chunks if k == "snapshot_entry" for r in t.to_pylist()]
    keep = [ke.ProducerSnapshotEntry(r["producer_id"], r["producer_epoch"], r["last_sequence"], r["last_offset"],
                                     r["offset_delta"], r["timestamp_ms"], r["coordinator_epoch"],
                                     r["current_txn_first_offset"]) for r in rows if r["producer_id"] == 7]
    _snapshot(root, roll, keep)
    assert audit(root, rules=SNAP) == []
    _snapshot(root, roll, [replace(keep[0], producer_epoch=1)])
    (f,) = audit(root, rules=SNAP)
    assert (f["producer_id"], f["first_offset"]) == (7, roll) and "producer_epoch 1 (the log gives 2)" in f["message"]


def test_snapshot_after_compaction_compares_what_remains(tmp_path):
    """Offsets missing after the producer's last batch (compaction): its fields are not judged;
    a log that starts past 0 (retention) does not make a listed producer extra."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0, start_offset=100)
    pb.append_batch(values=[b"a"], producer_id=5, producer_epoch=0, base_sequence=0, base_offset=100)
    pb.next_offset = 110   # 101-109 compacted away: producer 5 may have written there
    pb.append_batch(values=[b"b"], base_offset=110)
    root = ld.write()
    _snapshot(root, 111, [ke.ProducerSnapshotEntry(5, 0, 7, 108, 0, 1), ke.ProducerSnapshotEntry(6, 0, 0, 50, 0, 1)])
    assert audit(root, rules=SNAP) == []


@pytest.mark.parametrize("thinned", [True, False])
def test_snapshot_before_the_cleaner_rebuilt_the_last_batch(tmp_path, thinned):
    """The cleaner rebuilt producer 5's last batch with the records it kept (offsets 100-102, one
    record left at 100): its max timestamp is that record's, the snapshot taken at the roll (before
    the cleaning) holds the batch's as appended - not a mismatch (Kafka's MemoryRecords.
    buildRetainedRecordsInto). A batch holding all its records still proves its timestamp."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0, start_offset=100)
    recs = [ke.Record(offset_delta=0, timestamp_delta=0, key=b"k", value=b"a")]
    if not thinned:
        recs += [ke.Record(offset_delta=d, timestamp_delta=d, key=b"k%d" % d, value=b"b") for d in (1, 2)]
    pb.append_raw(ke.encode_record_batch_v2(100, recs, producer_id=5, producer_epoch=0, base_sequence=0,
                                            base_timestamp=1000, last_offset_delta=2))
    pb.append_batch(values=[b"c"], base_offset=103)
    root = ld.write()
    _snapshot(root, 104, [ke.ProducerSnapshotEntry(5, 0, 2, 102, 2, 1002 if thinned else 1005)])
    fs = audit(root, rules=SNAP)
    if thinned:
        assert fs == []
    else:
        assert [f["producer_id"] for f in fs] == [5] and "timestamp_ms 1005 (the log gives 1002)" in fs[0]["message"]


def test_the_bench_shapes_index_agrees(tmp_path):
    """The transaction benchmark's log dir (fixtures/builder/txn_bench.py) writes .txnindex files
    the rule accepts: its numbers are measured on a clean shape."""
    from fixtures.builder.txn_bench import write_txn_bench_logdir

    stats = write_txn_bench_logdir(tmp_path / "bench", transactions=400, producers=30, partitions=5)
    assert stats["aborted"] == 40
    assert audit(tmp_path / "bench", rules=BOTH) == []
    assert len(list((tmp_path / "bench").glob("*/*.txnindex"))) == 5


@pytest.mark.parametrize("idle_ms, reported", [(2 * 86_400_000, False), (60_000, True)])
def test_snapshot_of_a_producer_that_expired_after_its_marker(tmp_path, idle_ms, reported):
    """Producer 7 commits (coordinator epoch 3), then writes again after idling: past
    producer.id.expiration.ms its state may have expired in between - the broker's new entry
    begins with coordinator epoch -1 (ProducerStateManager.removeExpiredProducers); a minute
    later it cannot have."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    pb.append_batch(values=[b"a"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True,
                    timestamp=1_000)
    pb.append_control(7, 0, "COMMIT", 3, timestamp=1_010)
    pb.append_batch(values=[b"b"], producer_id=7, producer_epoch=0, base_sequence=1, is_transactional=False,
                    timestamp=1_010 + idle_ms)
    root = ld.write()
    _snapshot(root, 3, [ke.ProducerSnapshotEntry(7, 0, 1, 2, 0, 1_010 + idle_ms, -1, -1)])
    fs = audit(root, rules=SNAP)
    assert [("coordinator_epoch -1 (the log gives 3)" in f["message"]) for f in fs] == ([True] if reported else [])
