"""Golden JSON reports: compare a (normalised) report with its file, or rewrite the file when
KAUDIT_REGEN_GOLDEN=1 (then review the diff)."""

from __future__ import annotations

import json
import os
from pathlib import Path

REGEN = os.environ.get("KAUDIT_REGEN_GOLDEN") == "1"


def check_golden(golden: Path, report: dict, name: str) -> None:
    if REGEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    assert golden.exists(), f"no golden for {name}: run with KAUDIT_REGEN_GOLDEN=1"
    assert report == json.loads(golden.read_text()), f"{name}: report differs from {golden} (regenerate if intended)"
