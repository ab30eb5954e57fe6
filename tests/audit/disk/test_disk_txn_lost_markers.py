"""A transaction's marker missing on one partition it registered (lost: an unclean election, a
truncation), its data then ended in the log by a later transaction's marker
(txn_lost.split_lost_markers): the story is told on that partition and offsets, with the
outcome consumers get; under transaction version 2 and across a fencing (0/1), by epoch. Negative
twins: a fenced instance's late write (its own marker came first), a zombie on a partition its
transaction never registered, a transaction that committed everywhere."""

from __future__ import annotations

import pytest
from diskcraft import brief, details, logdir, of
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.builder.replicas import write_replicas
from kaudit.audit.stories import incidents
from kaudit.engine.local import audit_segments
from kaudit.report import story

pytestmark = pytest.mark.usefixtures("txn_path")
T0 = 1_700_000_000_000


def audit(root, **kw):
    return audit_segments([str(root)], **kw).findings


def serious(fs):
    return [f for f in fs if f["severity"] in ("warning", "error", "critical")]


def end_losing(p, kind: str, lost, *, epoch: int | None = None, hole: bool = False):
    """The coordinator ends the producer's transaction (`kind`), its marker on `lost` never
    written (`hole`: its offset left empty, as where its bytes were cut out of the log);
    `epoch`: the markers' epoch (default: as the version writes them)."""
    tv2 = p.transaction_version >= 2
    e = epoch if epoch is not None else (p.producer_epoch + 1 if tv2 else p.producer_epoch)
    prepare, complete = {"COMMIT": ("PrepareCommit", "CompleteCommit"), "ABORT": ("PrepareAbort", "CompleteAbort")}[kind]
    p._state(prepare, p.txn_partitions, producer_epoch=e)
    for pb in p.txn_members:
        if pb is not lost:
            pb.append_control(p.producer_id, e, kind, 0)
        elif hole:
            pb.next_offset += 1
            pb.logdir.tick()   # the clock as where it was written: replicas stay byte-identical
    p._state(complete, {}, producer_epoch=e)
    p.txn_members, p.txn_partitions = [], {}
    if tv2:
        p.producer_epoch = e
        p.sequences.clear()


def setup(tmp_path, tv):
    ld = logdir(tmp_path, start_time_ms=T0)
    return (ld, *parts_and_producer(ld, tv))


def parts_and_producer(ld, tv):
    """a-0, b-0 and transactional producer 7 ('tx') of a log dir with `__transaction_state`."""
    ts = ld.partition("__transaction_state", 0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    return a, b, ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)


@pytest.mark.parametrize("tv", [2])
def test_lost_commit_then_next_transaction_aborts(tmp_path, tv):
    """The committed transaction's COMMIT on b-0 is missing; the next transaction writes b-0 and
    aborts: its ABORT discards the committed data there - torn, told on b-0 at that data."""
    ld, a, b, p = setup(tmp_path, tv)
    p.send([b"a1"], partition=a); first = p.send([b"b1", b"b2"], partition=b)
    end_losing(p, "COMMIT", b)
    ld.tick(5_000)
    p.send([b"b3"], partition=b)
    p.abort()
    ld.write()
    fs = audit(ld.root)
    (t,) = of(fs, "torn-transaction")
    assert t["severity"] == "critical" and (t["topic"], t["first_offset"], t["last_offset"]) == ("b", first.base_offset, first.last_offset)
    assert "b-0 offsets 0-1 aborted by the ABORT at offset 3 of a later transaction" in t["message"]
    assert "its own marker there is missing" in t["message"] and "as decided: a-0 offset 0" in t["message"]
    assert details(t)["damaged"] == [["b-0", 0, 1, "ABORT", 3]]
    (m,) = of(fs, "mixed-epoch-transaction")
    assert (m["topic"], m["first_offset"], m["last_offset"]) == ("b", 0, 1) and "no marker of its own" in m["message"]
    assert {f["rule"] for f in serious(fs)} == {"torn-transaction", "mixed-epoch-transaction"}, brief(fs)
    incidents.assign(fs)
    (inc,) = story.incidents(fs, None)
    assert inc["title"].startswith("Torn transaction on b-0")
    assert "b-0 offsets 0-1" in inc["narrative"]["impact"] and "committed data lost to read_committed consumers" in inc["narrative"]["impact"]


