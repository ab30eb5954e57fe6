"""The on-disk producer rules on crafted log dirs: duplicate-batch, out-of-order-sequence,
fenced-epoch, offset-overlap — what they flag (positive) and the benign histories they must not
flag (negative). Each log dir is built with the fixture builder (fixtures/builder)."""

from __future__ import annotations

import os

import pytest
from diskcraft import INT32_MAX, audit, brief, details, logdir, of, small_chunks


def _root(ld):
    return ld.write()


# -- duplicate-batch -------------------------------------------------------------------------------

def test_byte_identical_duplicate_after_state_loss(tmp_path):
    """The broker lost producer 7's state and stored a resend of seq 0-4 again (same bytes)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    first = p.send([b"a", b"b", b"c", b"d", b"e"], timestamp=1_000)
    p.send([b"f", b"g", b"h", b"i", b"j"])
    dup = p.send([b"a", b"b", b"c", b"d", b"e"], base_sequence=0, timestamp=1_000)
    fs = audit(_root(ld))
    assert brief(fs) == [("duplicate-batch", "error", "orders-0", 10, 14),
                         ("out-of-order-sequence", "error", "orders-0", 10, 14)]
    [d] = of(fs, "duplicate-batch")
    assert (d["producer_id"], d["producer_epoch"], d["base_sequence"], d["last_sequence"]) == (7, 0, 0, 4)
    assert details(d) == {"payload": "identical", "original_first_offset": 0, "original_last_offset": 4,
                          "exact": True, "original_sequences": [0, 4]}
    assert "byte-identical" in d["message"]
    log = os.path.join(str(ld.root), first.log_path)
    assert [(e["source"], e["position"], e["note"]) for e in d["evidence"]] == [
        (log, dup.position, None), (log, first.position, "original")]
    [o] = of(fs, "out-of-order-sequence")
    assert details(o)["kind"] == "regression" and details(o)["expected_sequence"] == 10


def test_sequences_reused_with_a_different_payload(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"v0-%d" % j for j in range(4)])                 # seq 0-3 at offsets 0-3
    second = p.send([b"v1-%d" % j for j in range(4)])        # seq 4-7
    p.send([b"v2-%d" % j for j in range(4)])                 # seq 8-11
    p.send([b"new-%d" % j for j in range(3)], base_sequence=5)  # seq 5-7 again, other records
    fs = audit(_root(ld))
    assert brief(fs) == [("duplicate-batch", "error", "orders-0", 12, 14),
                         ("out-of-order-sequence", "error", "orders-0", 12, 14)]
    [d] = of(fs, "duplicate-batch")
    dd = details(d)
    assert dd["payload"] == "different" and dd["original_sequences"] == [5, 7]
    assert (dd["original_first_offset"], dd["original_last_offset"], dd["exact"]) == (5, 7, True)
    assert "a batch of other bounds (the first copy's batch held sequences 4-7)" in d["message"]
    # the batch that stored sequences 5-7 first (seq 4-7) is the original's evidence
    assert [(e["position"], e["note"]) for e in d["evidence"]][1:] == [(second.position, "original")]


def test_many_copies_give_one_finding_each_against_the_original(tmp_path):
    """A producer re-sending sequence 0 over and over (a client stuck in a retry loop after state
    loss): each copy is one duplicate of the first, not one per earlier copy (n^2/2 findings)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    for _ in range(300):
        pb.append_batch(values=[b"x"], producer_id=5, producer_epoch=0, base_sequence=0)
    dups = of(audit(_root(ld)), "duplicate-batch")
    assert len(dups) == 299
    assert {details(d)["original_first_offset"] for d in dups} == {0}


