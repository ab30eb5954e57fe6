"""leader-epoch-mismatch (audit/consistency/leader_epochs.py): leader-epoch-checkpoint against the batches."""

from __future__ import annotations

from diskcraft import audit, logdir, small_chunks

from fixtures import kafka_encoder as ke

RULES = ("leader-epoch-mismatch",)


def _partition(tmp_path, epochs=((0, 0), (1, 10), (3, 20)), n: int = 30, checkpoint=None):
    """`n` batches whose leader epoch changes at the given offsets; `checkpoint`: the file's
    entries instead of the ones the broker would write."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    change = dict((start, epoch) for epoch, start in epochs)
    for i in range(n):
        if i in change:
            pb.set_leader_epoch(change[i])
        pb.append_batch(values=[b"v%d" % i])
    if checkpoint is not None:
        pb.add_file("leader-epoch-checkpoint", ke.encode_leader_epoch_checkpoint(list(checkpoint)))
    return ld.write()


def _brief(fs):
    return [(f["severity"], f["first_offset"], f["last_offset"]) for f in fs]


def test_the_broker_file_agrees(tmp_path, monkeypatch):
    with small_chunks(monkeypatch, 4):   # runs cross chunk boundaries
        assert audit(_partition(tmp_path), rules=RULES) == []


def test_benign_files(tmp_path):
    """A new leader's entry at the log end (no batch yet), the first entries dropped with the log
    start (DeleteRecords kept older batches in the segment), an epoch nobody wrote in."""
    assert audit(_partition(tmp_path / "a", checkpoint=[(0, 0), (1, 10), (3, 20), (4, 30)]), rules=RULES) == []
    assert audit(_partition(tmp_path / "b", checkpoint=[(1, 12), (3, 20)]), rules=RULES) == []
    assert audit(_partition(tmp_path / "c", checkpoint=[(0, 0), (1, 10), (2, 20), (3, 20)][:2] + [(3, 20)]),
                 rules=RULES) == []


def test_epoch_starts_after_its_first_batch(tmp_path):
    """The file starts epoch 3 at 25, but batches 20-24 carry epoch 3: OffsetsForLeaderEpoch(1)
    would answer 25 and a follower would keep 20-24 of another history."""
    fs = audit(_partition(tmp_path, checkpoint=[(0, 0), (1, 10), (3, 25)]), rules=RULES)
    assert _brief(fs) == [("warning", 20, 29)]
    assert "gives offset 20 epoch 1" in fs[0]["message"]


def test_epoch_starts_inside_the_previous_one(tmp_path):
    fs = audit(_partition(tmp_path, checkpoint=[(0, 0), (1, 5), (3, 20)]), rules=RULES)
    assert _brief(fs) == [("warning", 0, 9)]
    assert "starts epoch 1 at 5, inside the batches of epoch 0" in fs[0]["message"]


def test_missing_epoch_and_unordered_entries(tmp_path):
    fs = audit(_partition(tmp_path, checkpoint=[(0, 0), (3, 20), (1, 10)]), rules=RULES)
    by_last = {f["last_offset"]: f for f in fs}
    assert sorted(_brief(fs)) == [("warning", 10, 10), ("warning", 10, 19)]
    assert "does not follow" in by_last[10]["message"]        # the entry itself
    assert "gives offset 10 epoch 0" in by_last[19]["message"]   # and the batches it leaves out


def test_epochs_going_down_in_the_log(tmp_path):
    """Batches of epoch 1 after batches of epoch 3: a leader never writes an older epoch."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    for i, e in enumerate([0, 0, 3, 3, 1, 1]):
        pb.set_leader_epoch(e)
        pb.append_batch(values=[b"v%d" % i])
    (f,) = audit(ld.write(), rules=RULES)
    assert _brief([f]) == [("warning", 4, 5)] and "never go down" in f["message"]
