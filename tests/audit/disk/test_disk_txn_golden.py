"""Golden JSON reports of the transaction rules (`kaudit segments --select <txn rules> --format
json`) on crafted log dirs (tests/audit/golden/disk/txn-<name>.json), as test_disk_golden.py does
for the other disk rules: paths relative to the temporary folder, the version normalised, ids
checked for stability rather than stored. One log dir per shape: with the coordinator's records
(every rule, one producer id each, and clean producers beside them), without them (what the
markers alone tell), and two replicas of the same partitions (merged parts, a lagging replica).
Regenerate after an intended change with
`KAUDIT_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/audit/disk/test_disk_txn_golden.py`
and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from diskcraft import logdir
from typer.testing import CliRunner

from kaudit.cli import app
from tests.audit.goldens import check_golden

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "disk"
TXN_RULES = ("dangling-transaction", "hanging-transaction", "torn-transaction", "coordinator-abort",
             "stray-marker", "coordinator-epoch-regression", "non-transactional-write-in-transaction",
             "late-transactional-write", "unregistered-partition", "illegal-state-transition")
T0 = 1_767_225_600_000
NOW = T0 + 120_000
runner = CliRunner()


def _coordinator(tmp_path):
    """Every transaction rule with the coordinator's records, one producer id (and partition) each."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    co = ld.partition("__consumer_offsets", 0)

    def producer(pid, tid, **kw):
        return ld.producer(pid, 0, transactional_id=tid, txn_state=ts, **kw)

    clean = producer(1, "tx-clean")                                   # quiet: data, offsets, commit, abort
    a0, a1 = ld.partition("a", 0), ld.partition("a", 1)
    clean.send([b"1"], partition=a0); clean.send([b"2"], partition=a1)
    clean.send_offsets("g", {("in", 0): 5}, partition=co)
    clean.commit()
    clean.send([b"3"], partition=a0); clean.abort()
    clean.send([b"4"], partition=a1); clean.commit()

    hang = producer(7, "tx-hang", timeout_ms=60_000)                  # hanging: past its timeout
    b0 = ld.partition("b", 0)
    hang.send([b"x"], partition=b0); hang.send([b"y"], partition=b0)

    torn = producer(9, "tx-torn")                                     # COMMIT here, ABORT there
    c0, c1 = ld.partition("c", 0), ld.partition("c", 1)
    torn.send([b"1"], partition=c0); torn.send([b"2"], partition=c1)
    torn._state("PrepareCommit", torn.txn_partitions)
    c0.append_control(9, 0, "COMMIT", 0)
    c1.append_control(9, 0, "ABORT", 0)
    torn._state("CompleteCommit", {})
    torn.txn_members, torn.txn_partitions = [], {}

    lost = producer(20, "tx-lost")                                    # complete, one marker missing
    d0, d1 = ld.partition("d", 0), ld.partition("d", 1)
    lost.send([b"1"], partition=d0); lost.send([b"2", b"3"], partition=d1)
    lost._state("PrepareCommit", lost.txn_partitions)
    d0.append_control(20, 0, "COMMIT", 0)
    lost._state("CompleteCommit", {})
    lost.txn_members, lost.txn_partitions = [], {}

    unreg = producer(10, "tx-unreg")                                  # data on a partition never registered
    e0, e1 = ld.partition("e", 0), ld.partition("e", 1)
    unreg.send([b"1"], partition=e0)
    e1.append_batch(values=[b"z"], producer_id=10, producer_epoch=0, base_sequence=0, is_transactional=True)
    unreg.commit()

    timeout = producer(11, "tx-timeout", timeout_ms=1_000)            # coordinator abort by timeout
    f0 = ld.partition("f", 0)
    timeout.send([b"1"], partition=f0)
    ld.tick(5_000)
    timeout.producer_epoch = 1
    timeout.abort()
    fence = producer(12, "tx-fence")                                  # coordinator abort by fencing
    f1 = ld.partition("f", 1)
    fence.send([b"2"], partition=f1)
    fence.producer_epoch = 1
    fence.abort()
    fence.bump_epoch(2)

    g0 = ld.partition("g", 0)
    g0.append_control(13, 0, "ABORT", 0)                              # stray marker, no records

    regress = producer(14, "tx-regress")                              # coordinator epoch 5 then 3
    h0 = ld.partition("h", 0)
    regress.send([b"1"], partition=h0); regress.commit(coordinator_epoch=5)
    regress.send([b"2"], partition=h0); regress.commit(coordinator_epoch=3)

    plain = producer(15, "tx-plain")                                  # a plain write inside it
    i0 = ld.partition("i", 0)
    plain.send([b"1"], partition=i0)
    i0.append_batch(values=[b"plain"], producer_id=15, producer_epoch=0, base_sequence=1)
    plain.send([b"2"], partition=i0, base_sequence=2)
    plain.commit()

    unknown = producer(16, "tx-late-open")                            # late data: unknown transaction
    j0 = ld.partition("j", 0)
    unknown.send([b"1"], partition=j0)
    unknown.abort()
    ld.tick(10)
    j0.append_batch(values=[b"late"], producer_id=16, producer_epoch=0, base_sequence=1, is_transactional=True)

    nxt = producer(17, "tx-late-next")                                # late data: the next commit ends it
    k0 = ld.partition("k", 0)
    nxt.send([b"1"], partition=k0)
    nxt.abort()
    ld.tick(5)
    k0.append_batch(values=[b"late"], producer_id=17, producer_epoch=0, base_sequence=1, is_transactional=True)
    ld.tick(500)
    nxt.sequences[("k", 0)] = 2
    nxt.send([b"next"], partition=k0)
    nxt.commit()

    ts.append_txn_state("tx-illegal", 18, 0, "Empty")                 # Empty -> CompleteCommit
    ts.append_txn_state("tx-illegal", 18, 0, "CompleteCommit", {})
    ts.append_txn_state("tx-illegal", 18, 0, "Ongoing", {"l": [0]})

    tv2 = producer(21, "tx-tv2")                                      # KIP-890: every marker bumps the epoch
    m0 = ld.partition("m", 0)
    tv2.send([b"1"], partition=m0); tv2.commit(marker_epoch=1)
    tv2.producer_epoch = 1
    tv2.send([b"2"], partition=m0); tv2.abort(marker_epoch=2)
    tv2.producer_epoch = 2

    open_ = producer(22, "tx-open", timeout_ms=900_000)               # dangling: open, within its timeout
    n0 = ld.partition("n", 0)
    open_.send([b"1"], partition=n0)
    return ld.write()


