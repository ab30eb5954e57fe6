"""One history judged on every feed: the report of what the auditor missed or invented."""

from __future__ import annotations

import json
import tempfile

from tests.sim.oracle import brief, judge
from tests.sim.runner import audit, feeds_of, simulate


def verdicts(history: dict, *, feeds=None, spark: bool = False) -> tuple[list, dict]:
    """(oracle, {feed: judge result}) of a history (`feeds`: by default the feeds the history is
    judged on - runner.feeds_of)."""
    feeds = feeds_of(history) if feeds is None else feeds
    with tempfile.TemporaryDirectory(prefix="kaudit-sim-") as d:
        sim, dirs, pcap, end = simulate(history, d)
        out = {}
        for feed in feeds:
            found = audit(feed, dirs, pcap, end, spark=spark)
            out[feed] = judge(found, sim.oracle, feed)
            if history.get("capture_fault"):
                # the capture point lost bytes: what the history put there may be unprovable from
                # what is left (not missed), but nothing may be invented (capture_faults.py)
                out[feed]["missed"], out[feed]["weak"] = [], []
            if feed == "segments":   # the consumer rules read the wire only: the log dirs hold no consumer
                out[feed]["wire_only"] = [f for f in found if f["rule"] in _consumer_rules()]
    return sim.oracle, out


def _consumer_rules() -> set:
    from kaudit.audit.consumers import rules, rules_poll  # noqa: F401  (registers them)
    from kaudit.audit.registry import fold_rules

    return {r.id for r in fold_rules(rules.FOLD_NAME)}


def failures(out: dict) -> list[str]:
    lines = []
    for feed, r in out.items():
        lines += [f"{feed}: missed {e.invariant} on {e.topic}-{e.partition} @{e.first}-{e.last} pid {e.producer_id}"
                  for e in r["missed"]]
        lines += [f"{feed}: false alarm {brief(f)}" for f in r["false_alarms"]]
        lines += [f"{feed}: too weak for {e.invariant}: {brief(f)}" for e, f in r["weak"]]
        lines += [f"{feed}: a consumer rule on the log dirs: {brief(f)}" for f in r.get("wire_only", ())]
    return lines


def assert_exact(history: dict, **kw) -> None:
    oracle, out = verdicts(history, **kw)
    bad = failures(out)
    assert not bad, "history " + json.dumps(history) + "\n" + "\n".join(bad)