def test_duplicate_interleaved_with_other_producers_is_located_within_the_run(tmp_path):
    """When other producers' batches sit between, the original offsets are given as the run
    that holds them (not exact)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    a, b = pb.producer(7, 0), pb.producer(8, 0)
    for i in range(3):
        a.send([b"a%d" % i, b"a%d'" % i])
        b.send([b"b%d" % i])
    a.send([b"x", b"y"], base_sequence=2)
    fs = audit(_root(ld))
    [d] = of(fs, "duplicate-batch")
    dd = details(d)
    assert (d["producer_id"], d["first_offset"], dd["original_sequences"]) == (7, 9, [2, 3])
    assert (dd["original_first_offset"], dd["original_last_offset"], dd["exact"]) == (0, 7, False)
    assert [f["rule"] for f in fs if f["producer_id"] == 8] == []


# -- out-of-order-sequence -------------------------------------------------------------------------

def test_sequence_gap(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b", b"c", b"d", b"e"])
    p.send([b"f", b"g"], base_sequence=50)
    p.send([b"h"])  # 52: in sequence again
    fs = audit(_root(ld))
    assert brief(fs) == [("out-of-order-sequence", "error", "orders-0", 5, 6)]
    [o] = fs
    assert details(o) == {"kind": "gap", "expected_sequence": 5, "previous_last_sequence": 4,
                          "previous_epoch": 0, "broker": "accepted (stored)"}
    assert "jumps from 4 to 50" in o["message"] and "5-49 are missing" in o["message"]
    assert o["timeline"][-1].startswith("offsets 5-6 epoch 0 seq 50-51")


def test_sequence_regression(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b", b"c"])
    p.send([b"d", b"e", b"f"])
    p.send([b"z"], base_sequence=1)
    fs = audit(_root(ld))
    [o] = of(fs, "out-of-order-sequence")
    assert (o["first_offset"], details(o)["kind"], details(o)["expected_sequence"]) == (6, "regression", 6)
    assert [f["rule"] for f in fs] == ["duplicate-batch", "out-of-order-sequence"]


def test_new_epoch_not_starting_at_zero(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b", b"c"])
    p.bump_epoch()
    p.send([b"d", b"e"], base_sequence=3)
    p.send([b"f"])  # 5: continues the new epoch
    fs = audit(_root(ld))
    assert brief(fs) == [("out-of-order-sequence", "error", "orders-0", 3, 4)]
    assert details(fs[0])["kind"] == "new-epoch" and fs[0]["producer_epoch"] == 1
    assert "starts new epoch 1 at sequence 3, not 0" in fs[0]["message"]


def test_wrap_at_int_max_is_not_flagged(tmp_path):
    """Sequences wrap from Int.MaxValue to 0 (DefaultRecordBatch.incrementSequence): a batch
    ending at MAX followed by 0, and a batch crossing MAX, are in sequence."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b"], base_sequence=INT32_MAX - 3)   # MAX-3, MAX-2
    p.send([b"c", b"d"])                                # MAX-1, MAX
    p.send([b"e", b"f"])                                # 0, 1
    q = pb.producer(8, 0)
    q.send([b"g"], base_sequence=INT32_MAX - 2)         # MAX-2
    q.send([b"h", b"i", b"j", b"k"])                    # MAX-1, MAX, 0, 1 (crosses)
    q.send([b"l", b"m"])                                # 2, 3
    for _ in range(3):
        p.send([b"n", b"o"])
        q.send([b"p"])
    assert audit(_root(ld)) == []


def test_duplicate_after_a_wrap_is_found(tmp_path):
    """Ranges are split at the wrap, so re-used sequences right after it are still seen."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b"], base_sequence=INT32_MAX - 3)
    p.send([b"c", b"d", b"e", b"f"])    # MAX-1 .. 1 at offsets 2-5
    p.send([b"g", b"h"])                # 2-3 at offsets 6-7
    p.send([b"x", b"y"], base_sequence=2)
    fs = audit(_root(ld))
    assert brief(fs) == [("duplicate-batch", "error", "orders-0", 8, 9),
                         ("out-of-order-sequence", "error", "orders-0", 8, 9)]
    dd = details(of(fs, "duplicate-batch")[0])
    assert (dd["original_sequences"], dd["original_first_offset"], dd["original_last_offset"]) == ([2, 3], 6, 7)


def test_resend_of_a_wrapping_batch_is_one_identical_duplicate(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"c", b"d", b"e", b"f"], base_sequence=INT32_MAX - 1, timestamp=5_000)  # MAX-1 .. 1
    p.send([b"g"])
    p.send([b"c", b"d", b"e", b"f"], base_sequence=INT32_MAX - 1, timestamp=5_000)
    fs = audit(_root(ld))
    [d] = of(fs, "duplicate-batch")
    assert details(d)["payload"] == "identical"
    assert (details(d)["original_first_offset"], details(d)["original_last_offset"]) == (0, 3)


# -- fenced-epoch ----------------------------------------------------------------------------------

def test_zombie_data_after_a_newer_epoch(tmp_path):
    """Epoch 0 writes after epoch 1: one finding for the zombie's consecutive batches; the live
    producer's next batch (epoch 1 seq 3) is in sequence and not flagged."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b", b"c"])
    p.bump_epoch()
    p.send([b"d", b"e", b"f"])
    zombie = pb.producer(7, 0)
    zombie.sequences[("orders", 0)] = 3
    zombie.send([b"z1", b"z2"])          # epoch 0 seq 3-4 at offsets 6-7
    zombie.send([b"z3"])                 # epoch 0 seq 5 at offset 8
    p.send([b"g"])                       # epoch 1 seq 3
    fs = audit(_root(ld))
    assert brief(fs) == [("fenced-epoch", "error", "orders-0", 6, 8)]
    [f] = fs
    assert (f["producer_epoch"], f["base_sequence"], f["last_sequence"]) == (0, 3, 5)
    assert details(f) == {"stale_epoch": 0, "current_epoch": 1, "broker": "accepted (stored)"}
    assert "2 batches up to offset 8" in f["message"]
    assert [e["kind"] for e in f["evidence"]] == ["batch"]


