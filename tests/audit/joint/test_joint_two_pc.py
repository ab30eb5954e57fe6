"""kaudit audit and KIP-939: a two-phase-commit transaction left open past its timeout is not
hanging - told by the coordinator's Int.MaxValue timeout in `__transaction_state`, or, when the
log dirs lack it, by the capture's InitProducerId Enable2Pc reaching the disk's transactions fold
(folds.Context.two_pc_inits). Log dirs and captures from the history simulator's cluster."""

from __future__ import annotations

import json

import pytest

from kaudit.audit.joint.join_rows import two_pc_inits
from kaudit.audit.txn.txn_model import ProducerTxns
from kaudit.audit.txn.coordinator_state import CoordView

TWENTY_MIN = 20 * 60_000


def _open_txn(sim, *, two_pc: bool, tv: int, reinit_plain: bool = False):
    from tests.sim.cluster import Client

    p = sim.partition("pay", 0)
    c = Client(sim, "tm", txn_id="tx-2pc", tv=tv, two_pc=two_pc, timeout_ms=10_000)
    c.init()
    c.send(p, [b"a", b"b"])
    c.end(True)
    if reinit_plain:            # the same id re-initialised without Enable2Pc: timeouts apply again
        c.two_pc = False
        c.init()
    c.send(p, [b"c"])
    sim.wait(TWENTY_MIN)        # past the 10 s timeout and transaction.max.timeout.ms (15 min)


def _run(tmp_path, *, state_log: bool, feed: str = "audit", **kw):
    from kaudit.engine.joint import audit_both
    from kaudit.engine.local import audit_segments
    from kaudit.sources.pcap import PcapOptions
    from tests.sim.cluster import Sim

    sim = Sim(tmp_path, broker="4.1")
    sim.state_log = state_log
    _open_txn(sim, **kw)
    dirs, pcap, end = sim.write()
    if feed == "segments":
        run = audit_segments([str(d) for d in dirs], now_ms=end)
    else:
        run = audit_both([str(pcap)], [str(d) for d in dirs], PcapOptions(), now_ms=end)
    assert not run.errors
    return [f for f in run.findings if f["rule"] in ("hanging-transaction", "dangling-transaction")]


def _details(f):
    return json.loads(f["details"]) if isinstance(f["details"], str) else f["details"]


TV = pytest.mark.parametrize("tv", [1, 2])


@TV
def test_capture_tells_the_log_dirs_a_2pc_transaction_is_not_hanging(tmp_path, tv):
    fs = _run(tmp_path, state_log=False, two_pc=True, tv=tv)
    assert fs and {(f["rule"], f["severity"]) for f in fs} == {("dangling-transaction", "warning")}
    disk = [f for f in fs if f["replica"] is not None]
    assert disk, "the disk's own finding, reconciled with the capture's knowledge"
    assert all(_details(f)["two_phase_commit"] for f in fs)
    assert "external transaction manager" in disk[0]["message"]
    assert "forceTerminateTransaction --transactionalId tx-2pc" in disk[0]["remediation"]


@TV
def test_the_coordinators_records_tell_it_without_a_capture(tmp_path, tv):
    """Kafka keeps Int.MaxValue as a 2PC transaction's timeout in __transaction_state."""
    fs = _run(tmp_path, state_log=True, feed="segments", two_pc=True, tv=tv)
    assert {(f["rule"], f["severity"]) for f in fs} == {("dangling-transaction", "warning")}


@TV
def test_without_2pc_the_same_transaction_is_hanging(tmp_path, tv):
    fs = _run(tmp_path, state_log=False, two_pc=False, tv=tv)
    assert ("hanging-transaction", "critical") in {(f["rule"], f["severity"]) for f in fs}
    assert not any(_details(f).get("two_phase_commit") for f in fs)


@TV
def test_2pc_given_up_by_a_later_plain_init_times_out_again(tmp_path, tv):
    """Re-initialised without Enable2Pc: the coordinator applies the timeout again (the
    InitProducerId in effect at the open transaction's epoch decides)."""
    fs = _run(tmp_path, state_log=False, two_pc=True, reinit_plain=True, tv=tv)
    assert ("hanging-transaction", "critical") in {(f["rule"], f["severity"]) for f in fs}
    fs = _run(tmp_path / "with-state", state_log=True, feed="segments", two_pc=True, reinit_plain=True, tv=tv)
    assert ("hanging-transaction", "critical") in {(f["rule"], f["severity"]) for f in fs}


def test_two_pc_inits_keeps_the_answered_inits_of_2pc_producers():
    def init(pid, epoch, on, err="", ts=1.0):
        return {"ts": ts, "event": "INIT_PRODUCER_ID", "transactional_id": "t", "producer_id": pid,
                "producer_epoch": epoch, "error_codes": err, "enable_2pc": on}
    rows = [init(5, 0, True), init(5, 1, False, ts=2.0), init(6, 0, False), init(7, 0, True, err=None),
            init(8, -1, True, err="53")]
    assert two_pc_inits(rows) == {5: ((0, True, "t"), (1, False, "t"))}


