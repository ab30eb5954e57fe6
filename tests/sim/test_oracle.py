"""The judge itself: a missed expectation, a false alarm, a finding on the wrong partition, a
finding too weak, a restatement allowed by the invariant, a request-level finding."""

from __future__ import annotations

from tests.sim.cluster import Expect
from tests.sim.oracle import INVARIANTS, PROVISIONAL, judge


def f(rule, severity="error", topic="t", partition=0, first=0, last=1, pid=7):
    return {"rule": rule, "severity": severity, "topic": topic, "partition": partition, "first_offset": first,
            "last_offset": last, "producer_id": pid, "message": ""}


TORN = Expect("torn-transaction", "t", 0, 0, 1, 7)


def test_found_exactly():
    r = judge([f("torn-transaction", "critical"), f("stray-marker", "info")], [TORN], "segments")
    assert r == {"missed": [], "false_alarms": [], "weak": []}


def test_wrong_partition_is_a_miss_and_a_false_alarm():
    r = judge([f("torn-transaction", "critical", partition=1)], [TORN], "segments")
    assert r["missed"] == [TORN] and [x["partition"] for x in r["false_alarms"]] == [1]


def test_offsets_must_overlap():
    r = judge([f("torn-transaction", "critical", first=5, last=6)], [TORN], "segments")
    assert r["missed"] == [TORN]


def test_too_weak():
    r = judge([f("torn-transaction", "warning")], [TORN], "segments")
    assert r["weak"] and not r["missed"]


def test_restatements_and_transaction_level_findings_are_allowed():
    fs = [f("torn-transaction", "critical"), f("outcome-mismatch", topic=None, partition=None, first=None)]
    assert judge(fs, [TORN], "audit")["false_alarms"] == []
    other = f("outcome-mismatch", topic=None, partition=None, first=None, pid=8)
    assert judge(fs[:1] + [other], [TORN], "audit")["false_alarms"] == [other]


def test_expectations_count_only_on_their_feeds():
    wire_only = Expect("fenced-write-refused", "t", 0, None, None, 7, feeds=("pcap",))
    assert judge([], [wire_only], "segments")["missed"] == []
    assert judge([], [wire_only], "pcap")["missed"] == [wire_only]


def test_every_rule_id_is_registered_or_provisional():
    from kaudit.audit import RULES

    ids = {r for inv in INVARIANTS.values() for r in inv.rules + inv.also}
    assert ids - set(RULES) <= set(PROVISIONAL)


def test_an_invariant_told_at_info_is_looked_for_at_info_and_no_louder():
    raced = Expect("acked-after-fencing", "t", 0, 0, 1, 7, feeds=("pcap",))
    assert judge([f("write-after-epoch-end", "info")], [raced], "pcap") == {"missed": [], "false_alarms": [],
                                                                            "weak": []}
    assert judge([], [raced], "pcap")["missed"] == [raced]
    loud = f("write-after-epoch-end", "error")
    r = judge([loud], [raced], "pcap")
    assert r["missed"] == [raced] and r["false_alarms"] == [loud]


def test_a_finding_about_several_partitions_reports_each_damaged_one():
    both = dict(f("torn-transaction", "critical"), details='{"damaged": [["t-0", 0, 1, "ABORT", 2], ["t-1", 4, 5, "ABORT", 6]]}')
    other = Expect("torn-transaction", "t", 1, 4, 5, 7)
    assert judge([both], [TORN, other], "segments") == {"missed": [], "false_alarms": [], "weak": []}
    elsewhere = Expect("torn-transaction", "t", 1, 9, 9, 7)
    assert judge([both], [TORN, elsewhere], "segments")["missed"] == [elsewhere]
