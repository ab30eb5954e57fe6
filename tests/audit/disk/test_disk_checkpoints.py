"""checkpoint-mismatch (audit/consistency/replicas.py): a log dir's offset checkpoints against its segments."""

from __future__ import annotations

import os

from diskcraft import audit, logdir

RULES = ("checkpoint-mismatch",)


def _broker(tmp_path, n: int = 20, **kw):
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    for i in range(n):
        pb.append_batch(values=[b"v%d" % i])
    for name, value in kw.items():
        setattr(pb, name, value)
    return ld.write(), pb


def _cut_after(root, offset: int) -> None:
    """Drop every batch after `offset` from orders-0's segment (a truncated copy)."""
    from kaudit.engine.local import decode_segments

    log = root / "orders-0" / f"{0:020d}.log"
    _, chunks = decode_segments([str(log)])
    pos = {b: p for kind, t in chunks if kind == "batch"
           for b, p in zip(t.column("base_offset").to_pylist(), t.column("position").to_pylist())}
    os.truncate(log, pos[offset + 1])


def test_consistent_checkpoints(tmp_path):
    root, _ = _broker(tmp_path)
    assert audit(root, rules=RULES) == []


def test_a_follower_behind_and_an_unflushed_tail_are_normal(tmp_path):
    """High watermark and recovery point below the log end: a follower behind its leader, records
    not flushed yet (an unclean shutdown)."""
    root, _ = _broker(tmp_path, high_watermark=12, recovery_point=5)
    assert audit(root, rules=RULES) == []


def test_log_lost_records_the_checkpoints_cover(tmp_path):
    root, _ = _broker(tmp_path)
    _cut_after(root, 14)
    fs = sorted(audit(root, rules=RULES), key=lambda f: f["severity"])
    assert [(f["severity"], f["first_offset"], f["last_offset"]) for f in fs] == [("error", 15, 19), ("warning", 15, 19)]
    hw, rp = fs
    assert "replication-offset-checkpoint records high watermark 20 but the log ends at offset 15" in hw["message"]
    assert "recovery-point-offset-checkpoint" in rp["message"]
    assert [e["kind"] for e in hw["evidence"]] == ["checkpoint", "batch"]
    assert hw["evidence"][0]["source"].endswith("replication-offset-checkpoint")


def test_log_start_past_the_log_end(tmp_path):
    ld = logdir(tmp_path, checkpoints=False)
    pb = ld.partition("orders", 0)
    for i in range(5):
        pb.append_batch(values=[b"v%d" % i])
    root = ld.write()
    (root / "log-start-offset-checkpoint").write_bytes(b"0\n1\norders 0 9\n")
    (f,) = audit(root, rules=RULES)
    assert (f["severity"], f["first_offset"], f["last_offset"]) == ("warning", 5, 8)
    assert "OFFSET_OUT_OF_RANGE" in f["message"]


def test_checkpoint_of_an_absent_partition_is_ignored(tmp_path):
    """Log dirs list partitions whose dirs are elsewhere (moved, deleted, left out of a copy)."""
    ld = logdir(tmp_path, checkpoints=False)
    pb = ld.partition("orders", 0)
    pb.append_batch(values=[b"v"])
    root = ld.write()
    (root / "replication-offset-checkpoint").write_bytes(b"0\n2\norders 0 1\ngone 3 500\n")
    assert audit(root, rules=RULES) == []
