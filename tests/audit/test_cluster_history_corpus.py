"""The real 3.0.2 cluster's metadata logs (all three nodes) replayed: every topic id the brokers
created partitions for is named as they named it, every "Leader X starts at leader epoch E ...
ISR [...]" line of the brokers' state-change logs is a state of the replayed history (leader,
epoch and ISR), GROUND_TRUTH's leaders are the partitions' first leaders, and no election is
unclean (none was)."""

from __future__ import annotations

import gzip
import json
import re

from kaudit.protocol.metadata.history import COLUMNS, replay
from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target

LEADER = re.compile(r"\[Broker id=(\d+)\] Leader (\S+)-(\d+) starts at leader epoch (\d+) from offset \d+ "
                    r"with high watermark \d+ ISR \[([\d,]*)\]")
CREATE = re.compile(r"Creating new partition (\S+)-(\d+) with topic id (\S+)\.")


def _history(root):
    rows = []
    for t in plan([str(root / f"logdirs-final/node{n}/meta") for n in (1, 2, 3)]).targets:
        for kind, table in decode_target(t, Options()):
            if kind == "metadata_record":
                rows += table.select(list(COLUMNS)).to_pylist()
    return replay(rows)


def test_metadata_history_matches_brokers_and_ground_truth(corpus):
    root = corpus / "real-kafka-3.0.2"
    h = _history(root)
    assert h.issues == 0 and h.first_offset == 0
    names = h.names()
    assert len(names) == 33 and len(h.partitions) == 76
    by_name = {n: t for t, n in names.items()}
    leaders = created = 0
    for node in (1, 2, 3):
        for line in gzip.open(root / f"broker/node{node}-state-change.log.gz", "rt"):
            m = CREATE.search(line)
            if m:
                created += 1
                assert names[m[3]] == m[1] and (m[3], int(m[2])) in h.partitions, line
            m = LEADER.search(line)
            if m:
                leaders += 1
                broker, epoch = int(m[1]), int(m[4])
                isr = sorted(int(x) for x in m[5].split(",") if x)
                p = h.partitions[(by_name[m[2]], int(m[3]))]
                assert any((s[2], s[3], sorted(s[4])) == (broker, epoch, isr) for s in p.states), line
    assert created > 200 and leaders == 298
    truth = json.loads((root / "GROUND_TRUTH.json").read_text())["scenarios"]
    checked = 0
    for s in truth.values():
        if "leader_node" in s:
            assert h.partition(s["topic"], s["partition"]).states[0][2] == s["leader_node"]
            checked += 1
    assert checked == 4
    elections = [e for p in h.partitions.values() for e in p.elections]
    assert len(elections) == 123 and not any(e.unclean for e in elections)
    assert [b["next_producer_id"] for b in h.producer_id_blocks] == [1000, 2000, 3000, 4000]


def test_node_dir_without_partition_metadata_is_named_from_its_metadata_log(corpus, tmp_path):
    """`kaudit segments` on a node's whole directory (data and meta log dirs): with every
    partition.metadata gone, each partition dir gets its topic id from the metadata log - the
    one the file held."""
    import shutil

    from kaudit.sources.logdir import plan, read_topic_id

    node = corpus / "real-kafka-3.0.2/logdirs-final/node1"
    want = {p.name: read_topic_id(str(p)) for p in (node / "data").iterdir() if p.is_dir()}
    copy = tmp_path / "node1"
    shutil.copytree(node, copy)
    for f in (copy / "data").glob("*/partition.metadata"):
        f.unlink()
    got = {f"{t.topic}-{t.partition}": t.topic_id for t in plan([str(copy)]).targets
           if t.topic and t.topic != "__cluster_metadata" and "/data/" in t.path}
    assert got and all(got[k] == want[k] for k in got), {k: (got[k], want[k]) for k in got if got[k] != want[k]}
