"""kaudit's sources as PySpark Python data sources (Spark 4 `pyspark.sql.datasource`).

    spark.dataSource.register(KafkaSegments); spark.dataSource.register(KafkaPcap)
    spark.read.format("kafka-segments").option("kind", "batch").load(["/var/kafka-logs"])
    spark.read.format("kafka-pcap").option("kind", "frame").option("kafka_port", "9092,9093").load(paths)

Planning (on the driver) walks the paths into file names, sizes and byte ranges: segments are cut
at their `.index` positions into ranges of about `split_bytes` (default 128 MiB), small files are
packed together, captures go one file per task. Nothing but paths and ranges is shipped; each task
maps its range read-only and yields Arrow batches.

Options: `kind` - one row kind (default `batch`; its columns as in kaudit.model, unsigned ints
widened for Spark), `*` for every kind in one envelope (spark_rows), or `audit` (the engine's fold
envelope); `split_bytes`, `max_batch_bytes`, `deep`; for captures `kafka_port` (comma list),
`max_frame_bytes`.
"""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from kaudit.engine import spark_rows
from kaudit.engine.spark_folds import CHUNK_SCHEMA, DiskChunker, Selector, TaskFolds, fold_schema
from kaudit.model import SCHEMAS

MODES_ALL, MODE_AUDIT = "*", "audit"


def _paths(options) -> list[str]:
    if "paths" in options:
        return list(json.loads(options["paths"]))
    if "path" in options:
        return [options["path"]]
    raise ValueError("no path given: .load(path) or .load([paths])")


def _arrow_schema(options, side: str) -> pa.Schema:
    kind = options.get("kind", "batch")
    kinds = spark_rows.DISK_KINDS if side == "disk" else spark_rows.WIRE_KINDS
    if kind == MODES_ALL:
        return spark_rows.envelope_schema(kinds, fragments=side == "wire")
    if kind == MODE_AUDIT:
        return CHUNK_SCHEMA if side == "disk" else fold_schema(side)
    if kind not in kinds:
        raise ValueError(f"kind {kind!r}: one of {', '.join(kinds)}, '*' or 'audit'")
    return spark_rows.spark_schema(SCHEMAS[kind])


class _Emitter:
    """Shapes one task's decoded chunks for the read's mode."""

    def __init__(self, side: str, options, schema: pa.Schema):
        self.options = options
        self.kind = options.get("kind", "batch")
        self.schema = schema
        self.side = side
        self.selector = None
        self.rows = 0

    def start(self, split: int, folds=None) -> None:
        """A split begins; `folds` (a TaskFolds): the task holds its partitions whole and runs
        their per-partition folds itself."""
        self.split, self.rows = split, 0
        if self.kind == MODE_AUDIT:
            join = json.loads(self.options["join"]) if self.options.get("join") else None
            placement = json.loads(self.options["placement"]) if self.options.get("placement") else None
            buckets = json.loads(self.options["buckets"]) if self.options.get("buckets") else None
            replicated = json.loads(self.options["replicated"]) if self.options.get("replicated") else None
            clusters = json.loads(self.options["clusters"]) if self.options.get("clusters") else None
            self.selector = (DiskChunker(split, join, placement, buckets, folds, replicated, clusters)
                             if self.side == "disk"
                             else Selector(self.side, split))

    def chunk(self, kind: str, table: pa.Table):
        if kind == "tcp_fragment":   # captures given together: stitched after a shuffle
            if self.kind in (MODE_AUDIT, MODES_ALL) and table.num_rows:
                schema = self.selector.schema if self.kind == MODE_AUDIT else self.schema
                yield from spark_rows.fragment_batches(schema, self.split, table)
            return
        if self.kind == MODE_AUDIT:
            yield from self.selector.select(kind, table)
        elif self.kind == MODES_ALL:
            if table.num_rows:
                yield spark_rows.wrap(table, self.schema, kind, self.split, self.rows)
                self.rows += table.num_rows
        elif kind == self.kind and table.num_rows:
            yield from table.cast(self.schema).to_batches()

    def end(self, meta: dict):
        if self.kind == MODE_AUDIT:
            yield self.selector.meta(meta)
        elif self.kind == MODES_ALL:
            yield spark_rows.meta_batch(self.schema, self.split, meta)


# -- log dirs -----------------------------------------------------------------------------------

class _Task(InputPartition):
    def __init__(self, number: int, items: list, whole: bool = False):
        super().__init__(number)
        self.items = items
        self.whole = whole   # log dirs: the task holds each of its partitions whole


class KafkaSegments(DataSource):
    """Kafka log dirs (segments, indexes, snapshots, checkpoints) as rows."""

    @classmethod
    def name(cls) -> str:
        return "kafka-segments"

    def schema(self):
        return from_arrow_schema(_arrow_schema(self.options, "disk"))

    def reader(self, schema):
        return _SegmentsReader(dict(self.options))


