"""Epochs and outcomes over one producer's history, on crafted log dirs, under transaction
version 0/1 and 2: a zombie's data stored after its epoch was fenced (on a partition its
transaction never registered, exposed by the new instance's COMMIT), a part of two epochs, a
marker at an epoch the data does not allow, an admin's abort of two of three partitions of an
open transaction the producer then commits (the story told on the damaged partitions, each
replica's own files); and the negative twins: a clean fencing whose marker aborted the zombie's
data, a marker re-sent after a coordinator failover."""

from __future__ import annotations

from pathlib import Path

import pytest
from diskcraft import brief, details, logdir, of

from fixtures.builder.replicas import write_replicas
from kaudit.audit.stories import incidents
from kaudit.engine.local import audit_segments
from kaudit.report import story

pytestmark = pytest.mark.usefixtures("txn_path")
T0 = 1_700_000_000_000


def audit(roots, **kw):
    roots = roots if isinstance(roots, list) else [roots]
    return audit_segments([str(r) for r in roots], **kw).findings


def serious(fs):
    return [f for f in fs if f["severity"] in ("warning", "error", "critical")]


def fence(ld, p, tv):
    """A new instance fences the producer's open transaction: PrepareAbort and the ABORT markers
    at epoch 1, CompleteAbort, then the new instance's Empty record at epoch 2."""
    p.producer_epoch = 1 if tv < 2 else 0
    p.abort()
    p.bump_epoch(2)


def zombie_on_unregistered(root: Path, tv: int, *, commit: bool = True):
    ld = logdir(root, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)
    p.send([b"1"], partition=a)
    fence(ld, p, tv)
    ld.tick(5_000)
    # the zombie (epoch 0) writes to b-0, which its transaction never registered: no fencing
    # marker reaches b-0, the broker stores it
    b.append_batch(values=[b"z1", b"z2"], producer_id=7, producer_epoch=0, base_sequence=1, is_transactional=True)
    if commit:
        p.send([b"new"], partition=b)
        p.commit()
    ld.write()
    return ld.root


@pytest.mark.parametrize("tv", [0, 2])
def test_zombie_on_unregistered_partition_exposed_by_commit(tmp_path, tv):
    fs = audit(zombie_on_unregistered(tmp_path, tv))
    (z,) = of(fs, "write-after-epoch-end")
    assert (z["severity"], z["topic"], z["partition"], z["first_offset"], z["last_offset"], z["producer_epoch"]) == \
        ("critical", "b", 0, 0, 1, 0)
    assert details(z)["outcome"] == "committed" and details(z)["exposed"]
    assert "fenced" in z["message"] and "exposed it to read_committed consumers" in z["message"]
    (m,) = of(fs, "mixed-epoch-transaction")
    assert m["topic"] == "b" and details(m)["epochs"] == [0, 2]
    incidents.assign(fs)
    (inc,) = [i for i in story.incidents(fs, None) if i["severity"] == "critical"]
    assert inc["kind"] == "zombie" and "b-0" in inc["topic_partitions"]
    impact = inc["narrative"]["impact"]
    assert "b-0@0-1 were stored and a later COMMIT exposed them" in impact
    assert "nothing" not in impact and "were not stored" not in impact


@pytest.mark.parametrize("tv", [0, 2])
def test_zombie_on_unregistered_partition_left_open(tmp_path, tv):
    """No later commit: the zombie's data hangs; it was created after its epoch was fenced."""
    fs = audit(zombie_on_unregistered(tmp_path, tv, commit=False), now_ms=T0 + 20_000)
    (z,) = of(fs, "write-after-epoch-end")
    assert (z["severity"], details(z)["outcome"], details(z)["how_known"]) == ("error", "open", "time")
    assert {f["rule"] for f in serious(fs)} >= {"write-after-epoch-end", "hanging-transaction"}


