"""The Spark engine (DESIGN.md §5): the sources as Python data sources, the folds unchanged.

A task decodes its splits and selects, per fold, the rows and columns the fold reads (the fold
envelope, spark_folds); each per-key fold then runs as
`repartition(key).sortWithinPartitions(key, order).mapInArrow(fold)`. Log dirs take one job and
one shuffle: a partition read whole by one task is folded there (whole_key_bytes), a bigger one's
rows are shuffled keyed by partition, the transactions across partitions keyed by producer id
(spark_folds). On the wire, folds whose `prepare` needs the whole selection at once
(the wire transactions) get it on the driver and run there as in the local engine: a capture's
selection is small. The coverage counters come from one meta row per split (on the disk side,
a copy of it for every shuffle partition). Findings, coverage and reference time are those of
the local engine on the same input.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

import pyarrow as pa

from kaudit.audit import sort_findings
from kaudit.audit.folds import Context
from kaudit.engine import coverage
from kaudit.engine.local import AuditRun, _keep, fold_selection, readable_files
from kaudit.engine.spark_folds import (
    FOLDS, context_dict, context_from, findings_from_table, fold_by_name, fold_input, meta_rows, run_fold,
    sort_columns,
)
from kaudit.engine.spark_rows import FOLD, KIND, META, META_KIND, in_decode_order, spark_schema
from kaudit.model import FINDING
from kaudit.sources.topics import TopicNames

DEFAULT_MASTER = "local[*]"
DEFAULT_THRESHOLD = 1 << 30
# a shuffle partition per this many input bytes, up to one a core: each is a Python task (~0.1 s)
PART_BYTES = 32 << 20
# log dirs: partitions no bigger than a core's share are folded in the task that reads them
# (whole_key_bytes); False shuffles every partition's rows to its fold (tests run both ways)
FOLD_IN_TASKS = True
# The JVM we start ourselves (local mode: driver and executor in one process) only schedules
# Python tasks and moves their few result rows; C2 kept compiling ~0.4 s of CPU a job even
# after ten jobs (measured per JVM thread: 0.84 s of JVM CPU a job, 0.34 s with C1 only),
# CPU taken from the Python workers on the same cores. --spark-conf
# spark.driver.extraJavaOptions=... replaces it; spark-submit's JVMs are left as configured.
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


@dataclass
class SparkOptions:
    master: str | None = None   # None: local[*], or spark-submit's master when it launched us
    conf: dict = field(default_factory=dict)
    ui: bool = False
    split_bytes: int | None = None


_SESSION = None


def session(options: SparkOptions | None = None):
    """The process's Spark session (one per process: later calls reuse it), with kaudit's sources
    registered. The workers run this interpreter; the UI is off unless asked for; nothing is
    downloaded (no spark.jars.packages)."""
    global _SESSION
    from pyspark.sql import SparkSession

    from kaudit.engine.spark_sources import register

    options = options or SparkOptions()
    if _SESSION is not None and _SESSION.sparkContext._jsc is not None:
        return _SESSION
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ   # spark-submit started this driver
    master = options.master or (None if submitted else DEFAULT_MASTER)
    b = SparkSession.builder.appName("kaudit")
    if master is not None:
        b = b.master(master)
    if master is not None and master.startswith("local"):
        # one machine: the workers run this very interpreter, no interface lookup
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if not submitted:   # a JVM this process starts: its heap, its logging and its JIT
        log4j = os.path.join(os.path.dirname(__file__), "log4j2.properties")
        b = (b.config("spark.driver.memory", "1g")
             .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j} {JIT_OPTIONS}"))
    b = (b.config("spark.ui.enabled", "true" if options.ui else "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .config("spark.python.worker.reuse", "true")
         # the jobs partition by key themselves (placement by size, a fixed count): adaptive
         # execution has nothing to re-plan and costs each job ~30-40 ms of re-planning (measured)
         .config("spark.sql.adaptive.enabled", "false"))
    for k, v in options.conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    _SESSION = spark
    return spark


def application_id(spark) -> str:
    return spark.sparkContext.applicationId


def _reader(spark, fmt: str, paths: list[str], kind: str, opts: dict):
    r = spark.read.format(fmt).option("kind", kind)
    for k, v in opts.items():
        if v is not None:
            r = r.option(k, str(v))
    return r.load(paths if len(paths) != 1 else paths[0])


def _run_folds(spark, env, side: str, ctx: Context, keep, input_bytes: int) -> list[dict]:
    """Every fold of a side over the cached fold envelope `env`: per-key folds on the executors in
    one job, the prepare-folds on the driver. Small inputs get few shuffle partitions (each is a
    task: scheduling dominates when the rows are few)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    findings_type = from_arrow_schema(spark_schema(FINDING))
    parts = max(1, min(spark.sparkContext.defaultParallelism * 2, input_bytes // PART_BYTES))
    ctx_d = context_dict(ctx)
    distributed = []
    out: list[dict] = []
    if ctx.topic_names is not None:   # the wire's topics named before any key groups them
        env = _label_topics(env, ctx.topic_names)
    for fold in FOLDS[side]:
        rows = env.where(F.col(FOLD) == fold.name)
        if hasattr(fold, "prepare"):   # it needs its whole selection at once: on the driver
            items = list(fold_input(in_decode_order(rows.toArrow()), fold))
            out.extend(f for f in fold_selection(fold, items, ctx) if keep(f))
            continue
        cols = sorted({c for names in fold.inputs.values() for c in names})
        rows = rows.select(KIND, "__split", "__row", *cols)
        sort = [F.asc_nulls_last(c) for c in sort_columns(fold, side)]
        name = fold.name

        def fn(batches, name=name):
            return run_fold(fold_by_name(name), context_from(ctx_d), batches)

        distributed.append(rows.repartition(parts, *fold.key).sortWithinPartitions(*sort)
                           .mapInArrow(fn, findings_type))
    if distributed:
        df = distributed[0]
        for d in distributed[1:]:
            df = df.unionByName(d)
        out.extend(f for f in findings_from_table(df.toArrow()) if keep(f))
    return out


def _label_topics(df, names: dict):
    """`df` with a null `topic` named from its `topic_id` (sources.topics.TopicNames.label, as a
    column expression: the rows are grouped by key after it)."""
    from pyspark.sql import functions as F

    if "topic_id" not in df.columns:
        return df
    mapping = F.create_map(*[F.lit(x) for kv in sorted(names.items()) for x in kv]) if names else None
    named = [F.col("topic")] + ([mapping[F.col("topic_id")]] if mapping is not None else []) + [F.col("topic_id")]
    return df.withColumn("topic", F.coalesce(*named))


def topic_names_of(metas: list[dict], seed: dict | None = None) -> TopicNames:
    """The id -> name facts of every task (and `seed`)."""
    names = TopicNames(seed)
    for m in metas:
        names.add(m.get("topic_names") or {})
        names.seen_ids.update(m.get("topic_ids") or ())
    return names


def _disk_job(spark, p, paths: list[str], opts: dict, tap=None, now_ms: int | None = None,
              collect: bool = False):
    """One job: decode (tasks over splits), one shuffle of the decoded chunks by (replica, topic,
    partition) - the buffered folds' by their own key - sorted by (split, row) - decode order -, the
    folds in mapInArrow. -> (findings, the tasks' meta rows, and with `collect` the buffered
    folds' rows as (kind, table) in decode order instead of their findings)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from kaudit.engine.spark_folds import DISK_KEY, PART, RESULT_SCHEMA, TYPE, run_disk
    from kaudit.engine.spark_rows import PAYLOAD, ROW, SPLIT, from_ipc

    ctx_d = context_dict(Context(reference_time_ms=now_ms))   # else the tasks settle it (run_disk)
    # one shuffle partition a core (the keys are placed by size, so the cores get even shares),
    # fewer for a small input (each partition is a Python task: ~0.1 s to schedule)
    cores = spark.sparkContext.defaultParallelism
    parts = max(1, min(cores, p.total_bytes // PART_BYTES))
    value_of = _part_values(spark, parts)
    from kaudit.sources.logdir import log_dir_clusters, replicated_partitions

    clusters = log_dir_clusters(p)
    opts = dict(opts, placement=json.dumps(placement(p, parts, value_of)),
                buckets=json.dumps([value_of.get(j, j) for j in range(parts)]),
                replicated=json.dumps(sorted(replicated_partitions(p, clusters))), clusters=json.dumps(clusters),
                cores=cores, whole_key_bytes=whole_key_bytes(p.total_bytes, cores) if FOLD_IN_TASKS else 0)
    sort = [F.asc_nulls_last(c) for c in DISK_KEY + (SPLIT, ROW)]
    result = (_reader(spark, "kafka-segments", paths, "audit", opts)
              .repartition(parts, PART).sortWithinPartitions(*sort)
              .mapInArrow(lambda it: run_disk(context_from(ctx_d), it, collect), from_arrow_schema(RESULT_SCHEMA))
              .toArrow())
    findings, metas, rows, tapped, tapped_more = [], [], {}, [], {}
    for typ, payload in zip(result.column(TYPE).to_pylist(), result.column(PAYLOAD).to_pylist()):
        if typ.startswith("tap:"):
            _, split, row = typ.split(":")
            tapped.append((int(split), int(row), from_ipc(payload)))
        elif typ.startswith("tap-"):
            name, split, row = typ[4:].split(":")
            tapped_more.setdefault(name, []).append((int(split), int(row), from_ipc(payload)))
        elif typ == "findings":
            findings.extend(findings_from_table(from_ipc(payload)))
        elif typ == "meta":
            metas.append(json.loads(payload))
        else:
            _, name, kind, split, row = typ.split(":")
            rows.setdefault(name, []).append((int(split), int(row), kind, from_ipc(payload)))
    # decode order: (split, first row) of each chunk; the rows of a chunk are in order
    driver_rows = {name: [(k, t) for _, _, k, t in sorted(chunks, key=lambda c: c[:2])]
                   for name, chunks in rows.items()}
    if tap is not None:
        from kaudit.engine.joint import merge_ranges

        tap.rows.extend(t for _, _, t in sorted(tapped, key=lambda c: c[:2]))
        for name, into in (("reader", tap.reader_rows), ("txnindex", tap.txnindex)):
            into.extend(t for _, _, t in sorted(tapped_more.get(name, []), key=lambda c: c[:2]))
        for m in metas:
            merge_ranges(tap.ranges, m.get("ranges", []))
            for rep, top, part, off in m.get("cleaned", []):
                tap.cleaned[(rep, top, part)] = max(off, tap.cleaned.get((rep, top, part), -1))
    return findings, metas, driver_rows


def whole_key_bytes(total: int, cores: int) -> int:
    """Partitions up to this size are read whole by one task, which runs their per-partition
    folds itself: no shuffle of their rows (per batch, the shuffle costs more than the folds).
    A bigger partition - more than a core's share of the input - is cut into splits decoded side
    by side and its rows are shuffled to its fold: its decoding then spreads over the cores."""
    return max(1, total // max(1, cores))


def placement(p, parts: int, value_of: dict) -> dict:
    """Which shuffle partition each (replica, topic, partition) goes to: the keys by size, each to
    the least loaded partition (hashing a few big keys alone often piles two on one core), as
    the `__part` value that Spark's hash partitioning sends to that partition."""
    from kaudit.engine.spark_folds import key_name
    from kaudit.sources.splits import key_sizes

    # the plan of the inputs (sources.logdir.plan): the segments' bytes per key
    sizes = {key_name(k): size for k, size in key_sizes(p, "log").items()}
    load = [0] * parts
    out = {}
    for k, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        j = min(range(parts), key=lambda i: (load[i], i))
        load[j] += size
        out[k] = value_of.get(j, j)
    return out


_PART_VALUES: dict = {}


def _part_values(spark, parts: int) -> dict:
    """partition -> a value Spark's hash partitioning sends there (asked once per session)."""
    from pyspark.sql import functions as F

    if parts not in _PART_VALUES:
        probe = spark.range(0, 64 * parts).select("id", F.expr(f"pmod(hash(id), {parts})").alias("p")).collect()
        values: dict = {}
        for r in probe:
            values.setdefault(r["p"], r["id"])
        _PART_VALUES[parts] = values
    return _PART_VALUES[parts]


def _envelope(spark, fmt: str, paths: list[str], opts: dict, mode: str = "audit"):
    """The cached envelope of the inputs (`mode`: the folds' selection, or `*` every row) and
    the tasks' meta rows (this runs the decode). Several captures: their connections that span
    files are stitched after a shuffle on the connection key (`_stitch`)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    env = _reader(spark, fmt, paths, mode, opts).persist(StorageLevel.MEMORY_AND_DISK)
    if fmt == "kafka-pcap" and len(paths) > 1:
        stitched = _stitch(spark, env, mode, opts, len(paths)).persist(StorageLevel.MEMORY_AND_DISK)
        stitched.count()
        env.unpersist()
        env = stitched
    metas = meta_rows(env.where(F.col(KIND) == META_KIND).select(KIND, META).toArrow())
    return env, metas


def _stitch(spark, env, mode: str, opts: dict, files: int):
    """`env` with its tcp_fragment chunks replaced by the rows of the connections they stitch:
    `repartition(key).sortWithinPartitions(key, file_index, frame).mapInArrow(stitch)`."""
    from pyspark.sql import functions as F

    from kaudit.engine.spark_folds import stitch_rows
    from kaudit.engine.spark_rows import FRAG_FILE, FRAG_FRAME, FRAG_KEY, FRAG_KIND

    frags = env.where(F.col(KIND) == FRAG_KIND)
    parts = max(1, spark.sparkContext.defaultParallelism)
    schema = env.schema
    arrow_schema = _arrow_of(schema)
    stitched = (frags.repartition(parts, FRAG_KEY).sortWithinPartitions(FRAG_KEY, FRAG_FILE, FRAG_FRAME)
                .mapInArrow(lambda it: stitch_rows(mode, opts, files, arrow_schema, it), schema))
    return env.where(F.col(KIND) != FRAG_KIND).unionByName(stitched)


def _arrow_of(struct_type) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct_type)


def audit_segments(paths: list[str], *, now_ms: int | None = None, select=(), ignore=(),
                   max_batch_bytes: int = 64 << 20, spark_options: SparkOptions | None = None,
                   tap=None) -> AuditRun:
    """As engine.local.audit_segments; `tap` (engine.joint._DiskTap) gets the join's rows and
    offset ranges, selected by the tasks."""
    from kaudit.sources.logdir import plan

    p = plan(paths)
    run = AuditRun(errors=list(p.errors), engine="spark")
    spark = session(spark_options)
    run.application_id = application_id(spark)
    cov = coverage.new_disk()
    cov["files"] = sum(1 for t in p.targets if t.kind != "skipped")
    cov["bytes"] = p.total_bytes
    readable = [x for x in paths if os.path.exists(x)]
    if not p.targets or not readable:
        cov.pop(coverage.LATEST)
        run.coverage, run.reference_time_ms = cov, now_ms
        return run
    opts = {"max_batch_bytes": max_batch_bytes,
            "split_bytes": spark_options.split_bytes if spark_options else None,
            "join": json.dumps(tap.sets) if tap is not None else None}
    keep = _keep(set(select), set(ignore))
    findings, metas, _ = _disk_job(spark, p, readable, opts, tap, now_ms)
    for m in metas:
        coverage.merge(cov, m["cov"])
    latest = cov.pop(coverage.LATEST)
    run.findings = sort_findings([f for f in findings if keep(f)])
    run.coverage = coverage.settle(cov)
    run.reference_time_ms = now_ms if now_ms is not None else latest
    return run


def audit_pcaps(paths: list[str], options, *, now_ms: int | None = None, select=(), ignore=(),
                spark_options: SparkOptions | None = None, taps=None, topic_names: dict | None = None) -> AuditRun:
    """As engine.local.audit_pcaps; `taps` (engine.joint._WireTap) gets the join's wire rows."""
    errors, readable = readable_files(paths)
    run = AuditRun(errors=errors, engine="spark")
    spark = session(spark_options)
    run.application_id = application_id(spark)
    cov = coverage.new_wire()
    captures: dict = {}
    ctx = Context(reference_time_ms=now_ms)
    if readable:
        env, metas = _envelope(spark, "kafka-pcap", readable, pcap_source_options(options))
        try:
            for m in metas:
                coverage.merge(cov, m["cov"])
            captures = _summaries(metas, run.errors)
            last = [s["last_ts"] for s in captures.values() if s["last_ts"] is not None]
            if now_ms is None and last:
                ctx.reference_time_ms = int(max(last) * 1000)
            names = topic_names_of(metas, topic_names)
            ctx.topic_names = names.names
            size = sum(os.path.getsize(x) for x in readable)
            findings = _run_folds(spark, env, "wire", ctx, _keep(set(select), set(ignore)), size)
            run.findings = sort_findings(names.name_findings(findings))
            run.topic_names = names.names
            coverage.note_names(cov, names.names)
            if taps is not None:
                _collect_taps(env, taps)
        finally:
            env.unpersist()
    coverage.settle(cov)
    cov["packets"] = sum(s["packets"] for s in captures.values())
    cov["captures"] = {p: {"packets": s["packets"], "tcp_packets": s["tcp_packets"],
                           "kafka_connections": s["kafka_connections"]} for p, s in captures.items()}
    run.coverage = cov
    run.reference_time_ms = ctx.reference_time_ms
    return run


def _summaries(metas: list[dict], errors: list) -> dict:
    """capture -> its summary (a dict of PcapSummary's fields), the connections stitched across
    files counted in their first file's; the unreadable captures' errors go to `errors`."""
    captures = {}
    for m in sorted(metas, key=lambda m: m["split"]):
        if "capture" in m:
            captures[m["capture"]] = dict(m["summary"])
            if m.get("error"):
                errors.append(m["error"])
    for m in metas:
        for source, (conns, kafka) in m.get("stitched", {}).items():
            if source in captures:
                captures[source]["connections"] += conns
                captures[source]["kafka_connections"] += kafka
    return captures


def _collect_taps(env, taps) -> None:
    from pyspark.sql import functions as F

    from kaudit.engine.joint import WIRE_TAPS

    for tap in WIRE_TAPS:
        for _, part in fold_input(in_decode_order(env.where(F.col(FOLD) == tap.name).toArrow()), tap):
            taps.add(tap.name, part)


def pcap_source_options(options) -> dict:
    return {"kafka_port": ",".join(str(p) for p in sorted(options.kafka_ports)),
            "max_batch_bytes": options.max_batch_bytes, "max_frame_bytes": options.max_frame_bytes,
            "deep": str(options.deep).lower()}


def decoded_chunks(fmt: str, paths: list[str], opts: dict, spark_options: SparkOptions | None = None
                   ) -> tuple[list[dict], list[tuple[str, pa.Table]]]:
    """(the tasks' meta rows, every decoded row as (kind, table) runs in the local engine's order).
    This collects to the driver (the decode commands print rows there anyway); `write_parquet`
    writes from the executors instead."""
    from kaudit.engine.spark_rows import kind_runs, unwrap

    spark = session(spark_options)
    if fmt == "kafka-pcap" and len(paths) > 1:   # stitched across the files
        env, _ = _envelope(spark, fmt, paths, opts, mode="*")
        try:
            t = env.toArrow()
        finally:
            env.unpersist()
    else:
        t = _reader(spark, fmt, paths, "*", opts).toArrow()
    t = in_decode_order(t)
    metas = meta_rows(t)
    chunks = [(kind, unwrap(part, kind)) for kind, part in kind_runs(t) if kind != META_KIND]
    if fmt == "kafka-pcap":   # topic ids named from every capture's responses, as the local engine does
        names = TopicNames()
        for kind, part in chunks:
            names.learn(kind, part)
        chunks = [(kind, names.resolve(kind, part)) for kind, part in chunks]
    return metas, chunks


def decode_pcaps(names: list[str], options, summaries: dict, spark_options: SparkOptions | None = None
                 ) -> tuple[list[str], list[tuple[str, pa.Table]]]:
    """(unreadable inputs, chunks) for `kaudit decode pcap`, as engine.local.decode_pcaps."""
    from kaudit.sources.pcap import PcapSummary

    errors, readable = readable_files(names)
    if not readable:
        return errors, []
    metas, chunks = decoded_chunks("kafka-pcap", readable, pcap_source_options(options), spark_options)
    for path, s in _summaries(metas, errors).items():
        summaries[path] = PcapSummary(**s)
    return errors, chunks


def decoded_tables(fmt: str, paths: list[str], opts: dict, spark_options: SparkOptions | None = None
                   ) -> dict[str, pa.Table]:
    """Every decoded row of the inputs, one table per kind (parity checks)."""
    by_kind: dict[str, list] = {}
    for kind, t in decoded_chunks(fmt, paths, opts, spark_options)[1]:
        by_kind.setdefault(kind, []).append(t)
    return {k: pa.concat_tables(v) for k, v in by_kind.items()}


def transactions_selection(paths: list[str], spark_options: SparkOptions | None = None
                           ) -> list[tuple[str, pa.Table]]:
    """What the transactions fold selects from log dirs (`kaudit txn`), decoded by the tasks."""
    from kaudit.sources.logdir import plan

    spark = session(spark_options)
    _, _, driver_rows = _disk_job(spark, plan(paths), paths, {}, collect=True)
    return driver_rows.get("transactions", [])


def _namer(kind: str, names: dict):
    """A mapInArrow function naming the topic ids of `kind`'s rows (sources.topics)."""
    def fn(batches):
        resolver = TopicNames(names)
        for rb in batches:
            yield from resolver.resolve(kind, pa.Table.from_batches([rb])).to_batches()
    return fn


def write_parquet(fmt: str, paths: list[str], opts: dict, directory: str, findings: list[dict],
                  spark_options: SparkOptions | None = None) -> None:
    """The decoded tables and the findings as Parquet, as the local engine names them
    (`<dir>/<kind>.parquet`); here each table is a folder of part files written by the tasks
    (Spark, DuckDB and pyarrow read either), its unsigned columns widened to signed ones."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from kaudit.engine.spark_rows import DISK_KINDS, WIRE_KINDS
    from kaudit.model import SCHEMAS, table_from_rows

    spark = session(spark_options)
    env = (_envelope(spark, fmt, paths, opts, mode="*")[0] if fmt == "kafka-pcap" and len(paths) > 1
           else _reader(spark, fmt, paths, "*", opts).cache())
    try:
        present = {r[0] for r in env.select(KIND).distinct().collect()}
        names = TopicNames()
        if "topic_name" in present:
            names.add(dict(env.where(F.col(KIND) == "topic_name").select("topic_id", "topic").distinct().collect()))
        for kind in DISK_KINDS if fmt == "kafka-segments" else WIRE_KINDS:
            if kind in present:
                df = env.where(F.col(KIND) == kind).select(*SCHEMAS[kind].names)
                if fmt == "kafka-pcap" and names.names and kind in ("batch", "fetch_partition", "frame"):
                    df = df.mapInArrow(_namer(kind, names.names), df.schema)
                df.write.mode("overwrite").parquet(os.path.join(directory, f"{kind}.parquet"))
    finally:
        env.unpersist()
    pq.write_table(table_from_rows("finding", findings), os.path.join(directory, "finding.parquet"))


def inputs_bytes(paths: list[str], enough: int | None = None) -> int:
    """The inputs' size in bytes (the walk stops once it passes `enough`)."""
    total = 0
    for p in paths:
        if os.path.isfile(p):
            total += os.path.getsize(p)
        elif os.path.isdir(p):
            for root, _, files in os.walk(p):
                for f in files:
                    try:
                        total += os.path.getsize(os.path.join(root, f))
                    except OSError:
                        pass
                if enough is not None and total > enough:
                    return total
    return total


def choose_engine(engine: str, paths: list[str], threshold: int | None, master: str | None) -> str:
    """`auto`: spark when a master is given, under spark-submit, or when the inputs exceed a
    threshold the user set; else local. No size alone moves one machine to Spark: its session
    start (6-10 s of JVM) and per-job costs make it slower than the local engine on the same
    cores at every size (issue 19: 17.2 s against 0.83 s on 1.1 GiB of segments)."""
    if engine != "auto":
        return engine
    if master is not None or "PYSPARK_GATEWAY_PORT" in os.environ:   # --master, or under spark-submit
        return "spark"
    if threshold is not None and inputs_bytes(paths, threshold) > threshold:
        return "spark"
    return "local"


__all__ = ["SparkOptions", "session", "audit_segments", "audit_pcaps", "decoded_tables", "write_parquet",
           "choose_engine"]
