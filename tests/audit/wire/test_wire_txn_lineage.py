"""One history per transactional id on the wire (issue 27): the InitProducerId answers and the
EndTxn v5 answers link the id's producer ids across epoch exhaustion, so that a zombie still
holding the old producer id, whose Produce is accepted after the move, is a write after its
epoch ended; the move alone is clean, a refused zombie is fenced-epoch's, and `kaudit txn` on
the capture shows the move."""

from __future__ import annotations

import pytest

from kaudit.audit.txn import txn_lineage
from tests.audit.wire.test_wire_txn_versions import PID, T0_MS, Story, run
from tests.audit.wire.wirecraft import batch, by_rule, details, init_producer_id, send

RULES = ("write-after-epoch-end", "hanging-transaction", "torn-transaction", "coordinator-abort", "stray-marker",
         "late-transactional-write", "mixed-epoch-transaction", "dangling-transaction")


def moved(tv: int, zombie: int | None) -> Story:
    """Producer PID of "tx-wire" at epoch 32766 moves to PID + 1 (TV2: its EndTxn answers the new
    id; TV1: the next InitProducerId gives it), which then commits on partition 0. `zombie`: an
    old instance's Produce under PID epoch 32766 on partition 1 after the move, answered with
    that error code."""
    s = Story(tv)
    s.epoch = 32766
    s.on("client", init_producer_id(30, PID, 32766, txn_id="tx-wire"))
    s.send(0, 0)
    if tv == 2:
        s.end(True, new_pid=PID + 1)
    else:
        s.end(True)
        s.on("client", init_producer_id(31, PID + 1, 0, txn_id="tx-wire"))
        s.pid, s.epoch, s.seq = PID + 1, 0, {}
    if zombie is not None:
        s.on("client2", send(50, batch(PID, 32766, 0, 1, transactional=True), partition=1,
                             offset=0 if zombie == 0 else -1, error=zombie, txn_id="tx-wire"))
    s.send(0, 2)
    s.end(True)
    return s


def rules(fs):
    return [f for f in fs if f["rule"] in RULES]


@pytest.mark.parametrize("tv", [1, 2])
def test_the_move_alone_is_clean(tmp_path, tv):
    assert rules(run(tmp_path, moved(tv, None), now_ms=T0_MS + 60_000)) == []


@pytest.mark.parametrize("tv", [1, 2])
def test_an_accepted_zombie_of_the_old_producer_id_is_a_write_after_its_epoch_ended(tmp_path, tv):
    fs = run(tmp_path, moved(tv, 0), now_ms=T0_MS + 60_000)
    (w,) = by_rule(fs, "write-after-epoch-end")
    assert (w["topic"], w["partition"], w["producer_id"]) == ("orders", 1, PID)
    assert w["severity"] == "error" and w["transactional_id"] == "tx-wire"
    assert f"producer id {PID + 1}" in w["message"]
    d = details(w)
    assert d["next_producer_id"] == PID + 1
    assert d["transactional_id_history"] == {"transactional_id": "tx-wire", "producer_ids": [PID, PID + 1]}
    assert all(f["producer_id"] == PID for f in rules(fs))


@pytest.mark.parametrize("tv", [1, 2])
def test_a_refused_zombie_of_the_old_producer_id_stored_nothing(tmp_path, tv):
    fs = run(tmp_path, moved(tv, 90 if tv == 2 else 47), now_ms=T0_MS + 60_000)
    assert rules(fs) == []
    assert [f["producer_id"] for f in by_rule(fs, "fenced-epoch")] == [PID]


def test_lineage_links_explicit_and_implicit_moves():
    rows = [{"tid": "a", "pid": 1, "first": 10, "last": 20, "epoch": 32766, "source": "s", "position": 1, "via": "record"},
            {"tid": "a", "old": 1, "new": 2, "ts": 20, "source": "s", "position": 2, "via": "next", "epoch": 32767},
            {"tid": "a", "pid": 2, "first": 21, "last": 30, "epoch": 0, "source": "s", "position": 3, "via": "record"},
            {"tid": "a", "pid": 3, "first": 40, "last": 40, "epoch": 0, "source": "w", "position": 9, "via": "init"},
            {"tid": "b", "pid": 9, "first": 5, "last": 50, "epoch": 3, "source": "s", "position": 4, "via": "record"}]
    lin = txn_lineage.build(rows)
    assert set(lin) == {1, 2, 3}                     # "b" has one producer id: nothing to link
    a = lin[1]
    assert a.producer_ids == [1, 2, 3]
    first, second = a.moves
    assert (first.old, first.new, first.ts_ms, first.position) == (1, 2, 20, 2) and "KIP-890" in first.how
    assert (second.old, second.new, second.ts_ms) == (2, 3, 40) and "InitProducerId" in second.how
    assert a.next_move(3) is None and a.previous_move(1) is None


@pytest.mark.parametrize("tv", [1, 2])
def test_kaudit_txn_on_the_capture_shows_the_move(tmp_path, tv):
    import json

    from typer.testing import CliRunner

    from kaudit.cli import app

    run(tmp_path, moved(tv, None), now_ms=T0_MS + 60_000)     # writes story.pcap
    r = CliRunner().invoke(app, ["txn", str(tmp_path / "story.pcap"), "-f", "json", "--transactional-id", "tx-wire"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["producer_id"] for row in rows] == [PID, PID + 1]
    change = rows[1]["producer_id_change"]
    assert (change["from"], change["to"]) == (PID, PID + 1)
    assert ("EndTxn answered a new producer id" in change["how"]) if tv == 2 else ("InitProducerId" in change["how"])


def test_kaudit_txn_rows_of_one_transactional_id_follow_each_other():
    rows = [{"producer_id": 2, "transactional_id": "a", "n": 1}, {"producer_id": 9, "transactional_id": "b", "n": 2},
            {"producer_id": 1, "transactional_id": "a", "n": 3}, {"producer_id": 2, "transactional_id": None, "n": 4}]
    lin = txn_lineage.build([
        {"tid": "a", "pid": 1, "first": 1, "last": 5, "epoch": 32766, "source": "s", "position": 1, "via": "record"},
        {"tid": "a", "pid": 2, "first": 6, "last": 9, "epoch": 0, "source": "s", "position": 2, "via": "init"}])
    out = txn_lineage.annotate(rows, lin)
    assert [r["n"] for r in out] == [3, 1, 4, 2]     # producer id 1's row first, then 2's, then "b"
    assert out[1]["producer_id_change"]["from"] == 1 and "producer_id_change" not in out[2]
    assert "producer_ids" not in out[3]
