"""The typer layer: arguments -> engine -> writer -> exit code.

Exit codes: 0 clean, 1 findings at or above --fail-on (audit commands), 2 usage, 3 unreadable input.
Machine output goes to stdout or --output; human messages and progress to stderr.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kaudit import __version__, cli_engine
from kaudit.cli_engine import (
    Engine, EngineOpt, MasterOpt, ParquetOpt, SparkConfOpt, SparkUiOpt, ThresholdOpt, choose, run_audit,
)

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3

app = typer.Typer(
    name="kaudit",
    help="Kafka protocol analyzer and transaction auditor.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
decode_app = typer.Typer(help="Decode inputs into rows (no audit).", no_args_is_help=True)
app.add_typer(decode_app, name="decode")


class RowFormat(str, Enum):
    ndjson = "ndjson"
    json = "json"
    table = "table"
    parquet = "parquet"


PathsArg = Annotated[list[Path], typer.Argument(help="Log dirs, folders of log dirs, partition dirs or files.")]
KafkaPortOpt = Annotated[Optional[list[int]], typer.Option(
    "--kafka-port", help="Broker port (repeatable; default 9092). Kafka on other ports is "
    "found from its request headers.")]
MaxFrameOpt = Annotated[int, typer.Option("--max-frame-bytes", min=1024, help="Largest Kafka frame accepted.")]
MaxBatchOpt = Annotated[int, typer.Option("--max-batch-bytes", min=1024,
                                          help="Largest batch (and decompressed payload) accepted.")]
JobsOpt = Annotated[Optional[int], typer.Option(
    "--jobs", "-j", min=1, help="Processes of the local engine. Default: captures of 64 MiB or more "
    "one per core (at most 4), segments 1 (their rows cost more to move between processes than "
    "to decode). Same rows and findings whatever the number.")]
MAX_FRAME_BYTES, MAX_BATCH_BYTES = 100 * 1024 * 1024, 64 * 1024 * 1024


def _pcap_options(kafka_port, max_batch_bytes: int, max_frame_bytes: int, deep: bool = False,
                  jobs: int | None = None):
    from kaudit.sources.pcap import PcapOptions

    return PcapOptions(kafka_ports=frozenset(kafka_port or [9092]), deep=deep,
                       max_batch_bytes=max_batch_bytes, max_frame_bytes=max_frame_bytes, jobs=jobs)


def _exit_unreadable(errors) -> None:
    for e in errors:
        _err(f"[red]error:[/red] unreadable input: {e}")
    raise typer.Exit(EXIT_UNREADABLE)


def _err(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(message, highlight=False)


def _version(value: bool):
    if value:
        typer.echo(f"kaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True,
                                                    help="Print the version and exit.")] = None,
):
    """kaudit reads Kafka packet captures and broker log dirs, decodes every frame and batch, and
    audits producers and transactions."""


def _inside(child: Path, parents: list[Path]) -> bool:
    c = child.resolve()
    for p in parents:
        p = p.resolve()
        if c == p or p in c.parents:
            return True
    return False


@decode_app.command("segments")
def decode_segments(
    paths: PathsArg,
    format: Annotated[RowFormat, typer.Option("--format", "-f", help="Output format.")] = RowFormat.ndjson,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file (a folder for parquet).")] = None,
    deep: Annotated[bool, typer.Option("--deep", help="Also decode every record (kind `record`).")] = False,
    max_batch_bytes: MaxBatchOpt = MAX_BATCH_BYTES,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="Only rows of these kinds (repeatable).")] = None,
    jobs: JobsOpt = None,
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
):
    """Decode every file a Kafka broker leaves in its log dirs: .log segments, indexes, transaction
    indexes, producer snapshots, checkpoints, and the internal topics' coordinator records."""
    from kaudit.engine.local import decode_segments as run
    from kaudit.report.writers import Counts, make_writer, write_all

    _check_output(format, output, kind, paths)

    sp = choose(engine, paths, master, spark_conf, spark_threshold, spark_ui)
    if sp is None:
        plan, chunks = run([str(p) for p in paths], deep=deep, max_batch_bytes=max_batch_bytes, jobs=jobs,
                           progress=sys.stderr.isatty())
    else:
        from kaudit.engine import spark
        from kaudit.sources.logdir import plan as plan_of

        plan = plan_of([str(p) for p in paths])
        chunks = [] if not plan.targets else spark.decoded_chunks(
            "kafka-segments", [str(p) for p in paths],
            {"max_batch_bytes": max_batch_bytes, "deep": str(deep).lower()}, sp)[1]
    if plan.errors and not plan.targets:
        _exit_unreadable(plan.errors)
    for e in plan.errors:
        _err(f"[yellow]warning:[/yellow] unreadable input: {e}")

    writer, handle = make_writer(format.value, str(output) if output else None)
    counts = Counts()
    try:
        write_all(writer, chunks, counts, set(kind) if kind else None)
        header = {
            "tool": "kaudit",
            "version": __version__,
            "command": "decode segments",
            "engine": "local" if sp is None else "spark",
            "inputs": [os.path.abspath(p) for p in paths],
            "coverage": {"files": sum(1 for t in plan.targets if t.kind != "skipped"),
                         "bytes": plan.total_bytes, "batch_bytes": counts.bytes_decoded,
                         "skipped": counts.rows.get("skipped", 0),
                         "decode_issues": counts.rows.get("decode_issue", 0)},
            "counts": dict(sorted(counts.rows.items())),
        }
        writer.close(header)
    finally:
        if handle is not None:
            handle.close()
    if plan.errors:
        raise typer.Exit(EXIT_UNREADABLE)


