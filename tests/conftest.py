"""Shared test set-up: the corpus location and its skip rule."""

from __future__ import annotations

import os
from pathlib import Path

# A key that comes back to a fold after its group closed raises in tests (kaudit.audit.folds:
# production reports it as an internal error); set before kaudit is imported, and inherited by
# the Spark workers.
os.environ["KAUDIT_STRICT_ORDER"] = "1"

import pytest

ROOT = Path(__file__).resolve().parents[1]
# KAUDIT_CORPUS: the corpus elsewhere (a git worktree of the repo is not beside ../shared)
CORPUS = Path(os.environ.get("KAUDIT_CORPUS") or ROOT.parent / "shared" / "corpus")


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS} (CI provides ../shared/corpus beside the repo)")
    return CORPUS


@pytest.fixture(params=["fast", "reference"])
def txn_path(request, monkeypatch):
    """Runs a transaction test on the fast path (txn_clean certifies producers through the
    rules' own predicates) and on the reference path (every producer judged exactly): the same
    findings either way."""
    from kaudit.audit.txn import txn_rows

    monkeypatch.setattr(txn_rows, "FAST_PATH", request.param == "fast")
    return request.param


# `make test` runs two processes, each taking whole files in collection order (the Makefile
# keeps xdist from reordering them by their number of tests): the slowest files (Spark, a Spark
# cluster, the compiled core against the pure path on the whole corpus, ...) go first, slowest
# first, so that neither process is left alone with one of them at the end. Files keep their own
# order; alone, nothing changes. (Measured file by file, Nov 2026: the Spark parity file ~150 s,
# the cluster ~80 s, the others ~20-50 s.)
SLOW_FIRST = ("tests/engine/test_spark_parity.py", "tests/engine/test_cluster.py", "tests/test_native.py",
              "tests/sim/test_sim_spark.py", "tests/sources/pcap/test_pcap_compiled.py", "tests/sim/test_sim.py",
              "tests/test_format_matrix.py", "tests/corpus/test_wireshark_agree.py",
              "tests/engine/test_spark_memory.py", "tests/audit/disk/test_disk_txn_runs.py",
              "tests/audit/test_corpus_41.py", "tests/engine/test_shared_folds.py",
              "tests/protocol/wire/test_corpus_wire.py", "tests/engine/test_cli_engine.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
