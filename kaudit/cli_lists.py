"""The listings: `kaudit txn` (transactions of log dirs and captures) and `kaudit consumers`
(consumer groups of captures). cli.py registers them on the app; exit codes as cli.py says."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kaudit.cli_common import (
    EXIT_UNREADABLE, EXIT_USAGE, MAX_BATCH_BYTES, MAX_FRAME_BYTES, CapturesArg, KafkaPortOpt, PartitionOpt, PathsArg,
    ProducerIdOpt, SinceOpt, TlsKeylogOpt, TopicOpt, TxnIdOpt, UntilOpt, captures_of, check_log_plan, err,
    exit_unreadable, inside, pcap_options, selection,
)
from kaudit.cli_engine import Engine, EngineOpt, MasterOpt, SparkConfOpt, SparkUiOpt, ThresholdOpt, choose


def list_transactions(
    paths: PathsArg,
    transactional_id: TxnIdOpt = None,
    producer_id: ProducerIdOpt = None,
    topic: TopicOpt = None, partition: PartitionOpt = None, since: SinceOpt = None, until: UntilOpt = None,
    format: Annotated[str, typer.Option("--format", "-f", help="json, ndjson or table.")] = "table",
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
    kafka_port: KafkaPortOpt = None,
    tls_keylog: TlsKeylogOpt = None,
):
    """List the transactions of log dirs, captures or both: partitions, first offsets, markers
    (offset, result, coordinator epoch, who wrote them), the coordinator's states with times (from
    __transaction_state, or the requests on the wire), the outcome and who ended it. Given both,
    one transaction seen on the wire and in the log is one row (`wire` holds the capture's view);
    --transactional-id follows the id across its producer ids. A selection that matches no
    transaction says so and exits 3."""
    from kaudit.audit.txn.txn_view import merge_rows
    from kaudit.engine.local import list_transactions as list_transactions_of
    from kaudit.engine.local import wire_transactions
    from kaudit.report.transactions import select_transactions
    from kaudit.sources.inputs import split_inputs
    from kaudit.sources.logdir import plan as plan_of
    from kaudit.sources.topics import from_plan

    if format not in ("json", "ndjson", "table"):
        err(f"[red]error:[/red] unknown format {format!r} (json, ndjson, table)")
        raise typer.Exit(EXIT_USAGE)
    sel = selection(topic, partition, producer_id, transactional_id, since, until)
    captures, names = split_inputs([str(p) for p in paths])
    wire: list = []
    errors: list = []
    if captures:
        options = pcap_options(kafka_port, MAX_BATCH_BYTES, MAX_FRAME_BYTES, tls_keylog=tls_keylog)
        errors, wire = wire_transactions(captures, options,
                                         topic_names=from_plan(plan_of(names)) if names else None)
    every, plan = wire, None
    if names or not captures:
        log_paths = [Path(n) for n in names]
        sp = choose(engine, log_paths, master, spark_conf, spark_threshold, spark_ui)
        selected = None
        if sp is not None and any(p.exists() for p in log_paths):
            from kaudit.engine import spark

            selected = spark.transactions_selection([str(p) for p in log_paths if p.exists()], sp)
        plan, disk = list_transactions_of(names, selected=selected)
        every = merge_rows(disk, wire) if captures else disk
        errors = errors + list(plan.errors)
        if not captures:
            if plan.errors and not plan.targets:
                exit_unreadable(plan.errors)
            check_log_plan(plan, log_paths)
    if errors and not every and (plan is None or not plan.targets) and len(errors) >= len(paths):
        exit_unreadable(errors)
    out = select_transactions(every, sel)
    if sel and not out:
        known = sorted({t["transactional_id"] for t in every if t["transactional_id"]})
        err(f"[red]error:[/red] no transaction matches the selection ({sel.text()}): the input holds "
            f"{len(every)} transaction(s)" + (f" of transactional ids {', '.join(known[:12])}" if known else ""))
        raise typer.Exit(EXIT_UNREADABLE)
    if format == "table":
        from kaudit.report.transactions import write_transactions_table

        write_transactions_table(out)
    else:
        _echo_rows(out, format)


def _echo_rows(rows: list[dict], format: str) -> None:
    """A listing's rows to stdout: one JSON array, or one JSON object a line (ndjson)."""
    import json

    if format == "json":
        typer.echo(json.dumps(rows, indent=1))
    else:
        for r in rows:
            typer.echo(json.dumps(r))


def list_consumers(
    paths: CapturesArg,
    group: Annotated[Optional[list[str]], typer.Option("--group", "-g", help="Only this consumer group "
                                                       "(repeatable).")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="json, ndjson, table or html (charts: each "
                                        "member's served ranges and commits against time, rebalances "
                                        "marked, the consumer rules' findings shaded).")] = "table",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the listing here.")] = None,
    kafka_port: KafkaPortOpt = None,
    tls_keylog: TlsKeylogOpt = None,
):
    """List the consumer groups of captures: per group, member and partition, the records each
    member was served, the offsets it committed (TxnOffsetCommit with its transaction's outcome),
    and its membership with times (joins, assignments, rebalances, and why it left). Consumers
    with no group member in the capture are listed under "(no group)". A --group the capture
    does not hold says so, names the groups it holds, and exits 0."""
    from kaudit.report.consumers import describe, select_groups
    from kaudit.sources.consumers_input import capture_timelines

    if format not in CONSUMER_FORMATS:
        err(f"[red]error:[/red] unknown format {format!r} ({', '.join(CONSUMER_FORMATS)})")
        raise typer.Exit(EXIT_USAGE)
    if output is not None and inside(output, [p for p in paths if p.exists()]):
        err("[red]error:[/red] --output is inside an input: kaudit never writes to what it reads")
        raise typer.Exit(EXIT_USAGE)
    options = pcap_options(kafka_port, MAX_BATCH_BYTES, MAX_FRAME_BYTES, tls_keylog=tls_keylog)
    errors, timelines = capture_timelines(captures_of(paths), options)
    if errors and not timelines:
        exit_unreadable(errors)
    rows = [r for tl in timelines for r in describe(tl)]
    out = select_groups(rows, group)
    if group and not out:
        # exit 0, not 3 (unreadable input) nor 2 (usage): the capture was read and the command is
        # well formed; that the group did nothing in this capture is the answer (a script asking
        # each capture about one group must not take it for a failure). The message names the
        # groups the capture holds, for a misspelt name.
        err(f"no consumer group {', '.join(group)} in the input: it holds "
            f"{', '.join(r['group'] for r in rows) or 'no consumer group'}")
    elif not out:
        err("no consumer group and no consumer Fetch in the input")
    stream = sys.stdout if output is None else open(output, "w", encoding="utf-8")
    try:
        if format == "html":
            _consumers_html(timelines, out, paths, stream)
        else:
            _write_rows(out, format, stream)
    finally:
        if output is not None:
            stream.close()


