"""The consumer charts (report/charts_consumers.py): what a person sees - each member's served ranges
and commits, the rebalances and exits with their causes, the finding's damaged range - read from the
figures' traces; the HTML report of `kaudit pcap` and `kaudit consumers --format html` carry them."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from kaudit.report.charts_consumers import consumer_chart, panels
from kaudit.sources.consumers_input import capture_timelines
from kaudit.sources.pcap import PcapOptions
from tests.audit.consumers.test_consumer_rebalance import A, MA, MB, _cooperative, _eager
from tests.sources.pcap.craft import Conn, write_capture

runner = CliRunner()


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    root = tmp_path_factory.mktemp("consumer-charts")
    eager, coop = root / "eager.pcap", root / "coop.pcap"
    write_capture(eager, Conn(_eager(None), **A))
    write_capture(coop, _cooperative(5))
    return {"eager": eager, "coop": coop}


def _timelines(path):
    errors, [tl] = capture_timelines(([str(path)], []), PcapOptions())
    assert not errors
    return tl


def _marks(fig, kind=None):
    """{(partition, member, first, last, kind, trace name)} of every mark (customdata)."""
    return {(d[0], d[1], d[2], d[3], d[5], t.name) for t in fig.data for d in (t.customdata or ())
            if kind is None or d[5] == kind}


def _hover(fig, kind) -> list[str]:
    return [h for t in fig.data for h, d in zip(t.hovertext or (), t.customdata or ()) if h and d[5] == kind]


def test_eager_member_served_twice_its_commit_and_rebalance(captures):
    tl = _timelines(captures["eager"])
    [p] = panels(tl)
    assert (p["group"], p["tp"]) == ("billing", "orders-0")
    finding = {"rule": "consumer-redelivery", "severity": "warning", "message": "m", "first_offset": 5,
               "last_offset": 9, "first_ts_ms": p["members"][0]["serves"][1][0],
               "last_ts_ms": p["members"][0]["serves"][2][0]}
    fig = consumer_chart(p, [finding])
    served = sorted({(first, last) for _, m, first, last, _, _ in _marks(fig, "served") if m == MA})
    assert served == [(0, 4), (5, 9), (10, 11)]          # 5-9 twice: once before, once after the rebalance
    assert len([1 for t in fig.data for d in t.customdata if d[5] == "served" and d[2] == 5]) >= 4
    assert {(first, kind) for _, _, first, _, kind, _ in _marks(fig, "commit")} == {(5, "commit")}
    rebalances = _hover(fig, "rebalance")
    assert any("joined, generation 2" in h for h in rebalances)
    assert any("rebalance announced" in h for h in rebalances)
    [box] = [t for t in fig.data if t.name == "consumer-redelivery: offsets 5-9"]
    assert box.fill == "toself" and (min(box.y), max(box.y)) == (4.5, 9.5)
    assert fig.layout.yaxis.title.text == "offset" and "billing" in fig.layout.title.text


def test_cooperative_panels_per_partition_with_the_moved_partition_revoked(captures):
    tl = _timelines(captures["coop"])
    by = {p["tp"]: p for p in panels(tl)}
    assert set(by) == {"orders-0", "orders-1"}
    assert [m["member"] for m in by["orders-0"]["members"]] == [MA]          # kept by A
    assert [m["member"] for m in by["orders-1"]["members"]] == [MA, MB]      # moved to B
    fig = consumer_chart(by["orders-1"])
    assert {(m, first, last) for _, m, first, last, _, _ in _marks(fig, "served")} == {(MA, 0, 9), (MB, 5, 11)}
    exits = _hover(fig, "exit")
    assert any("stopped holding orders-1: revoked by a rebalance" in h for h in exits)


class _Charts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.charts, self.groups, self.findings = [], [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "div" and a.get("class") == "chart":
            self.charts.append((a.get("data-chart"), a.get("data-partition")))
        if tag == "section" and "data-group" in a:
            self.groups.append(a["data-group"])
        if tag == "ul" and a.get("class") == "findings":
            self.findings += 1


def _page(tmp_path, *args) -> tuple[_Charts, str]:
    """The HTML page `kaudit args -f html` writes, parsed."""
    out = tmp_path / "page.html"
    r = runner.invoke(app, [*map(str, args), "-f", "html", "-o", str(out)])
    assert r.exit_code == 0, r.output
    p = _Charts()
    p.feed(out.read_text())
    return p, out.read_text()


def test_pcap_html_report_draws_the_consumer_incidents_partition(captures, tmp_path):
    p, _ = _page(tmp_path, "pcap", captures["coop"])
    assert p.charts.count(("consumer-timeline", None)) == 1      # the incident's partition only
    js = tmp_path / "r.json"
    runner.invoke(app, ["pcap", str(captures["coop"]), "-f", "json", "-o", str(js)])
    [f] = json.loads(js.read_text())["findings"]
    assert f["rule"] == "consumer-redelivery" and f["partition"] == 1


def test_consumers_html_draws_every_partition_of_the_group(captures, tmp_path):
    p, text = _page(tmp_path, "consumers", captures["coop"])
    assert p.groups == ["billing"]
    assert sorted(p.charts) == [("consumer-timeline", "orders-0"), ("consumer-timeline", "orders-1")]
    assert p.findings == 1 and "consumer-redelivery" in text
    r = runner.invoke(app, ["consumers", str(captures["coop"]), "-f", "html", "--group", "nope"])
    assert r.exit_code == 0 and "it holds billing" in r.output


def test_every_consumer_rule_has_its_impact_in_words():
    from kaudit.audit.registry import fold_rules
    from kaudit.report.impact import CONSUMED

    assert set(CONSUMED) == {r.id for r in fold_rules("consumers")}


def test_eos_double_commit_panel_shades_the_inputs_committed_twice(tmp_path):
    """Two committed transactions (t-a by member A, t-b by member B) over input offsets 0-4: both
    members' transactional commits on the group's partition, the inputs shaded."""
    from kaudit.audit.consumers import rules
    from kaudit.report.charts_consumers import finding_key
    from tests.audit.consumers.test_consumer_rules import A2, B, B2, _ctp

    ca, pa = _ctp("ctp-a", MA, 1, "t-a", 7, True)
    cb, pb = _ctp("ctp-b", MB, 2, "t-b", 8, True)
    path = tmp_path / "eos.pcap"
    write_capture(path, [Conn(ca, **A), Conn(pa, **A2), Conn(cb, **B), Conn(pb, **B2)])
    tl = _timelines(path)
    [f] = [f for f in rules.judge(tl, tl.batches) if f["rule"] == "eos-double-commit"]
    [p] = panels(tl, [finding_key(tl, f)])
    fig = consumer_chart(p, [f])
    assert {(m, first) for _, m, first, _, _, _ in _marks(fig, "commit")} == {(MA, 5), (MB, 5)}
    assert {(first, last) for _, _, first, last, _, _ in _marks(fig, "eos-double-commit")} == {(0, 4)}
    assert any("in transaction t-b: COMMIT" in h for h in _hover(fig, "commit"))
