"""Acceptance: with --deep, every record of every corpus segment agrees with DumpLogSegments'
`--deep-iteration --print-data-log` lines (offset, timestamp, sizes, sequence, header keys, key
and payload text, end-transaction markers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target
from tests.corpus.dumps import TRUTH_TREES, parse_log_section, read_dump

# Payloads the tool prints through its own decoders (compared in the coordinator tests).
FORMATTED_TOPICS = ("__transaction_state", "__consumer_offsets", "__cluster_metadata")


def _dump_files(truth_root):
    for dirpath, _, files in os.walk(truth_root):
        for f in files:
            if f.endswith(".dump.txt"):
                yield os.path.join(dirpath, f)


def _text(b: bytes | None) -> str:
    return b.decode("utf-8", "replace")


@pytest.mark.parametrize("tree,truth", TRUTH_TREES, ids=[t[0].split("/")[-2] + "/" + t[0].split("/")[-1] for t in TRUTH_TREES])
def test_records_agree_with_dumplogsegments(corpus, tree, truth):
    root, truth_root = corpus / tree, corpus / truth
    compared = fields = 0
    mismatches = []
    for dump in _dump_files(truth_root):
        rel_dir = os.path.relpath(dump, truth_root)[: -len(".dump.txt")]
        if rel_dir.endswith(".log"):   # one dump per file (4.1.0): <node>/<partition>/<segment>.log
            node, part = os.path.dirname(os.path.dirname(rel_dir)), os.path.basename(os.path.dirname(rel_dir))
            rel_dir = os.path.join(node, "data", part)
        elif os.path.basename(rel_dir)[:20].isdigit():
            continue                   # an index, snapshot or txnindex dump (their own tests)
        pdir = root / rel_dir
        topic = os.path.basename(rel_dir).rsplit("-", 1)[0]
        sections = read_dump(Path(dump))
        for t in plan([str(pdir)]).targets:
            if t.kind != "log" or os.path.basename(t.path) not in sections:
                continue
            _, expected = parse_log_section(sections[os.path.basename(t.path)])
            ours = []
            for kind, table in decode_target(t, Options(deep=True)):
                if kind == "record":
                    ours.extend(table.to_pylist())
            assert len(ours) == len(expected), f"{t.path}: {len(ours)} records vs tool {len(expected)}"
            for r, e in zip(ours, expected):
                got = {
                    "offset": str(r["offset"]),
                    "CreateTime": str(r["timestamp_ms"]),
                    "keySize": str(r["key_size"]),
                    "valueSize": str(r["value_size"]),
                    "sequence": str(r["sequence"]),
                    "headerKeys": "[" + r["header_keys"] + "]",
                }
                if r["control_type"] in ("COMMIT", "ABORT"):
                    got["endTxnMarker"] = r["control_type"]
                    got["coordinatorEpoch"] = str(r["coordinator_epoch"])
                elif topic not in FORMATTED_TOPICS:
                    if r["key"] is not None:
                        got["key"] = _text(r["key"])
                    if r["value"] is not None:
                        got["payload"] = _text(r["value"])
                for k, v in got.items():
                    fields += 1
                    if e.get(k) != v:
                        mismatches.append(f"{t.path}@{r['offset']} {k}: tool {e.get(k)!r} kaudit {v!r}")
                compared += 1
    assert compared, "no records compared"
    assert not mismatches, f"{len(mismatches)} disagreements, first: {mismatches[:5]}"
    print(f"{tree}: {compared} records, {fields} fields agree")
