"""KIP-939 recovery of a prepared transaction on the wire (audit/txn/txn_kept.py): an
InitProducerId v6 with KeepPreparedTxn whose answer names the prepared transaction
(OngoingTxnProducerId/Epoch) takes it over - not fenced, not timed out when it asked Enable2Pc,
ended by the recovering session's EndTxn and the markers at the kept epoch + 1 - even when the
recovering session has another producer id and the capture holds nothing else of the prepared
one's InitProducerId. Negative twins: a KeepPreparedTxn answered OngoingTxnProducerId -1 kept
nothing (its open transaction is fenced, told as a plain InitProducerId's fencing is)."""

from __future__ import annotations

import pytest

from tests.audit.wire.test_wire_txn_versions import PID, T0_MS, Story, run
from tests.audit.wire.wirecraft import by_rule, end_txn, init_producer_id
from tests.audit.wire.wirecraft_txn import end_txn_v5, markers
from tests.sim.wire import init_producer_id_v6

NEW_PID = PID + 1          # the recovering session's producer id (the epoch ran out)
LATE_MS = T0_MS + 20 * 60_000   # past any timeout but KIP-939's


def serious(fs):
    return [f for f in fs if f["severity"] in ("warning", "error", "critical")]


def told(fs):
    return sorted((f["rule"], f["severity"], f.get("partition")) for f in fs)


def said(fs):
    return sorted((f["rule"], f["severity"], f.get("partition")) for f in serious(fs))


def _prepared(tv: int, *, init: bool) -> Story:
    """Producer id PID's transaction (epoch 0) on orders-0 and orders-1, prepared and never ended
    by its instance; `init`: the capture holds its InitProducerId v6 with Enable2Pc, else it
    began before the capture."""
    s = Story(tv)
    s.events.clear()
    if init:
        s.on("client", init_producer_id_v6(1, PID, 0, txn_id="tx-wire", enable_2pc=True, client_id="wire-producer"))
    s.send(0, 0)
    s.send(1, 0)
    return s


def _recover(s: Story, corr: int, *, pid: int, epoch: int, ongoing: tuple, two_pc: bool = True) -> None:
    s.on("client2", init_producer_id_v6(corr, pid, epoch, txn_id="tx-wire", enable_2pc=two_pc, keep_prepared=True,
                                        timeout_ms=2**31 - 1, client_id="recovered-producer", ongoing=ongoing))


def _end(s: Story, corr: int, *, pid: int, epoch: int, committed: bool, markers_at: int | None) -> None:
    """The recovering session's EndTxn, and the coordinator's markers under the kept producer
    id at `markers_at` (None: the markers went to leaders outside the capture)."""
    if s.tv == 2:
        s.on("client2", end_txn_v5(corr, pid, epoch, committed=committed, client_id="recovered-producer"))
    else:
        s.on("client2", end_txn(corr, pid, epoch, committed=committed, client_id="recovered-producer"))
    if markers_at is not None:
        s.on("coord", markers(corr + 1, PID, markers_at, committed=committed,
                              parts=[("orders", 0), ("orders", 1)]))


@pytest.mark.parametrize("tv", [1, 2])
@pytest.mark.parametrize("init", [True, False])
def test_recovery_under_a_new_producer_id_is_not_hanging(tmp_path, tv, init):
    """The recovery's only link to the prepared transaction is OngoingTxnProducerId/Epoch (the
    session got producer id NEW_PID): open 20 minutes, the kept transaction is in progress -
    dangling at most, never hanging, no coordinator abort."""
    s = _prepared(tv, init=init)
    _recover(s, 40, pid=NEW_PID, epoch=0, ongoing=(PID, 0))
    fs = run(tmp_path, s, now_ms=LATE_MS)
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "coordinator-abort") == []
    assert {f["rule"] for f in serious(fs)} <= {"dangling-transaction"}