def _bounded_memory() -> None:
    # Arrow's default jemalloc pool keeps freed chunks mapped; with the system allocator the
    # decoder's resident memory stays flat across a large input (measured: 344 -> 262 MB peak).
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())


@decode_app.command("pcap")
def decode_pcap(
    files: Annotated[list[Path], typer.Argument(help="pcap or pcapng capture files.")],
    format: Annotated[RowFormat, typer.Option("--format", "-f", help="Output format.")] = RowFormat.ndjson,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file (a folder for parquet).")] = None,
    kafka_port: KafkaPortOpt = None,
    jobs: JobsOpt = None,
    deep: Annotated[bool, typer.Option("--deep", help="Also decode the records inside batches.")] = False,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="Only rows of these kinds (repeatable).")] = None,
    max_frame_bytes: MaxFrameOpt = MAX_FRAME_BYTES,
    max_batch_bytes: MaxBatchOpt = MAX_BATCH_BYTES,
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
):
    """Decode every Kafka conversation of packet captures: frames paired with their responses,
    record batches of Produce and Fetch, transaction events, connections. SASL secrets are
    redacted."""
    from kaudit.engine.local import decode_pcaps
    from kaudit.report.writers import Counts, make_writer, write_all

    _check_output(format, output, kind, files)
    options = _pcap_options(kafka_port, max_batch_bytes, max_frame_bytes, deep=deep, jobs=jobs)
    summaries: dict = {}
    sp = choose(engine, files, master, spark_conf, spark_threshold, spark_ui)
    if sp is None:
        errors, chunks = decode_pcaps([str(f) for f in files], options, summaries)
    else:
        from kaudit.engine import spark

        errors, chunks = spark.decode_pcaps([str(f) for f in files], options, summaries, sp)
    if errors and len(errors) == len(files):
        _exit_unreadable(errors)
    writer, handle = make_writer(format.value, str(output) if output else None)
    counts = Counts()
    try:
        write_all(writer, chunks, counts, set(kind) if kind else None)
        header = {
            "tool": "kaudit", "version": __version__, "command": "decode pcap",
            "engine": "local" if sp is None else "spark",
            "inputs": [os.path.abspath(f) for f in files],
            "coverage": {p: {"packets": s.packets, "tcp_packets": s.tcp_packets,
                             "connections": s.connections, "kafka_connections": s.kafka_connections,
                             "not_tcp": s.dropped} for p, s in summaries.items()},
            "counts": dict(sorted(counts.rows.items())),
        }
        writer.close(header)
    finally:
        if handle is not None:
            handle.close()
    if errors:
        _exit_unreadable(errors)


class ReportFormat(str, Enum):
    table = "table"
    json = "json"
    ndjson = "ndjson"
    sarif = "sarif"


