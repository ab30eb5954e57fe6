"""Transactions without the coordinator's records (log dirs lacking `__transaction_state`): the
parts no coordinator transaction claims are grouped by their markers (txn_model.group). Under
transaction version 0/1 a producer keeps its epoch from one transaction to the next, so two
transactions moments apart share it: a part whose data was written after another part's marker,
with another outcome, is the next transaction, not a torn one. Log dirs from the simulator."""

from __future__ import annotations


def _findings(tmp_path, script):
    from kaudit.engine.local import audit_segments
    from tests.sim.cluster import Sim

    sim = Sim(tmp_path)
    sim.state_log = False
    script(sim)
    sim.wait(100)
    dirs, _, end = sim.write()
    run = audit_segments([str(d) for d in dirs], now_ms=end)
    assert not run.errors
    return {(f["rule"], f["severity"]) for f in run.findings if f["severity"] != "info"}


def _client(sim):
    from tests.sim.cluster import Client

    c = Client(sim, "p", txn_id="tx", tv=1)
    c.init()
    return c, sim.partition("t", 0), sim.partition("t", 1)


def test_abort_then_commit_moments_apart_are_two_transactions(tmp_path):
    def script(sim):
        c, p0, p1 = _client(sim)
        c.send(p0, [b"a"])
        c.end(False)
        sim.wait(10)
        c.send(p1, [b"b"])
        c.end(True)
    assert _findings(tmp_path, script) == set()


def test_one_transaction_committed_on_two_partitions_is_one(tmp_path):
    def script(sim):
        c, p0, p1 = _client(sim)
        c.send(p0, [b"a"])
        c.send(p1, [b"b"])
        c.end(True)
        sim.wait(10)
        c.send(p0, [b"c"])
        c.end(False)
    assert _findings(tmp_path, script) == set()
