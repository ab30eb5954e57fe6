"""The transactions fold keeps a producer's consecutive non-transactional batches as one row
(txn_rows.runs): the findings are exactly those of one row per batch, whatever the chunking
(`details.offsets` names each stretch of plain writes inside a transaction once). Random log
dirs mix transactional producers that also write plainly (the anomaly), idempotent producers,
non-idempotent writes and markers, decoded in small and large chunks."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from diskcraft import logdir, small_chunks

from kaudit.audit.txn import txn_rows
from kaudit.engine.local import audit_segments

T0 = 1_700_000_000_000
TXN_RULES = ("dangling-transaction", "hanging-transaction", "torn-transaction", "coordinator-abort",
             "stray-marker", "non-transactional-write-in-transaction", "late-transactional-write",
             "unregistered-partition")
PARTS = [("a", 0), ("a", 1), ("b", 0)]


def _rows(**cols) -> pa.Table:
    n = len(next(iter(cols.values())))
    base = {"replica": ["1"] * n, "topic": ["a"] * n, "partition": [0] * n, "source": ["a-0/0.log"] * n,
            "position": list(range(0, 100 * n, 100)), "is_control": [False] * n,
            "producer_epoch": [0] * n, "base_timestamp_ms": [T0] * n, "max_timestamp_ms": [T0] * n}
    base.update(cols)
    return pa.table(base)


def test_runs_fold_consecutive_plain_batches_of_each_producer():
    t = _rows(producer_id=[1, 1, 1, 1, 1, 1, 2, 1, 1],
              is_transactional=[False, False, False, True, False, False, False, False, False],
              base_offset=[0, 1, 3, 5, 6, 8, 9, 10, 12], last_offset=[0, 2, 4, 5, 7, 8, 9, 11, 12],
              max_timestamp_ms=[T0, T0 + 5, None, T0, None, None, T0, T0 + 1, T0 + 9])
    r = txn_rows.runs(t)   # producer 2's batch does not cut producer 1's run
    assert r.column("producer_id").to_pylist() == [1, 1, 1, 2]
    assert r.column("base_offset").to_pylist() == [0, 5, 6, 9]
    assert r.column("last_offset").to_pylist() == [4, 5, 12, 9]
    assert r.column(txn_rows.BATCHES).to_pylist() == [3, 1, 4, 1]
    assert r.column("position").to_pylist() == [0, 300, 400, 600]
    assert r.column("max_timestamp_ms").to_pylist() == [T0 + 5, T0, T0 + 9, T0]


@pytest.mark.parametrize("change", [
    {"producer_epoch": [0, 1]},                        # an epoch bump
    {"base_offset": [5, 3], "last_offset": [5, 3]},    # offsets going back
    {"source": ["a-0/0.log", "a-0/9.log"]},             # another file
    {"is_control": [False, True]},                      # a marker
])
def test_runs_break(change):
    cols = {"producer_id": [1, 1], "is_transactional": [False, False], "base_offset": [0, 1],
            "last_offset": [0, 1]}
    cols.update(change)
    r = txn_rows.runs(_rows(**cols))
    assert r.num_rows == 2 and r.column(txn_rows.BATCHES).to_pylist() == [1, 1]


def _scenario(seed: int, tmp_path):
    rng = random.Random(seed)
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0) if rng.random() < 0.7 else None
    txn = [ld.producer(100 + i, 0, transactional_id=f"tx{i}", txn_state=ts, timeout_ms=60_000)
           if ts is not None else ld.producer(100 + i, 0, transactional=True) for i in range(rng.randint(1, 3))]
    seq: dict = {}
    for _ in range(rng.randint(5, 40)):
        pb = ld.partition(*rng.choice(PARTS))
        roll = rng.random()
        if roll < 0.35:
            rng.choice(txn).send([b"t"], partition=pb)
        elif roll < 0.55:                                  # a plain write by a transactional producer
            p = rng.choice(txn)
            for _ in range(rng.randint(1, 4)):
                pb.append_batch(values=[b"p"], producer_id=p.producer_id, producer_epoch=p.producer_epoch,
                                base_sequence=0, is_transactional=False)
        elif roll < 0.8:                                   # idempotent producers
            pid = rng.choice([200, 201])
            for _ in range(rng.randint(1, 5)):
                s = seq.get((pid, pb.topic, pb.partition), 0)
                pb.append_batch(values=[b"i"], producer_id=pid, producer_epoch=0, base_sequence=s)
                seq[(pid, pb.topic, pb.partition)] = s + 1
        elif roll < 0.87:
            pb.append_batch(values=[b"n"])                 # no producer id
        else:
            p = rng.choice(txn)
            (p.commit if rng.random() < 0.6 else p.abort)()
        if rng.random() < 0.2:
            ld.tick(rng.choice([1, 1_000, 61_000]))
    return ld.write()


def _without_runs(table: pa.Table) -> pa.Table:
    return table.append_column(txn_rows.BATCHES, pa.array(np.ones(table.num_rows, np.int32)))


@pytest.fixture(scope="module")
def one_row_per_batch(tmp_path_factory):
    """seed -> (log dir, its findings with one row per batch at the default chunking): each
    scenario written and judged the reference way once, for every chunk size below."""
    cache: dict = {}

    def get(seed: int):
        if seed not in cache:
            root = _scenario(seed, tmp_path_factory.mktemp(f"seed{seed}"))
            with pytest.MonkeyPatch.context() as m:
                m.setattr(txn_rows, "runs", _without_runs)
                cache[seed] = root, audit_segments([str(root)], select=TXN_RULES, now_ms=T0 + 10**6).findings
        return cache[seed]

    return get


@pytest.mark.parametrize("chunk", [1, 3, 16384])
def test_findings_equal_one_row_per_batch(one_row_per_batch, monkeypatch, chunk):
    # one batch per chunk is the slowest path of all (~1 s a seed): fewer seeds there, the same
    # scenarios as the first seeds of the others (the suite's time budget). The reference - one
    # row per batch - is judged once per scenario at the default chunking: the runs' findings at
    # any chunk size must be those (the fold's findings do not depend on the chunking either).
    seeds = 24 if chunk == 1 else 60
    plain_inside = 0
    for seed in range(seeds):
        root, want = one_row_per_batch(seed)
        with small_chunks(monkeypatch, chunk):
            got = audit_segments([str(root)], select=TXN_RULES, now_ms=T0 + 10**6).findings
        assert got == want, seed
        plain_inside += sum(f["rule"] == "non-transactional-write-in-transaction" for f in got)
    assert plain_inside >= seeds // 6   # the scenarios do reach the rule
