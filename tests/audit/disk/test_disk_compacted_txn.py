"""Transactions in a compacted topic (cleanup.policy=compact): the log cleaner removes committed
records a later value of their key superseded, aborted transactions' data, and - one cleaning
after their data went - gives the markers left without data a delete horizon (KIP-534: the
attribute bit, and the horizon as the batch's base timestamp), removing them past it. A marker's
time is then its record's (the max timestamp), never the horizon: read as the horizon, every
rewritten marker of a version-1 producer (one epoch for all its transactions) looked written at
the same moment, and an ABORT and a COMMIT of two transactions minutes apart were called one torn
transaction. Log dirs from the simulator and its cleaner (tests/sim/compaction.py)."""

from __future__ import annotations

import pytest

from kaudit.audit.txn.txn_parts import create_ms


def _run(tmp_path, script, *, state_log=True, tv=1):
    from kaudit.engine.local import audit_segments
    from tests.sim.cluster import Client, Sim
    from tests.sim.compaction import SEGMENT_BYTES

    sim = Sim(tmp_path, broker="4.1" if tv >= 2 else "3.0")
    sim.state_log = state_log
    parts = [sim.partition("c", p) for p in range(2)]
    for p in parts:
        for pb in p.pbs.values():
            pb.segment_bytes = SEGMENT_BYTES
    c = Client(sim, "p", txn_id="tx", tv=tv)
    c.init()
    script(sim, c, parts)
    sim.wait(100)
    dirs, _, end = sim.write()
    run = audit_segments([str(d) for d in dirs], now_ms=end)
    assert not run.errors
    return sim, {(f["rule"], f["severity"], f.get("partition")) for f in run.findings if f["severity"] != "info"}


def _txn(c, parts, r: int, commit: bool):
    for k, p in enumerate(parts):
        c.send(p, [b"v%d-%d" % (r, k)] * 2, keys=[b"a", b"b"])
    c.end(commit)


def _clean(sim, parts, nodes=(1, 2, 3)):
    from tests.sim.compaction import clean

    for p in parts:
        for n in nodes:
            clean(p.pbs[n], sim.clock)


def _history(sim, c, parts):
    """Transactions over the same two keys (each supersedes the last), commit and abort, cleaned
    twice with the delete horizon's time between: markers without data, some with a horizon."""
    for r in range(12):
        _txn(c, parts, r, r % 3 != 1)
        sim.wait(70_000)
        _clean(sim, parts, (1, 2) if r % 2 else (1, 3))


def test_markers_left_by_compaction_are_not_a_torn_transaction(tmp_path):
    from tests.sim.compaction import parse

    sim, found = _run(tmp_path, _history)
    assert found == set()
    rewritten = [b for p in sim.parts.values() if p.topic == "c" for s in p.pbs[1].segments
                 for b in parse(bytes(s.data)) if b.is_control and b.horizon is not None]
    assert rewritten, "the history must hold markers the cleaner rewrote with a delete horizon"


def test_without_the_coordinators_records(tmp_path):
    _, found = _run(tmp_path, _history, state_log=False)
    assert found == set()


def test_a_torn_transaction_after_a_cleaning_is_still_told(tmp_path):
    """An admin aborts one partition of an open transaction the producer then commits, after
    the cleaner rewrote the earlier transactions' markers: torn-transaction on that partition."""
    def script(sim, c, parts):
        _history(sim, c, parts)
        for k, p in enumerate(parts):
            c.send(p, [b"last-%d" % k], keys=[b"z"])
        st = parts[0].state[c.pid]
        sim.coord.send_markers(c.pid, st.epoch, False, [parts[0]], client_id="adminclient-1",
                               coordinator_epoch=st.coordinator_epoch)
        c.end(True)
    _, found = _run(tmp_path, script)
    assert ("torn-transaction", "critical", 0) in found


def test_create_time_of_rewritten_batches():
    assert create_ms({"base_timestamp_ms": 5, "max_timestamp_ms": 9}) == 5
    # the delete horizon in the base timestamp; an empty batch kept for the producer's state
    assert create_ms({"base_timestamp_ms": 90_000, "max_timestamp_ms": 9, "has_delete_horizon": True}) == 9
    assert create_ms({"base_timestamp_ms": -1, "max_timestamp_ms": 9}) == 9
    assert create_ms({"base_timestamp_ms": -1, "max_timestamp_ms": -1}) is None


@pytest.mark.parametrize("tv", [1, 2])
def test_transactions_the_coordinators_cleaner_removed_are_not_asked_for(tmp_path, tv):
    """`__transaction_state` is compacted too: its cleaner keeps a transactional id's latest
    records, so the registrations and results of its earlier transactions are gone. Data older
    than the producer's earliest coordinator record is not judged against registrations
    (unregistered-partition), nor its markers matched to a later transaction's record (a false
    torn-transaction or mixed-epoch-transaction: a TV2 marker's epoch is not that one's)."""
    from tests.sim.compaction import SEGMENT_BYTES, parse

    def script(sim, c, parts):
        coord = sim.coord.log_partition(c.txn_id)
        for pb in coord.pbs.values():
            pb.segment_bytes = SEGMENT_BYTES
        for r in range(12):    # c-1 in the first transactions only: their registrations go
            _txn(c, parts if r < 3 else parts[:1], r, r % 3 != 1)
            sim.wait(5_000 if r % 4 else 70_000)   # transactions within the matching window
            _clean(sim, parts + [coord])
        return coord

    coords = []
    sim, found = _run(tmp_path, lambda sim, c, parts: coords.append(script(sim, c, parts)), tv=tv)
    assert found == set()
    kept = [b for s in coords[0].pbs[1].segments for b in parse(bytes(s.data))]
    assert kept[0].base_offset > 0, "the cleaner must have removed the id's first records"
