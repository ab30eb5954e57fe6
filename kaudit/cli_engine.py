"""The engine options every command shares (`--engine`, `--master`, `--spark-conf`,
`--spark-threshold`, `--spark-ui`, `--parquet`) and the choice between the engines."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer


class Engine(str, Enum):
    auto = "auto"
    local = "local"
    spark = "spark"


EngineOpt = Annotated[Engine, typer.Option(
    "--engine", help="local (this machine's cores), spark (PySpark) or auto: spark when --master "
    "is given, spark-submit started kaudit, or the inputs exceed a --spark-threshold you set; "
    "otherwise local.")]
MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", help="Spark master (default local[*], or spark-submit's); giving it chooses the Spark "
    "engine under auto.")]
SparkConfOpt = Annotated[Optional[list[str]], typer.Option(
    "--spark-conf", help="KEY=VALUE passed to Spark (repeatable).")]
ThresholdOpt = Annotated[Optional[str], typer.Option(
    "--spark-threshold", help="Input size above which auto picks Spark (bytes, or 512MiB, 1TiB...); "
    "none by default: on one machine the local engine is faster at every size.")]
SparkUiOpt = Annotated[bool, typer.Option("--spark-ui", help="Keep the Spark UI on (off by default).")]
ParquetOpt = Annotated[Optional[Path], typer.Option(
    "--parquet", help="Also write the decoded tables and the findings as Parquet into this folder.")]

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
          "tb": 1000 ** 4}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text or "")
    if not m or m.group(2).lower() not in _UNITS:
        raise typer.BadParameter(f"{text!r}: a size like 1073741824, 512MiB or 1GiB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def spark_conf_of(spark_conf) -> dict:
    """--spark-conf KEY=VALUE items as a dict (checked whichever engine runs)."""
    conf = {}
    for item in spark_conf or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"--spark-conf {item!r}: give KEY=VALUE")
        conf[key.strip()] = value
    return conf


def spark_options(master, spark_conf, spark_ui: bool):
    from kaudit.engine.spark import SparkOptions

    return SparkOptions(master=master, conf=spark_conf_of(spark_conf), ui=spark_ui)


# Set by cli.main, the command line's own process: once the local engine is chosen, it refuses
# the modules that engine never uses (kaudit.lean). Off where kaudit's commands run inside
# another program (tests, a notebook), whose imports are its own business.
LEAN_LOCAL = False


def choose(engine: Engine, paths, master, spark_conf, threshold: str | None, spark_ui: bool):
    """None for the local engine, else the SparkOptions to run with."""
    from kaudit.engine.choice import choose_engine

    spark_conf_of(spark_conf)   # checked whichever engine runs
    limit = None if threshold is None else parse_size(threshold)
    name = choose_engine(engine.value, [str(p) for p in paths], limit, master)
    if name != "local":   # Spark's module only where it runs (start-up of every local command)
        return spark_options(master, spark_conf, spark_ui)
    lean_local()
    return None


def lean_local() -> None:
    """The local engine runs in this process: refuse what it never uses (LEAN_LOCAL)."""
    if LEAN_LOCAL:
        from kaudit.lean import refuse

        refuse()


def parquet_writer(folder: Optional[Path]):
    """A writer of the decoded chunks as Parquet while the local engine audits (or None)."""
    if folder is None:
        return None
    from kaudit.report.writers import ParquetWriter

    return ParquetWriter(str(folder))


def run_audit(sp, parquet: Optional[Path], command: str, local, on_spark, source: str, names: list[str],
              source_opts):
    """One audit command on the chosen engine (`sp`: None for local), with `--parquet`: the
    local engine writes its decoded chunks as it goes (`local(tap)`), Spark decodes them apart
    (`on_spark(sp)` runs the audit; `source_opts()` the Spark source's options)."""
    if sp is None:
        writer = parquet_writer(parquet)
        run = local(writer.write if writer else None)
        close_parquet(writer, run, command)
        return run
    from kaudit.engine import spark

    run = on_spark(sp)
    if parquet is not None:
        spark.write_parquet(source, names, source_opts(), str(parquet), run.findings, sp)
    return run


def close_parquet(writer, run, command: str) -> None:
    if writer is None:
        return
    from kaudit.model import table_from_rows

    writer.write("finding", table_from_rows("finding", run.findings))
    from kaudit import __version__

    writer.close({"tool": "kaudit", "version": __version__, "command": command, "engine": run.engine})
