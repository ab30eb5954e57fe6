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
