"""One history judged on every feed: the report of what the auditor missed or invented."""

from __future__ import annotations

import json
import tempfile

from tests.sim.oracle import brief, judge
from tests.sim.runner import FEEDS, audit, simulate


def verdicts(history: dict, *, feeds=FEEDS, spark: bool = False) -> tuple[list, dict]:
    """(oracle, {feed: judge result}) of a history."""
    with tempfile.TemporaryDirectory(prefix="kaudit-sim-") as d:
        sim, dirs, pcap, end = simulate(history, d)
        out = {feed: judge(audit(feed, dirs, pcap, end, spark=spark), sim.oracle, feed) for feed in feeds}
    return sim.oracle, out


def failures(out: dict) -> list[str]:
    lines = []
    for feed, r in out.items():
        lines += [f"{feed}: missed {e.invariant} on {e.topic}-{e.partition} @{e.first}-{e.last} pid {e.producer_id}"
                  for e in r["missed"]]
        lines += [f"{feed}: false alarm {brief(f)}" for f in r["false_alarms"]]
        lines += [f"{feed}: too weak for {e.invariant}: {brief(f)}" for e, f in r["weak"]]
    return lines


def assert_exact(history: dict, **kw) -> None:
    oracle, out = verdicts(history, **kw)
    bad = failures(out)
    assert not bad, "history " + json.dumps(history) + "\n" + "\n".join(bad)
