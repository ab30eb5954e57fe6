"""One history per transactional id on disk (issue 27): the id's producer ids linked across
epoch exhaustion - transaction version 2 (the coordinator's PrepareX names the next producer
id, CompleteX is written under it) and 0/1 (the next InitProducerId gives a new producer id) -
so that a zombie still holding the old producer id, writing after the move, is a write after
its epoch ended; a history that only moves on is clean, and `kaudit txn` shows the move."""

from __future__ import annotations

import json

import pytest
from diskcraft import logdir, of
from typer.testing import CliRunner

from kaudit.cli import app
from kaudit.engine.local import audit_segments

pytestmark = pytest.mark.usefixtures("txn_path")
T0 = 1_700_000_000_000
RULES = ("write-after-epoch-end", "hanging-transaction", "dangling-transaction", "torn-transaction",
         "coordinator-abort", "stray-marker", "late-transactional-write", "unregistered-partition",
         "illegal-state-transition", "fenced-epoch", "mixed-epoch-transaction")


def audit(root):
    return audit_segments([str(root)], select=RULES).findings


def moved(tmp_path, tv: int, zombie: bool, *, before: bool = False):
    """Producer 7 of "tx" at epoch 32765/32766 moves to producer 8 (TV2: at its EndTxn; TV1: a
    new InitProducerId); producer 8 then commits on a. `zombie`: producer 7 at epoch 32766
    writes to z, 5 s after the move (`before`: just before it)."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a, z = ld.partition("a", 0), ld.partition("z", 0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ts, transaction_version=tv,
                    next_producer_id=8 if tv >= 2 else None)
    p.bump_epoch(32765 if tv >= 2 else 32766)
    p.send([b"1"], partition=a)
    p.commit()
    if before:
        z.append_batch(values=[b"zombie"], producer_id=7, producer_epoch=32766, base_sequence=0,
                       is_transactional=True)
    if tv >= 2:
        p.send([b"2"], partition=a)
        p.commit()                    # 32766 -> 32767: completed under producer id 8
        assert p.producer_id == 8
    else:
        p = ld.producer(8, 0, transactional_id="tx", txn_state=ts, transaction_version=tv)
    if zombie:
        ld.tick(5000)
        z.append_batch(values=[b"zombie"], producer_id=7, producer_epoch=32766, base_sequence=0,
                       is_transactional=True)
    p.send([b"3"], partition=a)
    p.commit()
    ld.write()
    return ld


@pytest.mark.parametrize("tv", [1, 2])
def test_a_move_to_a_new_producer_id_alone_is_clean(tmp_path, tv):
    ld = moved(tmp_path, tv, zombie=False)
    assert audit(ld.root) == []


@pytest.mark.parametrize("tv", [1, 2])
def test_a_zombie_of_the_old_producer_id_after_the_move_is_a_write_after_its_epoch_ended(tmp_path, tv):
    ld = moved(tmp_path, tv, zombie=True)
    fs = audit(ld.root)
    (w,) = of(fs, "write-after-epoch-end")
    assert (w["topic"], w["partition"], w["producer_id"], w["first_offset"]) == ("z", 0, 7, 0)
    assert w["severity"] == "error" and w["transactional_id"] == "tx"
    # TV2: its own EndTxn ended epoch 32766 first (every end bumps it); the story says the move too
    assert "to producer id 8" in w["message"]
    assert "no marker ends it" in w["message"]
    d = json.loads(w["details"]) if isinstance(w["details"], str) else w["details"]
    assert d["next_producer_id"] == 8 and d["transactional_id_history"]["producer_ids"] == [7, 8]
    assert {f["rule"] for f in fs} <= {"write-after-epoch-end", "hanging-transaction", "unregistered-partition"}
    assert all(f["producer_id"] == 7 for f in fs)


def test_the_old_producer_ids_data_before_the_move_is_not_a_zombie(tmp_path):
    """Producer 7's write to z before the move: no marker ends it (hanging), but it was not
    written after its epoch ended."""
    ld = moved(tmp_path, 1, zombie=False, before=True)
    fs = audit(ld.root)
    assert of(fs, "write-after-epoch-end") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_kaudit_txn_shows_one_history_across_the_producer_ids(tmp_path, tv):
    ld = moved(tmp_path, tv, zombie=False)
    r = CliRunner().invoke(app, ["txn", str(ld.root), "-f", "json", "--transactional-id", "tx"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["producer_id"] for row in rows] == [7] * (len(rows) - 1) + [8]
    assert all(row["producer_ids"] == [7, 8] for row in rows)
    change = rows[-1]["producer_id_change"]
    assert (change["from"], change["to"]) == (7, 8)
    assert ("NextProducerId" in change["how"] or "next producer id" in change["how"]) if tv >= 2 \
        else "InitProducerId" in change["how"] or "records show" in change["how"]
    table = CliRunner().invoke(app, ["txn", str(ld.root), "--transactional-id", "tx"])
    assert "moved from producer id 7 to 8" in table.stdout


def test_the_zombie_incident_names_the_transactional_id_and_both_producer_ids(tmp_path):
    ld = moved(tmp_path, 1, zombie=True)
    r = CliRunner().invoke(app, ["segments", str(ld.root), "-f", "json"])
    (inc,) = json.loads(r.stdout)["incidents"]
    assert inc["kind"] == "zombie" and inc["topic_partitions"] == ["z-0"]
    assert "'tx'" in inc["title"] and "moved to producer id 8" in inc["title"]
    assert "fenced by epoch" not in inc["title"]    # nothing fenced it: its producer id was left behind
    assert "(its producer ids: 7 -> 8)" in inc["narrative"]["impact"]
