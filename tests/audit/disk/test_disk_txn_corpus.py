"""Transactions on the real corpus (../shared/corpus; skipped when absent): the transactions of
logdirs-final are assembled with the partitions and outcomes of GROUND_TRUTH.json, and the
hanging, unregistered and late writes of the extra scenario 02 are reported as Kafka's own
find-hanging saw them; nothing else at warning or above."""

from __future__ import annotations

import pytest

import csv
import json
import re

from diskcraft import details

from kaudit.audit import at_or_above
from kaudit.audit.txn import transactions
from kaudit.engine.local import audit_segments, decode_segments

# every test on the fast path and on the reference path (tests/conftest.py: txn_path)
pytestmark = pytest.mark.usefixtures("txn_path")

TXN_RULES = ("dangling-transaction", "hanging-transaction", "torn-transaction", "coordinator-abort",
             "stray-marker", "coordinator-epoch-regression", "non-transactional-write-in-transaction",
             "late-transactional-write", "unregistered-partition", "illegal-state-transition")
EXTRA = "real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes"


def assembled(path) -> dict[int, transactions.ProducerTxns]:
    """Every producer's transactions in a log dir (the fold's own selection, grouped by pid)."""
    _, chunks = decode_segments([str(path)])
    rows: dict[str, list[dict]] = {"batch": [], "txn_log": []}
    for kind, table in chunks:
        sel = transactions.FOLD.select(kind, table)
        if sel is not None:
            rows[kind].extend(sel.to_pylist())
    pids = {b["producer_id"] for b in rows["batch"] if b["is_transactional"]}
    return {pid: transactions.assemble(pid, [b for b in rows["batch"] if b["producer_id"] == pid],
                                       [r for r in rows["txn_log"] if r["producer_id"] == pid],
                                       coordinator_known=True)
            for pid in pids}


def outcomes(pt: transactions.ProducerTxns) -> list[tuple[str, list[str]]]:
    """(result, partitions with its marker) per coordinator transaction, in order."""
    out = []
    for t in pt.view.txns:
        tps = sorted(p.tp for p in pt.all_parts() if p.coord is t)
        out.append((t.result, tps))
    return out


def txn_findings(path):
    run = audit_segments([str(path)], select=TXN_RULES)
    assert run.errors == []
    return run.findings


def test_logdirs_final_transactions(corpus):
    base = corpus / "real-kafka-3.0.2"
    truth = json.loads((base / "GROUND_TRUTH.json").read_text())["scenarios"]
    txns = assembled(base / "logdirs-final")
    for name in ("03-txn-java", "03-txn-confluent", "03-txn-kafkapython", "03-txn-aiokafka"):
        sc = truth[name]
        pt = txns[sc["producer_id"]]
        assert pt.view.transactional_ids == {sc["transactional_id"]}
        assert outcomes(pt) == [(t["outcome"], sorted(t["partitions"])) for t in sc["transactions"]], name
        for p in pt.all_parts():
            assert p.marker is not None and p.data and sorted(p.replicas) == ["1", "2", "3"]

    ctp = txns[truth["04-ctp-java"]["producer_id"]]
    assert outcomes(ctp) == [("COMMIT", ["__consumer_offsets-4", "j-ctp-out-1"]),
                             ("ABORT", ["__consumer_offsets-4", "j-ctp-out-0"]),
                             ("COMMIT", ["__consumer_offsets-4", "j-ctp-out-0"])]
    [empty] = [p for p in ctp.partitions["j-ctp-out-0"] if not p.data]
    assert (empty.marker.offset, empty.marker.result, empty.coord.result) == (0, "ABORT", "ABORT")
    # the consume-transform-produce offsets: TxnOffsetCommit batches resolved by markers
    offs = ctp.partitions["__consumer_offsets-4"]
    assert [(p.start_offset, p.marker.offset, p.marker.result) for p in offs] == [
        (1, 2, "COMMIT"), (3, 4, "ABORT"), (5, 7, "COMMIT")]
    ck = txns[truth["04-ctp-confluent"]["producer_id"]]
    assert outcomes(ck) == [("COMMIT", ["__consumer_offsets-0", "ck-ctp-out-0", "ck-ctp-out-1"])]

    hang = txns[truth["06-dangling-open-txn-then-restart"]["producer_id"]]
    assert outcomes(hang) == [("ABORT", ["j-hang-0", "j-hang-1"])]
    for tp in ("j-hang-0", "j-hang-1"):
        [p] = hang.partitions[tp]
        assert (p.start_offset, p.marker.offset, p.marker.epoch, p.marker.coordinator_epoch) == (0, 2, 1, 5)

    # the 40 transactions on seg-txn-0 (ck-segtxn), against DumpLogSegments
    rows = [r for r in csv.DictReader((line for line in (base / "logdirs-final.truth" / "batches.tsv")
                                       .read_text().splitlines() if not line.startswith("#")),
                                      delimiter="\t")
            if r["partition"] == "node1/data/seg-txn-0" and r["is_control"] == "true"]
    seg = txns[2009]
    parts = seg.partitions["seg-txn-0"]
    assert len(parts) == len(rows) == 40
    assert [(p.marker.offset, p.marker.result) for p in parts] == [
        (int(r["base_offset"]), r["control_type"]) for r in rows]
    assert [r for r, _ in outcomes(seg)] == [p.marker.result for p in parts]
    assert all(p.data and p.coord is not None for p in parts)


