"""The wire sequence fold's clean-producer pass (audit/producers/wire_clean.py) against the checked path
alone: the same findings (messages, details, evidence, timelines) and the same state afterwards,
on generated Produce streams - mostly clean producers with retries, refusals, unanswered and acks=0
requests, gaps, regressions, epoch bumps, stale epochs, sequence wrap, producer id -1 - cut into
chunks at random places."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.producers.wire_produce import COLUMNS, WirePartition
from kaudit.model import SCHEMAS
from tests.audit.chunks import fed

INT32_MAX = 2**31 - 1
SCHEMA = pa.schema([SCHEMAS["batch"].field(c) for c in COLUMNS])


class Checked(WirePartition):
    clean_pass = False


def stream(seed: int, n: int = 400, noise: float = 1.0) -> list[dict]:
    """Produce batch rows of one partition in request order: a few producers, each mostly clean
    (`noise` scales how often something goes wrong)."""
    rng = random.Random(seed)
    prods = {pid: {"epoch": 0, "seq": rng.choice([0, 0, 0, INT32_MAX - 5]), "sent": []} for pid in (7, 8, 9)}
    rows, off, ts = [], 0, 1_700_000_000.0
    for pos in range(n):
        ts += rng.choice([0.001, 0.01, 0.5, 0.0])
        pid = rng.choice([7, 8, 9, 7, 8, -1])
        count = rng.randint(1, 4)
        err, acks, answered = 0, -1, True
        if pid < 0:
            epoch, base = -1, -1
            anon = [r for r in rows[-50:] if r["producer_id"] == -1]
            if anon and rng.random() < 0.2 * noise:   # a non-idempotent retry: same bytes
                prev = rng.choice(anon)
                rows.append({**prev, "position": pos, "request_ts": ts, "correlation_id": pos,
                             "response_base_offset": off if rng.random() < 0.5 else prev["response_base_offset"]})
                off += count
                continue
        else:
            p = prods[pid]
            r = rng.random() / noise
            if r < 0.08 and p["sent"]:                      # a retry of an earlier batch
                epoch, base, count = rng.choice(p["sent"][-6:])
            elif r < 0.11:                                 # a gap
                epoch, base = p["epoch"], (p["seq"] + rng.randint(1, 5)) % (INT32_MAX + 1)
            elif r < 0.13:                                 # a regression
                epoch, base = p["epoch"], max(0, p["seq"] - rng.randint(1, 5))
            elif r < 0.15:                                 # an epoch bump
                p["epoch"] += 1
                p["seq"] = 0 if rng.random() < 0.8 else 3
                epoch, base = p["epoch"], p["seq"]
            elif r < 0.16 and p["epoch"] > 0:              # a zombie's stale epoch
                epoch, base = p["epoch"] - 1, p["seq"]
            else:
                epoch, base = p["epoch"], p["seq"]
            err = 0 if rng.random() > 0.15 * noise else rng.choice([6, 45, 46, 47, 90, 19, None, None])
            if rng.random() < 0.03 * noise:
                acks, err = 0, None
            if err in (0, None) and epoch == p["epoch"] and base >= p["seq"]:
                p["seq"] = (base + count) % (INT32_MAX + 1)
            p["sent"].append((epoch, base, count))
        last = -1 if base < 0 else (base + count - 1) % (INT32_MAX + 1)
        rows.append({
            "topic": "t", "partition": 0, "request_ts": ts, "source": "c.pcap", "position": pos,
            "connection": f"10.0.0.{abs(pid)}:4000->10.0.0.100:9092", "correlation_id": pos,
            "client_id": f"client-{pid}", "transactional_id": None, "acks": acks, "api_version": 9,
            "producer_id": pid, "producer_epoch": epoch, "base_sequence": base, "last_sequence": last,
            "record_count": count, "crc": rng.getrandbits(32), "batch_size": 61 + 10 * count,
            "base_timestamp_ms": 1, "max_timestamp_ms": 2, "is_control": False,
            "response_ts": None if err is None else ts + 0.001, "response_error": err,
            "response_base_offset": (off if err == 0 else -1) if err is not None else None, "topic_id": None})
        if err == 0:
            off += count
    return rows


def run(cls, rows: list[dict], cuts: list[int]) -> tuple[list, dict]:
    part = cls(("t", 0))
    out = fed(part, "batch", rows, SCHEMA, cuts)
    state = {q: (p.state and (p.state.epoch, p.state.last_seq, p.state.max_epoch,
                              {e: [(r.lo, r.hi, r.first_offset, r.last_offset) for r in runs]
                               for e, runs in p.state.intervals.items()}),
                 sorted(p.attempts.by_key), list(p.attempts.order), sorted(p.attempts.unsettled), p.refused,
                 [(r.position, r.request_ts) for r in p.recent])
             for q, p in part.pids.items()}
    return out, state


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.lists(st.integers(0, 400), max_size=6), st.sampled_from([0.02, 0.2, 1.0]))
def test_clean_pass_changes_nothing(seed, cuts, noise):
    rows = stream(seed, noise=noise)
    assert run(WirePartition, rows, cuts) == run(Checked, rows, cuts)


@pytest.mark.parametrize("seed", range(3))
def test_clean_streams_take_the_pass(seed, monkeypatch):
    """A clean stream gives no finding and leaves nothing to the checked path after each
    producer's first batch (the pass is not vacuous)."""
    rng = random.Random(seed)
    rows, off, seqs = [], 0, {7: 0, 8: 0}
    for pos in range(300):
        pid = rng.choice([7, 8])
        n = rng.randint(1, 5)
        rows.append({"topic": "t", "partition": 0, "request_ts": 1.0 + pos, "source": "c", "position": pos,
                     "connection": "a", "correlation_id": pos, "client_id": "c", "transactional_id": None,
                     "acks": -1, "api_version": 11, "producer_id": pid, "producer_epoch": 0,
                     "base_sequence": seqs[pid], "last_sequence": seqs[pid] + n - 1, "record_count": n,
                     "crc": 1, "batch_size": 70, "base_timestamp_ms": 1, "max_timestamp_ms": 1,
                     "is_control": False, "response_ts": 1.5 + pos, "response_error": 0,
                     "response_base_offset": off, "topic_id": None})
        seqs[pid] += n
        off += n
    checked = []
    real = WirePartition._idempotent
    monkeypatch.setattr(WirePartition, "_idempotent", lambda self, r: (checked.append(r.position), real(self, r)))
    out, _ = run(WirePartition, rows, [100, 200])
    assert out == [] and checked == []
    assert run(WirePartition, rows, [100, 200]) == run(Checked, rows, [100, 200])
