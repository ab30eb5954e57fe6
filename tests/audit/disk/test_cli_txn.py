"""`kaudit txn`: the transaction view (crafted log dir, and the real corpus when present)."""

from __future__ import annotations

import json

from diskcraft import logdir
from typer.testing import CliRunner

from fixtures import kafka_encoder as ke
from kaudit.cli import app

T0 = 1_700_000_000_000


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_txn_view_crafted(tmp_path):
    ld = logdir(tmp_path, start_time_ms=T0)
    p = ld.producer(7, 0, transactional_id="tx", txn_state=ld.partition("__transaction_state", 0))
    a, b = ld.partition("a", 0), ld.partition("b", 0)
    p.send([b"1"], partition=a); p.send([b"2"], partition=b); p.commit(coordinator_epoch=3)
    p.send([b"3"], partition=a)
    ld.write()
    r = run("txn", ld.root, "-f", "json")
    assert r.exit_code == 0, r.output
    txns = json.loads(r.stdout)
    assert [t["outcome"] for t in txns] == ["COMMIT", "open"]
    first = txns[0]
    assert first["transactional_id"] == "tx" and first["registered_partitions"] == ["a-0", "b-0"]
    assert [(x["partition"], x["first_offset"], x["marker"]["offset"], x["marker"]["result"],
             x["marker"]["coordinator_epoch"]) for x in first["parts"]] == [
        ("a-0", 0, 1, "COMMIT", 3), ("b-0", 0, 1, "COMMIT", 3)]
    assert [s["state"] for s in first["coordinator_states"]] == ["Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert txns[1]["parts"][0]["marker"] is None and txns[1]["parts"][0]["first_offset"] == 2
    assert {t["transaction_version"] for t in txns} == {"0/1"}      # COMMIT with the data's epoch
    nd = run("txn", ld.root, "--producer-id", "8", "-f", "ndjson")
    assert nd.exit_code == 3 and nd.stdout == ""        # an empty selection says so
    assert "no transaction matches the selection (producer id 8)" in nd.output and "tx" in nd.output
    assert run("txn", ld.root, "--transactional-id", "tx", "-f", "table").exit_code == 0
    assert run("txn", ld.root, "-f", "xml").exit_code == 2


def test_txn_view_corpus(corpus):
    r = run("txn", corpus / "real-kafka-3.0.2" / "logdirs-final", "--transactional-id", "java-ctp", "-f", "ndjson")
    assert r.exit_code == 0, r.output
    txns = [json.loads(line) for line in r.stdout.splitlines()]
    assert [t["outcome"] for t in txns] == ["COMMIT", "ABORT", "COMMIT"]
    assert [p["partition"] for p in txns[1]["parts"]] == ["__consumer_offsets-4", "j-ctp-out-0"]
    assert txns[1]["parts"][1]["data_batches"] == 0 and txns[1]["parts"][1]["marker"]["offset"] == 0


def test_txn_view_transaction_version(tmp_path):
    """KIP-890: the epoch bumped at every end is transaction version 2; the coordinator's
    ClientTransactionVersion says it outright; an ABORT with epoch + 1 alone tells nothing."""
    ld = logdir(tmp_path, start_time_ms=T0)
    ts = ld.partition("__transaction_state", 0)
    a = ld.partition("a", 0)
    tv2 = ld.producer(7, 0, transactional_id="tv2", txn_state=ts)
    tv2.send([b"1"], partition=a); tv2.commit(marker_epoch=1)
    tv2.producer_epoch = 1
    tv2.send([b"2"], partition=a); tv2.abort(marker_epoch=2)
    said = ld.producer(8, 0, transactional_id="said", txn_state=ts, txn_log_version=1)
    said.send([b"3"], partition=a); said.abort()
    ts.append_txn_state("said", 8, 0, "Empty", version=1)
    fenced = ld.producer(9, 0, transactional=True)
    fenced.send([b"4"], partition=a)
    a.append_control(9, 1, "ABORT", 0)
    value = ke.encode_txn_log_value(10, 3, 60_000, "Ongoing", {"b": [0]}, T0, T0, version=1,
                                    client_transaction_version=2)
    ts.append_batch([ke.Record(key=ke.encode_txn_log_key("said-2"), value=value)])
    ld.write()
    rows = json.loads(run("txn", ld.root, "-f", "json").stdout)
    assert {t["producer_id"]: t["transaction_version"] for t in rows} == {7: "2", 8: "0/1", 9: None, 10: "2"}
