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