@pytest.mark.parametrize("tv", [1, 2])
@pytest.mark.parametrize("committed", [True, False])
@pytest.mark.parametrize("markers_shown", [True, False])
def test_recovery_under_a_new_producer_id_ends_the_kept_transaction(tmp_path, tv, committed, markers_shown):
    """The recovering session commits or aborts the kept transaction: its EndTxn (under
    NEW_PID) and the coordinator's markers under PID at the kept epoch + 1 end it - no warning,
    whether or not the capture holds the markers."""
    s = _prepared(tv, init=False)
    _recover(s, 40, pid=NEW_PID, epoch=0, ongoing=(PID, 0))
    _end(s, 50, pid=NEW_PID, epoch=0, committed=committed, markers_at=1 if markers_shown else None)
    fs = run(tmp_path, s, now_ms=LATE_MS)
    assert serious(fs) == [], said(fs)


@pytest.mark.parametrize("tv, markers_at", [(1, 1), (2, 1), (2, 2)])
def test_recovery_of_the_same_producer_id_started_before_the_capture(tmp_path, tv, markers_at):
    """The prepared transaction's InitProducerId is not in the capture; the recovery answers the
    same producer id at epoch 1 and names the kept transaction (PID, 0): its Enable2Pc lifts the
    timeout, its EndTxn and the markers end it - at the kept epoch + 1 (KIP-939's words) or, under
    version 2, at the recovering session's bumped epoch."""
    s = _prepared(tv, init=False)
    _recover(s, 40, pid=PID, epoch=1, ongoing=(PID, 0))
    fs = run(tmp_path, s, now_ms=LATE_MS)
    assert by_rule(fs, "hanging-transaction") == [], said(fs)
    _end(s, 50, pid=PID, epoch=1, committed=True, markers_at=markers_at)
    fs = run(tmp_path, s, now_ms=LATE_MS)
    assert serious(fs) == [], said(fs)


def test_kept_transaction_ended_at_a_foreign_epoch_is_still_told(tmp_path):
    """Negative: markers of the kept transaction at an epoch neither its own + 1 nor its
    recovering session's end allows: the part's marker epoch is still wrong."""
    s = _prepared(2, init=False)
    _recover(s, 40, pid=PID, epoch=1, ongoing=(PID, 0))
    _end(s, 50, pid=PID, epoch=1, committed=True, markers_at=5)
    assert {f["partition"] for f in by_rule(run(tmp_path, s, now_ms=LATE_MS), "mixed-epoch-transaction")} == {0, 1}


@pytest.mark.parametrize("tv", [1, 2])
def test_recovery_that_kept_nothing_is_told_as_a_fencing(tmp_path, tv):
    """Negative: a KeepPreparedTxn answered OngoingTxnProducerId -1 while the producer's
    transaction is open kept nothing of it: the new epoch fences it, told exactly as a plain
    InitProducerId (v4, no Enable2Pc) fencing it is - not excused."""
    plain = _prepared(tv, init=True)
    plain.on("client2", init_producer_id(40, PID, 1, txn_id="tx-wire", client_id="recovered-producer"))
    keep = _prepared(tv, init=True)
    _recover(keep, 40, pid=PID, epoch=1, ongoing=(-1, -1))
    want = told(run(tmp_path, plain, now_ms=LATE_MS))
    assert ("coordinator-abort", "info", 0) in want, want
    assert told(run(tmp_path, keep, now_ms=LATE_MS)) == want


@pytest.mark.parametrize("tv", [1, 2])
def test_recovery_naming_another_transaction_keeps_nothing_of_this_one(tmp_path, tv):
    """Negative: the answer names another producer id's transaction (-1 for this one): the
    recovering session took nothing of PID's, which stays open past its timeout, hanging."""
    s = _prepared(tv, init=False)
    _recover(s, 40, pid=NEW_PID, epoch=0, ongoing=(-1, -1))
    fs = run(tmp_path, s, now_ms=LATE_MS)
    assert {f["partition"] for f in by_rule(fs, "hanging-transaction")} == {0, 1}, said(fs)
    s = _prepared(tv, init=False)
    _recover(s, 40, pid=NEW_PID, epoch=0, ongoing=(PID + 7, 0))
    fs = run(tmp_path, s, now_ms=LATE_MS)
    assert {f["partition"] for f in by_rule(fs, "hanging-transaction")} == {0, 1}, said(fs)


# -- wire-lso: the transaction at a stuck LSO, kept by a recovery with Enable2Pc ------------------

