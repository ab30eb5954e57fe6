"""Acceptance on a real Kafka 4.1.0 cluster (../shared/corpus/real-kafka-4.1.0): its seven
scenarios hold no anomaly, so `kaudit pcap`, `kaudit segments` and `kaudit audit` give no finding
at warning or above - but for the zombie requests the broker rejected in v5-fencing-tv2; no
finding names a topic by its id where the capture or the log dirs name it; transaction version 2's
aborts are the client's; `kaudit txn` follows one transactional id through wire and disk."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from kaudit.audit import at_or_above
from kaudit.cli import app
from kaudit.engine.joint import audit_both
from kaudit.engine.local import audit_pcaps, audit_segments
from kaudit.sources.pcap import PcapOptions

pytestmark = pytest.mark.corpus
SCENARIOS = ("v1-idempotent-clean", "v2-txn-java-tv2", "v3-txn-confluent", "v4-idem-retry-java",
             "v5-fencing-tv2", "v6-codecs", "v7-compacted-eos-changelog")
PORTS = PcapOptions(kafka_ports=frozenset((9092, 9093, 9094)))
UUID = re.compile(r"\b[A-Za-z0-9_-]{22}\b")


def _inputs(corpus, scn):
    d = corpus / "real-kafka-4.1.0" / scn
    caps = [str(p) for p in sorted(d.iterdir()) if p.suffix in (".pcap", ".pcapng")]
    return caps, [str(d / "logdirs")]


def _runs(corpus, scn):
    caps, logs = _inputs(corpus, scn)
    return {"pcap": audit_pcaps(caps, PORTS), "segments": audit_segments(logs),
            "audit": audit_both(caps, logs, PORTS)}


@pytest.fixture(scope="module", params=["fast", "reference"])
def runs(corpus, request):
    """Every scenario's three audits, on the transactions' fast path and on the reference path."""
    from kaudit.audit.txn import txn_rows

    saved = txn_rows.FAST_PATH
    txn_rows.FAST_PATH = request.param == "fast"
    try:
        return {scn: _runs(corpus, scn) for scn in SCENARIOS}
    finally:
        txn_rows.FAST_PATH = saved


@pytest.mark.parametrize("scn", SCENARIOS)
def test_no_finding_at_warning_or_above(runs, scn):
    for cmd, run in runs[scn].items():
        assert not run.errors, (scn, cmd, run.errors)
        serious = [f for f in run.findings if at_or_above(f["severity"], "warning")]
        if scn == "v5-fencing-tv2" and cmd in ("pcap", "audit"):
            # the zombie's Produce (INVALID_PRODUCER_EPOCH) and EndTxn (PRODUCER_FENCED), rejected
            assert sorted(f["rule"] for f in serious) == ["fenced-epoch", "fenced-epoch"], (cmd, serious)
            assert {f["producer_epoch"] for f in serious} == {0}
            assert all("rejected" in f["message"] or "INVALID_PRODUCER_EPOCH" in f["message"]
                       or "PRODUCER_FENCED" in f["message"] for f in serious)
        else:
            assert serious == [], (scn, cmd, [(f["rule"], f["message"]) for f in serious])


@pytest.mark.parametrize("scn", SCENARIOS)
def test_no_topic_id_where_a_name_is_known(runs, scn, corpus):
    """Topic ids the capture's Metadata responses or the log dirs' partition.metadata name never
    stand for a topic in a finding, its timeline or its remediation."""
    names = {}
    for run in runs[scn].values():
        names.update(run.topic_names)
    names.update({line.split()[-1]: p.parent.name.rsplit("-", 1)[0]
                  for p in (corpus / "real-kafka-4.1.0" / scn / "logdirs").rglob("partition.metadata")
                  for line in p.read_text().splitlines() if line.startswith("topic_id")})
    for cmd, run in runs[scn].items():
        for f in run.findings:
            text = " ".join([f["message"], f["remediation"] or "", *(f["timeline"] or []), str(f["topic"])])
            leaked = [u for u in UUID.findall(text) if u in names]
            assert not leaked, (scn, cmd, f["rule"], leaked, f["message"])
            if f["topic_id"] is not None and f["topic_id"] in names:
                assert f["topic"] == names[f["topic_id"]]


def test_version2_aborts_are_the_clients(runs, corpus):
    """java41-txn aborted transactions 1 and 4 itself (EndTxn v5 abort): no coordinator-abort,
    and the view says the client ended them."""
    for cmd, run in runs["v2-txn-java-tv2"].items():
        assert [f for f in run.findings if f["rule"] == "coordinator-abort"] == [], cmd
    caps, logs = _inputs(corpus, "v2-txn-java-tv2")
    r = CliRunner().invoke(app, ["txn", *caps, *logs, "--transactional-id", "java41-txn", "-f", "json",
                                 "--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [t["outcome"] for t in rows] == ["COMMIT", "ABORT", "COMMIT", "COMMIT", "ABORT", "COMMIT"]
    assert [t["producer_epoch"] for t in rows] == [0, 1, 2, 3, 4, 5]
    assert all(t["transaction_version"] == "2" for t in rows)
    assert [t["ended_by"] for t in rows if t["outcome"] == "ABORT"] == ["client (EndTxn abort)"] * 2
    # one transaction seen in the log and on the wire is one row, the capture's view beside it
    assert all(t.get("wire", {}).get("outcome") == t["outcome"] for t in rows)


def test_fencing_is_the_coordinators(runs):
    """v5: B's InitProducerId fenced A's open transaction: the coordinator's ABORT at epoch 1."""
    for cmd in ("pcap", "segments"):
        (f,) = [f for f in runs["v5-fencing-tv2"][cmd].findings if f["rule"] == "coordinator-abort"]
        d = json.loads(f["details"])
        assert (d["cause"], d["partitions"], d["data_epoch"], d["marker_epoch"]) == ("fencing", ["j-fence-0"], 0, 1)
        assert d["transaction"] == "0/0/j-fence-0@0"      # the same transaction from wire and disk


def test_txn_view_of_a_capture_alone(corpus):
    """`kaudit txn` of the fencing capture alone: the requests show the fenced transaction ended by
    the coordinator, then the new instance's commit by the client."""
    caps, _ = _inputs(corpus, "v5-fencing-tv2")
    r = CliRunner().invoke(app, ["txn", *caps, "--transactional-id", "java41-fence", "-f", "json",
                                 "--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(t["source"], t["outcome"], t["ended_by"]) for t in rows] == [
        ("wire", "ABORT", "coordinator (fencing)"), ("wire", "COMMIT", "client (EndTxn commit)")]
    assert rows[0]["parts"][0]["marker"]["writer"] == "coordinator"