@pytest.mark.parametrize("tv", [0, 2])
def test_clean_fencing_aborts_the_zombie_data(tmp_path, tv):
    """Negative twin: the zombie's data is on its registered partition before the fencing
    marker, which aborts it. Nothing to report above info."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a = ld.partition("a", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)
    p.send([b"1"], partition=a)
    p.send([b"2"], partition=a)
    fence(ld, p, tv)
    p.send([b"new"], partition=a)
    p.commit()
    ld.write()
    fs = audit(ld.root)
    assert serious(fs) == [], brief(fs)
    assert of(fs, "write-after-epoch-end") == [] and of(fs, "mixed-epoch-transaction") == []


@pytest.mark.parametrize("tv", [0, 2])
def test_resent_marker_after_coordinator_failover_is_not_an_anomaly(tmp_path, tv):
    """The coordinator moved (coordinator epoch 1) and wrote the completed transaction's markers
    again: a marker that ends nothing, legal."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b)
    me = p.producer_epoch + (1 if tv >= 2 else 0)
    p.commit()
    a.append_control(7, me, "COMMIT", 1)
    b.append_control(7, me, "COMMIT", 1)
    ld.write()
    assert serious(audit(ld.root)) == []


@pytest.mark.parametrize("tv", [0, 2])
def test_marker_epoch_the_data_does_not_allow(tmp_path, tv):
    """Without coordinator records: a COMMIT two epochs above its data's."""
    ld = logdir(tmp_path, start_time_ms=T0)
    a = ld.partition("a", 0)
    p = ld.producer(9, 3, transactional=True)
    p.send([b"1"], partition=a)
    a.append_control(9, 3 + (1 if tv >= 2 else 0), "COMMIT", 0)
    p.send([b"2"], partition=a)
    a.append_control(9, 6, "COMMIT", 0)
    ld.write()
    fs = audit(ld.root)
    (m,) = of(fs, "mixed-epoch-transaction")
    assert (m["first_offset"], details(m)["marker_epoch"]) == (2, 6)
    assert "marker at offset 3 of epoch 6" in m["message"]


def admin_torn(ld, node, tv):
    ts = ld.partition("__transaction_state", 0)
    ps = [ld.partition("torn", i) for i in range(3)]
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)
    for q in ps:
        p.send([b"a", b"b"], partition=q)
    for q in ps[1:]:   # kafka-transactions.sh abort of torn-1 and torn-2, at the data's epoch
        q.append_control(7, 0, "ABORT", 0)
    p.send([b"c"], partition=ps[1])
    p.commit()
    p.send([b"n"], partition=ps[0])   # the next transaction
    p.commit()


@pytest.mark.parametrize("tv", [0, 2])
def test_admin_abort_of_two_partitions_then_commit(tmp_path, tv):
    roots = write_replicas(tmp_path / "cluster", lambda ld, n: admin_torn(ld, n, tv), nodes=(1, 2, 3),
                           start_time_ms=T0)
    fs = audit(roots)
    (t,) = of(fs, "torn-transaction")
    d = details(t)
    assert (t["topic"], t["partition"], t["first_offset"], t["last_offset"]) == ("torn", 1, 0, 1)
    assert d["damaged"] == [["torn-1", 0, 1, "ABORT", 2], ["torn-2", 0, 1, "ABORT", 2]]
    assert d["topic_partitions"] == ["torn-0", "torn-1", "torn-2"]
    (nothing,) = d["ends_nothing"]
    assert nothing["tp"] == "torn-2" and "already been aborted at offset 2" in nothing["why"]
    assert "torn-2: its COMMIT marker at offset 3 ends no data" in t["message"]
    incidents.assign(fs)
    (inc,) = story.incidents(fs, None)
    assert inc["title"].startswith("Torn transaction on torn-1, torn-2:")
    assert inc["topic_partitions"] == ["torn-0", "torn-1", "torn-2"]
    impact = inc["narrative"]["impact"]
    assert "torn-1 offsets 0-1: aborted though the coordinator committed" in impact
    assert "torn-2 offsets 0-1: aborted though the coordinator committed" in impact
    assert "torn-0" not in impact
    # each replica's evidence is in its own files
    for place in inc["places"]:
        node = place["place"].split()[-1]
        assert all(f"/node{node}/" in e["source"] for e in place["evidence"]), place
    shown = story.shown_sources(inc)
    assert any(v == "node2/torn-1/00000000000000000000.log" for v in shown.values()), shown


