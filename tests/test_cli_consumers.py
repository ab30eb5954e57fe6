"""`kaudit consumers`: per group, member and partition, the served ranges, commits and membership of
a crafted capture and of the corpus's consumers; --group; formats."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from tests.audit.wire import wirecraft_group as g
from tests.sources.pcap.craft import Conn, write_capture

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def rebalance(tmp_path_factory):
    """Member A served 0-9 and committed 5, died; B served 5-9 again."""
    a = (g.join(1, "app-a", "ma", 1) + g.sync(2, "app-a", "ma", 1, [(g.TOPIC, [0])]) + g.offset_fetch(3, "app-a", 0)
         + g.fetch(4, "app-a", 0, g.records(0, 5), hw=10) + g.commit(5, "app-a", "ma", 1, 5)
         + g.fetch(6, "app-a", 5, g.records(5, 5), hw=10))
    b = (g.join(1, "app-b", "mb", 2) + g.sync(2, "app-b", "mb", 2, [(g.TOPIC, [0])]) + g.offset_fetch(3, "app-b", 5)
         + g.fetch(4, "app-b", 5, g.records(5, 5), hw=10) + g.leave(5, "app-b", "mb"))
    path = tmp_path_factory.mktemp("consumers") / "rebalance.pcap"
    write_capture(path, [Conn(a, client=("10.0.0.4", 41001)), Conn(b, client=("10.0.0.5", 41002))])
    return path


def test_json_lists_the_group_its_members_served_ranges_and_commits(rebalance):
    r = run("consumers", rebalance, "-f", "json")
    assert r.exit_code == 0, r.output
    (group,) = json.loads(r.output)
    assert group["group"] == g.GROUP and [m["member_id"] for m in group["members"]] == ["ma", "mb"]
    a, b = group["members"]
    (pa,) = a["partitions"]
    assert [(s["first_offset"], s["last_offset"]) for s in pa["served"]] == [(0, 9)]
    assert [c["offset"] for c in pa["commits"]] == [5]
    assert "no LeaveGroup seen" in pa["owned"][0]["cause"]
    assert b["left_because"] == "LeaveGroup" and b["partitions"][0]["served"][0]["first_offset"] == 5


def test_table_and_group_selection(rebalance):
    r = run("consumers", rebalance, "--group", g.GROUP)
    assert r.exit_code == 0, r.output
    assert "group billing: 2 member(s), 1 commit(s)" in r.output and "served 0-9" in r.output
    assert "committed 5" in r.output
    assert run("consumers", rebalance, "-f", "xml").exit_code == 2


def test_a_group_the_capture_does_not_hold_is_nothing_to_report(rebalance):
    """The capture was read: a group it does not hold is an answer (exit 0), not unreadable input
    (3) nor a usage error (2); the message names the groups it holds."""
    r = run("consumers", rebalance, "--group", "nope")
    assert r.exit_code == 0
    assert "no consumer group nope in the input: it holds billing" in r.output
    r = run("consumers", rebalance, "--group", "nope", "-f", "json")
    assert r.exit_code == 0 and "it holds billing" in r.output and r.output.rstrip().endswith("[]")


@pytest.mark.parametrize("capture, group, commits", [
    ("real-kafka-3.0.2/pcap/04-ctp-java.pcap", "java-ctp-group", 3),
    ("real-kafka-4.1.0/v7-compacted-eos-changelog/v7-compacted-eos-changelog.pcap", "java41-changelog-rc", 1),
    ("public/kafka-go/v1-v1.pcapng", "test-group-edgy.1", 1),
])
def test_the_corpus_groups_are_listed(corpus, capture, group, commits):
    r = run("consumers", corpus / capture, "-f", "json", "--group", group)
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)
    assert len(row["commits"]) == commits and row["members"]
    served = [s for m in row["members"] for p in m["partitions"] for s in p["served"]]
    assert served, "the members' Fetch responses are tied to them"


def test_no_capture_and_no_group(tmp_path):
    bad = tmp_path / "not.pcap"
    bad.write_text("hello")
    assert run("consumers", bad).exit_code == 3
    empty = tmp_path / "empty.pcap"
    write_capture(empty, Conn(g.list_offsets(1, "tool", -1, 5)))
    r = run("consumers", empty)
    assert r.exit_code == 0 and "no consumer group" in r.output
