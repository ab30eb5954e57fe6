"""The rows the HTML report draws, read again from the inputs once the audit has named the
incidents (report/chart_rows.py keeps them): the batches of the producers involved - on their
partitions only: a fleet's log dirs are re-read for those partitions and the coordinator's, not
whole -, the coordinator's transaction states, and a capture's request/response pairs.
"""

from __future__ import annotations

from kaudit.report.chart_rows import ChartRows, involved

TXN_STATE_TOPIC = "__transaction_state"


def gather(report: dict, pcaps: list[str], segments: list[str], options) -> dict:
    pids, tps, tids = involved(report)
    rows = ChartRows(pids, tps, tids)
    if segments and (pids or tids):
        from kaudit.sources.logdir import plan
        from kaudit.sources.segments import Options, decode_target

        wanted = {tuple(tp.rsplit("-", 1)) for tp in tps}
        for t in plan(segments).targets:
            if t.kind != "log" or t.topic is None:
                continue
            if (t.topic, str(t.partition)) in wanted or (tids and t.topic == TXN_STATE_TOPIC):
                for kind, table in decode_target(t, Options()):
                    rows.add(kind, table)
    consumers = consumer_findings(report)
    tables = None
    if pcaps:
        from kaudit.engine.decoding import decode_pcaps
        from kaudit.sources.consumers_input import ConsumerTables

        tables = ConsumerTables() if consumers else None
        _, chunks = decode_pcaps(pcaps, options, {})
        for kind, table in chunks:
            rows.add(kind, table)
            if tables is not None:
                tables.add(kind, table)
    out = rows.result()
    if tables:
        out["consumers"] = consumer_panels(tables.timelines(), consumers)
    return out


def consumer_findings(report: dict) -> list[dict]:
    """The report's findings of the consumer rules (the consumers fold's), outside coverage."""
    from kaudit.audit.registry import fold_rules

    ids = {r.id for r in fold_rules("consumers")}
    kinds = {i["id"]: i["kind"] for i in report["incidents"]}
    return [f for f in report.get("findings") or () if f["rule"] in ids
            and kinds.get(f.get("incident"), "coverage") != "coverage"]


def consumer_panels(tl, findings: list[dict]) -> list[dict]:
    """The consumer charts' panels of the (group, partition)s the findings are on; each finding
    names its panel (`finding_ids`)."""
    from kaudit.report.charts_consumers import finding_key, panels

    keys: dict[tuple, list] = {}
    for f in findings:
        k = finding_key(tl, f)
        if k is not None:
            keys.setdefault(k, []).append(f["id"])
    out = panels(tl, list(keys))
    for p in out:
        p["finding_ids"] = next(v for (g, tp), v in keys.items() if g == p["group"] and f"{tp[0]}-{tp[1]}" == p["tp"])
    return out