def admin_torn_one(ld, node, tv, admin=True):
    """A one-partition transaction an admin aborted while open; the producer writes again and
    commits; its next transaction aborts (a coordinator ABORT on the same partition later on)."""
    ts = ld.partition("__transaction_state", 0)
    q = ld.partition("torn", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)
    p.send([b"a", b"b"], partition=q)
    if admin:
        q.append_control(7, 0, "ABORT", 0)   # kafka-transactions.sh abort, at the data's epoch
    p.send([b"c"], partition=q)
    p.commit()
    p.send([b"n"], partition=q)
    p.abort()


@pytest.mark.parametrize("tv", [0, 2])
def test_admin_abort_of_a_one_partition_transaction_then_commit(tmp_path, tv):
    """The admin's ABORT came after the coordinator registered the partition and before its
    PrepareCommit: it ends that transaction's first data (torn), not the later aborted one's."""
    roots = write_replicas(tmp_path / "cluster", lambda ld, n: admin_torn_one(ld, n, tv), nodes=(1, 2, 3),
                           start_time_ms=T0)
    fs = audit(roots)
    (t,) = of(fs, "torn-transaction")
    assert (t["topic"], t["partition"], t["first_offset"], t["last_offset"]) == ("torn", 0, 0, 1)
    assert details(t)["damaged"] == [["torn-0", 0, 1, "ABORT", 2]]


@pytest.mark.parametrize("tv", [0, 2])
def test_commit_then_abort_on_one_partition_is_clean(tmp_path, tv):
    roots = write_replicas(tmp_path / "cluster", lambda ld, n: admin_torn_one(ld, n, tv, admin=False),
                           nodes=(1, 2, 3), start_time_ms=T0)
    fs = audit(roots)
    assert serious(fs) == [], [brief(f) for f in serious(fs)]


# ---- generated histories -------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

STEP = st.sampled_from(["commit", "abort", "fence"])


@settings(max_examples=12, deadline=None)
@given(tv=st.sampled_from([0, 2]), steps=st.lists(STEP, min_size=1, max_size=5),
       zombie=st.one_of(st.none(), st.integers(0, 4)), exposed=st.booleans())
