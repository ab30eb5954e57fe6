"""Golden JSON reports of `kaudit segments --format json` on crafted log dirs
(tests/audit/golden/disk/<name>.json).

Paths in the report (inputs, evidence sources) are made relative to the temporary folder the log
dir is built in, and the tool version is normalised. Finding ids hash the evidence's absolute
paths, so they are not in the golden files; instead the same input audited twice must give the
same ids, ids are unique, and every output format carries the same ones. After an intended change
of the disk rules, regenerate with
`KAUDIT_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/audit/disk/test_disk_golden.py`
and review the diff. Only the rules under test are selected (`--select`): index-mismatch and the
transaction rules have their own tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from diskcraft import DISK_RULES, INT32_MAX, logdir
from typer.testing import CliRunner

from kaudit.cli import app
from tests.audit.goldens import check_golden

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "disk"
runner = CliRunner()


def _state_loss(tmp_path):
    """What 01-idempotent-state-expiry left on disk, plus a gap after a wrap."""
    ld = logdir(tmp_path, start_time_ms=1_767_225_600_000, tick_ms=10)
    a = ld.partition("payments", 0)
    p = a.producer(0, 0)
    p.send([b"a%d" % i for i in range(5)], keys=[b"k%d" % i for i in range(5)], timestamp=1_767_225_600_000)
    p.send([b"b%d" % i for i in range(5)])
    p.send([b"a%d" % i for i in range(5)], keys=[b"k%d" % i for i in range(5)], base_sequence=0,
           timestamp=1_767_225_600_000)                                 # byte-identical resend
    p.send([b"f%d" % i for i in range(3)])                               # seq 5-7 re-used
    b = ld.partition("payments", 1)
    q = b.producer(0, 0)
    q.send([b"c%d" % i for i in range(5)])
    q.send([b"g%d" % i for i in range(5)], base_sequence=50)             # gap 4 -> 50
    c = ld.partition("payments", 2)
    r = c.producer(0, 0)
    r.send([b"d0", b"d1", b"d2"])
    r.bump_epoch()
    r.send([b"e0", b"e1", b"e2"])
    z = c.producer(0, 0)
    z.sequences[("payments", 2)] = 3
    z.send([b"j0", b"j1"])                                               # zombie epoch 0
    w = ld.partition("payments", 3).producer(5, 0)
    w.send([b"w0", b"w1"], base_sequence=INT32_MAX - 1)
    w.send([b"w2"])                                                      # 0 after MAX: fine
    w.send([b"w3"], base_sequence=9)                                     # gap 0 -> 9
    return ld.write()


def _retries(tmp_path):
    ld = logdir(tmp_path, start_time_ms=1_767_225_600_000, tick_ms=10)
    pb = ld.partition("events", 0)
    for i in range(5):
        pb.append_batch(values=[b"before-%d" % i], keys=[b"b%d" % i])
    stop = [([b"during-stop-%d" % i], 1_767_225_601_000 + i) for i in range(2)]
    for values, ts in stop:
        pb.append_batch(values=values, timestamp=ts)
    for values, ts in stop:
        pb.append_batch(values=values, timestamp=ts)                     # both retried: stored twice
    pb.append_batch(values=[b"after"])
    idem = ld.partition("events", 1).producer(2, 0)
    idem.send([b"x", b"y"])
    idem.send([b"z"])
    return ld.write()


def _integrity(tmp_path):
    from fixtures.builder import truncate_file

    ld = logdir(tmp_path, start_time_ms=1_767_225_600_000, tick_ms=10)
    pb = ld.partition("ledger", 0)
    p = pb.producer(3, 0)
    infos = [p.send([b"v%d" % i]) for i in range(3)]
    pb.corrupt_batch(infos[1])                                           # crc-mismatch
    pb.append_raw(b"\x13\x37" * 40)                                      # corrupt-batch, resync
    p.send([b"v3"])
    pb.roll_segment()
    p.send([b"v4"])
    p.send([b"v5"])
    ov = ld.partition("ledger", 1)
    ov.append_batch(values=[b"o0", b"o1", b"o2"])
    ov.append_batch(values=[b"o3"], base_offset=1)                       # offset-overlap
    old = ld.partition("ledger", 2)
    for i in range(3):
        old.append_batch(values=[b"p%d" % i])
    old.roll_segment()
    old.append_batch(values=[b"p3"])
    root = ld.write()
    truncate_file(root / "ledger-0" / "00000000000000000004.log", 20)    # active segment cut: info
    truncate_file(root / "ledger-2" / "00000000000000000000.log", 30)    # closed segment cut: warning
    return root


def _benign(tmp_path):
    ld = logdir(tmp_path, start_time_ms=1_767_225_600_000, tick_ms=10)
    a = ld.partition("orders", 0, start_offset=1_000)
    p = a.producer(7, 2)
    p.send([b"a", b"b"], base_sequence=412)                              # log start deleted
    p.send([b"c"])
    p.bump_epoch()                                                       # KIP-360 reset
    p.send([b"d"])
    q = a.producer(8, 0)                                                 # re-initialised: new id
    q.send([b"a", b"b"])
    a.next_offset += 4
    p.sequences[("orders", 0)] += 4                                      # compaction gap
    p.send([b"e"])
    txn = ld.partition("__transaction_state", 0)
    co = ld.partition("__consumer_offsets", 0)
    t = ld.producer(9, 0, transactional_id="tx", txn_state=txn)
    t.send([b"t1"], partition=a)
    t.send_offsets("g", {("in", 0): 3}, partition=co)
    t.abort(marker_epoch=1)                                              # coordinator abort
    t.bump_epoch(2)
    t.send([b"t2"], partition=a)
    t.send_offsets("g", {("in", 0): 4}, partition=co)
    t.commit()
    return ld.write()


CASES = {"state-loss": _state_loss, "retries": _retries, "integrity": _integrity, "benign": _benign}


def _normalise(report: dict, base: Path) -> dict:
    report = json.loads(json.dumps(report))
    report["inputs"] = [os.path.relpath(p, base) for p in report["inputs"]]
    report["version"] = "<version>"
    for f in report["findings"]:
        f["id"] = "<id>"
        for e in f["evidence"]:
            e["source"] = os.path.relpath(e["source"], base)
    return report


def _run(root: Path, fmt: str = "json", *extra):
    # the rules under test only: index-mismatch (the cut tails leave index entries past the end)
    # and the transaction rules have their own tests
    r = runner.invoke(app, ["segments", str(root), "--format", fmt, "--select", ",".join(DISK_RULES), *extra])
    assert r.exit_code in (0, 1), r.output
    return r


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_report(name, tmp_path):
    root = CASES[name](tmp_path)
    r = _run(root)
    report = json.loads(r.stdout)
    norm = _normalise(report, tmp_path)
    check_golden(GOLDEN / f"{name}.json", norm, name)
    assert r.exit_code == int(any(f["severity"] in ("error", "critical") for f in report["findings"]))

    ids = [f["id"] for f in report["findings"]]
    assert len(set(ids)) == len(ids) and all(len(i) == 16 for i in ids)
    again = json.loads(_run(root).stdout)
    assert again == report                                     # ids included
    nd = [json.loads(line) for line in _run(root, "ndjson").stdout.splitlines()]
    assert [f["id"] for f in nd] == ids
    sarif = json.loads(_run(root, "sarif").stdout)
    assert [res["partialFingerprints"]["kauditFindingId"] for res in sarif["runs"][0]["results"]] == ids


def test_golden_files_cover_every_disk_rule():
    rules = set()
    for p in GOLDEN.glob("*.json"):
        rules |= {f["rule"] for f in json.loads(p.read_text())["findings"]}
    assert set(DISK_RULES) <= rules, sorted(set(DISK_RULES) - rules)


def test_ids_do_not_depend_on_the_order_of_the_inputs(tmp_path):
    a = _state_loss(tmp_path / "a")
    b = _retries(tmp_path / "b")
    one = json.loads(_run(a).stdout)["findings"] + json.loads(_run(b).stdout)["findings"]
    both = json.loads(runner.invoke(app, ["segments", str(b), str(a), "--format", "json", "--select",
                                          ",".join(DISK_RULES)]).stdout)["findings"]
    assert sorted(f["id"] for f in both) == sorted(f["id"] for f in one)
