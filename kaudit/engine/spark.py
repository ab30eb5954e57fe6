"""The Spark engine (docs/architecture.md §5): an audit plan (engine.plan) executed by Spark tasks, the
folds unchanged.

One job per audit. Read tasks (`spark.range(tasks).mapInArrow`, engine.spark_tasks) decode their
splits - a log dir cut at index positions, small files packed together, a partition no bigger
than a core's share read whole by one task, which runs its streamed folds itself - or one
capture each, and ship payload rows: what the buffered folds select, bucketed by the fold's
route (`repartition(bucket).sortWithinPartitions(key, split, row).mapInArrow(reduce)` folds each
bucket as the local engine folds it all), the rows a bigger partition's streamed folds read (to
the shuffle partition the partition is placed on, by size), the taps' rows and every task's facts.
Rotated captures take one more shuffle, keyed by connection, to stitch the connections that span
files. Findings, coverage and reference time are those of the local engine on the same input.
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial

import pyarrow as pa

from kaudit.audit.folds import Rows, Tap
from kaudit.engine.choice import choose_engine  # noqa: F401  (re-exported: the choice lives apart for start-up)
from kaudit.engine.plan import Audit, AuditRun, disk_audit, wire_audit
from kaudit.engine.spark_tasks import (
    FRAGMENT, KEY, META, PART, PAYLOAD, ROW, SCHEMA, SPLIT, TAG, TAP, Job, collect, from_ipc, key_name, read_tasks,
    reduce, stitch_tasks,
)
from kaudit.sources.inputs import readable_files
from kaudit.sources.topics import TopicNames

DEFAULT_MASTER = "local[*]"
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
# A decode ships every decoded row to the driver, which takes them a task at a time: tasks of at
# most this much of a log dir bound what the driver holds (a --deep decode: ~1.5x in Arrow).
DECODE_TASK_BYTES = 16 << 20


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


def _job(spark, audit: Audit, tap: Tap | None = None, split_bytes: int | None = None) -> Job:
    """The tasks of an audit (or a decode: an audit without folds) and where their rows go."""
    from kaudit.sources.splits import keyed_split_plan, split_plan

    cores = spark.sparkContext.defaultParallelism
    if audit.side == "disk":
        p, files = audit.layout, 0
        total = p.total_bytes
        size = split_bytes or task_bytes(total, cores)
        whole = whole_key_bytes(total, cores) if FOLD_IN_TASKS and audit.streamed else 0
        tasks = (keyed_split_plan(p, size, audit.options.max_batch_bytes, whole) if whole
                 else [(t, False) for t in split_plan(p, size, audit.options.max_batch_bytes)])
    else:
        tasks, files = _pcap_tasks(audit.paths)
        total = sum(os.path.getsize(x) for x in audit.paths)
    # one shuffle partition a core (the streamed keys are placed by size, so the cores get even
    # shares), fewer for a small input (each partition is a Python task: ~0.1 s to schedule)
    parts = max(1, min(cores, total // PART_BYTES)) if audit.folds else 1
    value_of = _part_values(spark, parts) if parts > 1 else {}
    job = Job(replace(audit, layout=None, tap=None), tasks, [value_of.get(j, j) for j in range(parts)], tap=tap,
              files=files)
    if audit.side == "disk" and audit.streamed:
        job.placement = placement(audit.layout, parts, value_of)
    return job


def _execute(spark, job: Job, persist: bool = False):
    """The job's payload rows: read (and stitch), then - with folds - the shuffle to their
    buckets and the folds; `persist`: the cached read rows instead (the caller unpersists)."""
    from pyspark import StorageLevel
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(SCHEMA)
    n = len(job.tasks)
    df = spark.range(0, n, 1, n).mapInArrow(partial(read_tasks, job), schema)
    cached = None
    if job.files > 1 or persist:
        cached = df = df.persist(StorageLevel.MEMORY_AND_DISK)
    if job.files > 1:
        df = _stitched(spark, job, df)
        if persist:
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
            df.count()
            cached.unpersist()
            return df
    if persist:
        return df
    if job.audit.folds:
        df = (df.repartition(len(job.buckets), PART).sortWithinPartitions(KEY, SPLIT, ROW)
              .mapInArrow(partial(reduce, job), schema))
    try:
        return collect(job, df.toArrow())
    finally:
        if cached is not None:
            cached.unpersist()


def _stitched(spark, job: Job, df):
    """Rotated captures: the read rows but the fragments, then the connections that span files,
    stitched by key (their splits numbered after every file's, Spark partition by partition)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    frags = (df.where(F.col(TAG) == FRAGMENT).repartition(spark.sparkContext.defaultParallelism, KEY)
             .sortWithinPartitions(KEY, SPLIT, ROW).mapInArrow(partial(stitch_tasks, job), from_arrow_schema(SCHEMA)))
    return df.where(F.col(TAG) != FRAGMENT).unionByName(frags)


