"""KIP-939 recovery on a live capture: the prepared transaction of producer id PID, quiet far
longer than any timeout the live settling waits for, is recovered by a new instance under
another producer id (KeepPreparedTxn: the answer's OngoingTxnProducerId/Epoch name it) that
commits it. The live executor settles the kept producer id and its recovering session together
and never by a two-phase-commit transaction's age: its findings are the file audit's."""

from __future__ import annotations

import pytest

from kaudit.engine import live
from tests.audit.wire.wirecraft import add_partitions, batch, by_rule, end_txn, send
from tests.audit.wire.wirecraft_txn import markers
from tests.engine.test_live_crafted import live_audit
from tests.sim.wire import init_producer_id_v6
from tests.sources.pcap.craft import Conn

PID, NEW_PID = 5501, 5502
COORD = dict(client=("10.0.0.9", 45001), server=("10.0.0.2", 9093))


@pytest.mark.parametrize("two_pc", [True, False])
def test_kept_transaction_recovered_after_a_long_silence(tmp_path, monkeypatch, two_pc):
    """`two_pc`: the prepared transaction's own InitProducerId asked Enable2Pc, else it was plain
    (the recovery's Enable2Pc and OngoingTxnProducerId are its only link)."""
    monkeypatch.setattr(live, "CHECK_EVERY_S", 0.0)
    first = Conn(init_producer_id_v6(1, PID, 0, txn_id="tx-wire", enable_2pc=two_pc, timeout_ms=10_000,
                                     client_id="app")
                 + add_partitions(2, PID, 0, partition=0)
                 + send(3, batch(PID, 0, 0, 2, transactional=True), partition=0, offset=0, txn_id="tx-wire"))
    recovered = Conn(init_producer_id_v6(1, NEW_PID, 0, txn_id="tx-wire", enable_2pc=True, keep_prepared=True,
                                         timeout_ms=10_000, client_id="app-recovered", ongoing=(PID, 0))
                     + end_txn(2, NEW_PID, 0, committed=True, client_id="app-recovered"),
                     client=("10.0.0.6", 41006))
    coord = Conn(markers(1, PID, 1, committed=True, parts=[("orders", 0)]), **COORD)

    waited = []

    def delay(i, p):   # 25 minutes of silence before the recovery's first packet
        if p.conn == 1 and not waited:
            waited.append(i)
            return 1500.0
        return 0.5
    fs = live_audit(tmp_path, [first, recovered, coord], timed={"delay": delay})
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "coordinator-abort") == []
    assert [f for f in fs if f["severity"] in ("warning", "error", "critical")] == []