def test_zombie_marker(tmp_path):
    """A marker from an older epoch than the producer's data and markers (a zombie's EndTxn
    that reached the log)."""
    ld = logdir(tmp_path)
    pb = ld.partition("payments", 0)
    p = ld.producer(9, 3, transactional_id="tx-a")
    p.send([b"a"], partition=pb)
    p.commit()                                          # data and COMMIT at epoch 3
    marker = pb.append_control(9, 2, "ABORT", 0)        # epoch 2: stale
    p.send([b"b"], partition=pb)
    p.commit()
    fs = audit(_root(ld))
    assert brief(fs) == [("fenced-epoch", "error", "payments-0", marker.base_offset, marker.base_offset)]
    [f] = fs
    assert f["evidence"][0]["kind"] == "marker" and f["base_sequence"] is None
    assert "ABORT marker with epoch 2 after epoch 3" in f["message"]


# -- offset-overlap --------------------------------------------------------------------------------

def test_offset_overlap_in_a_segment_and_across_segments(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    for i in range(4):
        pb.append_batch(values=[b"a%d" % i, b"b%d" % i])   # offsets 0-7
    pb.append_batch(values=[b"x"], base_offset=6)            # 6 <= 7: overlap
    pb.append_batch(values=[b"y"], base_offset=8)            # fine
    pb.roll_segment()
    pb.append_batch(values=[b"z", b"w"], base_offset=3)      # next segment goes back
    fs = audit(_root(ld))
    assert brief(fs) == [("offset-overlap", "error", "orders-0", 3, 4),
                         ("offset-overlap", "error", "orders-0", 6, 6)]
    assert [details(f)["previous_last_offset"] for f in sorted(fs, key=lambda f: f["first_offset"])] == [8, 7]


def test_offset_gaps_are_not_overlaps(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    pb.append_batch(values=[b"a"])
    pb.append_batch(values=[b"b"], base_offset=10)
    pb.roll_segment()
    pb.append_batch(values=[b"c"], base_offset=100)
    assert audit(_root(ld)) == []


# -- benign histories: no finding ------------------------------------------------------------------

def test_kip360_epoch_bump_with_sequence_reset(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    for _ in range(3):
        p.send([b"a", b"b"])
    p.bump_epoch()                 # UNKNOWN_PRODUCER_ID / OutOfOrderSequence: epoch + 1, seq 0
    for _ in range(3):
        p.send([b"c"])
    p.bump_epoch(5)                # a bigger jump (several bumps elsewhere): still from 0
    p.send([b"d"])
    assert audit(_root(ld)) == []


def test_coordinator_abort_marker_then_reinitialised_producer(tmp_path):
    """The coordinator aborts a timed-out transaction with a marker at epoch + 1; the producer
    re-initialises and writes at epoch + 2 from sequence 0."""
    ld = logdir(tmp_path)
    a, b = ld.partition("payments", 0), ld.partition("payments", 1)
    p = ld.producer(9, 0, transactional_id="tx-a")
    p.send([b"a1", b"a2"], partition=a)
    p.send([b"b1"], partition=b)
    p.abort(marker_epoch=1)        # coordinator-side abort: marker epoch 1
    p.bump_epoch(2)
    p.send([b"a3"], partition=a)   # epoch 2 seq 0
    p.send([b"b2", b"b3"], partition=b)
    p.commit()
    p.send([b"a4"], partition=a)   # epoch 2 seq 1 after the COMMIT (transaction v0/1: no reset)
    p.commit()
    assert audit(_root(ld)) == []


def test_transaction_v2_marker_bumps_then_data_from_zero(tmp_path):
    """KIP-890 (transaction version 2): every end marker bumps the epoch; the next transaction
    writes at that epoch from sequence 0."""
    ld = logdir(tmp_path)
    pb = ld.partition("payments", 0)
    p = ld.producer(9, 0, transactional_id="tx-v2")
    for epoch in range(1, 4):
        p.send([b"x", b"y"], partition=pb)
        p.commit(marker_epoch=epoch)
        p.producer_epoch = epoch
        p.sequences.clear()
    assert audit(_root(ld)) == []


def test_compaction_gaps(tmp_path):
    """Compaction removed whole batches: the sequences jump and so do the offsets. Also the
    first batches of a new epoch removed: the epoch's first visible batch is not at 0."""
    ld = logdir(tmp_path)
    pb = ld.partition("changelog", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b"], keys=[b"k1", b"k2"])
    p.sequences[("changelog", 0)] += 6
    pb.next_offset += 6                          # 6 records compacted away
    p.send([b"c"], keys=[b"k3"])
    p.bump_epoch()
    p.sequences[("changelog", 0)] = 4
    pb.next_offset += 4                          # epoch 1 seq 0-3 compacted away
    p.send([b"d"], keys=[b"k4"])
    p.send([b"e"], keys=[b"k5"])
    assert audit(_root(ld)) == []


def _eos_changelog(ld, rounds=12) -> None:
    """An exactly-once changelog (Kafka Streams): a transaction per round, its COMMIT marker
    after it; every other round two batches, of which compaction removed the second whole (all
    its records superseded): its sequences and offsets are gone, the marker stays."""
    pb = ld.partition("store-changelog", 0)
    p = ld.producer(11, 0, transactional_id="app-0_0")
    for r in range(rounds):
        p.send([b"v%d" % r], keys=[b"k%d" % r], partition=pb)
        if r % 2:
            p.sequences[("store-changelog", 0)] += 1
            pb.next_offset += 1                  # the second batch, compacted away
        p.commit()


def test_compaction_before_a_commit_marker(tmp_path):
    """A batch compaction removed just before its transaction's COMMIT marker leaves the offset
    gap before the marker: the next data batch's sequence gap is still compaction's."""
    ld = logdir(tmp_path)
    _eos_changelog(ld)
    assert audit(_root(ld)) == []


@pytest.mark.parametrize("rows", [1, 2, 3, 7])
def test_compaction_before_a_commit_marker_at_every_chunk_size(tmp_path, monkeypatch, rows):
    ld = logdir(tmp_path)
    _eos_changelog(ld, rounds=30)
    with small_chunks(monkeypatch, rows):
        assert audit(_root(ld)) == []


def test_a_gap_across_a_commit_marker_without_an_offset_gap(tmp_path):
    """The same transactions with sequences missing but the offsets consecutive: a real gap."""
    ld = logdir(tmp_path)
    pb = ld.partition("store-changelog", 0)
    p = ld.producer(11, 0, transactional_id="app-0_0")
    p.send([b"a"], partition=pb)
    p.commit()
    p.send([b"b"], partition=pb, base_sequence=5)
    p.commit()
    assert brief(audit(_root(ld))) == [("out-of-order-sequence", "error", "store-changelog-0", 2, 2)]


def test_a_new_epoch_not_at_zero_is_measured_from_its_bump_marker(tmp_path):
    """An offset gap before the coordinator's bump marker (the old epoch's batch compacted away)
    does not explain a new epoch whose first batch is not at 0 with consecutive offsets after it."""
    ld = logdir(tmp_path)
    pb = ld.partition("store-changelog", 0)
    p = ld.producer(11, 0, transactional_id="app-0_0")
    p.send([b"a"], partition=pb)
    pb.next_offset += 1                          # a batch of epoch 0 compacted away
    p.abort(marker_epoch=1)                      # the coordinator's abort, epoch bumped
    p.bump_epoch(1)
    p.send([b"b"], partition=pb, base_sequence=3)
    assert brief(audit(_root(ld))) == [("out-of-order-sequence", "error", "store-changelog-0", 3, 3)]


def test_compaction_before_a_zombie_write(tmp_path):
    """A zombie's write does not move the live producer's sequence, so an offset gap before it
    (the live producer's next batch compacted away) still explains the live producer's gap."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    live, zombie = pb.producer(7, 1), pb.producer(7, 0)
    live.send([b"a"])
    live.sequences[("orders", 0)] += 1
    pb.next_offset += 1                          # the live producer's next batch, compacted away
    zombie.send([b"z"], base_sequence=50)
    live.send([b"b"])                            # sequence 2 after 0: compaction's gap
    assert brief(audit(_root(ld))) == [("fenced-epoch", "error", "orders-0", 2, 2)]


def test_a_gap_is_flagged_when_the_offsets_jumped_elsewhere_before(tmp_path):
    """The compaction excuse only covers an offset jump between the producer's previous batch
    and this one — not one earlier in the log (the fast path keeps that bookkeeping too)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a"])
    p.send([b"b"])
    pb.next_offset += 3                          # an old jump
    for v in (b"c", b"d", b"e"):
        p.send([v])
    p.send([b"f"], base_sequence=10)             # a real gap, offsets consecutive
    fs = audit(_root(ld))
    assert brief(fs) == [("out-of-order-sequence", "error", "orders-0", 8, 8)]


def test_first_batch_after_retention_and_first_marker(tmp_path):
    """The log start was deleted: a producer's first visible batch has any sequence; another's
    first visible batch is its transaction's COMMIT marker, then its data continues at 37."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0, start_offset=5_000)
    p = pb.producer(7, 3)
    p.send([b"a", b"b"], base_sequence=1_234)
    p.send([b"c"])
    pb.append_control(8, 2, "COMMIT", 4)
    t = ld.producer(8, 2, transactional_id="tx-b")
    t.send([b"x"], partition=pb, base_sequence=37)
    t.send([b"y"], partition=pb)
    t.commit()
    assert audit(_root(ld)) == []


def test_new_producer_id_after_reinit(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b", b"c"])
    q = pb.producer(8, 0)          # the application restarted: a new producer id, seq 0 again
    q.send([b"a", b"b", b"c"])
    r = pb.producer(3, 0)          # a lower producer id is still just another producer
    r.send([b"d"])
    p.send([b"e"])                 # the old id's state is untouched
    assert audit(_root(ld)) == []


def test_transactional_offset_commits_in_consumer_offsets(tmp_path):
    """The group coordinator appends TxnOffsetCommit batches with the producer's id and epoch and
    base sequence 0 every time (AppendOrigin.Coordinator): no sequence findings there. Two
    identical plain commits in one millisecond are not a producer retry either."""
    ld = logdir(tmp_path)
    co = ld.partition("__consumer_offsets", 0)
    out = ld.partition("out", 0)
    p = ld.producer(9, 0, transactional_id="ctp")
    for i in range(4):
        p.send([b"r%d" % i], partition=out)
        p.send_offsets("g1", {("in", 0): 10 * i, ("in", 1): 10 * i + 1}, partition=co)
        p.commit()
    co.append_offset_commits("g2", {("in", 0): 5}, commit_timestamp=7_000)
    co.append_offset_commits("g2", {("in", 0): 5}, commit_timestamp=7_000)
    assert audit(_root(ld)) == []


def test_aborted_and_committed_transactions_continue_sequences(tmp_path):
    ld = logdir(tmp_path)
    a, b = ld.partition("payments", 0), ld.partition("payments", 1)
    txn = ld.partition("__transaction_state", 0)
    p = ld.producer(9, 0, transactional_id="tx-a", txn_state=txn)
    for i in range(4):
        p.send([b"a%d" % i], partition=a)
        p.send([b"b%d" % i, b"c%d" % i], partition=b)
        p.abort() if i % 2 else p.commit()
    assert audit(_root(ld)) == []


def test_replicas_are_audited_separately(tmp_path):
    """The same partition on two brokers: each replica's log is its own timeline (a duplicate
    on one replica only is reported for that replica only)."""
    roots = []
    for node in (1, 2):
        ld = logdir(tmp_path, f"node{node}", node_id=node)
        pb = ld.partition("orders", 0)
        p = pb.producer(7, 0)
        p.send([b"a", b"b"], timestamp=1_000)
        p.send([b"c"])
        if node == 2:
            p.send([b"a", b"b"], base_sequence=0, timestamp=1_000)
        roots.append(ld.write())
    fs = audit(tmp_path)
    assert sorted((f["rule"], f["replica"]) for f in fs) == [("duplicate-batch", "2"),
                                                            ("out-of-order-sequence", "2")]
