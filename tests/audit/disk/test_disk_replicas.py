"""Replicas are never merged (docs/architecture.md §2: a replica is (log dir, topic, partition)): log dirs that
share a node id and a partition are audited apart."""

from __future__ import annotations

from pathlib import Path


def test_two_snapshots_of_one_broker_are_audited_apart(tmp_path):
    """The same node's log dir under two paths: each copy's findings, nothing merged (one node id
    as the fold key had made the two copies' coordinator records one illegal state machine)."""
    import shutil
    from collections import Counter

    from kaudit.engine.local import audit_segments

    demo = Path(__file__).resolve().parents[3] / "fixtures" / "logdirs" / "demo"
    copies = [tmp_path / n / "demo" for n in ("before", "after")]
    for c in copies:
        shutil.copytree(demo, c)
    one = Counter(f["rule"] for f in audit_segments([str(demo)]).findings)
    both = audit_segments([str(c) for c in copies]).findings
    assert Counter(f["rule"] for f in both) == Counter({k: 2 * v for k, v in one.items()})
    assert {f["replica"] for f in both if f.get("replica")} == {str(c) for c in copies}
