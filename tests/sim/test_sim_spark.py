"""The simulator on the Spark engine, a few fixed histories only (Spark is slow): run by
`make bench` (KAUDIT_SIM_SPARK=1); the local engine covers the property in `make test`."""

from __future__ import annotations

import os

import pytest

from tests.sim.check import assert_exact

pytestmark = pytest.mark.skipif(not os.environ.get("KAUDIT_SIM_SPARK"),
                                reason="Spark runs of the simulator: KAUDIT_SIM_SPARK=1 (make bench)")

HISTORIES = {
    "clean-tv1-and-idempotent": {"broker": "3.0", "episodes": [
        {"kind": "idem", "parts": 2, "batches": 4, "sizes": [2, 1], "fault": "none", "at": 0},
        {"kind": "txn", "tv": 1, "parts": 2, "txns": [{"parts": [0, 1], "batches": 1, "commit": True},
                                                      {"parts": [1], "batches": 2, "commit": False}],
         "fault": "coord_failover", "at": 0}]},
    "tv2-fencing-refused-zombie": {"broker": "4.1", "episodes": [
        {"kind": "txn", "tv": 2, "parts": 2, "txns": [{"parts": [0, 1], "batches": 1, "commit": True}],
         "fault": "fence", "at": 0, "zombie": "registered"}]},
    "non-idempotent-retry-duplicate": {"broker": "3.0", "episodes": [
        {"kind": "idem", "parts": 1, "batches": 3, "sizes": [2], "fault": "noidem_retry", "at": 1}]},
    # the join by record content: the unanswered first send never stored, its records stored once
    # by the re-send under the bumped epoch (KIP-360)
    "idempotent-kip360-resend": {"broker": "3.0", "episodes": [
        {"kind": "idem", "parts": 2, "batches": 3, "sizes": [2, 1], "fault": "kip360", "at": 1}]},
    # KIP-939 without __transaction_state in the log dirs: the capture's Enable2Pc reaches the
    # disk's transactions fold in the Spark tasks (Audit.known -> folds.Context.two_pc_inits)
    "two-phase-commit-left-open": {"broker": "4.1", "episodes": [
        {"kind": "txn", "tv": 2, "parts": 2, "txns": [{"parts": [0, 1], "batches": 1, "commit": True},
                                                      {"parts": [1], "batches": 1, "commit": True}],
         "fault": "two_pc", "at": 0, "coord_log": False}]},
}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_spark_engine_reports_exactly_the_injected_anomalies(name):
    pytest.importorskip("pyspark")
    assert_exact(HISTORIES[name], spark=True)
