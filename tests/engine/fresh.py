"""A check run in a fresh interpreter, as a command runs: no other thread alive (pytest's process
may hold a Spark session's threads), nothing loaded yet. The script prints its result as JSON on
its last line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])
