"""Transaction versions on disk (KIP-890): crafted log dirs under transaction version 0/1 and 2,
positive and negative, for torn transactions (an admin's ABORT beside the coordinator's COMMIT),
late writes taken in by the next commit, zombie writes after a fencing, who ended a transaction,
epoch exhaustion to a new producer id, and both versions side by side."""

from __future__ import annotations

import json

import pytest
from diskcraft import details, logdir, of
from typer.testing import CliRunner

from kaudit.cli import app
from kaudit.engine.local import audit_segments

pytestmark = pytest.mark.usefixtures("txn_path")
T0 = 1_700_000_000_000
TXN_RULES = ("dangling-transaction", "hanging-transaction", "torn-transaction", "coordinator-abort",
             "stray-marker", "coordinator-epoch-regression", "non-transactional-write-in-transaction",
             "late-transactional-write", "unregistered-partition", "illegal-state-transition", "fenced-epoch")


def audit(root, **kw):
    return audit_segments([str(root)], select=TXN_RULES, **kw).findings


def setup(tmp_path, tv: int, **kw):
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv, **kw)
    return ld, ts, p


def txn_view(root, *args):
    r = CliRunner().invoke(app, ["txn", str(root), "-f", "json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("tv", [1, 2])
def test_commits_and_client_aborts_are_clean(tmp_path, tv):
    ld, _, p = setup(tmp_path, tv)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    for end in ("commit", "abort", "commit", "abort"):
        p.send([b"1"], partition=a)
        p.send([b"2"], partition=b)
        getattr(p, end)()
    ld.write()
    assert audit(ld.root) == []
    rows = txn_view(ld.root)
    assert [r["outcome"] for r in rows] == ["COMMIT", "ABORT", "COMMIT", "ABORT"]
    assert {r["ended_by"] for r in rows} == {"client (EndTxn commit)", "client (EndTxn abort)"}
    assert {r["transaction_version"] for r in rows} == {"2" if tv == 2 else "0/1"}
    if tv == 2:   # every end bumps the epoch: data at e, markers at e + 1
        assert [r["producer_epoch"] for r in rows] == [0, 1, 2, 3]
        assert [r["parts"][0]["marker"]["epoch"] for r in rows] == [1, 2, 3, 4]


def test_versions_side_by_side(tmp_path):
    """A version-2 producer and a version-0/1 one (librdkafka on Kafka 4.x) on the same topics."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    v2 = ld.producer(7, 0, transactional_id="java", txn_state=ts, transaction_version=2)
    v1 = ld.producer(8, 0, transactional_id="rdkafka", txn_state=ts, txn_log_version=1)
    for i in range(3):
        v2.send([b"x"], partition=a); v1.send([b"y"], partition=a); v1.send([b"z"], partition=b)
        (v2.abort if i == 1 else v2.commit)()
        (v1.abort if i == 2 else v1.commit)()
    ld.write()
    assert audit(ld.root) == []
    versions = {r["producer_id"]: r["transaction_version"] for r in txn_view(ld.root)}
    assert versions == {7: "2", 8: "0/1"}


@pytest.mark.parametrize("tv", [1, 2])
def test_coordinator_timeout_and_fencing_aborts(tmp_path, tv):
    """The coordinator's own aborts (epoch + 1 under both versions): after the timeout, and a new
    instance's InitProducerId (its Empty record at epoch + 2 right after)."""
    ld, ts, p = setup(tmp_path, tv, timeout_ms=1_000)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    ld.tick(5_000)
    e = p.producer_epoch
    p.transaction_version = 2          # Kafka 4.x aborts through the version-2 path: one bump
    p.abort()
    p.transaction_version = tv
    if tv != 2:
        p.producer_epoch = e + 1
    p.send([b"2"], partition=a)
    e = p.producer_epoch
    p.transaction_version = 2
    p.abort()                          # fencing: at once, then the new instance's Empty
    p.bump_epoch(e + 2)
    ld.write()
    fs = audit(ld.root)
    assert [(f["rule"], details(f)["cause"]) for f in fs] == [
        ("coordinator-abort", "timeout"), ("coordinator-abort", "fencing")]
    assert all(details(f)["ended_by"].startswith("coordinator") for f in fs)


def test_version2_client_abort_then_restart_is_the_client(tmp_path):
    """An abort followed by the next transaction (not an Empty record) is the client's."""
    ld, _, p = setup(tmp_path, 2)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a); p.abort()
    ld.tick(10_000)
    p.send([b"2"], partition=a); p.commit()
    ld.write()
    assert audit(ld.root) == []
    assert [r["ended_by"] for r in txn_view(ld.root)] == ["client (EndTxn abort)", "client (EndTxn commit)"]


@pytest.mark.parametrize("tv", [1, 2])
def test_admin_abort_beside_coordinator_commit_is_torn(tmp_path, tv):
    """kafka-transactions.sh abort wrote an ABORT on a-0 (at the data's epoch, with the
    coordinator epoch DescribeProducers gave); the coordinator then committed the transaction:
    COMMIT on b-0 and on a-0 (an empty part there now). Consumers saw b-0's data, not a-0's."""
    ld, _, p = setup(tmp_path, tv)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b)
    a.append_control(7, p.producer_epoch, "ABORT", 0)       # the admin's marker
    p.commit()
    ld.write()
    fs = audit(ld.root)
    [t] = of(fs, "torn-transaction")
    d = details(t)
    assert d["results"]["a-0"] == "ABORT" and d["results"]["b-0"] == "COMMIT"
    assert d["coordinator_result"] == "COMMIT"
    assert t["severity"] == "critical" and t["producer_id"] == 7
    assert {f["rule"] for f in fs} == {"torn-transaction"}