CONSUMER_FORMATS = ("json", "ndjson", "table", "html")


def _write_rows(rows: list[dict], format: str, stream) -> None:
    import json

    from kaudit.report.consumers import write_consumers_table

    if format == "table":
        write_consumers_table(rows, stream)
    elif format == "json":
        stream.write(json.dumps(rows, indent=1) + "\n")
    else:
        stream.writelines(json.dumps(r) + "\n" for r in rows)
    stream.flush()


def _consumers_html(timelines: list, rows: list[dict], paths, stream) -> None:
    """The page of `rows`' groups: their partitions' charts, with the consumer rules' findings."""
    from kaudit.audit.consumers import rules
    from kaudit.report.charts_consumers import finding_key, panels
    from kaudit.report.consumers_html import write_consumers_html

    wanted = {r["group"] for r in rows}
    every, findings, keys = [], [], {}
    for tl in timelines:
        fs = rules.judge(tl, tl.batches)
        for f in fs:
            k = finding_key(tl, f)
            if k is not None and k[0] in wanted:
                keys[f["id"]] = (k[0], f"{k[1][0]}-{k[1][1]}")
                findings.append(f)
        every += [p for p in panels(tl) if p["group"] in wanted]
    write_consumers_html(rows, every, findings, keys, [str(p) for p in paths], stream)