def split_bytes(options: dict, total: int) -> int:
    """`split_bytes` if given, else 128 MiB - or more when the engine says how many cores run the
    tasks (`cores`): about two tasks a core, at most 1 GiB a range. A Python task costs about a
    tenth of a second to schedule whatever it reads (measured here), and a 16 KiB-batch segment
    decodes at a few GB/s, so on few cores many small ranges would mostly wait for their turn."""
    from kaudit.sources.splits import DEFAULT_SPLIT_BYTES

    if options.get("split_bytes"):
        return int(options["split_bytes"])
    cores = int(options.get("cores") or 0)
    if cores <= 0:
        return DEFAULT_SPLIT_BYTES
    return max(DEFAULT_SPLIT_BYTES, min(1 << 30, total // (2 * cores)))


class _SegmentsReader(DataSourceReader):
    def __init__(self, options: dict):
        self.options = options

    def partitions(self):
        from kaudit.sources.logdir import plan
        from kaudit.sources.splits import keyed_split_plan, split_plan

        p = plan(_paths(self.options))
        size = split_bytes(self.options, p.total_bytes)
        max_batch = int(self.options.get("max_batch_bytes", 64 << 20))
        whole_bytes = int(self.options.get("whole_key_bytes") or 0)
        if self.options.get("kind") == MODE_AUDIT and whole_bytes > 0:
            tasks = keyed_split_plan(p, size, max_batch, whole_bytes)
            return [_Task(i, t, whole) for i, (t, whole) in enumerate(tasks)]
        return [_Task(i, t) for i, t in enumerate(split_plan(p, size, max_batch))]

    def read(self, partition):
        from kaudit.sources.segments import Options
        from kaudit.sources.splits import decode_split

        options = Options(deep=self.options.get("deep", "false").lower() == "true",
                          max_batch_bytes=int(self.options.get("max_batch_bytes", 64 << 20)))
        emit = _Emitter("disk", self.options, _arrow_schema(self.options, "disk"))
        folds = TaskFolds() if getattr(partition, "whole", False) and emit.kind == MODE_AUDIT else None
        for s in partition.items:
            emit.start(s.index, folds)
            for kind, table in decode_split(s, options):
                yield from emit.chunk(kind, table)
            yield from emit.end({"split": s.index})
        if folds is not None and partition.items:
            yield from folds.finish(partition.items[0].index, emit.selector.buckets)


# -- captures -----------------------------------------------------------------------------------

class KafkaPcap(DataSource):
    """Packet captures (pcap, pcapng) decoded to Kafka rows, one file per task."""

    @classmethod
    def name(cls) -> str:
        return "kafka-pcap"

    def schema(self):
        return from_arrow_schema(_arrow_schema(self.options, "wire"))

    def reader(self, schema):
        return _PcapReader(dict(self.options))


def pcap_options(options: dict):
    from kaudit.sources.pcap import DEFAULT_KAFKA_PORTS, PcapOptions

    ports = options.get("kafka_port")
    kw = {"jobs": 1}   # Spark runs the tasks side by side
    kw["kafka_ports"] = (frozenset(int(p) for p in ports.split(",") if p.strip()) if ports
                         else DEFAULT_KAFKA_PORTS)
    for name in ("max_batch_bytes", "max_frame_bytes"):
        if name in options:
            kw[name] = int(options[name])
    if "deep" in options:
        kw["deep"] = options["deep"].lower() == "true"
    return PcapOptions(**kw)


class _PcapReader(DataSourceReader):
    """One task per capture. Several captures are one capture cut in files (rotated): each task
    decodes the connections its file holds whole and hands the others on as tcp_fragment rows,
    which the engine stitches after a shuffle on the connection key (sources.pcap_stitch)."""

    def __init__(self, options: dict):
        self.options = options

    def partitions(self):
        from kaudit.sources.pcap import DecodeError
        from kaudit.sources.pcap_stitch import _failed, file_order, first_packet_ts

        paths = list(dict.fromkeys(_paths(self.options)))
        first_ts, failed = {}, []
        for p in paths:
            try:
                first_ts[p] = first_packet_ts(p)
            except (DecodeError, OSError) as e:
                errors: list = []
                _failed(p, e, errors)
                failed.append((p, errors[0]))
        ordered = file_order(list(first_ts), first_ts)
        stitch = len(ordered) > 1
        # the files that are no capture first (their errors come first, as in the local engine),
        # then the captures by their first packet's time (file_index: their rank)
        tasks = [(p, -1, False, err) for p, err in failed] + [(p, i, stitch, None) for i, p in enumerate(ordered)]
        return [_Task(n, [(n, *t)]) for n, t in enumerate(tasks)]

    def read(self, partition):
        from dataclasses import asdict

        from kaudit.sources.pcap import DecodeError, PcapSummary, decode_capture
        from kaudit.sources.pcap_stitch import split_capture

        options = pcap_options(self.options)
        emit = _Emitter("wire", self.options, _arrow_schema(self.options, "wire"))
        for index, path, file_index, stitch, error in partition.items:
            emit.start(index)
            summary = PcapSummary()
            if error is None:
                try:
                    chunks = (split_capture(path, file_index, options, summary) if stitch
                              else decode_capture(path, options, summary))
                    for kind, table in chunks:
                        yield from emit.chunk(kind, table)
                except DecodeError as e:
                    error = f"{path}: {e.message}"
                except OSError as e:
                    error = f"{path}: {e.strerror or e}"
            yield from emit.end({"split": index, "capture": path, "summary": asdict(summary),
                                 "error": error})


def register(spark) -> None:
    spark.dataSource.register(KafkaSegments)
    spark.dataSource.register(KafkaPcap)
