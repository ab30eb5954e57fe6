"""Golden JSON reports of `kaudit pcap --format json` on crafted captures
(tests/audit/golden/wire/<name>.json).

The captures are written into a temporary working directory and named relatively, so evidence
sources and finding ids do not depend on where the test runs; the report's absolute `inputs`
and the tool version are normalised. After an intended change of the wire rules, regenerate
with `KAUDIT_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/audit/wire/test_wire_golden.py`
and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from tests.audit.goldens import check_golden
from tests.audit.wire.wirecraft import (
    TOPIC,
    batch,
    end_txn,
    init_producer_id,
    metadata,
    produce,
    produce_response,
    send,
    write_timed,
)
from tests.sources.pcap.craft import Conn, write_capture

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "wire"
runner = CliRunner()
P = 6001


def _retries(path):
    m = (send(1, batch(P, 0, 0, 5), offset=0) + send(2, batch(P, 0, 5, 5), offset=5)
         + send(3, batch(P, 0, 5, 5), offset=5)                  # deduplicated
         + send(4, batch(P, 0, 5, 5), error=46)                  # DUPLICATE_SEQUENCE_NUMBER
         + send(5, batch(P, 0, 0, 5), offset=10)                 # stored twice
         + send(6, batch(-1, -1, -1, 4), offset=20, partition=1)
         + send(7, batch(-1, -1, -1, 4), offset=24, partition=1))  # producer id -1, stored twice
    write_capture(path, Conn(m))


def _sequences(path):
    m = (send(1, batch(P, 0, 0, 5), offset=0) + send(2, batch(P, 0, 5, 5), offset=5)
         + send(3, batch(P, 0, 20, 2), error=45)                 # gap, refused
         + send(4, batch(P, 0, 12, 2), offset=10)                # gap, accepted
         + send(5, batch(P, 1, 3, 1), error=45)                  # new epoch not at 0
         + send(6, batch(P, 1, 0, 2), offset=12)                 # epoch bump (KIP-360): fine
         + send(7, batch(P, 0, 14, 1), error=47)                 # zombie epoch 0, refused
         + send(8, batch(P, 0, 15, 1), offset=14))               # zombie epoch 0, accepted
    write_capture(path, Conn(m))


def _frames(path):
    a = (metadata(1, answered=False) + metadata(2)              # later request answered
         + init_producer_id(3, P, 3) + end_txn(4, P, 2, error=90)
         + send(5, batch(P, 3, 0, 2), error=6))                 # NOT_LEADER_OR_FOLLOWER
    b = send(1, batch(P + 1, 0, 0, 2), error=None)              # closed before its response
    c = metadata(1) + metadata(2) + metadata(3)                 # a segment lost
    write_capture(path, [Conn(a), Conn(b, client=("10.0.0.1", 40002)),
                         Conn(c, client=("10.0.0.1", 40003))], segment=24,
                  drop=lambda s: s.conn == 2 and s.direction == 0 and s.messages == (2,) and s.index == 1)


def _benign(path):
    five = [(0, produce(c, [(TOPIC, 0, batch(P, 0, 5 * c, 5))])) for c in range(5)] + \
        [(1, produce_response(c, [(TOPIC, 0, 0, 5 * c)])) for c in range(5)]
    bump = (init_producer_id(10, P, 1, txn_id=None) + send(11, batch(P, 1, 0, 5), offset=25)
            + init_producer_id(12, P + 1, 0, txn_id=None) + send(13, batch(P + 1, 0, 0, 5), offset=30)
            + send(14, batch(P + 2, 0, 2**31 - 3, 3), offset=35) + send(15, batch(P + 2, 0, 0, 3), offset=38)
            + metadata(16, answered=False))                     # in flight at the end
    write_timed(path, Conn(five + bump, fin=False))


CASES = {"retries": _retries, "sequences": _sequences, "frames": _frames, "benign": _benign}


def _report(name: str, tmp_path: Path, monkeypatch) -> tuple[dict, int]:
    monkeypatch.chdir(tmp_path)
    path = Path(f"{name}.pcap")
    if not path.exists():
        CASES[name](path)
    r = runner.invoke(app, ["pcap", str(path), "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    report = json.loads(r.stdout)
    report["inputs"] = [os.path.relpath(p, tmp_path) for p in report["inputs"]]
    report["version"] = "<version>"
    return report, r.exit_code


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_report(name, tmp_path, monkeypatch):
    report, code = _report(name, tmp_path, monkeypatch)
    check_golden(GOLDEN / f"{name}.json", report, name)
    # exit code follows --fail-on error (the default)
    assert code == int(any(f["severity"] in ("error", "critical") for f in report["findings"]))
    # the same capture audited again: identical findings and ids
    again, _ = _report(name, tmp_path, monkeypatch)
    assert [f["id"] for f in again["findings"]] == [f["id"] for f in report["findings"]]
    assert again == report


def test_golden_files_cover_every_rule_of_the_wire():
    """Between them the golden reports show every wire rule (a rule without one is untested)."""
    rules = set()
    for p in GOLDEN.glob("*.json"):
        rules |= {f["rule"] for f in json.loads(p.read_text())["findings"]}
    assert rules >= {"retried-batch", "duplicate-batch", "duplicate-records", "out-of-order-sequence",
                     "fenced-epoch", "unanswered-request", "producer-error", "stream-gap"}
    assert json.loads((GOLDEN / "benign.json").read_text())["findings"] == []
