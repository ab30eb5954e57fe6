"""Shrunk failing histories kept as fixtures (tests/sim/regressions/*.json), replayed exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sim.check import assert_exact
from tests.sim.known import KNOWN_FAILING

FILES = sorted((Path(__file__).parent / "regressions").glob("*.json"))


def _params():
    out = []
    for f in FILES:
        data = json.loads(f.read_text())
        kind = data["kind"]
        # a known-failing kind's fixture is xfail unless the auditor passes it since a commit
        # (`passes_since`): then it guards that fix
        known = kind in KNOWN_FAILING and not data.get("passes_since")
        marks = [pytest.mark.xfail(strict=False, reason=KNOWN_FAILING[kind])] if known else []
        out.append(pytest.param(f, id=f.stem, marks=marks))
    return out


@pytest.mark.parametrize("path", _params())
def test_regression(path):
    assert_exact(json.loads(path.read_text())["history"])
