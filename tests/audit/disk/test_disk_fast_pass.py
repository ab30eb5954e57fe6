"""disk-sequences' vectorised pass against the checked path alone, on generated logs of one
partition: idempotent and transactional producers (TV1 markers at the same epoch, TV2 and
coordinator markers that bump it, KIP-360 bumps), zombies' data and markers, gaps, regressions,
batches stored twice, offset gaps (compaction), CRC failures, producer id -1 and old magic, cut
into chunks at random places: the same findings and the same producer state afterwards."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.producers.disk_sequences import COLUMNS, PartitionTimeline
from kaudit.model import SCHEMAS
from tests.audit.chunks import fed

SCHEMA = pa.schema([SCHEMAS["batch"].field(c) for c in COLUMNS])


class Checked(PartitionTimeline):
    fast_pass = False


def log(seed: int, n: int = 400, noise: float = 1.0) -> list[dict]:
    rng = random.Random(seed)
    prods = {q: {"epoch": rng.randint(0, 3), "seq": 0, "tv2": q % 2 == 0, "stored": []} for q in (11, 12, 13, 14)}
    rows, off = [], 0

    def add(pid, epoch, bseq, count, control=None, crc_ok=True, magic=2):
        nonlocal off
        if rng.random() < 0.03 * noise:
            off += rng.randint(1, 4)          # compaction removed batches here
        last = -1 if bseq < 0 else (bseq + count - 1) % 2**31
        rows.append({"replica": "1", "topic": "t", "partition": 0, "source": "00.log", "position": len(rows) * 100,
                     "base_offset": off, "last_offset": off + count - 1, "magic": magic, "crc": rng.getrandbits(32),
                     "crc_ok": crc_ok, "is_control": control is not None, "control_type": control,
                     "producer_id": pid, "producer_epoch": epoch, "base_sequence": -1 if control else bseq,
                     "last_sequence": -1 if control else last, "record_count": count, "batch_size": 70 + count,
                     "base_timestamp_ms": 1, "max_timestamp_ms": 2})
        off += count

    for _ in range(n):
        r = rng.random()
        if r < 0.1:
            add(-1, -1, -1, rng.randint(1, 3), magic=rng.choice([2, 2, 1]))
            continue
        q = rng.choice(list(prods))
        p = prods[q]
        a = 1.0 if rng.random() < 0.15 else 0.05 + rng.random() / noise   # 0 .. 0.05: a marker
        count = rng.randint(1, 4)
        if a < 0.05 or a == 1.0 and rng.random() < 0.5:   # a marker ends a transaction
            kind = rng.choice(["COMMIT", "COMMIT", "ABORT"])
            if p["tv2"] or kind == "ABORT" and rng.random() < 0.5 * noise:
                p["epoch"] += 1                          # TV2 / coordinator abort: a bumped epoch
                p["seq"] = 0
            add(q, p["epoch"], -1, 1, control=kind)
        elif a < 0.07:                                   # KIP-360: a new epoch at 0 (or not)
            p["epoch"] += 1
            p["seq"] = 0 if rng.random() < 0.8 else 2
            add(q, p["epoch"], p["seq"], count)
            p["seq"] += count
        elif a < 0.08 and p["epoch"] > 0:                # a zombie: data or a marker of an old epoch
            if rng.random() < 0.5:
                add(q, p["epoch"] - 1, p["seq"], count)
            else:
                add(q, p["epoch"] - 1, -1, 1, control="ABORT")
        elif a < 0.09:                                   # a gap
            p["seq"] += rng.randint(1, 5)
            add(q, p["epoch"], p["seq"], count)
            p["seq"] += count
        elif a < 0.10 and p["stored"]:                   # stored again (same or other payload)
            e, b, c = rng.choice(p["stored"][-5:])
            add(q, e, b, c)
        elif a < 0.11:                                   # a regression
            b = max(0, p["seq"] - rng.randint(1, 5))
            add(q, p["epoch"], b, count)
            p["seq"] = b + count
        elif a < 0.115:                                  # a batch failing its CRC
            add(q, p["epoch"], p["seq"], count, crc_ok=False)
            p["seq"] += count
        else:
            add(q, p["epoch"], p["seq"], count)
            p["stored"].append((p["epoch"], p["seq"], count))
            p["seq"] += count
    return rows


def run(cls, rows: list[dict], cuts: list[int]) -> tuple:
    part = cls(("1", "t", 0))
    out = fed(part, "batch", rows, SCHEMA, cuts)
    state = {q: (s.epoch, s.last_seq, s.max_epoch, s.last_offset, s.offset_gaps, s.seq_offset_gaps,
                 {e: [(r.lo, r.hi, r.first_offset, r.last_offset, r.first and r.first.base_offset) for r in runs]
                  for e, runs in s.intervals.items()}, [v.base_offset for v in s.noted()])
             for q, s in part.producers.items()}
    return out, state


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.lists(st.integers(0, 400), max_size=6), st.sampled_from([0.05, 0.3, 1.0]))
def test_fast_pass_changes_nothing(seed, cuts, noise):
    rows = log(seed, noise=noise)
    assert run(PartitionTimeline, rows, cuts) == run(Checked, rows, cuts)


@pytest.mark.parametrize("seed", range(3))
def test_transactional_logs_take_the_fast_pass(seed, monkeypatch):
    """TV1 and TV2 transactional producers without anomalies: no finding, and nothing is left
    to the checked path (the pass is not vacuous)."""
    rows = [r for r in log(seed, n=600, noise=1e-9)]
    checked = []
    real = PartitionTimeline._checked
    monkeypatch.setattr(PartitionTimeline, "_checked", lambda self, i, b, *a: (checked.append(b.base_offset), real(self, i, b, *a)))
    out, _ = run(PartitionTimeline, rows, [150, 300, 450])
    assert out == [] and checked == []