def test_logdirs_final_transaction_findings(corpus):
    base = corpus / "real-kafka-3.0.2"
    fs = txn_findings(base / "logdirs-final")
    assert [f for f in fs if at_or_above(f["severity"], "warning")] == []
    # one finding per transaction (as on the wire), placed at its first partition
    aborts = {(f["topic"], f["partition"], f["producer_id"]): f for f in fs if f["rule"] == "coordinator-abort"}
    f = aborts[("j-hang", 0, 2010)]
    assert f["severity"] == "info" and details(f)["cause"] == "timeout"
    assert details(f)["partitions"] == ["j-hang-0", "j-hang-1"]
    assert (f["first_offset"], f["last_offset"], f["transactional_id"]) == (0, 2, "java-hang")
    fence = aborts[("j-fence", 0, 2003)]
    assert details(fence)["cause"] == "fencing" and fence["last_offset"] == 3
    assert {f["rule"] for f in fs} <= {"coordinator-abort"}


def test_hanging_unregistered_and_late_writes(corpus):
    base = corpus / EXTRA
    truth = json.loads((base / "GROUND_TRUTH.json").read_text())
    fs = txn_findings(base / "logdirs")
    serious = sorted((f["rule"], f["partition"], f["first_offset"], f["last_offset"])
                     for f in fs if at_or_above(f["severity"], "warning"))
    assert serious == [
        ("hanging-transaction", 1, 0, 2),
        ("hanging-transaction", 3, 3, 4),
        ("late-transactional-write", 3, 3, 4),
        ("late-transactional-write", 4, 3, 4),
        ("unregistered-partition", 1, 0, 2),
    ]
    # the start offsets Kafka's find-hanging printed
    found = {}
    for line in (base / "client-logs" / "12-find-hanging.log").read_text().splitlines():
        cells = line.split()
        if cells and cells[0] == "hang":
            found[int(cells[1])] = (int(cells[2]), int(cells[3]), int(cells[4]), int(cells[5]))
    assert set(found) == {1, 3}
    for f in fs:
        if f["rule"] != "hanging-transaction":
            continue
        pid, epoch, ce, start = found[f["partition"]]
        assert (f["producer_id"], f["producer_epoch"], f["first_offset"]) == (pid, epoch, start)
        assert f["remediation"].startswith(
            f"kafka-transactions.sh --bootstrap-server <broker> abort --topic hang "
            f"--partition {f['partition']} --start-offset {start}")
        if ce >= 0:
            assert f"coordinator epoch {ce}" in f["remediation"]
        assert f["transactional_id"] in (None, truth["transactional_id"])
    late4 = [f for f in fs if f["rule"] == "late-transactional-write" and f["partition"] == 4][0]
    anomaly = [a for a in truth["anomalies"] if a["type"] == "aborted_data_committed_by_later_transaction"][0]
    assert [late4["first_offset"], late4["last_offset"]] == anomaly["late_data_offsets"]
    assert details(late4)["previous_marker_offset"] == anomaly["abort_marker_offset"]
    assert "COMMIT at offset 7" in late4["message"]
    assert not [f for f in fs if f["partition"] in (0, 2) and at_or_above(f["severity"], "warning")]


def test_wild_logdirs_no_transaction_findings(corpus):
    root = corpus / "public" / "wild-logdirs"
    dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.endswith(".truth"))
    assert dirs
    for d in dirs:
        assert [f for f in txn_findings(d) if at_or_above(f["severity"], "warning")] == [], d.name
