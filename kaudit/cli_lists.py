"""The listings: `kaudit txn` (transactions of log dirs and captures) and `kaudit consumers`
(consumer groups of captures). cli.py registers them on the app; exit codes as cli.py says."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kaudit.cli_common import (
    EXIT_UNREADABLE, EXIT_USAGE, MAX_BATCH_BYTES, MAX_FRAME_BYTES, CapturesArg, KafkaPortOpt, PartitionOpt, PathsArg,
    ProducerIdOpt, SinceOpt, TlsKeylogOpt, TopicOpt, TxnIdOpt, UntilOpt, captures_of, check_log_plan, err,
    exit_unreadable, pcap_options, selection,
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
    format: Annotated[str, typer.Option("--format", "-f", help="json, ndjson or table.")] = "table",
    kafka_port: KafkaPortOpt = None,
    tls_keylog: TlsKeylogOpt = None,
):
    """List the consumer groups of captures: per group, member and partition, the records each
    member was served, the offsets it committed (TxnOffsetCommit with its transaction's outcome),
    and its membership with times (joins, assignments, rebalances, and why it left). Consumers
    with no group member in the capture are listed under "(no group)". A --group that matches
    nothing says so and exits 3."""
    from kaudit.report.consumers import describe, select_groups, write_consumers_table
    from kaudit.sources.consumers_input import capture_timelines

    if format not in ("json", "ndjson", "table"):
        err(f"[red]error:[/red] unknown format {format!r} (json, ndjson, table)")
        raise typer.Exit(EXIT_USAGE)
    options = pcap_options(kafka_port, MAX_BATCH_BYTES, MAX_FRAME_BYTES, tls_keylog=tls_keylog)
    errors, timelines = capture_timelines(captures_of(paths), options)
    if errors and not timelines:
        exit_unreadable(errors)
    rows = [r for tl in timelines for r in describe(tl)]
    out = select_groups(rows, group)
    if group and not out:
        err(f"[red]error:[/red] no consumer group {', '.join(group)} in the input: it holds "
            f"{', '.join(r['group'] for r in rows) or 'none'}")
        raise typer.Exit(EXIT_UNREADABLE)
    if not out:
        err("no consumer group and no consumer Fetch in the input")
    if format == "table":
        write_consumers_table(out)
    else:
        _echo_rows(out, format)
