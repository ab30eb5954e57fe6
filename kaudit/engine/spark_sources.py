"""kaudit's sources as PySpark Python data sources (Spark 4 `pyspark.sql.datasource`), for your own
Spark code (the engine runs its audits as tasks of its own: engine.spark).

    spark.read.format("kafka-segments").option("kind", "batch").load(["/var/kafka-logs"])
    spark.read.format("kafka-pcap").option("kind", "frame").option("kafka_port", "9092,9093").load(paths)

Planning (on the driver) walks the paths into file names, sizes and byte ranges: segments are cut
at their `.index` positions into ranges of about `split_bytes` (default 128 MiB), small files are
packed together, captures go one file per task (each decoded alone). Nothing but paths and
ranges is shipped; each task maps its range read-only and yields Arrow batches.

Options: `kind` - one row kind (default `batch`: its columns as in kaudit.model, unsigned ints
widened for Spark); `split_bytes`, `max_batch_bytes`, `deep`; for captures `kafka_port` (comma
list), `max_frame_bytes`.
"""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from kaudit.model import SCHEMAS, kinds_of


def spark_type(t: pa.DataType) -> pa.DataType:
    """An Arrow type Spark can hold: unsigned integers widen to the next signed type."""
    if pa.types.is_uint32(t) or pa.types.is_uint64(t):
        return pa.int64()
    if pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_uint8(t):
        return pa.int16()
    return t   # rows are flat (model.py)


def spark_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, spark_type(f.type)) for f in schema])


def _paths(options) -> list[str]:
    if "paths" in options:
        return list(json.loads(options["paths"]))
    if "path" in options:
        return [options["path"]]
    raise ValueError("no path given: .load(path) or .load([paths])")


def _kind(options, side: str) -> str:
    kind = options.get("kind", "batch")
    if kind not in kinds_of(side):
        raise ValueError(f"kind {kind!r}: one of {', '.join(kinds_of(side))}")
    return kind


class _Task(InputPartition):
    def __init__(self, number: int, items: list):
        super().__init__(number)
        self.items = items


class _Reader(DataSourceReader):
    side = "disk"

    def __init__(self, options: dict):
        self.options = options
        self.kind = _kind(options, self.side)
        self.schema = spark_schema(SCHEMAS[self.kind])

    def read(self, partition):
        for kind, table in self.chunks(partition.items):
            if kind == self.kind and table.num_rows:
                yield from table.cast(self.schema).to_batches()


class KafkaSegments(DataSource):
    """Kafka log dirs (segments, indexes, snapshots, checkpoints) as rows."""

    @classmethod
    def name(cls) -> str:
        return "kafka-segments"

    def schema(self):
        return from_arrow_schema(spark_schema(SCHEMAS[_kind(self.options, "disk")]))

    def reader(self, schema):
        return _SegmentsReader(dict(self.options))


class _SegmentsReader(_Reader):
    def partitions(self):
        from kaudit.sources.logdir import plan
        from kaudit.sources.splits import DEFAULT_SPLIT_BYTES, split_plan

        size = int(self.options.get("split_bytes") or DEFAULT_SPLIT_BYTES)
        tasks = split_plan(plan(_paths(self.options)), size, int(self.options.get("max_batch_bytes", 64 << 20)))
        return [_Task(i, t) for i, t in enumerate(tasks)]

    def chunks(self, splits):
        from kaudit.sources.segments import Options
        from kaudit.sources.splits import decode_split

        options = Options(deep=self.options.get("deep", "false").lower() == "true",
                          max_batch_bytes=int(self.options.get("max_batch_bytes", 64 << 20)))
        for s in splits:
            yield from decode_split(s, options)


class KafkaPcap(DataSource):
    """Packet captures (pcap, pcapng) decoded to Kafka rows, one file per task."""

    @classmethod
    def name(cls) -> str:
        return "kafka-pcap"

    def schema(self):
        return from_arrow_schema(spark_schema(SCHEMAS[_kind(self.options, "wire")]))

    def reader(self, schema):
        return _PcapReader(dict(self.options))


def pcap_options(options: dict):
    """The PcapOptions of the source's options (strings)."""
    from kaudit.sources.pcap import DEFAULT_KAFKA_PORTS, PcapOptions

    ports = options.get("kafka_port")
    kw = {"jobs": 1}   # Spark runs the tasks side by side
    kw["kafka_ports"] = (frozenset(int(p) for p in str(ports).split(",") if p.strip()) if ports
                         else DEFAULT_KAFKA_PORTS)
    for name in ("max_batch_bytes", "max_frame_bytes"):
        if name in options:
            kw[name] = int(options[name])
    if "deep" in options:
        kw["deep"] = str(options["deep"]).lower() == "true"
    if options.get("tls_keylog"):
        from kaudit.capture.tls.keylog import KeyLog

        kw["tls_keys"] = KeyLog.from_files(str(options["tls_keylog"]).split("\n"))
    return PcapOptions(**kw)


class _PcapReader(_Reader):
    side = "wire"

    def partitions(self):
        return [_Task(i, [p]) for i, p in enumerate(dict.fromkeys(_paths(self.options)))]

    def chunks(self, paths):
        from kaudit.sources.pcap import DecodeError, decode_capture

        for path in paths:
            try:
                yield from decode_capture(path, pcap_options(self.options))
            except (DecodeError, OSError):   # not a capture, or unreadable: no rows
                pass


def register(spark) -> None:
    """Registers the sources with `spark` and makes kaudit importable by its executors
    (engine.ship: the executors' interpreter, kaudit's package shipped to them), or raises
    engine.ship.ExecutorSetupError in one line saying how."""
    from kaudit.engine.ship import prepare

    prepare(spark)
    spark.dataSource.register(KafkaSegments)
    spark.dataSource.register(KafkaPcap)
