"""Incident ids with the cluster's identity are the same on the Spark engine (master local[2])
as on the local engine, and differ between two clusters on both (issue 27)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit" / "disk"))

from test_cluster_ids import build  # noqa: E402

from kaudit.engine import local as L  # noqa: E402
from kaudit.engine import spark as S  # noqa: E402

SPARK = S.SparkOptions(master="local[2]")


@pytest.fixture(scope="module")
def spark():
    return S.session(SPARK)


def test_same_ids_on_both_engines_and_other_ids_per_cluster(spark, tmp_path):
    runs = {}
    for name, cid in (("a", "Q2x1c3Rlci1BLUFBQUFBQQ"), ("b", "Q2x1c3Rlci1CLUJCQkJCQg")):
        root = [str(build(tmp_path / name, cid))]
        here, there = L.audit_segments(root), S.audit_segments(root, spark_options=SPARK)
        assert [(f["id"], f["incident"]) for f in there.findings] == [(f["id"], f["incident"]) for f in here.findings]
        runs[name] = {f["incident"] for f in here.findings}
    assert runs["a"] and not runs["a"] & runs["b"]