def _recovery_conn(ongoing: tuple, two_pc: bool = True):
    from tests.audit.wire.test_wire_txn_crafted import PID as HELD
    from tests.sources.pcap.craft import Conn

    ongoing = (HELD if ongoing[0] == PID else ongoing[0], ongoing[1])   # the producer _held_by writes
    return Conn(init_producer_id_v6(1, NEW_PID, 0, txn_id="tx-wire", enable_2pc=two_pc, keep_prepared=True,
                                    timeout_ms=2**31 - 1, client_id="recovered-producer", ongoing=ongoing),
                client=("10.0.0.6", 41006))


@pytest.mark.parametrize("ongoing, two_pc, severity", [
    ((PID, 0), True, "info"),        # the recovery with Enable2Pc kept the transaction at the LSO
    ((-1, -1), True, "warning"),     # it kept nothing: the plain transaction's timeout applies
    ((PID, 3), True, "warning"),     # it kept another epoch's transaction, not this one
    ((PID, 0), False, "warning"),    # kept without Enable2Pc: its timeout still applies
])
def test_lso_held_by_a_kept_transaction(tmp_path, ongoing, two_pc, severity):
    """KIP-939: the transaction at the stuck LSO began with a plain InitProducerId (v4); a
    recovery under another producer id kept it with Enable2Pc (its answer's OngoingTxnProducerId
    and Epoch name it): a two-phase-commit transaction, told at info; the twins are not."""
    from tests.audit.wire.test_wire_txn_crafted import _fetches, _held_by
    from tests.audit.wire.wirecraft import audit, details

    fs = audit(tmp_path, [_held_by(False), _recovery_conn(ongoing, two_pc),
                          _fetches([(13, 10), (15, 10), (17, 10), (19, 10)])],
               timed={"delay": lambda i, p: 2.0})
    (f,) = by_rule(fs, "lso-stuck")
    assert f["severity"] == severity, f["message"]
    assert (details(f).get("two_phase_commit") is True) == (severity == "info")


# -- the rows a recovery gives the kept producer id (txn_kept.linked_rows), generated ------------

def test_linked_rows_follow_the_answers():
    """Any interleaving of InitProducerIds (kept or not, answered or not) and EndTxns of a few
    producer ids: a KEEP_PREPARED row for each answered KeepPreparedTxn naming another producer
    id's transaction, under that id; a KEPT_END for the recovering session's first answered
    EndTxn after it (none once that session re-initialised), under the kept id and epoch."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from kaudit.audit.txn import txn_kept

    row = st.fixed_dictionaries({
        "event": st.sampled_from(["INIT_PRODUCER_ID", "END_TXN"]), "producer_id": st.integers(1, 3),
        "producer_epoch": st.integers(0, 2), "error_codes": st.sampled_from(["", "0", "51", None]),
        "keep_prepared_txn": st.booleans(), "ongoing_txn_producer_id": st.sampled_from([None, -1, 1, 2, 3]),
        "ongoing_txn_producer_epoch": st.integers(-1, 2), "result": st.sampled_from(["COMMIT", "ABORT"])})

    @settings(max_examples=200, deadline=None)
    @given(rows=st.lists(row, max_size=12))
    def check(rows):
        if not rows:
            return
        cols = {c: [r[c] for r in rows] for c in rows[0]}
        cols["ts"] = [float(i) for i in range(len(rows))]
        cols["position"] = list(range(len(rows)))
        pending, want = {}, []
        for r in rows:
            ok = r["error_codes"] in ("", "0")
            if r["event"] == "INIT_PRODUCER_ID" and ok:
                k = r["ongoing_txn_producer_id"]
                if r["keep_prepared_txn"] and k is not None and k >= 0 and k != r["producer_id"]:
                    e = r["ongoing_txn_producer_epoch"]
                    pending[r["producer_id"]] = (k, e if e >= 0 else None)
                    want.append(("KEEP_PREPARED", k, pending[r["producer_id"]][1], r["producer_id"]))
                else:
                    pending.pop(r["producer_id"], None)
            elif r["event"] == "END_TXN" and ok and r["producer_id"] in pending:
                k, e = pending.pop(r["producer_id"])
                want.append(("KEPT_END", k, e, r["producer_id"]))
        got = [(x["event"], x["producer_id"], x["producer_epoch"], x["new_producer_id"])
               for x in txn_kept.linked_rows(cols)]
        assert got == want

    check()