def _no_coordinator(tmp_path):
    """No `__transaction_state` in the evidence: the markers alone (and the age) tell."""
    ld = logdir(tmp_path, start_time_ms=T0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    torn = ld.producer(30, 0, transactional=True)
    torn.send([b"1"], partition=a); torn.send([b"2"], partition=b)
    a.append_control(30, 0, "COMMIT", 0)
    b.append_control(30, 0, "ABORT", 0)
    ok = ld.producer(31, 0, transactional=True)                       # quiet: whole transactions
    ok.send([b"1"], partition=a); ok.send([b"2"], partition=b)
    a.append_control(31, 0, "COMMIT", 0); b.append_control(31, 0, "COMMIT", 0)
    ld.tick(10_000)
    ok.send([b"3"], partition=a)
    a.append_control(31, 0, "ABORT", 0)
    c = ld.partition("c", 0)
    c.append_control(32, 0, "COMMIT", 0)                              # stray
    fenced = ld.producer(33, 0, transactional=True)                   # ABORT with epoch + 1
    fenced.send([b"1"], partition=c)
    c.append_control(33, 1, "ABORT", 0)
    old = ld.producer(34, 0, transactional=True)                      # open: hanging by age only
    old.send([b"1"], partition=ld.partition("d", 0))
    return ld.write()


def _replicas(tmp_path):
    """Two replicas of the same partitions; broker 2 lags one marker behind; the coordinator's
    records are on broker 1 only."""
    roots = []
    for node in (1, 2):
        ld = logdir(tmp_path / f"broker{node}", node_id=node, start_time_ms=T0)
        a, b = ld.partition("a", 0), ld.partition("b", 0)
        ts = ld.partition("__transaction_state", 0) if node == 1 else None
        p = ld.producer(40, 0, transactional_id="tx-rep", txn_state=ts)
        p.send([b"1"], partition=a); p.send([b"2"], partition=b); p.commit()
        p.send([b"3"], partition=a); p.send([b"4"], partition=b)
        if node == 1:
            p.commit()
        else:                                                         # b's marker not replicated yet
            a.append_control(40, 0, "COMMIT", 0)
        q = ld.producer(41, 0, transactional_id="tx-rep-open", txn_state=ts, timeout_ms=900_000)
        q.send([b"5"], partition=a)                                   # open on both replicas
        roots.append(ld.write())
    return roots


CASES = {"txn-coordinator": _coordinator, "txn-no-coordinator": _no_coordinator, "txn-replicas": _replicas}


def _normalise(report: dict, base: Path) -> dict:
    report = json.loads(json.dumps(report))
    report["inputs"] = [os.path.relpath(p, base) for p in report["inputs"]]
    report["version"] = "<version>"
    for f in report["findings"]:
        f["id"] = "<id>"
        for e in f["evidence"]:
            e["source"] = os.path.relpath(e["source"], base)
    return report


def _run(roots, fmt: str = "json"):
    r = runner.invoke(app, ["segments", *map(str, roots), "--format", fmt, "--now", str(NOW),
                            "--select", ",".join(TXN_RULES)])
    assert r.exit_code in (0, 1), r.output
    return r


@pytest.mark.parametrize("name", sorted(CASES))
def test_txn_golden_report(name, tmp_path):
    built = CASES[name](tmp_path)
    roots = built if isinstance(built, list) else [built]
    r = _run(roots)
    report = json.loads(r.stdout)
    norm = _normalise(report, tmp_path)
    check_golden(GOLDEN / f"{name}.json", norm, name)
    ids = [f["id"] for f in report["findings"]]
    assert len(set(ids)) == len(ids)
    assert json.loads(_run(roots).stdout) == report                  # ids included


def test_txn_golden_files_cover_every_transaction_rule():
    rules = set()
    for name in CASES:
        rules |= {f["rule"] for f in json.loads((GOLDEN / f"{name}.json").read_text())["findings"]}
    assert set(TXN_RULES) <= rules, sorted(set(TXN_RULES) - rules)
