"""The wire folds' fast paths - wire-produce's clean-producer pass (audit/producers/wire_clean.py),
wire-frames' runs of plain frames, wire-readers' pre-check before its join - against the row-by-row
paths on every capture of the corpus (3.0.2, 3.0.2-extra, 4.1.0, public, librdkafka-mock) and on
generated frame streams: the very same findings."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.wire import wire_readers
from kaudit.audit.wire.wire_frames import FRAME_COLUMNS, ConnectionGroup
from kaudit.audit.producers.wire_produce import WirePartition
from kaudit.engine.local import audit_pcaps
from kaudit.model import SCHEMAS
from kaudit.sources.pcap import PcapOptions
from tests.audit.chunks import fed
from tests.conftest import CORPUS

PORTS = frozenset({9092, 9093, 9094})
CAPTURES = sorted(p for p in CORPUS.rglob("*") if p.suffix in (".pcap", ".pcapng")) if CORPUS.is_dir() else []


def _slow(monkeypatch) -> None:
    monkeypatch.setattr(WirePartition, "clean_pass", False)
    monkeypatch.setattr(ConnectionGroup, "plain_runs", False)
    monkeypatch.setattr(wire_readers, "_may_pass_lso", lambda fetch, fetched: True)


@pytest.mark.skipif(not CAPTURES, reason=f"corpus not found at {CORPUS} (CI provides ../shared/corpus)")
def test_fast_paths_change_no_finding_on_the_corpus(monkeypatch):
    fast = {p: audit_pcaps([str(p)], PcapOptions(kafka_ports=PORTS)).findings for p in CAPTURES}
    _slow(monkeypatch)
    for p in CAPTURES:
        assert audit_pcaps([str(p)], PcapOptions(kafka_ports=PORTS)).findings == fast[p], p
    assert sum(map(len, fast.values())) > 50   # the corpus has findings of these folds to compare


SCHEMA = pa.schema([SCHEMAS["frame"].field(c) for c in FRAME_COLUMNS])


def frames(seed: int, n: int = 300) -> list[dict]:
    """Frames of one connection in request time order: mostly answered, some unanswered, error
    answers, fenced answers, undecodable bodies, pipelined requests sharing a time and frame."""
    rng = random.Random(seed)
    rows, ts, frame = [], 1_700_000_000.0, 1
    for corr in range(n):
        if rng.random() > 0.3:
            ts += rng.choice([0.0, 0.001, 5.0, 40.0])
            frame += rng.choice([0, 1, 3])
        r = rng.random()
        answered = r > 0.08
        api = rng.choice([0, 0, 1, 3, 22, 24, 26])
        err = "" if rng.random() > 0.1 else rng.choice(["6", "47", "90", "0,47", None])
        rows.append({
            "source": "c.pcap", "connection": "a:1 -> b:9092", "request_frame": frame,
            "response_frame": frame + 1 if answered else None, "request_ts": ts,
            "response_ts": ts + 0.002 if answered and rng.random() > 0.05 else None,
            "api_key": api, "api_name": f"api{api}", "api_version": 9, "correlation_id": corr if rng.random() > 0.02 else None,
            "client_id": "c", "error_codes": err, "error_names": err and "ERR", "transactional_id": None,
            "producer_id": 5, "producer_epoch": 0, "acks": -1, "timeout_ms": 30000, "partitions": None,
            "partition_errors": None, "committed": None, "complete": True,
            "decode_error": None if rng.random() > 0.03 else "bad body"})
    return rows


def _group(rows, cuts):
    g = ConnectionGroup(("c.pcap", "a:1 -> b:9092"), None)
    out = fed(g, "frame", rows, SCHEMA, cuts)
    return out, (g.last_activity, g.last_answered, [(p[0].correlation_id, p[1]) for p in g.pending])


@pytest.mark.parametrize("seed", range(40))
def test_plain_runs_change_nothing(seed, monkeypatch):
    rows = frames(seed)
    cuts = random.Random(seed).sample(range(len(rows)), 3)
    fast = _group(rows, cuts)
    monkeypatch.setattr(ConnectionGroup, "plain_runs", False)
    assert _group(rows, cuts) == fast


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.sampled_from([0.5, 1.0, 1.5, float("nan")])),
                          st.one_of(st.none(), st.integers(0, 3))), max_size=12), st.booleans())
def test_readers_by_time_equals_arrows_sort(rows, presorted):
    """wire_readers._by_time: the rows as Arrow's stable sort by (response_ts, position) gives them
    (kept as they are only where numpy shows them in that order already)."""
    from kaudit.audit.wire.wire_readers import _by_time
    t = pa.table({"response_ts": pa.array([r[0] for r in rows], pa.float64()),
                  "position": pa.array([r[1] for r in rows], pa.int64()), "i": pa.array(range(len(rows)), pa.int64())})
    if presorted:
        t = t.sort_by([("response_ts", "ascending"), ("position", "ascending")])
    want = t.sort_by([("response_ts", "ascending"), ("position", "ascending")])
    assert _by_time(t).column("i").to_pylist() == want.column("i").to_pylist()
