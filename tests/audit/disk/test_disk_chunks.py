"""Long idempotent runs over many decode chunks: the vectorised fast path (a batch that simply
continues its producer) and the checked path (everything else) must give the same findings
whatever the chunk size, with interleaved producers and anomalies in the middle of a chunk."""

from __future__ import annotations

import pytest
from diskcraft import audit, brief, details, logdir, small_chunks

from kaudit.audit.producers import disk_sequences

CHUNK_SIZES = (1, 2, 3, 7, 16, 61)


def _normal_run(ld, producers=5, rounds=60):
    pb = ld.partition("orders", 0)
    ps = [pb.producer(100 + k, k % 2) for k in range(producers)]
    for r in range(rounds):
        for k, p in enumerate(ps):
            if (r + k) % 3:                           # irregular interleaving
                p.send([b"%d-%d-%d" % (k, r, j) for j in range(1 + (r + k) % 3)])
        if r % 9 == 4:
            pb.append_batch(values=[b"anon-%d" % r])  # producer id -1 between them
    return pb, ps


def _anomalies(ld):
    """Five producers over ~300 batches; anomalies in the middle, each followed by more batches
    of the same producer (which must be checked against the changed state)."""
    pb, ps = _normal_run(ld, rounds=30)
    a, b, c, d, e = ps
    marks = {}
    for r in range(30):
        if r == 7:
            a.send([b"once-0", b"once-1"])
            a.sequences[("orders", 0)] -= 2           # a: regression (its last batch's sequences
            marks["a"] = a.send([b"again-0", b"again-1"])  # stored again), then it goes on
        elif r == 11:
            b.sequences[("orders", 0)] += 40          # b: gap
            marks["b"] = b.send([b"jump"])
        elif r == 15:
            zombie = pb.producer(c.producer_id, c.producer_epoch)
            zombie.sequences[("orders", 0)] = c.sequences[("orders", 0)]
            c.bump_epoch()                            # c: epoch bump (benign) ...
            c.send([b"new-epoch"])
            marks["c"] = zombie.send([b"zombie-1"])   # ... then its old instance writes (zombie)
            zombie.send([b"zombie-2"])
        elif r == 19:
            d.bump_epoch()
            marks["d"] = d.send([b"late"], base_sequence=4)  # d: new epoch not at 0
        elif r == 23:
            e.bump_epoch()                            # e: KIP-360 reset: benign
        for p in ps:
            p.send([b"r%d" % r, b"s%d" % r])
    return marks


def _expected(marks):
    a, b, c, d = marks["a"], marks["b"], marks["c"], marks["d"]
    return sorted([
        ("duplicate-batch", "error", "orders-0", a.base_offset, a.last_offset),
        ("out-of-order-sequence", "error", "orders-0", a.base_offset, a.last_offset),
        ("out-of-order-sequence", "error", "orders-0", b.base_offset, b.last_offset),
        ("fenced-epoch", "error", "orders-0", c.base_offset, c.base_offset + 1),
        ("out-of-order-sequence", "error", "orders-0", d.base_offset, d.last_offset),
    ])


def _count_checked(monkeypatch) -> list:
    calls = []
    real = disk_sequences.PartitionTimeline._checked

    def counting(self, i, b, *args):
        calls.append(b.base_offset)
        return real(self, i, b, *args)

    monkeypatch.setattr(disk_sequences.PartitionTimeline, "_checked", counting)
    return calls


def test_long_normal_run_has_no_finding_at_any_chunk_size(tmp_path, monkeypatch):
    ld = logdir(tmp_path)
    pb, ps = _normal_run(ld)
    pb.roll_segment()
    for p in ps:
        p.send([b"after-roll"])
    root = ld.write()
    calls = _count_checked(monkeypatch)
    assert audit(root) == []
    # one chunk: the checked path sees none of them (a producer's first batch only opens its
    # state, the rest continue it: all vectorised)
    assert len(calls) == 0
    for n in CHUNK_SIZES:
        with small_chunks(monkeypatch, n):
            assert audit(root) == [], n


def test_small_chunks_really_split_the_segment(tmp_path, monkeypatch):
    from kaudit.engine.local import decode_segments

    ld = logdir(tmp_path)
    _normal_run(ld, rounds=10)
    root = ld.write()
    with small_chunks(monkeypatch, 3):
        _, chunks = decode_segments([str(root)])
        sizes = [t.num_rows for kind, t in chunks if kind == "batch"]
    assert len(sizes) > 5 and max(sizes) == 3


