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
            if not (feed != "segments" and history.get("capture_fault")):
                out[feed]["stories"] = torn_stories(feed, dirs, pcap, sim.oracle)
    return sim.oracle, out


def torn_stories(feed: str, dirs, pcap, oracle) -> list[dict]:
    """`kaudit txn`'s transactions told torn (their partitions ended apart) where the history
    tore none, or on the wire ended by no one: stories the evidence does not give, even where no
    finding above info says them (3.0.2's 04-ctp-java told its group's offsets markers as one
    transaction's: torn; a simulated one, each as a transaction of its own). On `audit` (wire
    and disk together) a capture's transaction the log dirs hold is one row with the log's: a
    row of the capture's alone beside one of the log's alone, of one producer id and epoch no
    injected anomaly names, is a failure."""
    from tests.sim.oracle import INVARIANTS

    if any("torn-transaction" in INVARIANTS[e.invariant].rules + INVARIANTS[e.invariant].also
           for e in oracle if feed in e.feeds):
        return []
    from kaudit.engine import local
    from kaudit.sources.pcap import PcapOptions

    if feed == "audit":   # one row per transaction: a capture's the log dirs hold too joins it
        from kaudit.audit.txn.txn_view import data_producer, merge_rows

        wire = local.wire_transactions([str(pcap)], PcapOptions())[1]
        rows = merge_rows(local.list_transactions([str(d) for d in dirs])[1], wire)
        # told apart: a row of each side alone under one producer id and epoch (a transaction the
        # log no longer holds - compacted away, or lost - stays the capture's alone)
        told = {e.producer_id for e in oracle if feed in e.feeds}
        alone = {data_producer(r) for r in rows if r.get("source") != "wire" and "wire" not in r}
        return [r for r in rows if r.get("source") == "wire" and r["producer_id"] not in told
                and data_producer(r) in alone]
    if feed == "pcap":
        _, rows = local.wire_transactions([str(pcap)], PcapOptions())
    else:
        _, rows = local.list_transactions([str(d) for d in dirs])
    # on the wire, whose capture holds the producers' and coordinators' requests, an ended
    # transaction no request ended is one whose markers the replay told apart from it
    return [r for r in rows if r["outcome"] == "torn"
            or (feed == "pcap" and r["outcome"] in ("COMMIT", "ABORT") and not r.get("ended_by"))]


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
        lines += [f"{feed}: kaudit txn told {t['transaction']} {t['outcome']}"
                  f"{'' if t.get('ended_by') else ', ended by no one'}: "
                  + ", ".join(f"{p['partition']} {(p['marker'] or {}).get('result')}" for p in t["parts"])
                  for t in r.get("stories", ())]
    return lines


def assert_exact(history: dict, **kw) -> None:
    oracle, out = verdicts(history, **kw)
    bad = failures(out)
    assert not bad, "history " + json.dumps(history) + "\n" + "\n".join(bad)
