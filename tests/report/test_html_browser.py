"""The demo's HTML reports in a real browser: Debian's chromium, headless (`make test` installs
it: Makefile `browser`). Fails on any console error, uncaught exception or failed load; checks
that every incident and every chart rendered (Plotly drew its SVG); saves a screenshot of each
report to build/screenshots/ (KAUDIT_SCREENSHOTS to choose)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kaudit.cli import app
from tests.report.browser import Browser, chromium

REPO = Path(__file__).resolve().parents[2]
PORTS = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
DEMOS = {"segments": ["segments", "fixtures/logdirs/demo"], "pcap": ["pcap", "pcaps", *PORTS]}
SHOTS = Path(os.environ.get("KAUDIT_SCREENSHOTS", REPO / "build" / "screenshots"))


@pytest.fixture(scope="module")
def browser():
    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: `make test` installs it (apt-get install chromium)")
        pytest.skip("chromium is missing: run `make browser` (apt-get install chromium as root)")
    b = Browser()
    yield b
    b.close()


@pytest.mark.parametrize("demo", sorted(DEMOS))
def test_demo_report_renders_in_chromium(demo, browser, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    html, js = tmp_path / f"demo-{demo}.html", tmp_path / f"demo-{demo}.json"
    for fmt, out in (("html", html), ("json", js)):
        r = CliRunner().invoke(app, [*DEMOS[demo], "-f", fmt, "-o", str(out)])
        assert r.exit_code == 1, r.output
    report = json.loads(js.read_text())
    incidents = [i for i in report["incidents"] if i["kind"] != "coverage"]

    browser.events.clear()
    browser.open(html.as_uri())
    charts = browser.evaluate("document.querySelectorAll('div.chart').length")
    assert charts > 0
    # every chart drawn by plotly.js (its SVG is there), within the time a person waits
    browser.wait_for(f"document.querySelectorAll('div.chart .main-svg').length >= {charts}")
    drawn = browser.evaluate("Array.from(document.querySelectorAll('div.chart')).every("
                             "d => d.querySelector('.main-svg') && d.querySelector('.main-svg').getBoundingClientRect().height > 100)")
    assert drawn
    shown = browser.evaluate("Array.from(document.querySelectorAll('section.incident')).map(s => s.dataset.incident)")
    assert shown == [i["id"] for i in incidents]
    titles = browser.evaluate("Array.from(document.querySelectorAll('#incident-list li')).map(l => l.innerText)")
    assert [t.split(" ", 1)[1].strip() for t in titles] == [i["title"] for i in incidents]
    assert browser.evaluate("!!document.getElementById('coverage')")
    assert browser.errors() == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / f"demo-{demo}.png"
    browser.screenshot(str(shot))
    assert shot.stat().st_size > 10_000


def test_the_browser_test_sees_errors(browser, tmp_path):
    """The check above is not blind: a console error, an uncaught exception and a resource that
    cannot load (what a CDN link would be offline) are all reported."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>console.error('bad thing'); undefined_function();</script>"
                    "<img src='missing.png'></body></html>")
    browser.events.clear()
    browser.open(page.as_uri())
    errors = browser.errors()
    assert any("bad thing" in e for e in errors)
    assert any("undefined_function" in e for e in errors)
    assert any("missing.png" in e or "ERR_FILE_NOT_FOUND" in e for e in errors)


# -- what the charts show: crafted incidents ------------------------------------------------------

CHART_MARKS = """Array.from(document.querySelectorAll('section.incident')).map(s => ({
  incident: s.dataset.incident,
  charts: Array.from(s.querySelectorAll('div.chart')).map(c => {
    const gd = c.querySelector('.js-plotly-plot');
    return {name: c.dataset.chart,
            marks: gd.data.flatMap(t => (t.customdata || []).map(d => d.concat([t.name]))),
            notes: (gd.layout.annotations || []).map(a => a.text),
            drawn: c.querySelectorAll('.scatterlayer .point').length,
            boxes: Array.from(c.querySelectorAll('g.annotation')).map(a => {
              const r = a.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })};
  })}))"""


def _report(browser, tmp_path, name, args):
    """The HTML and JSON reports of `kaudit segments args`, the HTML opened and every chart drawn;
    -> (report, {incident id: [chart]})."""
    html, js = tmp_path / f"{name}.html", tmp_path / f"{name}.json"
    for fmt, out in (("html", html), ("json", js)):
        r = CliRunner().invoke(app, ["segments", *map(str, args), "-f", fmt, "-o", str(out)])
        assert r.exit_code == 1, r.output
    browser.events.clear()
    browser.open(html.as_uri())
    n = browser.evaluate("document.querySelectorAll('div.chart').length")
    browser.wait_for(f"document.querySelectorAll('div.chart .main-svg').length >= {n}")
    assert browser.errors() == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(str(SHOTS / f"{name}.png"))
    charts = {s["incident"]: s["charts"] for s in browser.evaluate(CHART_MARKS)}
    return json.loads(js.read_text()), charts


