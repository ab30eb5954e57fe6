"""wire-lso on a live capture (audit/wire/lso_settle.py): a stuck run that is over is told before
the stream ends - at info when a KIP-939 two-phase-commit transaction holds its LSO - and the
responses and batches that can no longer matter leave the selection; the findings are the file
audit's."""

from __future__ import annotations

import json

import pytest

from kaudit.audit.wire import lso_settle
from kaudit.engine import live
from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions
from tests.audit.wire.test_wire_txn_crafted import PID, fetch
from tests.audit.wire.wirecraft import add_partitions, batch, by_rule, details, init_producer_id, send, write_timed
from tests.sim.wire import init_producer_id_v6
from tests.sources.pcap.craft import Conn

OTHER = 4303   # a producer that did not ask for two-phase commit


def _producer(pid: int, two_pc: bool, offset: int, port: int):
    init = (init_producer_id_v6(1, pid, 0, txn_id=f"tx-{pid}", enable_2pc=True, client_id="wire-producer")
            if two_pc else init_producer_id(1, pid, 0, txn_id=f"tx-{pid}"))
    return Conn(init + add_partitions(2, pid, 0, partition=2)
                + send(3, batch(pid, 0, 0, 3, transactional=True), partition=2, offset=offset, txn_id=f"tx-{pid}"),
                client=("10.0.0.5", port))


def _consumer(points):
    return Conn([m for i, (hw, lso) in enumerate(points) for m in fetch(i + 1, hw, lso)], client=("10.0.0.4", 41001))


def _live(tmp_path, conns, **timed):
    path = tmp_path / "lso.pcap"
    write_timed(path, conns, **timed)
    data = path.read_bytes()
    early: list[dict] = []
    run = live.audit_live(str(path), (data[i:i + 1500] for i in range(0, len(data), 1500)), PcapOptions(),
                          emit=early.append)
    want = audit_pcaps([str(path)], PcapOptions()).findings
    key = lambda f: (f["id"], f["rule"], f["severity"], f["message"], json.dumps(f["evidence"]))
    assert sorted(map(key, run.findings)) == sorted(map(key, want))
    return run, early


@pytest.fixture
def sweeping(monkeypatch):
    monkeypatch.setattr(live, "CHECK_EVERY_S", 0.0)   # a checkpoint after every chunk
    monkeypatch.setattr(lso_settle, "SWEEP_S", 0.0)


def test_two_phase_commit_holder_settled_before_the_end(tmp_path, sweeping):
    """The LSO stuck at a two-phase-commit producer's data (offset 10) for 6 responses, then the
    transaction ends and 30 more responses show no open transaction: the stuck run is told at
    info while the capture goes on; the other producer's batch (offset 5, no Enable2Pc) and the
    responses of the run over leave the selection."""
    points = [(13, 10)] * 6 + [(30, 30)] * 30
    run, early = _live(tmp_path, [_producer(PID, True, 10, 52001), _producer(OTHER, False, 5, 52002),
                                  _consumer(points)], delay=lambda i, p: 3.0)
    (f,) = by_rule(run.findings, "lso-stuck")
    assert f["severity"] == "info" and (f["partition"], f["first_offset"], f["producer_id"]) == (2, 10, PID)
    assert details(f)["two_phase_commit"] is True and details(f)["transactional_id"] == f"tx-{PID}"
    assert [x["id"] for x in early if x["rule"] == "lso-stuck"] == [f["id"]]
    cov = run.coverage["live"]
    assert cov["lso_runs_settled"] == 1
    # every response but the last minute's, and the batch of the producer without two-phase commit
    assert cov["lso_rows_dropped"] >= 20


@pytest.mark.parametrize("sweep_s", [0.0, 200.0])
def test_two_runs_of_one_lso_settled_apart(tmp_path, sweeping, monkeypatch, sweep_s):
    """Two stuck runs at one LSO, apart by a response whose high watermark is the LSO (a lagging
    follower's): two findings, as the file's audit tells them, both settled before the end, in
    two sweeps or in one (200 s: the response that closed each run is settled with it, else the
    two would be folded as one run)."""
    from kaudit.audit.thresholds import MIN_RESPONSES

    assert MIN_RESPONSES > 1   # a closer settled with its run is no stuck run of its own
    monkeypatch.setattr(lso_settle, "SWEEP_S", sweep_s)
    points = [(13, 10)] * 5 + [(10, 10)] + [(14, 10)] * 5 + [(30, 30)] * 25
    run, early = _live(tmp_path, [_producer(PID, True, 10, 52001), _consumer(points)], delay=lambda i, p: 3.0)
    fs = by_rule(run.findings, "lso-stuck")
    assert [(f["severity"], details(f)["responses"]) for f in fs] == [("info", 5), ("info", 5)]
    assert sorted(x["id"] for x in early if x["rule"] == "lso-stuck") == sorted(f["id"] for f in fs)
    assert run.coverage["live"]["lso_runs_settled"] == 2


def test_plain_holder_settled_as_a_warning(tmp_path, sweeping):
    """The same run held by a producer that did not ask Enable2Pc: a warning, told early."""
    points = [(13, 10)] * 6 + [(30, 30)] * 30
    run, early = _live(tmp_path, [_producer(OTHER, False, 10, 52002), _consumer(points)], delay=lambda i, p: 3.0)
    (f,) = by_rule(run.findings, "lso-stuck")
    assert f["severity"] == "warning" and f["producer_id"] is None
    assert [x["id"] for x in early if x["rule"] == "lso-stuck"] == [f["id"]]


def test_open_two_phase_commit_run_kept_to_the_end(tmp_path, sweeping):
    """A two-phase-commit transaction that still holds the LSO when the capture ends: its run is
    open, told at the end (info), never early; its batch stays in the selection."""
    points = [(13, 13)] * 5 + [(15, 13), (17, 13), (19, 13)] * 10
    run, early = _live(tmp_path, [_producer(PID, True, 13, 52001), _consumer(points)], delay=lambda i, p: 3.0)
    (f,) = by_rule(run.findings, "lso-stuck")
    assert f["severity"] == "info" and f["first_offset"] == 13 and details(f)["responses"] == 30
    assert not [x for x in early if x["rule"] == "lso-stuck"]
    assert run.coverage["live"]["lso_runs_settled"] == 0


def test_simulated_two_phase_commit_history_live_as_the_file(tmp_path, sweeping):
    """The simulator's shrunk history of the false warning (tests/sim/regressions/txn-two_pc-lso.json:
    a 2PC transaction holds the LSO read_committed consumers see) through the live executor: the
    file audit's findings, the stuck LSO at info."""
    from pathlib import Path

    from tests.sim.runner import simulate

    doc = json.loads((Path(__file__).parents[1] / "sim" / "regressions" / "txn-two_pc-lso.json").read_text())
    _, _, pcap, end = simulate(doc["history"], tmp_path)
    data = Path(pcap).read_bytes()
    run = live.audit_live(str(pcap), (data[i:i + 65536] for i in range(0, len(data), 65536)), PcapOptions(),
                          now_ms=end)
    want = audit_pcaps([str(pcap)], PcapOptions(), now_ms=end).findings
    key = lambda f: (f["id"], f["rule"], f["severity"], f["message"], json.dumps(f["evidence"]))
    assert sorted(map(key, run.findings)) == sorted(map(key, want))
    stuck = by_rule(run.findings, "lso-stuck")
    assert stuck and all(f["severity"] == "info" for f in stuck)
