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
    if pcaps:
        from kaudit.engine.decoding import decode_pcaps

        _, chunks = decode_pcaps(pcaps, options, {})
        for kind, table in chunks:
            rows.add(kind, table)
    return rows.result()