def test_fencing_abort_lost_then_new_instance_commits(tmp_path):
    """Version 0/1: a new instance fences the open transaction; the fencing's ABORT (epoch 1)
    never reaches b-0; the new instance (epoch 2) writes b-0 and commits: the aborted data there
    is exposed to read_committed consumers. Not a zombie's write: it was written before the
    fencing, on a partition its transaction registered."""
    ld, a, b, p = setup(tmp_path, 0)
    p.send([b"a1"], partition=a); old = p.send([b"b1"], partition=b)
    p.producer_epoch = 1
    end_losing(p, "ABORT", b)
    p.bump_epoch(2)
    ld.tick(5_000)
    p.send([b"new"], partition=b)
    p.commit()
    ld.write()
    fs = audit(ld.root)
    (t,) = of(fs, "torn-transaction")
    assert t["severity"] == "critical" and (t["topic"], t["first_offset"], t["last_offset"]) == ("b", old.base_offset, old.base_offset)
    assert "the coordinator decided ABORT" in t["message"] and "committed by the COMMIT at offset 2" in t["message"]
    assert of(fs, "write-after-epoch-end") == []
    incidents.assign(fs)
    critical = [i for i in story.incidents(fs, None) if i["severity"] == "critical"]
    assert len(critical) == 1 and "b-0 offset 0" in critical[0]["narrative"]["impact"]
    assert "aborted" in critical[0]["narrative"]["impact"] and "read_committed consumers" in critical[0]["narrative"]["impact"]


def test_same_epoch_transactions_are_not_cut_by_time(tmp_path):
    """Version 0/1 keeps one epoch across transactions: one whose COMMIT on b-0 is missing is not
    told apart from the next by clocks (client times against the coordinator's, transactions
    ms apart): no lost marker is read, and no false story told (a known gap: docs)."""
    ld, a, b, p = setup(tmp_path, 0)
    p.send([b"a1"], partition=a); p.send([b"b1"], partition=b)
    end_losing(p, "COMMIT", b)
    ld.tick(200)
    p.send([b"b2"], partition=b)
    p.commit()
    ld.write()
    fs = audit(ld.root)
    assert serious(fs) == [], brief(fs)


@pytest.mark.parametrize("tv", [0, 2])
def test_lost_marker_with_nothing_after_is_not_cut(tmp_path, tv):
    """Negative twins: a transaction that committed everywhere, then a late write of the ended
    epoch after its own marker, then the next transaction's commit: no lost marker is read (the
    late write is late-transactional-write's)."""
    ld, a, b, p = setup(tmp_path, tv)
    p.send([b"a1"], partition=a); p.send([b"b1"], partition=b)
    e1 = p.producer_epoch
    p.commit()
    ld.tick(50)
    b.append_batch(values=[b"late"], producer_id=7, producer_epoch=e1, base_sequence=1, is_transactional=True)
    ld.tick(5_000)
    p.send([b"b2"], partition=b)
    p.commit()
    ld.write()
    fs = audit(ld.root, ignore=("fenced-epoch",))
    assert of(fs, "torn-transaction") == [] and of(fs, "late-transactional-write"), brief(fs)
    assert all("no marker of its own" not in f["message"] for f in fs), brief(fs)


# ---- generated histories -------------------------------------------------------------------

STEP = st.sampled_from(["commit", "abort"])


@settings(max_examples=10, deadline=None)
@given(tv=st.just(2), steps=st.lists(STEP, min_size=2, max_size=5), lose=st.integers(0, 3),
       on=st.integers(0, 1))
