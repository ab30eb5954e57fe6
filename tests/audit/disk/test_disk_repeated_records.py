"""repeated-records (issue 27, "cries wolf on old data"): batches without a timestamp (magic 0
messages, v2 batches converted from them) that repeat earlier records are one info finding per
replica, partition and producer - never an error per pair - and say "no timestamp", never 1969.
A retried batch that carries its create time stays duplicate-records (error)."""

from __future__ import annotations

import pytest
from diskcraft import audit, details, logdir, of, small_chunks

from kaudit.report.story import incidents

RULES = ("duplicate-records", "repeated-records", "duplicate-batch", "out-of-order-sequence")


def _old_producer(pb, n=3000, repeat_every=1000):
    """An old client without idempotence or timestamps writing values that come back: value i
    again `repeat_every` batches later."""
    for i in range(n):
        pb.append_batch(values=[b"value-%d" % (i % repeat_every)], keys=[b"k%d" % (i % repeat_every % 7)], timestamp=-1)


def test_old_format_repetition_is_one_info_finding(tmp_path):
    ld = logdir(tmp_path)
    _old_producer(ld.partition("legacy", 0))
    fs = audit(ld.write(), rules=RULES)
    assert [(f["rule"], f["severity"]) for f in fs] == [("repeated-records", "info")]
    [f] = fs
    d = details(f)
    assert d["repeats"] == 2000 and d["timestamps"] == "none"
    assert (f["first_offset"], f["last_offset"], d["original_first_offset"]) == (1000, 2999, 0)
    assert d["batches_apart"] == [1000, 1000]
    assert f["first_ts_ms"] is None and f["last_ts_ms"] is None
    assert "no timestamp" in f["message"] and "1970" not in f["message"] and "1969" not in f["message"]
    [inc] = incidents(fs, None)
    assert inc["severity"] == "info" and inc["narrative"]["when"] == "no timestamp"
    assert "not a retry" in inc["narrative"]["impact"] and not inc["consumer_visible"]


def test_magic_0_messages_repeat_at_info(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("legacy", 0)
    for i in range(40):
        pb.append_legacy([b"m%d" % (i % 10)], magic=0)
    fs = audit(ld.write(), rules=RULES)
    assert [(f["rule"], f["severity"], details(f)["repeats"]) for f in fs] == [("repeated-records", "info", 30)]


def test_one_incident_per_partition_across_replicas_and_chunks(tmp_path, monkeypatch):
    roots = []
    for node in (1, 2, 3):
        ld = logdir(tmp_path, f"node{node}", node_id=node)
        _old_producer(ld.partition("legacy", 0), n=300, repeat_every=100)
        _old_producer(ld.partition("legacy", 1), n=50, repeat_every=1000)   # no repeat
        roots.append(ld.write())
    with small_chunks(monkeypatch, 7):
        fs = audit(roots, rules=RULES)
    assert sorted((f["rule"], f["replica"], f["partition"], details(f)["repeats"]) for f in fs) == [
        ("repeated-records", r, 0, 200) for r in ("1", "2", "3")]
    assert len({f["incident"] for f in fs}) == 1


def test_a_retry_with_its_create_time_stays_an_error(tmp_path):
    """The twin: the same bytes with a real create time, right behind the original - the retry
    of a client without idempotence (duplicate-records), not a repetition."""
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    pb.append_batch(values=[b"a", b"b"], timestamp=5_000)
    pb.append_batch(values=[b"a", b"b"], timestamp=5_000)
    fs = audit(ld.write(), rules=RULES)
    assert [(f["rule"], f["severity"]) for f in fs] == [("duplicate-records", "error")]


@pytest.mark.parametrize("chunk", [3, 64])
def test_repeats_are_the_brute_force_ones(tmp_path, monkeypatch, chunk):
    """Counted with the window in log order, whatever the chunking."""
    from kaudit.audit.producers import repeated_records as R

    monkeypatch.setattr(R, "RECENT_ROWS", 5)
    ld = logdir(tmp_path)
    pb = ld.partition("legacy", 0)
    vals = [0, 1, 0, 2, 3, 4, 5, 6, 0, 1, 1, 7, 8, 9, 10, 11, 12, 7]
    for v in vals:
        pb.append_batch(values=[b"%d" % v], timestamp=-1)
    with small_chunks(monkeypatch, chunk):
        [f] = audit(ld.write(), rules=RULES)
    want = [i for i, v in enumerate(vals) if any(vals[j] == v for j in range(max(0, i - 5), i))]
    assert details(f)["repeats"] == len(want) and f["first_offset"] == want[0]
    assert f["last_offset"] == want[-1]
