"""The history simulator's property: on every generated history (one fault kind per test, placed
anywhere, beside clean background producers), `kaudit segments`, `kaudit pcap` and `kaudit audit`
(local engine) report exactly the oracle's anomalies at warning or above. Kinds the current
auditor gets wrong are xfail (tests/sim/known.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.sim.check import assert_exact
from tests.sim.profiles import sim_settings
from tests.sim.known import KNOWN_FAILING
from tests.sim.strategies import CAPTURE_KINDS, KINDS, capture_history, history, mix, wide

REGRESSIONS = Path(__file__).parent / "regressions"


def _params(kinds=KINDS):
    return [pytest.param(k, marks=pytest.mark.xfail(strict=False, reason=KNOWN_FAILING[k]))
            if k in KNOWN_FAILING else k for k in kinds]


@pytest.mark.parametrize("kind", _params())
def test_auditor_reports_exactly_the_injected_anomalies(kind):
    _exact(kind, history(kind))


@pytest.mark.parametrize("kind", _params(tuple(f"capture:{k}" for k in CAPTURE_KINDS)))
def test_a_capture_that_lost_bytes_proves_no_absence(kind):
    """capture:lossy (1-5 % of the payload segments dropped anywhere) and capture:one_broker (the
    capture of one broker: its host, or its listeners) of CLEAN histories: `kaudit pcap` and `kaudit audit` tell nothing
    at warning or above - a capture that lost bytes proves no absence on the connections that lost
    them, one broker's capture none of what the others were sent (capture_faults.py)."""
    _exact(kind, capture_history(kind.split(":")[1]))


def _exact(kind: str, histories) -> None:
    """Every history the strategy draws reported exactly (check.assert_exact); the shrunk failing
    one kept (`_keep`)."""
    last = {}

    @sim_settings()
    @given(h=with_replication(histories))
    def check(h):
        last["h"] = h
        assert_exact(h)

    try:
        check()
    except AssertionError:
        _keep(kind, last.get("h"))      # Hypothesis re-runs the shrunk example last
        raise


def with_replication(histories):
    """The histories, half of them with the followers' steady Fetches in the capture
    (`replicate_on_wire`: a capture taken on a broker's host or interface holds its replication)."""
    return histories.flatmap(lambda h: st.booleans().map(lambda on: dict(h, replicate_on_wire=True) if on else h))


def _keep(kind: str, h) -> None:
    """KAUDIT_SIM_SAVE=1: keep the shrunk failing history as a regression fixture."""
    if h is None or not os.environ.get("KAUDIT_SIM_SAVE"):
        return
    import hashlib

    from tests.sim.check import failures, verdicts

    text = json.dumps(h, sort_keys=True)
    name = f"{kind.replace(':', '-')}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"
    found = failures(verdicts(h)[1])
    REGRESSIONS.mkdir(exist_ok=True)
    (REGRESSIONS / f"{name}.json").write_text(
        json.dumps({"kind": kind, "history": h, "failures_when_kept": found}, indent=1) + "\n")


def _passing() -> list[str]:
    return [k for k in KINDS if k not in KNOWN_FAILING]


def _exact_for_every(histories) -> None:
    """The property: every history the strategy draws is reported exactly (the sim's budget)."""
    @sim_settings()
    @given(h=with_replication(histories))
    def check(h):
        assert_exact(h)

    check()


def test_a_mix_of_passing_kinds_on_shared_partitions_is_reported_exactly():
    """Several faults of the kinds the auditor passes, in one history, their producers often on the
    same partitions: the union of their oracles, nothing else (grows as KNOWN_FAILING shrinks)."""
    _exact_for_every(mix(_passing()))


@pytest.mark.parametrize("kind", ["log:compacted", "txn:admin_abort_ended", "log:compacted_compressed",
                                  "log:clean_interrupted"])
def test_a_mix_holding_a_fault_free_log_change_is_reported_exactly(kind):
    """A history holding `kind` - what Kafka itself does to a log that is no anomaly (the log
    cleaner of a compacted topic, an admin's abort of an ended transaction) - beside faults of the
    passing kinds: the faults are all found, nothing else is told at warning or above."""
    _exact_for_every(mix(_passing(), with_kind=kind))


@pytest.mark.skipif(not os.environ.get("KAUDIT_SIM_EXAMPLES"),
                    reason="wide histories on the local engine: the bench profile only (KAUDIT_SIM_EXAMPLES=N)")
def test_wide_histories_on_the_local_engine_are_reported_exactly():
    """strategies.wide (an episode of every passing kind side by side, the Spark test's histories)
    on the local engine: the union of the episodes' oracles on each feed, nothing else."""
    _exact_for_every(wide(_passing()))
