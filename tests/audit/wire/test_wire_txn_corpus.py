"""Transactions on the wire (audit/wire_txn.py, audit/wire/wire_lso.py) on the real captures of the
shared corpus. Skipped without the corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kaudit.audit import at_or_above
from tests.audit.wire.corpus_audit import PORTS, findings, pcap  # noqa: F401

pytestmark = pytest.mark.corpus

TXN_RULES = {"coordinator-abort", "hanging-transaction", "dangling-transaction", "unregistered-partition",
             "late-transactional-write", "lso-stuck"}


EXTRA = "real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes/02-hanging-unregistered-and-late-writes.pcap"


def txn(fs) -> list[dict]:
    return [f for f in fs if f["rule"] in TXN_RULES]


def by_rule(fs, rule) -> list[dict]:
    return [f for f in fs if f["rule"] == rule]


def test_fence_story_in_order(corpus: Path):
    (f,) = by_rule(pcap(corpus, "05-fence-java"), "coordinator-abort")
    d = json.loads(f["details"])
    assert (f["producer_id"], f["producer_epoch"], f["transactional_id"]) == (2003, 0, "java-fence")
    assert d["cause"] == "fencing" and d["marker_epoch"] == 1 and d["partitions"] == ["j-fence-0"]
    tl = f["timeline"]

    def at(text):
        return next(i for i, line in enumerate(tl) if text in line)

    steps = [at("InitProducerId transactional id 'java-fence' -> error 51"),   # the new instance
             at("WriteTxnMarkers ABORT epoch 1"),                              # coordinator abort
             at("-> producer id 2003 epoch 2"),                                # new epoch
             at("epoch 0 seq 3-3 (1 records) -> rejected INVALID_PRODUCER_EPOCH")]  # the zombie
    assert steps == sorted(steps)


def test_dangling_then_timeout_abort(corpus: Path):
    fs = txn(pcap(corpus, "06-dangling-open-txn-then-restart"))
    (f,) = fs
    assert f["rule"] == "coordinator-abort" and f["producer_id"] == 2010
    d = json.loads(f["details"])
    assert d["cause"] == "timeout" and d["partitions"] == ["j-hang-0", "j-hang-1"]
    assert sum("Produce j-hang" in line for line in f["timeline"]) == 4
    assert "WriteTxnMarkers ABORT epoch 1" in f["timeline"][-1]


def test_hanging_unregistered_and_lso(corpus: Path):
    fs = txn(findings(corpus, EXTRA))
    got = {(f["rule"], f["partition"]) for f in fs}
    assert ("unregistered-partition", 1) in got
    assert ("hanging-transaction", 1) in got and ("hanging-transaction", 3) in got
    assert ("lso-stuck", 1) in got and ("lso-stuck", 3) in got
    assert ("late-transactional-write", 4) in got      # committed later by transaction 5
    (u,) = by_rule(fs, "unregistered-partition")
    assert json.loads(u["details"])["accepted"] is True
    hang = {f["partition"]: f for f in by_rule(fs, "hanging-transaction")}
    assert set(hang) == {1, 3}
    # the start offsets kafka-transactions.sh find-hanging printed
    assert hang[1]["first_offset"] == 0 and "--start-offset 0" in hang[1]["remediation"]
    assert hang[3]["first_offset"] == 3 and "--start-offset 3" in hang[3]["remediation"]
    lso = {f["partition"]: json.loads(f["details"]) for f in by_rule(fs, "lso-stuck")}
    assert lso[1]["last_stable_offset"] == 0 and lso[3]["last_stable_offset"] == 3
    # hang-2 (a write that raced the marker, correctly aborted) and hang-0: nothing above info
    assert not [f for f in fs if f["partition"] in (0, 2) and at_or_above(f["severity"], "warning")]


@pytest.mark.parametrize("name", ["01-idem-aiokafka", "01-idem-confluent", "01-idem-java", "01-idem-kafkapython",
                                  "03-txn-aiokafka", "03-txn-confluent", "03-txn-java", "03-txn-kafkapython",
                                  "04-ctp-confluent", "04-ctp-java", "07-acks0-confluent", "07-acks0-kafkapython",
                                  "08-compression-aiokafka", "08-compression-confluent",
                                  "08-compression-kafkapython", "09-readcommitted-mixed"])
def test_clean_scenarios_no_txn_findings(corpus: Path, name: str):
    assert txn(pcap(corpus, name)) == []