def test_anomalies_mid_chunk_same_findings_at_every_chunk_size(tmp_path, monkeypatch):
    ld = logdir(tmp_path)
    marks = _anomalies(ld)
    root = ld.write()
    expected = _expected(marks)
    reference = audit(root)
    assert brief(reference) == expected
    fenced = [f for f in reference if f["rule"] == "fenced-epoch"][0]
    assert details(fenced)["current_epoch"] == details(fenced)["stale_epoch"] + 1
    assert "2 batches" in fenced["message"]
    for n in CHUNK_SIZES:
        with small_chunks(monkeypatch, n):
            got = audit(root)
        assert brief(got) == expected, n
        # the same findings, down to messages, details, evidence and timelines
        assert got == reference, n


@pytest.mark.parametrize("n", [4, 5])
def test_producer_state_across_chunk_boundaries(tmp_path, monkeypatch, n):
    """A producer whose previous batch was in an earlier chunk: its first batch of the chunk is
    checked against the carried state (gap and regression right after a boundary)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p, q = pb.producer(7, 0), pb.producer(8, 0)
    for i in range(8):
        p.send([b"p%d" % i])
        q.send([b"q%d" % i])
    p.sequences[("orders", 0)] += 5
    gap = p.send([b"gap"])            # row 16: starts a chunk of 4, the second row of one of 5
    q.sequences[("orders", 0)] -= 1
    reg = q.send([b"regression"])     # q's last sequence again
    for i in range(4):
        p.send([b"x%d" % i])
        q.send([b"y%d" % i])
    root = ld.write()
    with small_chunks(monkeypatch, n):
        fs = audit(root)
    assert brief(fs) == sorted([("duplicate-batch", "error", "orders-0", reg.base_offset, reg.last_offset),
                                ("out-of-order-sequence", "error", "orders-0", gap.base_offset, gap.last_offset),
                                ("out-of-order-sequence", "error", "orders-0", reg.base_offset, reg.last_offset)])
    assert fs == audit(root)


def _random_history(ld, rng):
    """Random interleaved producers: normal sends, gaps, re-used sequences, epoch bumps (from 0
    or not), zombie writes, transaction markers (same epoch, or a coordinator abort at epoch
    + 1), producer id -1 batches and their retries, offset jumps, CRC-damaged batches."""
    pb = ld.partition("mixed", 0)
    ps = [pb.producer(10 + k, 0, transactional=k == 0) for k in range(4)]
    anon = []
    for step in range(160):
        k = rng.randrange(len(ps))
        p = ps[k]
        key = ("mixed", 0)
        roll = rng.random()
        if roll < 0.04:
            p.sequences[key] = p.sequences.get(key, 0) + rng.randrange(1, 30)        # gap
        elif roll < 0.07 and p.sequences.get(key, 0) > 3:
            p.sequences[key] -= rng.randrange(1, 4)                                 # regression
        elif roll < 0.09:
            p.bump_epoch()
            if rng.random() < 0.3:
                p.sequences[key] = rng.randrange(1, 9)                              # not from 0
        elif roll < 0.11:
            z = pb.producer(p.producer_id, max(0, p.producer_epoch - 1))
            z.sequences[key] = rng.randrange(0, 50)
            z.send([b"zombie-%d" % step])
            continue
        elif roll < 0.14 and k == 0:
            if rng.random() < 0.5:
                pb.append_control(p.producer_id, p.producer_epoch, "COMMIT")
            else:
                pb.append_control(p.producer_id, p.producer_epoch + 1, "ABORT")     # coordinator
                p.bump_epoch(p.producer_epoch + 2)
            continue
        elif roll < 0.20:
            ts = 9_000 + step
            anon.append((ts, step))
            pb.append_batch(values=[b"anon-%d" % step], timestamp=ts)
            continue
        elif roll < 0.23 and anon:
            ts, s = rng.choice(anon)
            pb.append_batch(values=[b"anon-%d" % s], timestamp=ts)                 # a retry
            continue
        elif roll < 0.25:
            pb.next_offset += rng.randrange(1, 4)                                   # offset jump
        info = p.send([b"%d-%d-%d" % (k, step, j) for j in range(rng.randrange(1, 4))])
        if rng.random() < 0.02:
            pb.corrupt_batch(info)


@pytest.mark.parametrize("seed", range(6))
def test_random_histories_same_findings_at_every_chunk_size(tmp_path, monkeypatch, seed):
    import random

    ld = logdir(tmp_path)
    _random_history(ld, random.Random(seed))
    root = ld.write()
    reference = audit(root)
    assert reference  # the histories do hold anomalies
    for n in (1, 2, 5, 13):
        with small_chunks(monkeypatch, n):
            assert audit(root) == reference, (seed, n)
