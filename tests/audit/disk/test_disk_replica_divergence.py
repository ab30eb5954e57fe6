"""replica-divergence (audit/consistency/replicas.py, replica_compare.py): crafted brokers' log dirs holding
the same partition, built with the fixture builder; each case against its negative twin."""

from __future__ import annotations

import json
import os

from diskcraft import audit, brief

from fixtures.builder import corrupt_file, truncate_file
from fixtures.builder.replicas import write_replicas
from kaudit.audit.consistency import replicas
from kaudit.sources.logdir import plan, replicated_partitions

RULES = ("replica-divergence", "checkpoint-mismatch")
T0 = 1_795_000_000_000   # explicit timestamps where nodes append different batches
TOPIC = "orders"


def _log(root, node: int, base: int = 0):
    return root / f"node{node}" / f"{TOPIC}-0" / f"{base:020d}.log"


def _cluster(tmp_path, n: int = 30, per_node=None, nodes=(1, 2, 3)):
    """`n` one-record batches of orders-0 on every node; `per_node(pb, node)` changes one."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0, role="leader" if node == 1 else "follower")
        for i in range(n):
            pb.append_batch(values=[b"v%d" % i])
        if per_node is not None:
            per_node(pb, node)

    write_replicas(root, build, nodes=nodes)
    return root


def _positions(path) -> dict[int, tuple[int, int]]:
    """base offset -> (byte position, size) of each batch of a segment."""
    from kaudit.engine.local import decode_segments

    _, chunks = decode_segments([str(path)])
    out = {}
    for kind, t in chunks:
        if kind == "batch":
            for b, p, s in zip(*(t.column(c).to_pylist() for c in ("base_offset", "position", "batch_size"))):
                out[b] = (p, s)
    return out


def _details(f) -> dict:
    return json.loads(f["details"]) if f.get("details") else {}


def test_identical_replicas_agree(tmp_path):
    assert audit(_cluster(tmp_path), rules=RULES) == []


def test_lost_offsets_that_others_hold(tmp_path):
    """The issue's case: replica 1's bytes at offsets 10-14 overwritten (CRC fails) and its log cut
    after offset 19; replicas 2 and 3 hold everything below the high watermark 30."""
    root = _cluster(tmp_path)
    log = _log(root, 1)
    pos = _positions(log)
    for o in range(10, 15):
        corrupt_file(log, pos[o][0] + pos[o][1] - 2)
    truncate_file(log, os.path.getsize(log) - pos[20][0])
    fs = audit(root, rules=RULES)
    assert brief(fs) == [
        ("checkpoint-mismatch", "error", "orders-0", 20, 29),
        ("checkpoint-mismatch", "warning", "orders-0", 20, 29),
        ("replica-divergence", "error", "orders-0", 10, 14),
        ("replica-divergence", "error", "orders-0", 20, 29),
    ]
    hole, tail = sorted((f for f in fs if f["rule"] == "replica-divergence"), key=lambda f: f["first_offset"])
    assert {hole["replica"], tail["replica"]} == {"1"}
    assert "replica(s) 2, 3 hold" in hole["message"] and "fails its CRC" in hole["message"]
    # its corrupt copy is served as it is, not skipped: a CRC-checking consumer stops there
    assert "lacks a readable copy of offsets 10-14" in hole["message"] and "skip" not in hole["message"]
    assert "CorruptRecordException" in hole["message"]
    assert (_details(hole)["kind"], _details(tail)["kind"]) == ("hole", "tail-flushed")
    assert _details(hole)["holders"] == ["2", "3"]
    assert [e["note"] for e in hole["evidence"]] == ["replica 1", "replica 2 holds it", "replica 3 holds it"]


def test_a_follower_behind_is_a_warning(tmp_path):
    """Replica 3 stopped fetching at offset 20 (its own high watermark and recovery point say so):
    it lacks committed offsets, but it is behind, not damaged."""
    def behind(pb, node):
        if node == 3:
            pb.high_watermark = pb.recovery_point = 20

    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0, role="follower")
        for i in range(20 if node == 3 else 30):
            pb.append_batch(values=[b"v%d" % i])
        behind(pb, node)

    write_replicas(root, build)
    (f,) = audit(root, rules=RULES)
    assert (f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"]) == \
        ("replica-divergence", "warning", "3", 20, 29)
    assert _details(f)["kind"] == "tail-lag"


def test_uncommitted_tail_is_not_compared(tmp_path):
    """Replica 1 holds offsets 30-34 that no high watermark covers (a leader's uncommitted
    appends, or a deposed leader's tail): nothing to say."""
    def extra(pb, node):
        if node == 1:
            for i in range(5):
                pb.append_batch(values=[b"x%d" % i])
            pb.high_watermark = 30

    assert audit(_cluster(tmp_path, per_node=extra), rules=RULES) == []


def _epochs(first: int, second: int, at: int = 20, n: int = 30, tag: bytes = b"v"):
    """A log of `n` batches whose leader epoch goes from `first` to `second` at offset `at`
    (records from `at` on tagged with `tag`)."""
    def write(pb):
        pb.set_leader_epoch(first)
        for i in range(n):
            if i == at:
                pb.set_leader_epoch(second)
            pb.append_batch(values=[(tag if i >= at else b"v") + b"%d" % i])
    return write


def test_unclean_election_below_the_high_watermark(tmp_path):
    """Replica 1 (leader of epoch 0) had 20-29 acknowledged (its high watermark 30); after an
    unclean election replicas 2 and 3 wrote other records at 20-29 in epoch 1: below every
    replica's high watermark, committed on each - critical."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        (_epochs(0, 0) if node == 1 else _epochs(0, 1, tag=b"w"))(pb)

    write_replicas(root, build)
    (f,) = audit(root, rules=RULES)
    assert (f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"]) == \
        ("replica-divergence", "critical", "1", 20, 29)
    versions = _details(f)["versions"]
    assert sorted(versions) == ["1", "2", "3"] and [versions[n][1] for n in "123"] == [0, 1, 1]
    assert "holds different batches than replica(s) 2, 3" in f["message"]


def test_different_epochs_need_both_high_watermarks(tmp_path):
    """Replica 1's replication-offset-checkpoint is missing: its epoch-0 batches at 20-29 may be
    a deposed leader's uncommitted tail, so they are not called divergent (the same records
    with both checkpoints are: test_unclean_election_below_the_high_watermark) - only told, at
    info, to lie past the others' start of epoch 1 (truncated when it follows)."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        (_epochs(0, 0) if node == 1 else _epochs(0, 1, tag=b"w"))(pb)

    write_replicas(root, build)
    (root / "node1" / "replication-offset-checkpoint").unlink()
    (f,) = audit(root, rules=RULES)
    assert (f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"]) == \
        ("replica-divergence", "info", "1", 20, 29)
    assert "cannot be told" in f["message"]


def test_deposed_leader_tail_above_the_high_watermark(tmp_path):
    """The negative twin: replica 1's epoch-0 records at 20-24 were never committed (its high
    watermark is 20); it truncates them when it rejoins. It is behind on 25-29 (a warning), and
    its different batches above its high watermark are not divergence: told at info as a
    deposed leader's uncommitted tail past the others' start of epoch 1."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        if node == 1:
            _epochs(0, 0, n=25)(pb)
            pb.high_watermark = pb.recovery_point = 20
        else:
            _epochs(0, 1, tag=b"w")(pb)

    write_replicas(root, build)
    assert [(f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"])
            for f in audit(root, rules=RULES)] == [("replica-divergence", "warning", "1", 25, 29),
                                                   ("replica-divergence", "info", "1", 20, 24)]


def test_two_versions_in_one_epoch_are_divergence_anywhere(tmp_path):
    """Above every high watermark, but the same leader epoch: a leader writes one sequence of
    batches per epoch, so two versions of offset 20 in epoch 0 are never uncommitted data."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        for i in range(25):
            pb.append_batch(values=[(b"other" if node == 2 and i >= 20 else b"v") + b"%d" % i])
        pb.high_watermark = 20

    write_replicas(root, build, nodes=(1, 2))
    (f,) = audit(root, rules=RULES)
    assert (f["rule"], f["severity"], f["first_offset"], f["last_offset"]) == ("replica-divergence", "error", 20, 24)


def _compacted(pb, node, *, checkpoint: bool, horizon: bool = False):
    """Node 2's cleaner removed offsets 5-9 and 15 (and, `horizon`, rewrote the rest with a
    delete horizon: new CRCs); the others were not cleaned."""
    for i in range(30):
        if node == 2 and (5 <= i <= 9 or i == 15):
            pb.next_offset += 1   # the cleaner left a gap
            continue
        pb.append_batch(values=[b"v%d" % i], base_offset=i, timestamp=T0 + i,
                        has_delete_horizon=horizon and node == 2 and i < 20)
    if node == 2 and checkpoint:
        pb.cleaner_offset = 20


def _compaction_cluster(tmp_path, **kw):
    root = tmp_path / "cluster"

    def build(ld, node):
        _compacted(ld.partition(TOPIC, 0), node, **kw)

    write_replicas(root, build)
    return root


def test_each_cleaner_compacts_on_its_own(tmp_path):
    """Replica 2's cleaner removed batches (below its cleaner-offset-checkpoint 20) and rewrote
    others with a delete horizon (new CRCs): compaction, not divergence."""
    assert audit(_compaction_cluster(tmp_path, checkpoint=True, horizon=True), rules=RULES) == []


def test_cleaned_segment_past_the_checkpoint(tmp_path):
    """The same gaps between replica 2's batches, no cleaner-offset-checkpoint entry: a cleaning
    round that a crash (or the copy) interrupted had swapped that segment in - the checkpoint is
    written once a whole round is done (LogCleanerManager.doneCleaning) - and only the cleaner
    removes offsets from between a segment's batches (appends are contiguous): compaction."""
    assert audit(_compaction_cluster(tmp_path, checkpoint=False), rules=RULES) == []


def _segment_lost(pb, node, *, thinned: bool):
    """Three segments of ten batches (one of offsets 3-4); replica 2 lacks the middle segment's offsets
    10-19 (its first segment then ends short of the third's base); `thinned`: its first segment
    holds a batch its cleaner rebuilt with fewer records than offsets."""
    for i in range(30):
        if i and i % 10 == 0:
            pb.roll_segment()
        if node == 2 and 10 <= i <= 19:
            pb.next_offset += 1
            continue
        if i == 3:   # one batch of offsets 3-4 (replica 2's cleaner dropped its first record)
            recs = [{"value": b"v3", "offset_delta": 0}, {"value": b"v4", "offset_delta": 1}]
            pb.append_batch(recs[1:] if node == 2 and thinned else recs, base_offset=3, timestamp=T0 + i,
                            last_offset_delta=1)
        elif i != 4:
            pb.append_batch(values=[b"v%d" % i], base_offset=i, timestamp=T0 + i)


def test_offsets_missing_at_a_segment_end_without_a_cleaner_are_a_hole(tmp_path):
    """A segment's offsets missing where no segment of the replica shows the cleaner's work (no
    gap between a segment's batches, no batch thinned, no checkpoint, no delete horizon): a hole."""
    root = tmp_path / "cluster"
    write_replicas(root, lambda ld, node: _segment_lost(ld.partition(TOPIC, 0), node, thinned=False))
    fs = audit(root, rules=RULES)
    assert [(f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"]) for f in fs] == [
        ("replica-divergence", "error", "2", 10, 19)]


def test_offsets_missing_at_a_segment_end_of_a_cleaned_log(tmp_path):
    """The twin: replica 2's first segment holds a batch its cleaner rebuilt (fewer records than
    offsets: MemoryRecords.filterTo keeps the last offset delta) - its cleaner rewrote the log
    up to the segment ending short of the next: compaction, not a hole."""
    root = tmp_path / "cluster"
    write_replicas(root, lambda ld, node: _segment_lost(ld.partition(TOPIC, 0), node, thinned=True))
    assert audit(root, rules=RULES) == []


def test_delete_horizon_alone_excuses_its_batches(tmp_path):
    """No cleaner-offset-checkpoint (a partial copy), but the batches carry the delete-horizon
    flag that only the cleaner sets: their CRCs may differ, and the gaps before them are the
    cleaner's."""
    assert audit(_compaction_cluster(tmp_path, checkpoint=False, horizon=True), rules=RULES) == []


def test_different_crc_where_no_cleaner_ran(tmp_path):
    """Same offsets and producer fields, another CRC (records rewritten in place with a valid
    CRC), in a partition no cleaner touched: divergence."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        for i in range(10):
            pb.append_batch(values=[b"v%d" % i if not (node == 3 and i == 4) else b"forged"])

    write_replicas(root, build)
    (f,) = audit(root, rules=RULES)
    assert (f["rule"], f["replica"], f["first_offset"], f["last_offset"]) == ("replica-divergence", "3", 4, 4)


def test_log_start_and_a_single_replica(tmp_path):
    """Retention deleted replica 3's first segment (its log starts at 10): not missing. A
    partition held in one log dir only is never compared."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0, start_offset=10 if node == 3 else 0)
        for i in range(10 if node == 3 else 0, 30):
            pb.append_batch(values=[b"v%d" % i], base_offset=i, timestamp=T0 + i)
        if node == 1:
            solo = ld.partition("solo", 0)
            for i in range(5):
                solo.append_batch(values=[b"s%d" % i])

    write_replicas(root, build)
    assert audit(root, rules=RULES) == []
    assert replicated_partitions(plan([str(root)])) == {(TOPIC, 0)}


def test_a_single_replicas_rows_are_two_per_chunk(tmp_path):
    """The fold's selection: a row per batch only for replicated partitions; otherwise the two
    batches that bound a chunk's offsets."""
    from kaudit.engine.local import decode_segments

    root = _cluster(tmp_path, n=50, nodes=(1,))
    bound = replicas.FOLD.bind(set())
    _, chunks = decode_segments([str(root)])
    rows = [bound.select(k, t) for k, t in chunks if k == "batch"]
    assert [r.num_rows for r in rows] == [2] and rows[0].column("batches").to_pylist() == [50, 0]
    assert rows[0].column("base_offset").to_pylist() == [0, 49]
    # copies, not views: the buffered rows must not keep the chunk's buffers alive
    held = sum(b.size for col in rows[0].columns for c in col.chunks for b in c.buffers() if b is not None)
    assert held < 2048
    _, chunks = decode_segments([str(root)])
    detail = [replicas.FOLD.bind({(TOPIC, 0)}).select(k, t) for k, t in chunks if k == "batch"]
    assert [r.num_rows for r in detail] == [50]


def test_other_clusters_are_not_replicas(tmp_path):
    """Two clusters' log dirs (meta.properties' cluster.id) both hold an orders-0: different
    partitions that share a name. The same two log dirs in one cluster diverge."""
    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        for i in range(5):
            pb.append_batch(values=[b"%d-%d" % (node, i)])

    for n, cluster in ((1, "Y2x1c3Rlci1vbmU"), (2, "Y2x1c3Rlci10d28")):
        write_replicas(tmp_path / "two", build, nodes=(n,), cluster_id=cluster)
    assert audit(tmp_path / "two", rules=RULES) == []
    write_replicas(tmp_path / "one", build, nodes=(1, 2))
    assert [f["first_offset"] for f in audit(tmp_path / "one", rules=RULES)] == [0]


def _superseded(tmp_path, *, hw1: int, entry: bool):
    """Replica 1 (leader of epoch 0) holds 0-29; replicas 2 and 3 hold 0-19 and nothing more, and
    (`entry`) replica 2's leader-epoch-checkpoint starts epoch 1 at 20: it was made leader and has
    written nothing yet (Partition.makeLeader records the entry first)."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        for i in range(30 if node == 1 else 20):
            pb.append_batch(values=[b"v%d" % i])
        pb.high_watermark = hw1 if node == 1 else 20
        if node == 2 and entry:
            pb.epochs.append((1, 20))

    write_replicas(root, build)
    return [(f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"])
            for f in audit(root, rules=RULES)]


def test_committed_records_past_a_new_leaders_epoch_start_are_critical(tmp_path):
    """Replica 1's 20-29 are below its high watermark 30 (committed), yet replica 2 began epoch 1
    at 20 without them: an unclean election - lost, however far the new leader has written."""
    assert _superseded(tmp_path, hw1=30, entry=True) == [("replica-divergence", "critical", "1", 20, 29)]


def test_an_uncommitted_tail_past_a_new_leaders_epoch_start_is_info(tmp_path):
    assert _superseded(tmp_path, hw1=20, entry=True) == [("replica-divergence", "info", "1", 20, 29)]


def test_replicas_behind_without_a_later_epoch_only_lag(tmp_path):
    """The twin: no replica began a later epoch - replicas 2 and 3 are behind (they fetch 20-29)."""
    assert _superseded(tmp_path, hw1=30, entry=False) == [("replica-divergence", "warning", "2", 20, 29),
                                                          ("replica-divergence", "warning", "3", 20, 29)]


def test_an_unclean_elections_trace_is_one_incident(tmp_path):
    """Replica 1 had 20-29 committed in epoch 0; replica 2 began epoch 1 at 20 and wrote 20-24:
    different batches at 20-24 below both high watermarks and replica 1's 25-29 past replica 2's
    epoch start - both critical, one incident (no metadata log to head it)."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        for i in range(30 if node == 1 else 20):
            pb.append_batch(values=[b"v%d" % i])
        if node == 2:
            pb.set_leader_epoch(1)
            for i in range(20, 25):
                pb.append_batch(values=[b"w%d" % i])
        pb.high_watermark = pb.next_offset

    write_replicas(root, build, nodes=(1, 2))
    fs = audit(root, rules=RULES)
    assert sorted((f["severity"], f["replica"], f["first_offset"], f["last_offset"]) for f in fs) == [
        ("critical", "1", 20, 24), ("critical", "1", 25, 29)]
    assert len({f["incident"] for f in fs}) == 1


def _empty_leader(tmp_path, *, hw1: int, entry: bool):
    """Replica 1 (leader of epoch 0) holds 0-9; replica 2's log is empty and (`entry`) its
    leader-epoch-checkpoint starts epoch 1 at 0: elected (uncleanly) with an empty log, it wrote
    nothing yet - its log holds no batch to compare, only that entry."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        if node == 1:
            for i in range(10):
                pb.append_batch(values=[b"v%d" % i])
        pb.high_watermark = hw1 if node == 1 else 0
        if node == 2 and entry:
            pb.epochs.append((1, 0))

    write_replicas(root, build, nodes=(1, 2))
    return [(f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"])
            for f in audit(root, rules=RULES)]


def test_committed_records_past_an_empty_new_leaders_epoch_start_are_critical(tmp_path):
    """An empty replica's leader-epoch-checkpoint still tells where its log began epoch 1: replica
    1's committed 0-9 in epoch 0 are past it - lost (missed while only replicas with batches were
    compared: the simulator's elect:txn_unclean, regressions/elect-txn_unclean-empty-leader.json)."""
    assert _empty_leader(tmp_path, hw1=10, entry=True) == [("replica-divergence", "critical", "1", 0, 9)]


def test_an_uncommitted_tail_past_an_empty_new_leaders_epoch_start_is_info(tmp_path):
    assert _empty_leader(tmp_path, hw1=0, entry=True) == [("replica-divergence", "info", "1", 0, 9)]


def test_an_empty_replica_without_a_later_epoch_is_no_divergence(tmp_path):
    """The twin: the empty replica began no later epoch - nothing superseded."""
    assert _empty_leader(tmp_path, hw1=10, entry=False) == []


def _lost_marker(tmp_path, *, epoch_start: int):
    """Replica 1 holds producer 7's transaction at 0-1 and its COMMIT at 2 (committed: high
    watermark 3); replica 2 holds 0-1 only, and began epoch 1 at `epoch_start` (an unclean
    election after it fetched the data - 2 - or before - 0)."""
    root = tmp_path / "cluster"

    def build(ld, node):
        pb = ld.partition(TOPIC, 0)
        if node == 1 or epoch_start > 0:
            pb.append_batch(values=[b"a", b"b"], producer_id=7, producer_epoch=0, base_sequence=0,
                            is_transactional=True)
        if node == 1:
            pb.append_control(7, 0, "COMMIT")
        else:
            pb.epochs.append((1, epoch_start))
        pb.high_watermark = pb.next_offset
    write_replicas(root, build, nodes=(1, 2))
    return [f for f in audit(root, rules=RULES) if f["severity"] == "critical"]


def test_a_lost_marker_names_the_open_transaction_it_leaves_on_the_new_leader(tmp_path):
    """The COMMIT at 2 is past replica 2's start of epoch 1, its data below it: replica 2 holds the
    transaction without its end - an open transaction there that no coordinator will end (the
    simulator's elect:txn_unclean losing the marker)."""
    (f,) = _lost_marker(tmp_path, epoch_start=2)
    assert (f["replica"], f["first_offset"], f["last_offset"]) == ("1", 2, 2)
    assert _details(f)["open_on_leader"] == [{"producer_id": 7, "marker_offset": 2, "data": [0, 1]}]
    assert "open transaction" in f["message"] and "replica 2 holds without it" in f["message"]


def test_a_transaction_lost_whole_leaves_nothing_open(tmp_path):
    """The twin: replica 2 began epoch 1 at 0 - the data went with the marker, nothing is open."""
    fs = _lost_marker(tmp_path, epoch_start=0)
    assert [(f["replica"], f["first_offset"], f["last_offset"]) for f in fs] == [("1", 0, 2)]
    assert "open_on_leader" not in _details(fs[0]) and "open transaction" not in fs[0]["message"]


def test_a_log_dir_naming_a_partition_it_holds_no_directory_of(tmp_path):
    """Node 2's checkpoints name orders-0 at high watermark 30, the other replicas are in the
    input, node 2's orders-0 directory is not: its 30 committed offsets are gone from that broker
    - or the copy left the directory out, which the input cannot tell apart: a warning saying
    both. A partition no replica of which is in the input is not told (test_disk_checkpoints)."""
    import shutil

    root = _cluster(tmp_path)
    shutil.rmtree(root / "node2" / f"{TOPIC}-0")
    (f,) = audit(root, rules=RULES)
    assert (f["rule"], f["severity"], f["replica"], f["first_offset"], f["last_offset"]) == \
        ("checkpoint-mismatch", "warning", "2", 0, 29)
    assert "holds no orders-0 directory of that log dir" in f["message"]
    assert "gone from that broker" in f["message"] and "the copy left that directory out" in f["message"]
    assert f["evidence"][0]["source"].endswith("replication-offset-checkpoint")
