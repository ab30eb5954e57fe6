"""Transaction rules on crafted log dirs (fixtures.builder): each rule's positive case and the
benign cases it must stay quiet on; the coordinator's state machine over every (state, event)."""

from __future__ import annotations

import pytest
from diskcraft import brief, details, logdir, of
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.txn import coordinator_state
from kaudit.audit.txn.coordinator_state import STATES, VALID_PREVIOUS, illegal_state_transition
from kaudit.engine.local import audit_segments

# every test on the fast path and on the reference path (tests/conftest.py: txn_path)
pytestmark = pytest.mark.usefixtures("txn_path")

TXN_RULES = ("dangling-transaction", "hanging-transaction", "torn-transaction", "coordinator-abort",
             "stray-marker", "coordinator-epoch-regression", "non-transactional-write-in-transaction",
             "late-transactional-write", "unregistered-partition", "illegal-state-transition")
T0 = 1_700_000_000_000


def audit(root, **kw):
    return audit_segments([str(root)], select=TXN_RULES, **kw).findings


def setup(tmp_path, **kw):
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, **kw)
    return ld, p


def test_clean_transactions_with_offsets_are_quiet(tmp_path):
    ld, p = setup(tmp_path)
    a, b, co = ld.partition("a", 0), ld.partition("b", 0), ld.partition("__consumer_offsets", 0)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b)
    p.send_offsets("g", {("in", 0): 5}, partition=co)
    p.commit()
    p.send([b"3"], partition=a); p.abort()
    p.send([b"4"], partition=b); p.commit()
    ld.write()
    assert audit(ld.root) == []


def test_dangling_then_hanging_by_timeout(tmp_path):
    ld, p = setup(tmp_path, timeout_ms=60_000)
    a = ld.partition("a", 0)
    p.send([b"x"], partition=a)
    p.send([b"y"], partition=a)
    ld.write()
    [f] = audit(ld.root, now_ms=T0 + 1_000)
    assert (f["rule"], f["severity"], f["first_offset"], f["last_offset"]) == ("dangling-transaction", "info", 0, 1)
    assert "in progress when the evidence was taken" in f["message"]
    [h] = audit(ld.root, now_ms=T0 + 120_000)
    assert (h["rule"], h["severity"], h["first_offset"]) == ("hanging-transaction", "critical", 0)
    assert h["remediation"].startswith(
        "kafka-transactions.sh --bootstrap-server <broker> abort --topic a --partition 0 --start-offset 0")
    assert "producer id 7, producer epoch 0" in h["remediation"]
    assert h["transactional_id"] == "tx"


def test_markers_removed_copy_is_hanging_and_torn(tmp_path):
    """The coordinator completed the commit but one partition has no marker."""
    ld, p = setup(tmp_path)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a); p.send([b"2", b"3"], partition=b)
    p._state("PrepareCommit", p.txn_partitions)
    a.append_control(7, 0, "COMMIT", 0)            # b's marker is missing
    p._state("CompleteCommit", {})
    ld.write()
    fs = audit(ld.root, now_ms=T0 + 10)
    # told on the damaged partition (b-0: no marker where the coordinator committed)
    assert brief(fs) == [("hanging-transaction", "critical", "b-0", 0, 1),
                         ("torn-transaction", "critical", "b-0", 0, 1)]
    assert details(of(fs, "torn-transaction")[0])["results"] == {"a-0": "COMMIT", "b-0": None}
    assert "already complete" in of(fs, "hanging-transaction")[0]["message"]


def test_commit_replaced_by_abort_is_torn(tmp_path):
    ld, p = setup(tmp_path)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b)
    p._state("PrepareCommit", p.txn_partitions)
    a.append_control(7, 0, "COMMIT", 0)
    b.append_control(7, 0, "ABORT", 0)
    p._state("CompleteCommit", {})
    ld.write()
    [f] = audit(ld.root)
    assert f["rule"] == "torn-transaction"
    assert details(f)["results"]["a-0"] == "COMMIT" and details(f)["results"]["b-0"] == "ABORT"


def test_torn_without_coordinator_records(tmp_path):
    ld = logdir(tmp_path, start_time_ms=T0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p = ld.producer(9, 0, transactional=True)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b)
    a.append_control(9, 0, "COMMIT", 0)
    b.append_control(9, 0, "ABORT", 0)
    ld.write()
    assert [f["rule"] for f in audit(ld.root)] == ["torn-transaction"]


