"""`kaudit decode segments|pcap`: inputs -> rows (no audit), with the selection options."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from kaudit import __version__
from kaudit.cli_common import (
    CAPTURE_EXPECTED, EXIT_UNREADABLE, EXIT_USAGE, MAX_BATCH_BYTES, MAX_FRAME_BYTES, CapturesArg, JobsOpt,
    KafkaPortOpt, TlsKeylogOpt, MaxBatchOpt, MaxFrameOpt, PartitionOpt, PathsArg, ProducerIdOpt, SinceOpt, TopicOpt, TxnIdOpt,
    UntilOpt, captures_of, check_log_plan, err, exit_unreadable, inside, no_kafka_traffic, pcap_options, selection,
)
from kaudit.cli_engine import (
    Engine, EngineOpt, MasterOpt, SparkConfOpt, SparkUiOpt, ThresholdOpt, choose,
)

decode_app = typer.Typer(help="Decode inputs into rows (no audit).", no_args_is_help=True)


class RowFormat(str, Enum):
    ndjson = "ndjson"
    json = "json"
    table = "table"
    parquet = "parquet"


FormatOpt = Annotated[RowFormat, typer.Option("--format", "-f", help="Output format.")]
OutputOpt = Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file (a folder for parquet).")]
KindOpt = Annotated[Optional[list[str]], typer.Option("--kind", help="Only rows of these kinds (repeatable).")]


def _write(format: RowFormat, output, chunks, kind, sel, header_of, deep: bool = False):
    """Writes the selected rows; -> Counts (rows per kind decoded, and selected)."""
    from kaudit.report.writers import Counts, make_writer, write_all

    writer, handle = make_writer(format.value, str(output) if output else None, deep=deep)
    counts = Counts()
    try:
        write_all(writer, chunks, counts, set(kind) if kind else None, sel.rows if sel else None)
        writer.close(header_of(counts))
    finally:
        if handle is not None:
            handle.close()
    return counts


def _empty_selection(sel, counts) -> None:
    from kaudit.report.selection import CONTEXT_KINDS

    if sel and not any(n for k, n in counts.selected.items() if k not in CONTEXT_KINDS):
        err(f"[red]error:[/red] the selection ({sel.text()}) matches no row of the input")
        raise typer.Exit(EXIT_UNREADABLE)


@decode_app.command("segments")
def decode_segments(
    paths: PathsArg,
    format: FormatOpt = RowFormat.ndjson,
    output: OutputOpt = None,
    deep: Annotated[bool, typer.Option("--deep", help="Also decode every record (kind `record`).")] = False,
    max_batch_bytes: MaxBatchOpt = MAX_BATCH_BYTES,
    kind: KindOpt = None,
    jobs: JobsOpt = None,
    topic: TopicOpt = None, partition: PartitionOpt = None, producer_id: ProducerIdOpt = None,
    transactional_id: TxnIdOpt = None, since: SinceOpt = None, until: UntilOpt = None,
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
):
    """Decode every file a Kafka broker leaves in its log dirs: .log segments, indexes, transaction
    indexes, producer snapshots, checkpoints, and the internal topics' coordinator records.
    `--format table` lists the batches as DumpLogSegments does (and the records with --deep)."""
    from kaudit.engine.decoding import decode_segments as run

    check_output(format, output, kind, paths)
    sel = selection(topic, partition, producer_id, transactional_id, since, until)
    sp = choose(engine, paths, master, spark_conf, spark_threshold, spark_ui)
    facts, chunks = None, []
    if sp is None:
        plan, chunks = run([str(p) for p in paths], deep=deep, max_batch_bytes=max_batch_bytes, jobs=jobs,
                           progress=sys.stderr.isatty())
    else:
        from kaudit.engine import spark
        from kaudit.sources.logdir import plan as plan_of

        plan = plan_of([str(p) for p in paths])
        if plan.targets:   # the rows stream in; the facts (an executor's unreadable inputs) after them
            facts, chunks = spark.decoded_chunks("kafka-segments", [str(p) for p in paths],
                                                 {"max_batch_bytes": max_batch_bytes, "deep": str(deep).lower()}, sp)
    check_log_plan(plan, paths)
    for e in plan.errors:
        err(f"[yellow]warning:[/yellow] unreadable input: {e}")

    def header(counts):
        return {
            "tool": "kaudit", "version": __version__, "command": "decode segments",
            "engine": "local" if sp is None else "spark",
            "inputs": [os.path.abspath(p) for p in paths],
            **({"selection": sel.text()} if sel else {}),
            "coverage": {"files": sum(1 for t in plan.targets if t.kind != "skipped"),
                         "bytes": plan.total_bytes, "batch_bytes": counts.bytes_decoded,
                         "skipped": counts.rows.get("skipped", 0),
                         "decode_issues": counts.rows.get("decode_issue", 0)},
            "counts": dict(sorted(counts.rows.items())),
        }

    counts = _write(format, output, chunks, kind, sel, header, deep=deep)
    if facts is not None and facts.errors:
        exit_unreadable([e for _, e in sorted(facts.errors, key=lambda x: x[0])])
    if plan.errors:
        raise typer.Exit(EXIT_UNREADABLE)
    _empty_selection(sel, counts)


@decode_app.command("pcap")
def decode_pcap(
    files: CapturesArg,
    format: FormatOpt = RowFormat.ndjson,
    output: OutputOpt = None,
    kafka_port: KafkaPortOpt = None,
    tls_keylog: TlsKeylogOpt = None,
    jobs: JobsOpt = None,
    deep: Annotated[bool, typer.Option("--deep", help="Also decode the records inside batches.")] = False,
    kind: KindOpt = None,
    max_frame_bytes: MaxFrameOpt = MAX_FRAME_BYTES,
    max_batch_bytes: MaxBatchOpt = MAX_BATCH_BYTES,
    topic: TopicOpt = None, partition: PartitionOpt = None, producer_id: ProducerIdOpt = None,
    transactional_id: TxnIdOpt = None, since: SinceOpt = None, until: UntilOpt = None,
    engine: EngineOpt = Engine.auto,
    master: MasterOpt = None,
    spark_conf: SparkConfOpt = None,
    spark_threshold: ThresholdOpt = None,
    spark_ui: SparkUiOpt = False,
):
    """Decode every Kafka conversation of packet captures: frames paired with their responses,
    record batches of Produce and Fetch, transaction events, connections. SASL secrets are
    redacted."""
    from kaudit.engine.decoding import decode_pcaps

    check_output(format, output, kind, files)
    sel = selection(topic, partition, producer_id, transactional_id, since, until)
    names, missing = captures_of(files)
    if not names:
        exit_unreadable(missing, CAPTURE_EXPECTED)
    options = pcap_options(kafka_port, max_batch_bytes, max_frame_bytes, deep=deep, jobs=jobs,
                           tls_keylog=tls_keylog)
    summaries: dict = {}
    sp = choose(engine, [Path(n) for n in names], master, spark_conf, spark_threshold, spark_ui)
    if sp is None:
        errors, chunks = decode_pcaps(names, options, summaries)
    else:
        from kaudit.engine import spark

        errors, chunks = spark.decode_pcaps(names, options, summaries, sp)
    errors = missing + errors
    if errors and len(errors) >= len(names) + len(missing):
        exit_unreadable(errors, CAPTURE_EXPECTED)

    def header(counts):
        return {
            "tool": "kaudit", "version": __version__, "command": "decode pcap",
            "engine": "local" if sp is None else "spark",
            "inputs": [os.path.abspath(f) for f in names],
            **({"selection": sel.text()} if sel else {}),
            "coverage": {p: {"packets": s.packets, "tcp_packets": s.tcp_packets,
                             "connections": s.connections, "kafka_connections": s.kafka_connections,
                             "not_tcp": s.dropped, **({"tls": dict(s.tls)} if s.tls else {})}
                         for p, s in summaries.items()},
            "counts": dict(sorted(counts.rows.items())),
        }

    counts = _write(format, output, chunks, kind, sel, header, deep=deep)
    if errors:
        exit_unreadable(errors)
    why = no_kafka_traffic({p: {"kafka_connections": s.kafka_connections, "tls": s.tls} for p, s in summaries.items()},
                           kafka_port)
    if why:
        exit_unreadable([why], CAPTURE_EXPECTED)
    _empty_selection(sel, counts)


def check_output(format: RowFormat, output: Optional[Path], kind, inputs) -> None:
    from kaudit.model import KINDS

    if kind:
        unknown = sorted(set(kind) - set(KINDS))
        if unknown:
            err(f"[red]error:[/red] unknown --kind {', '.join(unknown)} (kinds: {', '.join(KINDS)})")
            raise typer.Exit(EXIT_USAGE)
    if format == RowFormat.parquet and output is None:
        err("[red]error:[/red] --format parquet writes one file per kind: give --output FOLDER")
        raise typer.Exit(EXIT_USAGE)
    if output is not None and inside(output, [p for p in inputs if p.exists()]):
        err("[red]error:[/red] --output is inside an input: kaudit never writes to what it audits")
        raise typer.Exit(EXIT_USAGE)