def test_two_pc_at_reads_the_init_in_effect_at_an_epoch():
    pt = ProducerTxns(5, {}, CoordView(), two_pc_inits=((0, True), (3, False), (5, True)))
    assert [pt.two_pc_at(e) for e in (0, 2, 3, 4, 5, 9)] == [True, True, False, False, True, True]
    assert not ProducerTxns(5, {}, CoordView()).two_pc_at(0)


def _kept_by_recovery(sim, *, tv: int, kept: bool, new_id: bool):
    """A plain transaction (no Enable2Pc, 10 s timeout) whose instance crashed; within its
    timeout a new instance's KeepPreparedTxn InitProducerId v6 with Enable2Pc recovers it (KIP-939:
    the answer names the kept transaction, on a new producer id when `new_id`) - or, `kept`
    False, is answered OngoingTxnProducerId -1 (kept nothing). Then nothing for 20 minutes."""
    from tests.sim import wire
    from tests.sim.cluster import Client

    p = sim.partition("pay", 0)
    c = Client(sim, "app", txn_id="tx-2pc", tv=tv, timeout_ms=10_000)
    c.init()
    c.send(p, [b"a", b"b"])
    r = Client(sim, "app-recovered", txn_id="tx-2pc", tv=tv, two_pc=True)
    r.client_ip = "10.0.1.4"
    node = sim.coord.node
    pid, epoch, kpid, kepoch = sim.coord.keep_prepared("tx-2pc", sim.new_pid, new_id=new_id)
    msgs = wire.init_producer_id_v6(r.corr(node), pid, epoch, txn_id="tx-2pc", enable_2pc=True, keep_prepared=True,
                                    client_id=r.name, ongoing=(kpid, kepoch) if kept else (-1, -1))
    r.exchange(node, msgs[:1])
    r.exchange(node, msgs[1:])
    sim.wait(TWENTY_MIN)


@TV
@pytest.mark.parametrize("new_id", [False, True])
def test_capture_tells_the_log_dirs_a_kept_transaction_is_two_phase_commit(tmp_path, tv, new_id):
    """`kaudit audit` without `__transaction_state`: the only link between the open transaction
    and Enable2Pc is the recovery's OngoingTxnProducerId/Epoch (its own InitProducerId was plain):
    not hanging on the log dirs (join_rows.two_pc_inits gives the kept producer id the recovery's
    Enable2Pc); the twin answered -1 kept nothing: hanging past its timeout, as before."""
    from kaudit.engine.joint import audit_both
    from kaudit.sources.pcap import PcapOptions
    from tests.sim.cluster import Sim

    out = {}
    for kept in (True, False):
        sim = Sim(tmp_path / f"kept-{kept}", broker="4.1")
        sim.state_log = False
        _kept_by_recovery(sim, tv=tv, kept=kept, new_id=new_id)
        dirs, pcap, end = sim.write()
        run = audit_both([str(pcap)], [str(d) for d in dirs], PcapOptions(), now_ms=end)
        assert not run.errors
        out[kept] = {f["rule"] for f in run.findings if f["severity"] in ("warning", "error", "critical")}
    assert "hanging-transaction" not in out[True], out[True]
    assert "hanging-transaction" in out[False], out[False]


def test_two_pc_inits_gives_the_kept_transaction_the_recovery_enable_2pc():
    """KIP-939: a KeepPreparedTxn recovery with Enable2Pc answered under producer id 9 names the
    kept transaction (5, 2): producer id 5 gets (2, True) after its own plain init; a recovery
    answered -1, or without Enable2Pc, gives nothing; the wire's link rows say the same."""
    from kaudit.audit.txn import txn_lineage

    def init(pid, epoch, on, ts, keep=False, ongoing=(None, None)):
        return {"ts": ts, "event": "INIT_PRODUCER_ID", "transactional_id": "t", "producer_id": pid,
                "producer_epoch": epoch, "error_codes": "", "enable_2pc": on, "keep_prepared_txn": keep,
                "ongoing_txn_producer_id": ongoing[0], "ongoing_txn_producer_epoch": ongoing[1]}
    rows = [init(5, 2, False, 1.0), init(9, 0, True, 2.0, keep=True, ongoing=(5, 2)),
            init(11, 0, True, 3.0, keep=True, ongoing=(-1, -1)), init(12, 0, False, 4.0, keep=True, ongoing=(6, 0))]
    want = {5: ((2, False, "t"), (2, True, "t")), 9: ((0, True, "t"),), 11: ((0, True, "t"),)}
    assert two_pc_inits(rows) == want
    import pyarrow as pa

    t = pa.Table.from_pylist([dict(r, source="c.pcap", position=i) for i, r in enumerate(rows)])
    assert txn_lineage.two_pc_inits(txn_lineage.wire_links(t)) == want
    assert ProducerTxns(5, {}, CoordView(), two_pc_inits=want[5]).two_pc_at(2)
