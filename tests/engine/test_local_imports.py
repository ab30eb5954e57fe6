"""engine.local starts a big capture's decode without the audit's modules: the plan, the folds
and their rules load in the folds' child (engine.forked_folds) while this process decodes, and
here only once the last chunk is sent. Checked in a fresh interpreter (what a command imports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_local_engine_loads_no_audit_module_before_the_decode():
    code = ("import sys, kaudit.engine.local as L; "
            "print(sorted(m for m in sys.modules if m.startswith(('kaudit.audit', 'kaudit.engine.plan', "
            "'kaudit.engine.shared_folds', 'concurrent.futures'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_its_re_exports_still_resolve():
    from kaudit.audit import folds
    from kaudit.engine import local
    from kaudit.engine.local import sorted_stream

    assert sorted_stream is folds.sorted_stream and local.Rows is folds.Rows and local.Context is folds.Context