def test_unregistered_partition(tmp_path):
    ld, p = setup(tmp_path)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a)
    b.append_batch(values=[b"z"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    p.commit()
    ld.write()
    fs = audit(ld.root, now_ms=T0 + 10)
    assert brief(fs) == [("hanging-transaction", "critical", "b-0", 0, 0),
                         ("unregistered-partition", "error", "b-0", 0, 0)]


def test_coordinator_abort_timeout_and_fencing(tmp_path):
    ld, p = setup(tmp_path, timeout_ms=1_000)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    ld.tick(5_000)
    p.producer_epoch = 1
    p.abort()                       # timeout: epoch bumped, prepared after the timeout
    p.producer_epoch = 1
    p.bump_epoch(2)
    p.send([b"2"], partition=a)
    p.producer_epoch = 3
    p.abort()                       # fencing: prepared at once, the id then gets epoch 4
    p.bump_epoch(4)
    ld.write()
    fs = audit(ld.root)
    assert [(f["rule"], f["severity"], details(f)["cause"]) for f in fs] == [
        ("coordinator-abort", "info", "timeout"), ("coordinator-abort", "info", "fencing")]


def test_producer_abort_is_not_a_coordinator_abort(tmp_path):
    ld, p = setup(tmp_path)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    p.abort()
    ld.write()
    assert audit(ld.root) == []


def test_stray_marker_and_empty_registered_partition(tmp_path):
    ld = logdir(tmp_path, start_time_ms=T0)
    a = ld.partition("a", 0)
    a.append_control(11, 0, "ABORT", 0)
    ld.write()
    [f] = audit(ld.root)
    assert (f["rule"], f["severity"], f["first_offset"]) == ("stray-marker", "info", 0)
    # an empty partition of a registered transaction: the coordinator's records list it
    ld2, p = setup(tmp_path / "2")
    b, c = ld2.partition("b", 0), ld2.partition("c", 0)
    p.send([b"1"], partition=b)
    p._register(c)
    p.abort()
    ld2.write()
    assert audit(ld2.root) == []


def test_coordinator_epoch_regression(tmp_path):
    ld, p = setup(tmp_path)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a); p.commit(coordinator_epoch=5)
    p.send([b"2"], partition=a); p.commit(coordinator_epoch=3)
    ld.write()
    [f] = audit(ld.root)
    assert (f["rule"], f["severity"], f["first_offset"]) == ("coordinator-epoch-regression", "error", 2)
    assert details(f).items() >= {"previous_coordinator_epoch": 5, "coordinator_epoch": 3}.items()


def test_non_transactional_write_in_transaction(tmp_path):
    ld, p = setup(tmp_path)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    a.append_batch(values=[b"plain"], producer_id=7, producer_epoch=0, base_sequence=1)
    p.send([b"2"], partition=a, base_sequence=2)
    p.commit()
    ld.write()
    [f] = audit(ld.root)
    assert (f["rule"], f["severity"], f["first_offset"]) == ("non-transactional-write-in-transaction", "error", 0)
    assert details(f)["offsets"] == [[1, 1]]


def test_late_write_opening_unknown_transaction(tmp_path):
    ld, p = setup(tmp_path)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    p.abort()
    ld.tick(10)
    a.append_batch(values=[b"late"], producer_id=7, producer_epoch=0, base_sequence=1, is_transactional=True)
    ld.write()
    fs = audit(ld.root, now_ms=T0 + 100)
    assert brief(fs) == [("hanging-transaction", "critical", "a-0", 2, 2),
                         ("late-transactional-write", "error", "a-0", 2, 2)]


def test_next_transaction_early_data_is_not_late(tmp_path):
    """A batch created just before its transaction registered the partition is normal."""
    ld, p = setup(tmp_path)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    p.commit()
    info = a.append_batch(values=[b"2"], producer_id=7, producer_epoch=0, base_sequence=1,
                          is_transactional=True)
    p._register(a)
    p.commit()
    ld.write()
    assert info.base_offset == 2
    assert audit(ld.root) == []


def test_late_write_committed_by_next_transaction(tmp_path):
    ld, p = setup(tmp_path)
    a = ld.partition("a", 0)
    p.send([b"1"], partition=a)
    p.abort()
    ld.tick(5)
    a.append_batch(values=[b"late"], producer_id=7, producer_epoch=0, base_sequence=1, is_transactional=True)
    ld.tick(500)
    p.sequences[("a", 0)] = 2
    p.send([b"next"], partition=a)
    p.commit()
    ld.write()
    [f] = audit(ld.root)
    assert (f["rule"], f["first_offset"], f["last_offset"]) == ("late-transactional-write", 2, 2)
    assert "committed by the next transaction's COMMIT" in f["message"]


def test_illegal_state_transition_in_log(tmp_path):
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    ts.append_txn_state("tx", 7, 0, "Empty")
    ts.append_txn_state("tx", 7, 0, "CompleteCommit", {})
    ts.append_txn_state("tx", 7, 0, "Ongoing", {"a": [0]})
    ld.write()
    [f] = audit(ld.root)
    assert (f["rule"], f["severity"], f["first_offset"], f["last_offset"]) == ("illegal-state-transition", "error", 0, 1)
    assert details(f)["previous_state"] == "Empty" and details(f)["state"] == "CompleteCommit"


def _row(i, state, partitions=None, tombstone=False):
    return {"replica": "1", "topic": "__transaction_state", "partition": 0, "source": "x.log",
            "position": i * 100, "offset": i, "timestamp_ms": T0 + i, "transactional_id": "tx",
            "tombstone": tombstone, "producer_id": 7, "producer_epoch": 0, "transaction_timeout_ms": 60000,
            "state": state, "state_id": STATES.index(state) if state in STATES else 99,
            "partitions": partitions, "last_update_ms": T0 + i, "start_ms": T0}


@pytest.mark.parametrize("prev", STATES)
@pytest.mark.parametrize("new", STATES)
def test_state_machine_table(prev, new):
    assert illegal_state_transition(prev, new) == (prev not in VALID_PREVIOUS[new])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(STATES + ("Bogus",)), st.booleans(), st.booleans()),
                min_size=1, max_size=12))
def test_state_machine_any_sequence(events):
    """Any sequence of coordinator records: one finding per illegal consecutive pair, never a
    crash (tombstones restart the history)."""
    rows, expected, prev = [], 0, None
    for i, (state, with_parts, tomb) in enumerate(events):
        if tomb and i % 3 == 0:
            rows.append(_row(i, state, tombstone=True))
            prev = None
            continue
        rows.append(_row(i, state, "a-0,b-1" if with_parts else None))
        if prev is not None and (state not in VALID_PREVIOUS or prev not in VALID_PREVIOUS[state]):
            expected += 1
        prev = state
    view = coordinator_state.build(rows)
    assert len(view.findings) == expected
    assert all(f["rule"] == "illegal-state-transition" and f["severity"] == "error" for f in view.findings)