class Severity(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    critical = "critical"


RulesOpt = Annotated[Optional[list[str]], typer.Option(
    help="Only these rules (repeatable or comma-separated; see `kaudit rules`).")]
IgnoreOpt = Annotated[Optional[list[str]], typer.Option(
    help="Skip these rules (repeatable or comma-separated).")]
FormatOpt = Annotated[ReportFormat, typer.Option("--format", "-f", help="Report format.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the report here.")]
FailOpt = Annotated[Severity, typer.Option("--fail-on", help="Exit 1 when a finding is at or above this severity.")]
NowOpt = Annotated[Optional[str], typer.Option(
    "--now", help="Reference time for ages and timeouts: ms since the epoch or ISO-8601 "
    "(default: the latest broker-side timestamp in the evidence, or the last packet).")]


def _rule_list(values) -> list[str]:
    from kaudit.audit import RULES

    out = [v.strip() for item in values or [] for v in item.split(",") if v.strip()]
    unknown = sorted(set(out) - set(RULES))
    if unknown:
        _err(f"[red]error:[/red] unknown rule {', '.join(unknown)} (see `kaudit rules`)")
        raise typer.Exit(EXIT_USAGE)
    return out


def _parse_now(now: Optional[str]) -> Optional[int]:
    if now is None:
        return None
    if now.lstrip("-").isdigit():
        return int(now)
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(now.replace("Z", "+00:00"))
    except ValueError:
        _err(f"[red]error:[/red] --now {now!r}: give ms since the epoch or an ISO-8601 time")
        raise typer.Exit(EXIT_USAGE)
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def _report(run, command: str, inputs, format: ReportFormat, output: Optional[Path], fail_on: Severity) -> None:
    from kaudit.audit import at_or_above
    from kaudit.report.findings import WRITERS, build_report

    report = build_report(run, command, [str(p) for p in inputs])
    if output is None:
        WRITERS[format.value](report, sys.stdout)
        sys.stdout.flush()
    else:
        with open(output, "w") as out:
            WRITERS[format.value](report, out)
    if run.errors:
        _exit_unreadable(run.errors)
    if any(at_or_above(f["severity"], fail_on.value) for f in run.findings):
        raise typer.Exit(EXIT_FINDINGS)


def _check_report_output(output: Optional[Path], inputs) -> None:
    if output is not None and _inside(output, [p for p in inputs if p.exists()]):
        _err("[red]error:[/red] --output is inside an input: kaudit never writes to what it audits")
        raise typer.Exit(EXIT_USAGE)


@app.command("segments")
def audit_segments(
    paths: PathsArg,
    format: FormatOpt = ReportFormat.table,
    output: OutputOpt = None,
    fail_on: FailOpt = Severity.error,
    now: NowOpt = None,
    select: RulesOpt = None,
    ignore: IgnoreOpt = None,
    jobs: JobsOpt = None,
    max_batch_bytes: MaxBatchOpt = MAX_BATCH_BYTES,
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
    parquet: ParquetOpt = None,
):
    """Audit brokers' log dirs: decode every segment and report duplicates, sequence anomalies,
    zombie epochs and corruption, with evidence (file, byte position) and remediation."""
    _check_report_output(output, paths)
    _check_report_output(parquet, paths)
    sel, ign, now_ms = _rule_list(select), _rule_list(ignore), _parse_now(now)
    names = [str(p) for p in paths]
    sp = choose(engine, paths, master, spark_conf, spark_threshold, spark_ui)

    def local(tap):
        from kaudit.engine.local import audit_segments

        return audit_segments(names, now_ms=now_ms, select=sel, ignore=ign, max_batch_bytes=max_batch_bytes,
                              jobs=jobs, progress=sys.stderr.isatty(), tap=tap)

    def on_spark(sp):
        from kaudit.engine import spark

        return spark.audit_segments(names, now_ms=now_ms, select=sel, ignore=ign,
                                    max_batch_bytes=max_batch_bytes, spark_options=sp)

    run = run_audit(sp, parquet, "segments", local, on_spark, "kafka-segments", names,
                    lambda: {"max_batch_bytes": max_batch_bytes})
    if run.errors and not run.coverage.get("files"):
        _exit_unreadable(run.errors)
    _report(run, "segments", paths, format, output, fail_on)


@app.command("pcap")
def audit_pcap(
    files: Annotated[list[Path], typer.Argument(help="pcap or pcapng capture files (rotated files form one timeline).")],
    format: FormatOpt = ReportFormat.table,
    output: OutputOpt = None,
    fail_on: FailOpt = Severity.error,
    now: NowOpt = None,
    select: RulesOpt = None,
    ignore: IgnoreOpt = None,
    kafka_port: KafkaPortOpt = None,
    jobs: JobsOpt = None,
    max_frame_bytes: MaxFrameOpt = MAX_FRAME_BYTES,
    max_batch_bytes: MaxBatchOpt = MAX_BATCH_BYTES,
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
    parquet: ParquetOpt = None,
):
    """Audit packet captures: producers' sequences and epochs as the broker answered them, retries
    and their outcome, unanswered requests and error responses, with frame numbers as evidence."""
    _check_report_output(output, files)
    _check_report_output(parquet, files)
    sel, ign, now_ms = _rule_list(select), _rule_list(ignore), _parse_now(now)
    options = _pcap_options(kafka_port, max_batch_bytes, max_frame_bytes, deep=False, jobs=jobs)
    names = [str(f) for f in files]
    sp = choose(engine, files, master, spark_conf, spark_threshold, spark_ui)

    def local(tap):
        from kaudit.engine.local import audit_pcaps

        return audit_pcaps(names, options, now_ms=now_ms, select=sel, ignore=ign, tap=tap)

    def on_spark(sp):
        from kaudit.engine import spark

        return spark.audit_pcaps(names, options, now_ms=now_ms, select=sel, ignore=ign, spark_options=sp)

    def source_opts():
        from kaudit.engine.spark import pcap_source_options

        return pcap_source_options(options)

    run = run_audit(sp, parquet, "pcap", local, on_spark, "kafka-pcap", names, source_opts)
    if run.errors and len(run.errors) >= len(files):
        _exit_unreadable(run.errors)
    _report(run, "pcap", files, format, output, fail_on)


@app.command("audit")
def audit_both(
    pcap: Annotated[list[Path], typer.Option("--pcap", help="pcap or pcapng capture files (repeatable).")],
    segments: Annotated[list[Path], typer.Option("--segments", help="Log dirs, folders of log dirs, partition dirs or files (repeatable).")],
    format: FormatOpt = ReportFormat.table,
    output: OutputOpt = None,
    fail_on: FailOpt = Severity.error,
    now: NowOpt = None,
    select: RulesOpt = None,
    ignore: IgnoreOpt = None,
    kafka_port: KafkaPortOpt = None,
    jobs: JobsOpt = None,
    max_frame_bytes: MaxFrameOpt = MAX_FRAME_BYTES,
    max_batch_bytes: MaxBatchOpt = MAX_BATCH_BYTES,
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
):
    """Audit captures and log dirs together: both audits, then their join on (topic, partition,
    producer id, epoch, sequence): unanswered Produce requests resolved by the log (stored once,
    twice, never), acknowledged writes missing from the log and EndTxn results that differ from
    the stored markers (outcome-mismatch)."""
    from kaudit.engine.joint import audit_both as run_audit

    inputs = list(pcap) + list(segments)
    _check_report_output(output, inputs)
    sel, ign, now_ms = _rule_list(select), _rule_list(ignore), _parse_now(now)
    options = _pcap_options(kafka_port, max_batch_bytes, max_frame_bytes, deep=False)
    sp = choose(engine, inputs, master, spark_conf, spark_threshold, spark_ui)
    run = run_audit([str(f) for f in pcap], [str(p) for p in segments], options, now_ms=now_ms,
                    select=sel, ignore=ign, max_batch_bytes=max_batch_bytes, jobs=jobs,
                    progress=sys.stderr.isatty(), spark_options=sp)
    if run.errors and not run.coverage["disk"].get("files") and len(run.errors) >= len(pcap):
        _exit_unreadable(run.errors)
    _report(run, "audit", inputs, format, output, fail_on)


@app.command("txn")
def list_transactions(
    paths: PathsArg,
    transactional_id: Annotated[Optional[str], typer.Option("--transactional-id", help="Only this transactional id.")] = None,
    producer_id: Annotated[Optional[int], typer.Option("--producer-id", help="Only this producer id.")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="json, ndjson or table.")] = "table",
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
    kafka_port: KafkaPortOpt = None,
):
    """List the transactions of log dirs, captures or both: partitions, first offsets, markers
    (offset, result, coordinator epoch, who wrote them), the coordinator's states with times (from
    __transaction_state, or the requests on the wire), the outcome and who ended it. Given both,
    one transaction seen on the wire and in the log is one row (`wire` holds the capture's view);
    --transactional-id follows the id across its producer ids."""
    import json

    from kaudit.audit.txn_view import merge_rows
    from kaudit.engine.local import list_transactions as list_transactions_of
    from kaudit.engine.local import wire_transactions
    from kaudit.sources.inputs import split_inputs
    from kaudit.sources.logdir import plan as plan_of
    from kaudit.sources.topics import from_plan

    if format not in ("json", "ndjson", "table"):
        _err(f"[red]error:[/red] unknown format {format!r} (json, ndjson, table)")
        raise typer.Exit(EXIT_USAGE)
    captures, names = split_inputs([str(p) for p in paths])
    wire: list = []
    errors: list = []
    if captures:
        errors, wire = wire_transactions(captures, _pcap_options(kafka_port, MAX_BATCH_BYTES, MAX_FRAME_BYTES),
                                         transactional_id=transactional_id, producer_id=producer_id,
                                         topic_names=from_plan(plan_of(names)) if names else None)
    out, plan = wire, None
    if names or not captures:
        sp = choose(engine, [Path(n) for n in names], master, spark_conf, spark_threshold, spark_ui)
        selected = None
        if sp is not None and any(os.path.exists(n) for n in names):
            from kaudit.engine import spark

            selected = spark.transactions_selection([n for n in names if os.path.exists(n)], sp)
        plan, disk = list_transactions_of(names, transactional_id=transactional_id, producer_id=producer_id,
                                          selected=selected)
        out = merge_rows(disk, wire) if captures else disk
        errors = errors + list(plan.errors)
    if errors and not out and (plan is None or not plan.targets) and len(errors) >= len(paths):
        _exit_unreadable(errors)
    if format == "json":
        typer.echo(json.dumps(out, indent=1))
    elif format == "ndjson":
        for t in out:
            typer.echo(json.dumps(t))
    else:
        from kaudit.report.transactions import write_transactions_table

        write_transactions_table(out)