def test_generated_lost_markers(tmp_path_factory, tv, steps, lose, on):
    """Version 2 transactions over a-0 and b-0 that commit or abort; the marker of transaction `lose` on
    one partition is never written. The next transaction's marker ends its data there: exactly
    one torn-transaction where the two outcomes differ, on that partition and that data, and the
    lost marker always told (mixed-epoch-transaction); nothing else at warning or above. A lost
    marker of the last transaction leaves its data open (dangling or hanging: not judged here)."""
    root = tmp_path_factory.mktemp("lost")
    ld, a, b, p = setup(root, tv)
    parts = (a, b)
    lost = None
    for i, step in enumerate(steps):
        p.send([b"a%d" % i], partition=a)
        sent = p.send([b"b%d" % i], partition=b)
        if i == min(lose, len(steps) - 2):
            lost = (parts[on], sent if on == 1 else None, step, steps[i + 1])
            end_losing(p, step.upper(), parts[on])
        else:
            (p.commit if step == "commit" else p.abort)()
        ld.tick(2_000)
    ld.write()
    fs = audit(ld.root, now_ms=ld.clock + 1_000)
    where, _, decided, then = lost
    torn = of(fs, "torn-transaction")
    assert len(torn) == (1 if decided != then else 0), brief(fs)
    assert all(f["topic"] == where.topic for f in torn)
    (m,) = of(fs, "mixed-epoch-transaction")
    assert m["topic"] == where.topic and "no marker of its own" in m["message"]
    assert {f["rule"] for f in serious(fs)} <= {"torn-transaction", "mixed-epoch-transaction"}, brief(fs)


def lost_on(nodes_losing):
    """A log dir builder: the committed transaction's COMMIT on b-0 missing on `nodes_losing`,
    the next transaction writes b-0 and aborts (every node holds the rest)."""
    def build(ld, node):
        a, b, p = parts_and_producer(ld, 2)
        p.send([b"a1"], partition=a); p.send([b"b1", b"b2"], partition=b)
        end_losing(p, "COMMIT", b if node in nodes_losing else None, hole=True)
        ld.tick(5_000)
        p.send([b"b3"], partition=b)
        p.abort()
    return build


def test_marker_lost_on_one_follower_is_that_replica_s(tmp_path):
    """Replicas 1 and 2 hold the COMMIT, replica 3 lost it (its offset left empty): the
    transaction is not torn (the replicas holding it give the part its own marker), and no later
    write is called late."""
    roots = write_replicas(tmp_path / "cluster", lost_on({3}), nodes=(1, 2, 3), start_time_ms=T0)
    fs = audit_segments([str(r) for r in roots]).findings
    assert of(fs, "torn-transaction") == [] and of(fs, "late-transactional-write") == [], brief(fs)
    assert of(fs, "write-after-epoch-end") == [] and of(fs, "mixed-epoch-transaction") == [], brief(fs)
    # replica 3's hole sits between batches of one segment, which only the cleaner leaves in a
    # Kafka log (replica_rows._rewritten_end): it may be read as compaction, never as a torn
    # or late write
    assert {f["rule"] for f in serious(fs)} <= {"replica-divergence"}, brief(fs)


def test_a_hole_of_markers_only_says_what_it_changes(tmp_path):
    """Replica 3's copy of the COMMIT's offset is missing between later batches (bytes cut out of
    its segment - nothing Kafka does, so read as the cleaner's work unless the others say
    otherwise): where replica-divergence tells the hole, it names the marker and what it changes."""
    from kaudit.audit.consistency.replicas import _markers_only
    from kaudit.audit.consistency import replica_rows as R
    import pyarrow as pa

    r = R.Replica("1", rows=pa.table({"base_offset": [0, 2, 3], "last_offset": [1, 2, 3], "is_control": [False, True, False],
                                      "producer_id": [7, 7, 7], "control_type": [None, "COMMIT", None]}))
    r.base, r.last = np.array([0, 2, 3]), np.array([1, 2, 3])
    assert _markers_only(r, 2, 2) == "producer 7's COMMIT marker"
    assert _markers_only(r, 2, 3) is None and _markers_only(r, 0, 1) is None


def test_marker_lost_on_every_replica(tmp_path):
    """Every replica lost it: torn on b-0 (all three replicas' files), the next transaction's data
    is no late write (its previous marker is the one before the lost transaction's)."""
    roots = write_replicas(tmp_path / "cluster", lost_on({1, 2, 3}), nodes=(1, 2, 3), start_time_ms=T0)
    fs = audit_segments([str(r) for r in roots]).findings
    (t,) = of(fs, "torn-transaction")
    assert (t["topic"], t["first_offset"], t["last_offset"], t["replica"]) == ("b", 0, 1, "1,2,3")
    assert {f["rule"] for f in serious(fs)} == {"torn-transaction", "mixed-epoch-transaction"}, brief(fs)