def _pcap_tasks(paths: list[str]) -> tuple[list, int]:
    """One task per capture: (index, path, file index, stitch, error). Several captures are one
    capture cut in files (rotated), ranked by their first packet's time; the files that are no
    capture first (their errors come first, as in the local engine)."""
    from kaudit.sources.pcap_stitch import capture_order, failure

    ordered, failed = capture_order(list(dict.fromkeys(paths)))
    items = [(p, -1, False, failure(p, e)) for p, e in failed] + [(p, i, len(ordered) > 1, None)
                                                                   for i, p in enumerate(ordered)]
    return [([(n, *item)], False) for n, item in enumerate(items)], len(ordered)


def task_bytes(total: int, cores: int) -> int:
    """128 MiB a range - or more: about two tasks a core, at most 1 GiB a range. A Python task
    costs about a tenth of a second to schedule whatever it reads (measured here), and a 16 KiB-
    batch segment decodes at a few GB/s, so on few cores many small ranges would mostly wait."""
    from kaudit.sources.splits import DEFAULT_SPLIT_BYTES

    return max(DEFAULT_SPLIT_BYTES, min(1 << 30, total // (2 * max(cores, 1))))


def whole_key_bytes(total: int, cores: int) -> int:
    """Partitions up to this size are read whole by one task, which runs their streamed folds
    itself: no shuffle of their rows (per batch, the shuffle costs more than the folds). A
    bigger partition - more than a core's share of the input - is cut into splits decoded side
    by side and its rows are shuffled to its folds: its decoding then spreads over the cores."""
    return max(1, total // max(1, cores))


def placement(p, parts: int, value_of: dict) -> dict:
    """Which shuffle partition each (replica, topic, partition) goes to: the keys by size, each to
    the least loaded partition (hashing a few big keys alone often piles two on one core), as
    the `__part` value that Spark's hash partitioning sends to that partition."""
    from kaudit.sources.splits import key_sizes

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


def _run(audit: Audit, errors: list[str], spark_options) -> AuditRun:
    spark = session(spark_options)
    job = _job(spark, audit, audit.tap, spark_options.split_bytes if spark_options else None)
    found = _execute(spark, job) if job.tasks else ([], audit.facts(), [])
    run = audit.result(found[0], found[1], errors, "spark", found[2])
    run.application_id = application_id(spark)
    return run


def audit_segments(paths: list[str], *, now_ms: int | None = None, select=(), ignore=(),
                   max_batch_bytes: int = 64 << 20, spark_options: SparkOptions | None = None,
                   tap=None, folds=None, known: dict | None = None) -> AuditRun:
    """As engine.local.audit_segments; `tap` (engine.joint.DiskTap) gets the join's rows; `known`
    travels with the plan to every task (Audit.known)."""
    audit = disk_audit(paths, now_ms=now_ms, select=select, ignore=ignore, tap=tap,
                       max_batch_bytes=max_batch_bytes, folds=folds, known=known)
    return _run(audit, list(audit.layout.errors), spark_options)


def audit_pcaps(paths: list[str], options, *, now_ms: int | None = None, select=(), ignore=(),
                spark_options: SparkOptions | None = None, tap=None, topic_names: dict | None = None,
                folds=None) -> AuditRun:
    """As engine.local.audit_pcaps; `tap` (engine.joint.WireTap) gets the join's wire rows."""
    errors, readable = readable_files(paths)
    audit = wire_audit(readable, options, now_ms=now_ms, select=select, ignore=ignore, tap=tap,
                       names=topic_names, folds=folds)
    return _run(audit, errors, spark_options)


def pcap_source_options(options) -> dict:
    """A capture decode's options as the kafka-pcap source takes them (strings)."""
    return {"kafka_port": ",".join(str(p) for p in sorted(options.kafka_ports)),
            "max_batch_bytes": options.max_batch_bytes, "max_frame_bytes": options.max_frame_bytes,
            "deep": str(options.deep).lower(),
            # the key log files' paths (never their secrets) for the executors to read
            **({"tls_keylog": "\n".join(options.tls_keys.sources)} if options.tls_keys is not None else {})}


def _decode_job(fmt: str, paths: list[str], opts: dict, spark_options, tap: Tap):
    """(the session, the job of a decode: an audit without folds; `opts`: the source's options,
    as strings). Log dirs in tasks of at most DECODE_TASK_BYTES."""
    from kaudit.engine.spark_sources import pcap_options

    if fmt == "kafka-pcap":
        audit = wire_audit(paths, pcap_options(opts), folds=())
    else:
        audit = disk_audit(paths, max_batch_bytes=int(opts.get("max_batch_bytes") or 64 << 20),
                           deep=str(opts.get("deep", "false")).lower() == "true", folds=())
    spark = session(spark_options)
    return spark, _job(spark, audit, tap, opts.get("split_bytes") or (DECODE_TASK_BYTES if fmt != "kafka-pcap" else None))


def _decode(fmt: str, paths: list[str], opts: dict, spark_options, tap: Tap, persist: bool = False):
    """A decode into `tap`: (the tasks' facts, the job) or, `persist`, (the cached payload rows or
    None, the job)."""
    spark, job = _decode_job(fmt, paths, opts, spark_options, tap)
    if not job.tasks:
        return (None if persist else job.audit.facts()), job
    return (_execute(spark, job, persist) if persist else _execute(spark, job)[1]), job


def _streamed(spark, job: Job, facts) -> Iterator[tuple[str, pa.Table]]:
    """A decode's rows, (kind, table) in decode order, a task's rows at a time: the read tasks'
    partitions come in split order (toLocalIterator, the next one computed meanwhile), each
    task's rows in row order, so the driver's JVM and Python hold a task's rows or two whatever
    the input holds (rotated captures: then the stitched connections, a Spark partition at a
    time, the files' rows kept on disk meanwhile). The tasks' facts are merged into `facts` as
    they come."""
    from pyspark import StorageLevel
    from pyspark.sql.pandas.types import from_arrow_schema

    n = len(job.tasks)
    df = cached = spark.range(0, n, 1, n).mapInArrow(partial(read_tasks, job), from_arrow_schema(SCHEMA))
    if job.files > 1:   # read once for both the files' rows and the fragments' shuffle
        df = _stitched(spark, job, cached.persist(StorageLevel.DISK_ONLY))
    try:
        # the RDD's iterator, not DataFrame.toLocalIterator: that one runs a job a partition under
        # one SQL execution id, and Spark 4's DAGScheduler keeps a query's finished jobs - each
        # holding its partition's collected rows - until the query ends (activeQueryToJobs), which
        # it has already done when these jobs run: the JVM heap grew with every row passed on, for
        # the session's life (docs/spark.md, Memory)
        for tag, payload in df.select(TAG, PAYLOAD).rdd.toLocalIterator(prefetchPartitions=True):
            if tag == META:
                facts.merge(pickle.loads(payload))
            elif tag.startswith(TAP):
                yield tag[len(TAP):], from_ipc(payload)
    finally:
        if job.files > 1:
            cached.unpersist()


def decoded_chunks(fmt: str, paths: list[str], opts: dict, spark_options: SparkOptions | None = None):
    """(the tasks' facts, every decoded row as (kind, table) in the local engine's order),
    streamed (`_streamed`: the facts are complete once the rows are read). Captures' topic ids
    are named as the local engine names them (TopicNames.resolve_stream: a chunk waits, within
    a bound, for a later response naming its ids). `write_parquet` writes from the executors
    instead."""
    spark, job = _decode_job(fmt, paths, opts, spark_options, Rows())
    facts = job.audit.facts()
    chunks = _streamed(spark, job, facts) if job.tasks else iter(())
    return facts, (TopicNames().resolve_stream(chunks) if fmt == "kafka-pcap" else chunks)


def decode_pcaps(names: list[str], options, summaries: dict, spark_options: SparkOptions | None = None
                 ) -> tuple[list[str], Iterator[tuple[str, pa.Table]]]:
    """(unreadable inputs, chunks) for `kaudit decode pcap`, as engine.local.decode_pcaps: the
    chunks stream; `summaries` and the executors' unreadable inputs are filled once they are
    read."""
    errors, readable = readable_files(names)
    if not readable:
        return errors, iter(())
    facts, chunks = decoded_chunks("kafka-pcap", readable, pcap_source_options(options), spark_options)

    def rows():
        yield from chunks
        summaries.update(facts.summaries())
        errors.extend(e for _, e in sorted(facts.errors, key=lambda x: x[0]))

    return errors, rows()


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
    from kaudit.audit.txn import transactions

    tap = Rows(transactions.FOLD)
    _decode("kafka-segments", paths, {}, spark_options, tap)
    return tap.out


def _unpack(kind: str, names: dict, schema: pa.Schema, batches):
    """mapInArrow: a kind's payloads -> its rows in Spark's types, their topic ids named."""
    resolver = TopicNames(names)
    for rb in batches:
        for payload in rb.column(PAYLOAD).to_pylist():
            yield from resolver.resolve(kind, from_ipc(payload)).select(schema.names).cast(schema).to_batches()


def write_parquet(fmt: str, paths: list[str], opts: dict, directory: str, findings: list[dict],
                  spark_options: SparkOptions | None = None) -> None:
    """The decoded tables and the findings as Parquet, as the local engine names them
    (`<dir>/<kind>.parquet`); here each table is a folder of part files written by the tasks
    (Spark, DuckDB and pyarrow read either), its unsigned columns widened to signed ones."""
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    from kaudit.engine.spark_sources import spark_schema
    from kaudit.model import KINDS, SCHEMAS, table_from_rows

    df, job = _decode(fmt, paths, opts, spark_options, Rows(), persist=True)
    if df is not None:
        try:
            names = collect(job, df.where(F.col(TAG) == META).toArrow())[1].names.names if fmt == "kafka-pcap" else {}
            present = {r[0] for r in df.select(TAG).distinct().collect()}
            for kind in (k for k in KINDS if TAP + k in present):
                schema = spark_schema(SCHEMAS[kind])
                (df.where(F.col(TAG) == TAP + kind).mapInArrow(partial(_unpack, kind, names, schema),
                                                               from_arrow_schema(schema))
                 .write.mode("overwrite").parquet(os.path.join(directory, f"{kind}.parquet")))
        finally:
            df.unpersist()
    pq.write_table(table_from_rows("finding", findings), os.path.join(directory, "finding.parquet"))


__all__ = ["SparkOptions", "session", "audit_segments", "audit_pcaps", "decoded_tables", "write_parquet",
           "choose_engine"]
