"""The live executor runs the plan as the other executors do: it names no fold. How a buffered
fold settles before the end is the fold's own declaration (Fold.live, audit/folds.Settler)."""

from __future__ import annotations

import ast
from pathlib import Path

import kaudit.audit as audit
from kaudit.audit.folds import Settler

LIVE = Path(audit.__file__).parent.parent / "engine" / "live.py"


def test_live_executor_names_no_fold():
    tree = ast.parse(LIVE.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert {m for m in imported if m.startswith("kaudit.audit")} <= {"kaudit.audit.folds"}
    names = {f.name for f in audit.WIRE_FOLDS + audit.DISK_FOLDS}
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not names & strings


def test_every_wire_fold_has_a_live_plan():
    """A wire fold is streamed (one kind, no prepare, keyed groups) or says how it settles; one
    with neither would keep its whole selection to the end of a stream that may never end."""
    from kaudit.engine.live import streamable

    for f in audit.WIRE_FOLDS:
        assert streamable(f) or f.live is not None, f.name
        if f.live is not None:
            s = f.live(f)
            assert isinstance(s, Settler)
            assert s.settle([], 0.0) == []