@app.command("rules")
def list_rules(
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
):
    """List the audit rules: id, default severity, where they look (disk, wire) and what they flag."""
    from kaudit.audit import RULES

    rows = [{"id": r.id, "severity": r.severity, "scope": r.scope, "title": r.title}
            for r in sorted(RULES.values(), key=lambda r: r.id)]
    if format == "json":
        import json

        typer.echo(json.dumps(rows, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table("rule", "severity", "scope", "flags")
    t.columns[0].no_wrap = True  # ids are what users type: never wrapped
    for r in rows:
        t.add_row(r["id"], r["severity"], r["scope"], r["title"])
    Console().print(t)


@app.command("explain")
def explain(rule: Annotated[str, typer.Argument(help="A rule id (see `kaudit rules`).")]):
    """Print a rule's documentation: its invariant, the Kafka class or KIP it mirrors, benign
    causes, and the remediation."""
    from kaudit.audit import RULES

    r = RULES.get(rule)
    if r is None:
        _err(f"[red]error:[/red] unknown rule {rule!r} (see `kaudit rules`)")
        raise typer.Exit(EXIT_USAGE)
    typer.echo(f"{r.id} ({r.severity}, {r.scope}): {r.title}\n\n{r.doc}\n\nRemediation: {r.remediation}")


def _check_output(format: RowFormat, output: Optional[Path], kind, inputs) -> None:
    from kaudit.model import KINDS

    if kind:
        unknown = sorted(set(kind) - set(KINDS))
        if unknown:
            _err(f"[red]error:[/red] unknown --kind {', '.join(unknown)} (kinds: {', '.join(KINDS)})")
            raise typer.Exit(EXIT_USAGE)
    if format == RowFormat.parquet and output is None:
        _err("[red]error:[/red] --format parquet writes one file per kind: give --output FOLDER")
        raise typer.Exit(EXIT_USAGE)
    if output is not None and _inside(output, [p for p in inputs if p.exists()]):
        _err("[red]error:[/red] --output is inside an input: kaudit never writes to what it audits")
        raise typer.Exit(EXIT_USAGE)


def main() -> None:
    cli_engine.LEAN_LOCAL = True
    _bounded_memory()
    try:
        app()
    except BrokenPipeError:  # `kaudit ... | head`: not an error
        sys.stderr.close()
        sys.exit(EXIT_OK)
