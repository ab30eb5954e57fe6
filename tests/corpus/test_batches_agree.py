"""Acceptance: every batch of every corpus log-dir tree agrees with Kafka's DumpLogSegments
(`batches.tsv`) on every column, and kaudit finds no batch the tool did not."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target
from tests.corpus.dumps import TRUTH_TREES, read_batches_tsv

# batches.tsv column -> kaudit batch row field (values compared as text, like the tool prints)
COLUMNS = {
    "base_offset": "base_offset",
    "last_offset": "last_offset",
    "count": "record_count",
    "base_sequence": "base_sequence",
    "last_sequence": "last_sequence",
    "producer_id": "producer_id",
    "producer_epoch": "producer_epoch",
    "partition_leader_epoch": "partition_leader_epoch",
    "is_transactional": "is_transactional",
    "is_control": "is_control",
    "position": "position",
    "create_time": "max_timestamp_ms",
    "size": "batch_size",
    "magic": "magic",
    "codec": "codec",
    "control_type": "control_type",
    "coordinator_epoch": "coordinator_epoch",
}


def _text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def decode_tree(root) -> dict:
    """{(relative segment path, position): batch row} for every batch kaudit finds under root."""
    rows = {}
    issues = []
    targets = [t for t in plan([str(root)]).targets if t.kind in ("log", "checkpoint")]
    for kind, table in (c for t in targets for c in decode_target(t, Options())):
        if kind == "batch":
            for r in table.to_pylist():
                rows[(os.path.relpath(r["source"], root), r["position"])] = r
        elif kind == "decode_issue":
            issues.extend(table.to_pylist())
    return rows, issues


@pytest.mark.parametrize("tree,truth", TRUTH_TREES, ids=[t[0].split("/")[-2] + "/" + t[0].split("/")[-1] for t in TRUTH_TREES])
def test_batches_agree_with_dumplogsegments(corpus, tree, truth):
    root = corpus / tree
    ours, issues = decode_tree(root)
    expected = read_batches_tsv(corpus / truth / "batches.tsv")
    covered = set()
    mismatches = []
    for t in expected:
        seg = os.path.join(t["partition"], t["segment"])
        covered.add(seg)
        r = ours.get((seg, int(t["position"])))
        if r is None:
            mismatches.append(f"{seg}@{t['position']}: missing in kaudit")
            continue
        for col, field in COLUMNS.items():
            got = _text(r[field])
            if col == "control_type" and t[col] == "" and got not in ("COMMIT", "ABORT"):
                got = ""  # the tool names only end-transaction markers; kaudit names KRaft ones too
            if got != t[col]:
                mismatches.append(f"{seg}@{t['position']} {col}: tool {t[col]!r} kaudit {got!r}")
        if not r["crc_ok"]:
            mismatches.append(f"{seg}@{t['position']}: crc_ok false, tool says valid")
    extra = [k for k in ours if k[0] in covered and not any(
        os.path.join(t["partition"], t["segment"]) == k[0] and int(t["position"]) == k[1] for t in expected)]
    assert not mismatches, f"{len(mismatches)} disagreements, first: {mismatches[:10]}"
    assert not extra, f"batches the tool did not list: {extra[:10]}"
    # The real trees hold no corruption; only cut tails of active segments would be legitimate.
    assert not [i for i in issues if i["issue"] not in ("truncated-tail", "zero-fill")], issues[:5]
    print(f"{tree}: {len(expected)} batches x {len(COLUMNS)} columns agree; "
          f"{len(ours)} batches decoded in total")