@pytest.mark.parametrize("tv", [1, 2])
def test_coordinator_abort_everywhere_is_not_torn(tmp_path, tv):
    ld, _, p = setup(tmp_path, tv)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b)
    p.abort()
    ld.write()
    assert of(audit(ld.root), "torn-transaction") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_late_write_after_abort_taken_in_by_next_commit(tmp_path, tv):
    """Transaction 1 aborts a-0; its late Produce lands after the ABORT marker (a broker without
    KIP-890 verification); transaction 2 registers a-0 later and its COMMIT takes the late data
    in (read_committed consumers read aborted data)."""
    ld, _, p = setup(tmp_path, tv)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    e1 = p.producer_epoch
    p.abort()
    ld.tick(50)
    late = a.append_batch(values=[b"late"], producer_id=7, producer_epoch=e1, base_sequence=1,
                          is_transactional=True)
    ld.tick(5_000)
    p.send([b"2"], partition=a)
    p.commit()
    ld.write()
    fs = audit(ld.root, ignore=("fenced-epoch",))
    [f] = of(fs, "late-transactional-write")
    assert (f["partition"], f["first_offset"]) == (0, late.base_offset)
    assert "COMMIT at offset" in f["message"]
    assert {x["rule"] for x in fs} == {"late-transactional-write"}


@pytest.mark.parametrize("tv", [1, 2])
def test_next_transaction_early_data_is_not_late(tmp_path, tv):
    ld, _, p = setup(tmp_path, tv)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a); p.abort()
    ld.tick(5_000)
    p.send([b"2"], partition=a); p.commit()
    ld.write()
    assert audit(ld.root) == []


@pytest.mark.parametrize("tv", [1, 2])
def test_zombie_write_after_fencing_accepted(tmp_path, tv):
    """The coordinator fenced epoch e (ABORT at e + 1); the zombie's write at e was accepted
    (a replica path, or a broker that lost its producer state): a late write and a fenced epoch."""
    ld, _, p = setup(tmp_path, tv)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    e = p.producer_epoch
    p.transaction_version = 2
    p.abort()                                    # the coordinator's fencing abort at e + 1
    p.bump_epoch(e + 2)
    ld.tick(100)
    a.append_batch(values=[b"zombie"], producer_id=7, producer_epoch=e, base_sequence=1, is_transactional=True)
    ld.write()
    fs = audit(ld.root, now_ms=T0 + 10_000)
    rules = {f["rule"] for f in fs}
    assert {"late-transactional-write", "fenced-epoch", "coordinator-abort"} <= rules
    [late] = of(fs, "late-transactional-write")
    assert f"epoch {e} is older than the marker's {e + 1}" in late["message"]


@pytest.mark.parametrize("tv", [1, 2])
def test_zombie_write_rejected_leaves_nothing(tmp_path, tv):
    ld, _, p = setup(tmp_path, tv)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    e = p.producer_epoch
    p.transaction_version = 2
    p.abort()
    p.bump_epoch(e + 2)
    p.transaction_version = tv
    p.send([b"2"], partition=a); p.commit()
    ld.write()
    assert [f["rule"] for f in audit(ld.root)] == ["coordinator-abort"]


def test_epoch_exhaustion_moves_the_id_to_a_new_producer_id(tmp_path):
    """At epoch 32766 a version-2 end is prepared at 32767 (the markers too) and completed under
    the next producer id at epoch 0 (TransactionMetadata.prepareComplete): no finding, and the
    view follows the transactional id across both producer ids."""
    ld, _, p = setup(tmp_path, 2, next_producer_id=8)
    a = ld.partition("a", 0)
    p.producer_epoch = 32765
    p.send([b"1"], partition=a); p.commit()          # 32765 -> 32766
    p.send([b"2"], partition=a); p.commit()          # 32766 -> 32767, completed as (8, 0)
    assert (p.producer_id, p.producer_epoch) == (8, 0)
    p.send([b"3"], partition=a); p.commit()
    ld.write()
    assert audit(ld.root) == []
    rows = txn_view(ld.root, "--transactional-id", "tx")
    assert [(r["producer_id"], r["outcome"]) for r in rows] == [(7, "COMMIT"), (7, "COMMIT"), (8, "COMMIT")]
    assert rows[1]["parts"][0]["marker"]["epoch"] == 32767
