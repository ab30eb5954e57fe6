"""duplicate-records on crafted log dirs: a non-idempotent producer's retry stored twice."""

from __future__ import annotations

import pytest
from diskcraft import audit, brief, details, log_file, logdir, small_chunks


def test_retry_stored_twice(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    for i in range(5):
        pb.append_batch(values=[b"before-%d" % i])
    orig = pb.append_batch(values=[b"d%d" % i for i in range(5)], keys=[b"k%d" % i for i in range(5)],
                           timestamp=2_000)
    dup = pb.append_batch(values=[b"d%d" % i for i in range(5)], keys=[b"k%d" % i for i in range(5)],
                          timestamp=2_000)
    pb.append_batch(values=[b"after"])
    root = ld.write()
    fs = audit(root)
    assert brief(fs) == [("duplicate-records", "error", "events-0", 10, 14)]
    [f] = fs
    assert f["producer_id"] == -1 and (f["first_ts_ms"], f["last_ts_ms"]) == (2_000, 2_000)
    assert details(f) == {"original_first_offset": 5, "original_last_offset": 9, "batches": 1}
    log = log_file(root, "events", 0)
    assert [(e["source"], e["position"], e["note"]) for e in f["evidence"]] == [
        (log, dup.position, None), (log, orig.position, "original")]
    assert "offsets 10-14 are byte-identical to those at offsets 5-9" in f["message"]


def test_consecutive_retried_batches_make_one_finding(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    batches = [([b"a%d" % i, b"b%d" % i], 3_000 + i) for i in range(3)]
    for values, ts in batches:
        pb.append_batch(values=values, timestamp=ts)     # offsets 0-5
    for values, ts in batches:
        pb.append_batch(values=values, timestamp=ts)     # offsets 6-11: the three again
    fs = audit(ld.write())
    assert brief(fs) == [("duplicate-records", "error", "events-0", 6, 11)]
    assert details(fs[0]) == {"original_first_offset": 0, "original_last_offset": 5, "batches": 3}
    assert len(fs[0]["evidence"]) == 4 and "3 batches" in fs[0]["message"]


def test_same_values_with_other_timestamps_or_keys_are_not_duplicates(tmp_path):
    """An application sending the same values again later (new create timestamps), or the same
    values under other keys, is not a retry."""
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    pb.append_batch(values=[b"x", b"y"], timestamp=1_000)
    pb.append_batch(values=[b"x", b"y"], timestamp=1_001)
    pb.append_batch(values=[b"x", b"y"], keys=[b"k1", b"k2"], timestamp=1_000)
    pb.append_batch(values=[b"x", b"y"], keys=[b"k2", b"k1"], timestamp=1_000)
    pb.append_batch(values=[b"x", b"y"], timestamp=1_000, codec="gzip")
    other = ld.partition("events", 1)                     # another partition: its own log
    other.append_batch(values=[b"x", b"y"], timestamp=1_000)
    assert audit(ld.write()) == []


def test_idempotent_producers_are_left_to_the_sequence_rules(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b"], timestamp=5_000)
    p.send([b"a", b"b"], base_sequence=0, timestamp=5_000)
    fs = audit(ld.write())
    assert sorted(f["rule"] for f in fs) == ["duplicate-batch", "out-of-order-sequence"]


def test_duplicate_across_chunks_and_segments(tmp_path, monkeypatch):
    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    orig = None
    for i in range(20):
        info = pb.append_batch(values=[b"e%d" % i], timestamp=10_000 + i)
        if i == 3:
            orig = info
    pb.roll_segment()
    for i in range(5):
        pb.append_batch(values=[b"f%d" % i], timestamp=10_100 + i)
    pb.append_batch(values=[b"e3"], timestamp=10_003)     # the retry, 22 batches later
    with small_chunks(monkeypatch, 4):
        fs = audit(ld.write())
    assert brief(fs) == [("duplicate-records", "error", "events-0", 25, 25)]
    assert details(fs[0])["original_first_offset"] == orig.base_offset == 3
    assert fs[0]["evidence"][1]["source"].endswith("00000000000000000000.log")




def _window_log(tmp_path):
    from kaudit.audit.producers.duplicate_records import WINDOW_MS

    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    late = 1_000 + WINDOW_MS + 1
    pb.append_batch(values=[b"old"], timestamp=1_000)              # 0
    pb.append_batch(values=[b"new"], timestamp=late)               # 1
    pb.append_batch(values=[b"old"], timestamp=1_000)              # 2: 0 is 2 rows, WINDOW_MS + 1 back
    pb.append_batch(values=[b"new"], timestamp=late)               # 3: a retry of 1
    pb.append_batch(values=[b"old"], timestamp=1_000)              # 4: 0 and 2 are too far back
    pb.append_batch(values=[b"edge"], timestamp=late - WINDOW_MS)  # 5
    pb.append_batch(values=[b"edge"], timestamp=late - WINDOW_MS)  # 6: just inside: a retry of 5
    pb.append_batch(values=[b"new"], timestamp=late)               # 7: a third copy: of 1 again
    return ld.write()


@pytest.mark.parametrize("chunk", [1, 2, 3, None])
@pytest.mark.parametrize("recent", [1, 2])
def test_retry_window_whatever_the_chunking(tmp_path, monkeypatch, chunk, recent):
    """Memory is bounded by a window: an original is paired with a copy when it was created at
    most WINDOW_MS before the newest timestamp seen (a retry comes within the producer's
    delivery timeout, 2 minutes by default) or lies at most RECENT_ROWS batches back (a producer
    whose clock lags the others'). The window applies to each pair, so the chunking of the local
    engine (or Spark's) does not change the findings."""
    from kaudit.audit.producers import duplicate_records

    monkeypatch.setattr(duplicate_records, "RECENT_ROWS", recent)
    root = _window_log(tmp_path)
    if chunk is None:
        fs = audit(root)
    else:
        with small_chunks(monkeypatch, chunk):
            fs = audit(root)
    pairs = [(f["first_offset"], details(f)["original_first_offset"]) for f in fs]
    if recent == 1:
        assert pairs == [(3, 1), (6, 5), (7, 1)]
    else:   # 2 is paired with 0 (two rows back), 3 with 1, 4 with 2: one finding for the three
        assert pairs == [(2, 0), (6, 5), (7, 1)] and details(fs[0])["batches"] == 3


def test_retry_of_a_producer_with_a_lagging_clock(tmp_path):
    """Another producer's clock is ahead by more than the window: the retry right behind its
    original is still paired (it is among the last RECENT_ROWS batches)."""
    from kaudit.audit.producers.duplicate_records import WINDOW_MS

    ld = logdir(tmp_path)
    pb = ld.partition("events", 0)
    pb.append_batch(values=[b"ahead"], timestamp=10 * WINDOW_MS)
    pb.append_batch(values=[b"lagging"], timestamp=1_000)
    pb.append_batch(values=[b"ahead-2"], timestamp=10 * WINDOW_MS + 1)
    pb.append_batch(values=[b"lagging"], timestamp=1_000)
    fs = audit(ld.write())
    assert [(f["first_offset"], details(f)["original_first_offset"]) for f in fs] == [(3, 1)]


@pytest.mark.parametrize("seed", range(6))
def test_pairs_are_the_brute_force_ones_across_evictions(seed, monkeypatch):
    """The fold's pairs (Bloom filter, runs evicted, the bitmap rebuilt only now and then) are the
    brute-force ones: each copy paired with the earliest equal batch inside its retry window."""
    import numpy as np
    import pyarrow as pa

    from kaudit.audit.producers import duplicate_records as D

    monkeypatch.setattr(D, "RECENT_ROWS", 40)
    monkeypatch.setattr(D, "WINDOW_MS", 50)
    rng = np.random.default_rng(seed)
    n = 2000
    crc = rng.integers(0, 12, n)           # a small space: many equal fingerprints
    ts = np.cumsum(rng.random(n) < 0.1) + np.where(rng.random(n) < 0.05, -30, 0)
    base = np.arange(n, dtype=np.int64) * 2
    got = []
    monkeypatch.setattr(D.RecordDuplicates, "_report",
                        lambda self, b, last, pos, src, t, ob, *rest: got.append((b, ob)))
    fold = D.RecordDuplicates(("1", "t", 0))
    start = 0
    while start < n:
        size = int(rng.integers(1, 90))
        sl = slice(start, min(start + size, n))
        t = pa.table({"crc": crc[sl].astype(np.uint32), "batch_size": np.full(len(crc[sl]), 80, np.int32),
                      "record_count": np.ones(len(crc[sl]), np.int32),
                      "base_timestamp_ms": ts[sl], "max_timestamp_ms": ts[sl], "base_offset": base[sl],
                      "last_offset": base[sl] + 1, "position": base[sl] * 10,
                      "source": pa.array(["s"] * len(crc[sl]))})
        fold.feed(t, np.ones(t.num_rows, dtype=bool))
        start += size
    # a batch without a timestamp (-1, Kafka's NO_TIMESTAMP) is no retry evidence: it goes to
    # repeated_records, and the window counts the other batches
    timed = np.flatnonzero(ts != -1)
    crc, ts, base = crc[timed], ts[timed], base[timed]
    seen = np.maximum.accumulate(ts)
    want = []
    for b in range(len(ts)):
        for a in range(b):
            if crc[a] == crc[b] and ts[a] == ts[b] and (ts[a] >= seen[b] - 50 or a >= b - 40):
                want.append((int(base[b]), int(base[a])))
                break
    assert got == want and len(want) > 200


def test_fingerprints_tell_a_timestamp_from_its_negative():
    """Equal fingerprints stand for equal fields: t and -t (odd t, base = max) once collided."""
    import numpy as np
    import pyarrow as pa

    from kaudit.audit.producers.duplicate_records import fingerprints

    ts = np.array([19, -19, 1, -1, 7, -7], dtype=np.int64)
    t = pa.table({"crc": np.full(6, 4, np.uint32), "batch_size": np.full(6, 80, np.int32),
                  "record_count": np.ones(6, np.int32), "base_timestamp_ms": ts, "max_timestamp_ms": ts})
    assert len(set(fingerprints(t, np.ones(6, dtype=bool)).tolist())) == 6


@pytest.mark.parametrize("seed", range(6))
def test_log_order_is_a_stable_sort(seed):
    """The fingerprints' order (the default sort, ties put back in row order) is what a stable
    sort gives, with many, few or no equal fingerprints."""
    import numpy as np

    from kaudit.audit.producers.duplicate_records import log_order

    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 7, 1000, 20000):
        for top in (2, 60, 2**62):
            fp = rng.integers(0, top, n).astype(np.uint64)
            assert np.array_equal(log_order(fp), np.argsort(fp, kind="stable"))
