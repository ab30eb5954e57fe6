"""The simulator on the Spark engine.

In `make test` (when pyspark is installed): a small fixed Hypothesis budget of wide histories -
several faulted episodes of the kinds the auditor passes, each its own producer, topic and
transactional id, then a consumer group of each passing group kind reading their topics, side by
side in one cluster (one set of log dirs, one capture) - each audited
in ONE Spark run per feed (`segments`, `pcap`, `audit`) and judged against the union of the
episodes' oracles (strategies.wide: an episode of every fault kind the auditor passes, in any
order). Spark's fixed cost (its session, its first job) is paid once for many histories; the
budget is SPARK_CI_EXAMPLES wide histories (docs/simulator.md has its time). `make bench`
(KAUDIT_SIM_SPARK=1) runs KAUDIT_SIM_SPARK_EXAMPLES of them (default SPARK_BENCH_EXAMPLES) and
the fixed histories below."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings

from tests.sim.check import assert_exact
from tests.sim.known import KNOWN_FAILING
from tests.sim.profiles import sim_settings
from tests.sim.strategies import KINDS, wide

BENCH = bool(os.environ.get("KAUDIT_SIM_SPARK"))
SPARK_CI_EXAMPLES = 2      # wide histories in `make test` (each holds every passing kind)
SPARK_BENCH_EXAMPLES = 10  # in `make bench`
bench_only = pytest.mark.skipif(not BENCH, reason="Spark runs of the simulator: KAUDIT_SIM_SPARK=1 (make bench)")

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


def _budget():
    """SPARK_CI_EXAMPLES wide histories (`make test`), or under KAUDIT_SIM_SPARK=1 (`make bench`)
    KAUDIT_SIM_SPARK_EXAMPLES of them (default SPARK_BENCH_EXAMPLES)."""
    n = int(os.environ.get("KAUDIT_SIM_SPARK_EXAMPLES") or SPARK_BENCH_EXAMPLES) if BENCH else SPARK_CI_EXAMPLES
    return settings(sim_settings(), max_examples=n)


def test_spark_engine_reports_exactly_the_injected_anomalies_of_wide_histories():
    """One episode of every passing fault kind per history, on the Spark engine: the union of their
    oracles on each feed, nothing else."""
    pytest.importorskip("pyspark")
    passing = [k for k in KINDS if k not in KNOWN_FAILING]

    @_budget()
    @given(h=wide(passing))
    def check(h):
        assert_exact(h, spark=True)

    check()


@bench_only
@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_spark_engine_reports_exactly_the_injected_anomalies(name):
    pytest.importorskip("pyspark")
    assert_exact(HISTORIES[name], spark=True)
