"""The log-dir walker: what it accepts, how it tags replicas, what it skips and why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target

DEMO = Path(__file__).resolve().parents[2] / "fixtures" / "logdirs" / "demo"


def _rows(paths, kind):
    out = []
    for t in plan([str(p) for p in paths]).targets:
        for k, table in decode_target(t, Options()):
            if k == kind:
                out.extend(table.to_pylist())
    return out


def test_demo_log_dir_skips_what_kafka_ignores():
    skipped = {Path(r["source"]).name: r["reason"] for r in _rows([DEMO], "skipped")}
    assert skipped["00000000000000000000.log.deleted"].startswith(".deleted")
    assert any(name.endswith("-delete") for name in skipped)
    assert all("checkpoint" not in name for name in skipped)  # offset checkpoints are decoded


def test_offset_checkpoints_are_rows():
    rows = _rows([DEMO], "checkpoint_entry")
    names = {r["checkpoint"] for r in rows}
    assert "recovery-point-offset-checkpoint" in names and "replication-offset-checkpoint" in names
    assert all(r["replica"] == "1" and r["topic"] and r["partition"] is not None for r in rows)


def test_folder_of_brokers_tags_each_replica(corpus):
    root = corpus / "real-kafka-3.0.2/logdirs-final"
    batches = _rows([root], "batch")
    replicas = Counter(r["replica"] for r in batches if r["topic"] == "j-fence")
    assert replicas == {"1": 7, "2": 7, "3": 7}  # three replicas, never merged


def test_partition_dir_and_single_file_inputs(corpus):
    pdir = corpus / "real-kafka-3.0.2/logdirs-final/node2/data/j-fence-0"
    by_dir = _rows([pdir], "batch")
    by_file = _rows([pdir / "00000000000000000000.log"], "batch")
    assert by_dir == by_file and len(by_dir) == 7
    assert {(r["replica"], r["topic"], r["partition"]) for r in by_dir} == {("2", "j-fence", 0)}


def test_high_watermarks_from_a_real_log_dir(corpus):
    rows = _rows([corpus / "real-kafka-3.0.2/logdirs-final/node1/data"], "checkpoint_entry")
    hw = {(r["topic"], r["partition"]): r["offset"] for r in rows if r["checkpoint"] == "replication-offset-checkpoint"}
    assert hw[("j-fence", 0)] == 7


def _two_copies(tmp_path, src: Path) -> list[Path]:
    """The same log dir (one node id) under two paths: two snapshots of one broker."""
    import shutil

    copies = [tmp_path / name / src.name for name in ("before", "after")]
    for c in copies:
        shutil.copytree(src, c)
    return copies


def test_one_node_in_two_log_dirs_is_two_replicas(tmp_path):
    copies = _two_copies(tmp_path, DEMO)
    rows = _rows(copies, "batch")
    # tagged by path (docs/architecture.md §2: a replica is (log dir, topic, partition), never merged)
    assert {r["replica"] for r in rows} == {str(c) for c in copies}
    one = _rows([DEMO], "batch")
    assert len(rows) == 2 * len(one)
    # checkpoints carry the same tag as their log dir's partitions, so they still meet them
    assert {r["replica"] for r in _rows(copies, "checkpoint_entry")} == {str(c) for c in copies}


def test_partitions_of_one_node_in_several_log_dirs_keep_the_node_id(tmp_path):
    """JBOD: one broker, two log dirs, each partition in one of them - no clash, node id kept."""
    import shutil

    for d, parts in (("d1", ["demo-plain-0"]), ("d2", ["demo-idem-0"])):
        (tmp_path / d).mkdir()
        shutil.copy(DEMO / "meta.properties", tmp_path / d / "meta.properties")
        for p in parts:
            shutil.copytree(DEMO / p, tmp_path / d / p)
    rows = _rows([tmp_path / "d1", tmp_path / "d2"], "batch")
    assert rows and {r["replica"] for r in rows} == {"1"}