def _no_overlap(boxes) -> bool:
    return all(a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
               for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_torn_transaction_chart_draws_every_partition(browser, tmp_path):
    """a-0 ended ABORT (an admin's marker) and b-0 COMMIT (the coordinator's): both partitions,
    their data and markers at their offsets, and the coordinator's decision are drawn."""
    from tests.report.crafted import torn_transaction

    report, charts = _report(browser, tmp_path, "torn-transaction", [torn_transaction(tmp_path)])
    [inc] = [i for i in report["incidents"] if i["kind"] == "torn"]
    [chart] = [c for c in charts[inc["id"]] if c["name"] == "transaction-gantt"]
    marks = chart["marks"]
    found = {(tp, kind, off) for tp, where, off, last, pos, kind, name in marks if where == "replica 1"}
    assert {("a-0", "data", 0), ("a-0", "data", 1), ("a-0", "marker", 2), ("a-0", "marker", 3),
            ("b-0", "data", 0), ("b-0", "marker", 2)} <= found
    names = {m[-1] for m in marks}
    assert "ABORT marker by an unknown writer" in names and "COMMIT marker by coordinator" in names
    assert {"data (ABORT)", "data (COMMIT)"} <= names           # a-0's data aborted, b-0's committed
    assert chart["notes"] == ["decision: COMMIT"]
    assert chart["drawn"] >= len(marks) and _no_overlap(chart["boxes"])


def test_duplicate_chart_draws_each_copy_on_each_replica(browser, tmp_path):
    """Producer 7's seq 0-4 stored at offsets 0-4 and again at 10-14 (same bytes, same
    timestamp) on three replicas: each replica its own panel, each copy at its own offset."""
    from tests.report.crafted import duplicate

    report, charts = _report(browser, tmp_path, "duplicate", duplicate(tmp_path))
    [inc] = [i for i in report["incidents"] if i["kind"] == "duplicate"]
    [chart] = [c for c in charts[inc["id"]] if c["name"] == "sequence-timeline"]
    stored = {(where, off, last) for tp, where, off, last, pos, kind, name in chart["marks"]
              if tp == "orders-0" and kind == "stored"}
    for r in ("1", "2", "3"):
        assert {(f"replica {r}", 0, 4), (f"replica {r}", 10, 14)} <= stored, r
    assert [n for n in chart["notes"] if n.startswith("orders-0")] == [
        "orders-0 · replica 1", "orders-0 · replica 2", "orders-0 · replica 3"]
    copies = [(where, pos) for tp, where, off, last, pos, kind, name in chart["marks"] if kind == "stored" and off in (0, 10)]
    assert len(set(copies)) == 6                                  # two copies, own positions, per replica
    stars = {(where, off) for tp, where, off, last, pos, kind, name in chart["marks"] if kind == "duplicate-batch"}
    assert {("replica 1", 10), ("replica 2", 10), ("replica 3", 10)} <= stars
    assert chart["drawn"] >= len(chart["marks"])


def test_consumer_chart_shows_each_members_reads_commits_rebalances_and_the_redelivered_range(browser, tmp_path):
    """orders-1 moved from member A (served 0-9, committed 5) to member B (served 5-11): the
    incident's consumer chart draws both members' served ranges, A's commit, the rebalance marks
    with their causes, and the redelivered offsets 5-9 shaded."""
    from tests.report.crafted import consumer_redelivery

    html = tmp_path / "consumer.html"
    r = CliRunner().invoke(app, ["pcap", str(consumer_redelivery(tmp_path)), "-f", "html", "-o", str(html)])
    assert r.exit_code == 0, r.output
    browser.events.clear()
    browser.open(html.as_uri())
    browser.wait_for("document.querySelectorAll('div.chart .main-svg').length >= "
                     "document.querySelectorAll('div.chart').length")
    assert browser.errors() == []
    [chart] = browser.evaluate("""Array.from(document.querySelectorAll('div.chart[data-chart=consumer-timeline]'))
      .map(c => { const gd = c.querySelector('.js-plotly-plot');
        return {marks: gd.data.flatMap(t => (t.customdata || []).map(d => d.concat([t.name]))),
                hover: gd.data.flatMap(t => (t.hovertext || []).filter(h => h)),
                title: gd.layout.title.text, lines: c.querySelectorAll('.scatterlayer .trace').length,
                height: c.querySelector('.main-svg').getBoundingClientRect().height}; })""")
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.screenshot(str(SHOTS / "consumer-redelivery.png"))
    assert "billing" in chart["title"] and "orders-1" in chart["title"] and chart["height"] > 300
    served = {(m, lo, hi) for tp, m, lo, hi, pos, kind, name in chart["marks"] if kind == "served"}
    assert served == {("app-a-1111", 0, 9), ("app-b-2222", 5, 11)}
    assert {(m, lo) for tp, m, lo, hi, pos, kind, name in chart["marks"] if kind == "commit"} == {("app-a-1111", 5)}
    assert {kind for *_, kind, name in chart["marks"]} >= {"rebalance", "exit", "consumer-redelivery"}
    assert {(lo, hi) for tp, m, lo, hi, pos, kind, name in chart["marks"] if kind == "consumer-redelivery"} == {(5, 9)}
    assert any("joined, generation 2" in h for h in chart["hover"])
    assert any("revoked by a rebalance" in h for h in chart["hover"])
    assert chart["lines"] >= 5     # both members' reads, the commit, the marks and the shaded range drawn
