"""The transactions fold's certification (kaudit/audit/txn/txn_clean.py) never hides a finding: on
random transactional log dirs (replicas, with or without the coordinator's records, KIP-890
epoch bumps, coordinator aborts, registered partitions without data) and on random mutations of
their rows (epochs, timestamps around every threshold, states, partition lists, replicas that
differ, dropped or duplicated rows), the findings with the certified producers left out equal
those of the exact path on every producer, whatever the chunking. The textbook shapes (the
benchmark's, clean corpus producers) are certified, or the fast path would be useless."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest
from diskcraft import logdir

from kaudit.audit.txn import transactions, txn_clean, txn_rows
from kaudit.audit.folds import Context
from kaudit.engine.local import decode_segments, sorted_stream

T0 = 1_700_000_000_000
PARTS = [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
SHIFTS = [-60_001, -2_001, -2_000, -101, -100, -1, 1, 100, 101, 2_000, 2_001, 60_000, 60_001]
STATES = ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
          "Dead", "PrepareEpochFence", None]


def _scenario(seed: int, tmp_path):
    """The same random producers written on 1-3 brokers (identical replicas)."""
    shape = random.Random(seed)
    brokers, producers = shape.choice([1, 1, 2, 3]), shape.randint(1, 4)
    coord = shape.choice(["all", "all", "first", "none"])         # the coordinator's records: where
    roots = []
    for node in range(1, brokers + 1):
        rng = random.Random(seed * 7919 + 1)
        ld = logdir(tmp_path / f"b{node}", node_id=node, start_time_ms=T0)
        ts = ld.partition("__transaction_state", 0) if coord == "all" or (coord == "first" and node == 1) else None
        ps = [ld.producer(100 + i, 0, transactional_id=f"tx{i}", txn_state=ts, timeout_ms=rng.choice([1_000, 60_000]))
              if ts is not None else ld.producer(100 + i, 0, transactional=True) for i in range(producers)]
        for step in range(rng.randint(1, 10)):
            p = rng.choice(ps)
            for _ in range(rng.randint(1, 3)):
                pb = ld.partition(*rng.choice(PARTS + [("__consumer_offsets", 0)]))
                if pb.topic == "__consumer_offsets":
                    p.send_offsets("g", {("in", 0): step}, partition=pb)
                elif rng.random() < 0.1:
                    p._register(pb)                                  # registered, never written
                else:
                    p.send([b"v%d" % step], partition=pb)
                if rng.random() < 0.3:
                    ld.tick(rng.choice([1, 99, 101, 1_999, 2_001, 61_000]))
            end = rng.choice(["commit", "commit", "abort", "tv2", "coordinator", "open"])
            if end == "open":
                continue
            e = p.producer_epoch
            if end == "commit":
                p.commit(coordinator_epoch=rng.choice([0, 0, 1]))
            elif end == "abort":
                p.abort()
            else:                                                    # the marker bumps the epoch
                if end == "coordinator":
                    p.producer_epoch = e + 1
                (p.commit if rng.random() < 0.5 and end == "tv2" else p.abort)(marker_epoch=e + 1)
                p.producer_epoch = e + 1
                p.sequences.clear()
        roots.append(ld.write())
    _, chunks = decode_segments([str(r) for r in roots])
    return [(k, t) for k, t in chunks if k in ("batch", "txn_log")]


def _mutate(chunks, rng: random.Random, n: int):
    rows = {"batch": [], "txn_log": []}
    schema = {}
    for k, t in chunks:
        rows[k].extend(t.to_pylist())
        schema[k] = t.schema
    b, log = rows["batch"], rows["txn_log"]
    pids = sorted({r["producer_id"] for r in b if (r["producer_id"] or -1) >= 0}) or [100]
    for _ in range(n):
        if log and rng.random() < 0.4:
            i = rng.randrange(len(log))
            r = log[i]
            m = rng.randrange(9)
            if m == 0:
                r["state"] = rng.choice(STATES)
            elif m == 1:
                r["timestamp_ms"] += rng.choice(SHIFTS)
            elif m == 2:
                del log[i]
            elif m == 3:
                log.insert(i, dict(r, replica=rng.choice(["1", "2", "7"])))
            elif m == 4:
                ps = [p for p in (r["partitions"] or "").split(",") if p]
                if ps and rng.random() < 0.5:
                    ps.pop(rng.randrange(len(ps)))
                else:
                    ps.append(rng.choice(["a-0", "a-1", "b-0", "zz-3"]))
                r["partitions"] = ",".join(ps)
            elif m == 5:
                r["start_ms"] = rng.choice([0, -1, None, T0 + rng.choice(SHIFTS)])
            elif m == 6:
                r["producer_epoch"] += rng.choice([-1, 1])
            elif m == 7:
                r["transactional_id"] = rng.choice(["tx0", "tx1", "txZ"])
            else:
                r["producer_id"] = rng.choice(pids)
        elif b:
            i = rng.randrange(len(b))
            r = b[i]
            m = rng.randrange(12)
            if m == 0:
                r["producer_epoch"] += rng.choice([-1, 1])
            elif m == 1:
                r["coordinator_epoch"] = rng.choice([None, 0, 1, 5])
            elif m == 2:
                r["control_type"] = rng.choice(["COMMIT", "ABORT", "LEADER_CHANGE"])
            elif m == 3:
                r["is_transactional"] = not r["is_transactional"]
            elif m == 4:
                r["is_control"] = not r["is_control"]
            elif m == 5:
                del b[i]
            elif m == 6:
                b.append(dict(r, replica=rng.choice(["1", "2", "9"])))
            elif m == 7:
                s = rng.choice(SHIFTS)
                r["base_timestamp_ms"] += s
                r["max_timestamp_ms"] += s
            elif m == 8:
                r["base_offset"] += rng.choice([-1, 1])
            elif m == 9:
                r["producer_id"] = rng.choice(pids)
            elif m == 10:
                r["topic"], r["partition"] = rng.choice(PARTS)
            else:
                j = rng.randrange(len(b))
                b[i], b[j] = b[j], b[i]
    return [(k, pa.Table.from_pylist(rs, schema=schema[k])) for k, rs in rows.items() if rs]


def _rechunk(chunks, rng: random.Random):
    out = []
    for k, t in chunks:
        i = 0
        while i < t.num_rows:
            n = rng.choice([1, 2, 5, 1_000])
            out.append((k, t.slice(i, n)))
            i += n
    return out


def _findings(chunks, now, certify=True):
    fold = transactions.FOLD
    items = [(k, s) for k, t in chunks if (s := fold.select(k, t)) is not None]
    ctx = Context(reference_time_ms=now)
    prepared = txn_rows.prepare(items, ctx, fold.key + fold.order, certify=certify)
    return sorted(json.dumps(f, sort_keys=True) for f in fold.run(sorted_stream(fold, prepared), ctx))


@pytest.mark.parametrize("seed", range(24))
def test_certified_producers_have_no_finding(seed, tmp_path, monkeypatch):
    base = _scenario(seed, tmp_path)
    rng = random.Random(seed)
    for _ in range(5):
        chunks = _mutate(base, rng, rng.choice([0, 1, 2, 3]))
        now = T0 + rng.choice([10, 120_000, 10**7])
        exact = _findings(chunks, now, certify=False)
        monkeypatch.setattr(txn_clean, "BUCKET_ROWS", rng.choice([4, 1 << 16]))   # by pid buckets too
        assert _findings(_rechunk(chunks, rng), now) == exact


def _clean_of(chunks) -> list[int]:
    fold = transactions.FOLD
    by: dict[str, list] = {}
    for k, t in chunks:
        s = fold.select(k, t)
        if s is not None:
            by.setdefault(k, []).append(s)
    tables = {k: pa.concat_tables(ts) for k, ts in by.items()}
    return txn_clean.clean_producers(tables.get("batch"), tables.get("txn_log")).tolist()


def test_textbook_shapes_are_certified(tmp_path):
    """The benchmark's shape and clean producers with replicas, offsets and empty parts."""
    from fixtures.builder.txn_bench import write_txn_bench_logdir

    write_txn_bench_logdir(tmp_path / "bench", transactions=300, producers=20, partitions=6)
    _, chunks = decode_segments([str(tmp_path / "bench")])
    assert _clean_of(chunks) == list(range(100_000, 100_020))
    roots = []
    for node in (1, 2, 3):
        ld = logdir(tmp_path / f"r{node}", node_id=node, start_time_ms=T0)
        p = ld.producer(7, 0, transactional_id="tx", txn_state=ld.partition("__transaction_state", 0))
        a, b, co = ld.partition("a", 0), ld.partition("b", 0), ld.partition("__consumer_offsets", 0)
        p.send([b"1"], partition=a); p._register(b); p.send_offsets("g", {("in", 0): 1}, partition=co)
        p.commit()
        ld.tick(5_000)
        p.send([b"2"], partition=b); p.abort()
        roots.append(ld.write())
    _, chunks = decode_segments([str(r) for r in roots])
    assert _clean_of(chunks) == [7]