def test_generated_histories(tmp_path_factory, tv, steps, zombie, exposed):
    """Transactions that commit, abort or are fenced by a new instance, on partitions a-0..c-0;
    optionally, after the fencing at step `zombie`, the fenced epoch writes to d-0 (never
    registered before): exactly that write is reported, critical when the next transaction
    commits d-0, and nothing else reaches warning."""
    root = tmp_path_factory.mktemp("gen")
    ld = logdir(root, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    ps = [ld.partition(t, 0) for t in "abc"]
    d = ld.partition("d", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)
    injected = None
    for i, step in enumerate(steps):
        p.send([b"v%d" % i], partition=ps[i % 3]); p.send([b"w%d" % i], partition=ps[(i + 1) % 3])
        if step == "fence":
            old = p.producer_epoch
            p.producer_epoch = old + 1 if tv < 2 else old
            p.abort()
            p.bump_epoch(p.producer_epoch + 1)
            if zombie is not None and injected is None and i >= zombie:
                ld.tick(5_000)
                injected = d.append_batch(values=[b"z"], producer_id=7, producer_epoch=old, base_sequence=5,
                                          is_transactional=True)
                p.send([b"n"], partition=d)
                (p.commit if exposed else p.abort)()
        else:
            (p.commit if step == "commit" else p.abort)()
        ld.tick(1_000)
    ld.write()
    fs = audit(ld.root, now_ms=ld.clock + 1_000)
    stale = of(fs, "write-after-epoch-end")
    if injected is None:
        assert serious(fs) == [], brief(fs)
        assert stale == []
        return
    (z,) = stale
    assert (z["topic"], z["first_offset"]) == ("d", injected.base_offset)
    assert z["severity"] == ("critical" if exposed else "error")
    assert {f["rule"] for f in serious(fs)} <= {"write-after-epoch-end", "mixed-epoch-transaction"}, brief(fs)


def test_resent_marker_without_coordinator_records_is_explained(tmp_path):
    ld = logdir(tmp_path, start_time_ms=T0)
    a = ld.partition("a", 0)
    p = ld.producer(9, 0, transactional=True)
    p.send([b"1"], partition=a)
    a.append_control(9, 0, "COMMIT", 0)
    a.append_control(9, 0, "COMMIT", 1)
    ld.write()
    fs = audit(ld.root)
    (s,) = of(fs, "stray-marker")
    assert s["severity"] == "info" and details(s)["resent"] and "re-sent" in s["message"]
    assert serious(fs) == []


def test_lost_marker_of_a_committed_transaction_is_not_an_exposure(tmp_path):
    """TV2: the first transaction committed but its marker on a-0 is missing; the next one's
    COMMIT takes its data in. Reported (another epoch's marker ends it: the data was written
    while its own transaction ran, so no write after its epoch's end), but consumers read it as
    the coordinator decided: neither torn nor critical."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=2)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b)
    p._state("PrepareCommit", p.txn_partitions, producer_epoch=1)
    b.append_control(7, 1, "COMMIT", 0)            # a-0's marker is lost
    p._state("CompleteCommit", {}, producer_epoch=1)
    p.txn_members, p.txn_partitions, p.producer_epoch = [], {}, 1
    p.sequences.clear()
    p.send([b"3"], partition=a)
    p.commit()
    ld.write()
    fs = audit(ld.root)
    (z,) = of(fs, "mixed-epoch-transaction")
    assert z["severity"] == "error" and "has no marker of its own" in z["message"]
    assert z["first_offset"] == 0 and z["last_offset"] == 0 and z["topic"] == "a"
    assert "COMMIT decided" in z["message"] and "the COMMIT at offset 2 (epoch 2)" in z["message"]
    assert of(fs, "write-after-epoch-end") == [] and of(fs, "torn-transaction") == []
    assert [f for f in fs if f["severity"] == "critical"] == []


def _diverged(root: Path):
    """orders-0 on two brokers that diverged at offset 0 (an unclean election: broker 1 led epoch
    1 with an empty log). Broker 2 holds producer 7's committed transaction of producer epoch 0:
    two batches at 0-3 and its COMMIT at 4 (version 2: the marker at epoch + 1), leader epoch 0;
    broker 1 the restarted application's transaction of producer epoch 2, one batch at 0-1 and
    its COMMIT (epoch 3) at 2, leader epoch 1."""
    def build(ld, node):
        pb = ld.partition("orders", 0)
        if node == 2:
            for k in range(2):
                pb.append_batch(values=[b"a%d" % k, b"b%d" % k], producer_id=7, producer_epoch=0,
                                base_sequence=2 * k, is_transactional=True)
            pb.append_control(7, 1, "COMMIT")
        else:
            pb.set_leader_epoch(1)
            pb.assign_epoch(1, 0)
            pb.append_batch(values=[b"c", b"d"], producer_id=7, producer_epoch=2, base_sequence=0,
                            is_transactional=True)
            pb.append_control(7, 3, "COMMIT")
        pb.high_watermark = pb.next_offset
    return write_replicas(root / "cluster", build, nodes=(1, 2))


def test_diverged_replicas_hold_two_transactions_not_one_of_two_epochs(tmp_path):
    """Each replica's transaction at offset 0 is its own: epoch 0's data and COMMIT on broker 2,
    epoch 2's on broker 1 - not one transaction whose epoch-0 data an epoch-3 marker ended (told
    before: the parts were merged by their start offset alone, broker 2's data with broker 1's
    marker; the simulator's elect:txn_unclean, regressions/elect-txn_unclean-diverged-parts.json).
    The divergence itself is replica-divergence's."""
    fs = audit(_diverged(tmp_path))
    assert not of(fs, "write-after-epoch-end") and not of(fs, "mixed-epoch-transaction")
    assert {f["rule"] for f in serious(fs)} == {"replica-divergence"}


def test_one_replicas_data_ended_by_another_epochs_marker_is_still_told(tmp_path):
    """The twin on one log: epoch 0's data ended by an epoch-3 COMMIT is still judged."""
    root = tmp_path / "one"
    ld = logdir(root, start_time_ms=T0)
    pb = ld.partition("orders", 0)
    for k in range(2):
        pb.append_batch(values=[b"a%d" % k, b"b%d" % k], producer_id=7, producer_epoch=0, base_sequence=2 * k,
                        is_transactional=True)
    pb.append_control(7, 3, "COMMIT")
    ld.write()
    fs = audit(ld.root)
    assert of(fs, "write-after-epoch-end") or of(fs, "mixed-epoch-transaction")
