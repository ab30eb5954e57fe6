"""Today's transaction failure modes on disk (issue 30 item 5), crafted log dirs positive and
negative: the coordinator's Prepare record left without its Complete record while a marker never
landed (txn-markers-refused, KAFKA-19999), and a transaction left open at the producer epoch's
limit, 32767 (epoch-exhausted-transaction, KAFKA-20090). Both engines' reference path: the
fast path (txn_clean) must not certify these producers."""

from __future__ import annotations

import pytest
from diskcraft import details, logdir, of

from kaudit.engine.local import audit_segments

pytestmark = pytest.mark.usefixtures("txn_path")
T0 = 1_700_000_000_000
RULES = ("txn-markers-refused", "epoch-exhausted-transaction")


def audit(root, **kw):
    return audit_segments([str(root)], select=RULES, **kw).findings


def setup(tmp_path, tv: int, epoch: int = 0):
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    p = ld.producer(7, epoch, transactional_id="tx", txn_state=ts, transaction_version=tv)
    return ld, ts, p


def _prepare_only(p, *, land: tuple) -> None:
    """The client's EndTxn commit: the Prepare record, the markers on `land` only, no Complete."""
    end = p.producer_epoch + 1 if p.transaction_version >= 2 else p.producer_epoch
    p._state("PrepareCommit", p.txn_partitions, producer_epoch=end)
    for pb in p.txn_members:
        if pb.topic in land:
            pb.append_control(p.producer_id, end, "COMMIT", 0)


@pytest.mark.parametrize("tv", [1, 2])
def test_prepare_without_complete_and_a_missing_marker(tmp_path, tv):
    ld, _, p = setup(tmp_path, tv)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a)
    p.send([b"2"], partition=b)
    _prepare_only(p, land=("a",))
    ld.write()
    (f,) = of(audit(ld.root, now_ms=ld.clock + 600_000), "txn-markers-refused")
    d = details(f)
    assert (f["topic"], f["partition"], f["severity"]) == ("b", 0, "critical")
    assert (d["markers_landed"], d["markers_missing"], d["read_committed_stops"]) == (["a-0"], ["b-0"], {"b-0": 0})
    assert "no Complete record" in f["message"]


def test_every_marker_landed_without_complete(tmp_path):
    """KAFKA-19999's trace on disk: the markers are there, the coordinator never completed."""
    ld, _, p = setup(tmp_path, 2)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    _prepare_only(p, land=("a",))
    ld.write()
    (f,) = of(audit(ld.root, now_ms=ld.clock + 600_000), "txn-markers-refused")
    assert f["severity"] == "error" and "KAFKA-19999" in f["message"]


def test_prepare_moments_before_the_end_of_the_evidence_is_clean(tmp_path):
    """A log dir copied while the coordinator was writing the markers."""
    ld, _, p = setup(tmp_path, 2)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a)
    p.send([b"2"], partition=b)
    _prepare_only(p, land=("a",))
    ld.write()
    assert audit(ld.root, now_ms=ld.clock + 1_000) == []


@pytest.mark.parametrize("tv", [1, 2])
def test_completed_transactions_are_clean(tmp_path, tv):
    ld, _, p = setup(tmp_path, tv)
    a = ld.partition("a", 0)
    for end in ("commit", "abort"):
        p.send([b"1"], partition=a)
        getattr(p, end)()
    ld.write()
    assert audit(ld.root, now_ms=ld.clock + 600_000) == []


def test_epoch_rotation_at_the_limit_is_clean(tmp_path):
    """Version 2 at 32766: the end moves the id to the next producer id (its Complete record)."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    p = ld.producer(7, 32766, transactional_id="tx", txn_state=ts, transaction_version=2, next_producer_id=8)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    p.commit()
    p.send([b"2"], partition=a)
    p.commit()
    ld.write()
    assert audit(ld.root, now_ms=ld.clock + 600_000) == []


@pytest.mark.parametrize("tv,epoch", [(1, 32767), (2, 32767), (2, 32766)])
def test_open_at_the_limit_past_its_timeout(tmp_path, tv, epoch):
    ld, _, p = setup(tmp_path, tv, epoch)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    ld.write()
    (f,) = of(audit(ld.root, now_ms=ld.clock + 600_000), "epoch-exhausted-transaction")
    d = details(f)
    assert (f["partition"], f["producer_epoch"], d["read_committed_stops"]) == (0, epoch, {"a-0": 0})
    assert d["coordinator_state"] == "Ongoing" and f["severity"] == "critical"


@pytest.mark.parametrize("tv,epoch,later", [(1, 32767, 1_000), (1, 32766, 600_000), (2, 32765, 600_000)])
def test_open_within_its_timeout_or_below_the_limit_is_not_flagged(tmp_path, tv, epoch, later):
    ld, _, p = setup(tmp_path, tv, epoch)
    p.send([b"1"], partition=ld.partition("a", 0))
    ld.write()
    assert of(audit(ld.root, now_ms=ld.clock + later), "epoch-exhausted-transaction") == []


def test_committed_at_the_limit_is_clean(tmp_path):
    ld, _, p = setup(tmp_path, 1, 32767)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    p.commit()
    ld.write()
    assert audit(ld.root, now_ms=ld.clock + 600_000) == []


def test_version_2_prepared_at_the_limit_without_a_next_producer_id(tmp_path):
    """KAFKA-20090: the end that reaches 32767 names no next producer id (NextProducerId -1) and
    nothing completes it; told once, by epoch-exhausted-transaction."""
    ld, _, p = setup(tmp_path, 2, 32766)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    _prepare_only(p, land=())
    ld.write()
    fs = audit(ld.root, now_ms=ld.clock + 600_000)
    assert of(fs, "txn-markers-refused") == []
    (f,) = of(fs, "epoch-exhausted-transaction")
    assert (f["producer_epoch"], details(f)["read_committed_stops"]) == (32767, {"a-0": 0})
    assert "names no next producer id" in f["message"]


def test_version_1_earlier_marker_of_the_same_epoch_is_not_this_transactions(tmp_path):
    """Version 0/1 keeps the epoch: the previous transaction's COMMIT on b (epoch 0) does not
    end this one's data there."""
    ld, _, p = setup(tmp_path, 1)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"0"], partition=b)
    p.commit()
    p.send([b"1"], partition=a)
    p.send([b"2"], partition=b)
    _prepare_only(p, land=("a",))
    ld.write()
    (f,) = of(audit(ld.root, now_ms=ld.clock + 600_000), "txn-markers-refused")
    d = details(f)
    assert (d["markers_missing"], d["read_committed_stops"], f["severity"]) == (["b-0"], {"b-0": 2}, "critical")