def test_skewed_markers_and_kip890_commits_are_certified(tmp_path):
    """A partition leader's clock a little off the coordinator's puts markers just outside
    their transaction's [Prepare, Complete] window: still its nearest, still certified. KIP-890
    producers (every marker bumps the epoch) that only commit are clean too."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p = ld.producer(7, 0, transactional_id="skew", txn_state=ts)
    for i, skew in enumerate((40, -30, 900)):
        p.send([b"%d" % i], partition=a); p.send([b"%d" % i], partition=b)
        p._state("PrepareCommit", p.txn_partitions)
        for pb in (a, b):
            pb.append_control(7, 0, "COMMIT", 0, timestamp=ld.clock + skew)
        p._state("CompleteCommit", {})
        p.txn_members, p.txn_partitions = [], {}
        ld.tick(10_000)
    # (the coordinator's PrepareCommit carries the bumped epoch its markers carry, as Kafka 4.x writes it)
    tv2 = ld.producer(8, 0, transactional_id="tv2", txn_state=ts, transaction_version=2)
    for e in range(3):
        tv2.send([b"x"], partition=a); tv2.commit()
        assert tv2.producer_epoch == e + 1
        ld.tick(5_000)
    ld.write()
    _, chunks = decode_segments([str(ld.root)])
    chunks = [(k, t) for k, t in chunks if k in ("batch", "txn_log")]
    assert _clean_of(chunks) == [7, 8]
    assert _findings(chunks, T0 + 100_000, certify=False) == []


def test_the_fast_path_certifies_through_the_rules_own_predicates(tmp_path, monkeypatch):
    """Every rule the transactions fold runs declares its predicate beside it; a rule without one
    turns the fast path off (nobody certified), and a predicate that names a producer keeps it on
    the exact path."""
    import dataclasses

    from fixtures.builder.txn_bench import write_txn_bench_logdir
    from kaudit.audit.registry import RULES

    assert all(RULES[r].clean is not None for r in transactions.RULE_IDS)
    write_txn_bench_logdir(tmp_path / "bench", transactions=300, producers=20, partitions=6)
    _, chunks = decode_segments([str(tmp_path / "bench")])
    tables = {}
    for k, t in chunks:
        sel = transactions.FOLD.select(k, t)
        if sel is not None:
            tables.setdefault(k, []).append(sel)
    b, log = (pa.concat_tables(tables[k]) for k in ("batch", "txn_log"))
    rules = [RULES[r] for r in transactions.RULE_IDS]
    assert txn_clean.clean_producers(b, log, rules).tolist() == list(range(100_000, 100_020))
    no_pred = [dataclasses.replace(r, clean=None) if r.id == "stray-marker" else r for r in rules]
    assert txn_clean.clean_producers(b, log, no_pred).tolist() == []
    picky = [dataclasses.replace(r, clean=lambda facts: np.array([100_002])) if r.id == "torn-transaction" else r
             for r in rules]
    assert txn_clean.clean_producers(b, log, picky).tolist() == [p for p in range(100_000, 100_020) if p != 100_002]
