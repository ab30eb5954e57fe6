"""Incident ids carry the cluster's identity (issue 27): two log dirs identical but for the
cluster id in meta.properties never share an incident id, alone or audited together; the same
input keeps its ids wherever it lies (engine parity: tests/engine/test_spark_cluster_ids.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "disk"))

from diskcraft import audit, logdir  # noqa: E402

from kaudit.audit.stories.clusters import ClusterMap  # noqa: E402


def build(root: Path, cluster_id: str, node_id: int = 1) -> Path:
    """An idempotent producer's duplicate and an old client's retry: a few incidents."""
    ld = logdir(root, f"node{node_id}", node_id=node_id, cluster_id=cluster_id)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b"], timestamp=1_000)
    p.send([b"a", b"b"], base_sequence=0, timestamp=1_000)
    ev = ld.partition("events", 0)
    ev.append_batch(values=[b"x"], timestamp=2_000)
    ev.append_batch(values=[b"x"], timestamp=2_000)
    old = ld.partition("legacy", 0)          # repeated-records: no timestamps
    for i in range(9):
        old.append_batch(values=[b"v%d" % (i % 3)], timestamp=-1)
    rs = ld.partition("resent", 0)           # duplicate-records across producer sessions
    rs.producer(20, 0).send([b"r1", b"r2"], timestamp=3_000)
    rs.producer(21, 0).send([b"r1", b"r2"], timestamp=3_500)
    return ld.write()


def _incidents(fs) -> dict:
    return {f["id"]: f["incident"] for f in fs}


def test_two_clusters_never_share_an_incident_id(tmp_path):
    a = audit(build(tmp_path / "a", "Q2x1c3Rlci1BLUFBQUFBQQ"), rules=())
    b = audit(build(tmp_path / "b", "Q2x1c3Rlci1CLUJCQkJCQg"), rules=())
    assert sorted(_incidents(a)) == sorted(_incidents(b))          # the same findings ...
    assert len(set(_incidents(a).values())) >= 2
    assert not set(_incidents(a).values()) & set(_incidents(b).values())   # ... other incidents


def test_both_clusters_in_one_run_are_not_linked(tmp_path):
    a = build(tmp_path / "a", "Q2x1c3Rlci1BLUFBQUFBQQ")
    b = build(tmp_path / "b", "Q2x1c3Rlci1CLUJCQkJCQg")
    fs = audit([a, b], rules=())
    alone = len(set(_incidents(audit(a, rules=())).values())) + len(set(_incidents(audit(b, rules=())).values()))
    assert len({f["incident"] for f in fs}) == alone
    for f in fs:   # each incident's findings come from one cluster's files
        dirs = {str(a) in e["source"] for g in fs if g["incident"] == f["incident"] for e in g["evidence"]}
        assert len(dirs) == 1


def test_the_same_input_keeps_its_ids_wherever_it_lies(tmp_path):
    a = build(tmp_path / "a", "Q2x1c3Rlci1BLUFBQUFBQQ")
    copy = tmp_path / "elsewhere" / "node1"
    shutil.copytree(a, copy)
    assert _incidents(audit(a, rules=())) == _incidents(audit(copy, rules=()))


def test_without_a_cluster_id_the_ids_are_as_before(tmp_path):
    from kaudit.audit.stories import incidents

    fs = audit(build(tmp_path / "a", "Q2x1c3Rlci1BLUFBQUFBQQ"), rules=())
    before = [dict(f, incident=None) for f in fs]
    after = [dict(f, incident=None) for f in fs]
    incidents.assign(before)
    incidents.assign(after, ClusterMap().of)
    assert [f["incident"] for f in before] == [f["incident"] for f in after]


def test_cluster_map_places_findings():
    m = ClusterMap({"/d/node1": "A", "/e/node1": "B"}, {"/c/x.pcap": {"C"}}, {"1": {"A", "B"}})
    assert m.of({"evidence": [{"source": "/d/node1/t-0/00.log"}]}) == "A"
    assert m.of({"evidence": [{"source": "/e/node1/t-0/00.log"}]}) == "B"
    assert m.of({"evidence": [{"source": "/c/x.pcap"}]}) == "C"
    assert m.of({"evidence": [], "replica": "1"}) == "A,B"
    assert ClusterMap({"/d": "A"}).of({"evidence": []}) == "A"   # the only cluster
    assert ClusterMap().of({"evidence": []}) is None
