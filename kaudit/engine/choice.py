"""Which engine a command runs on (`--engine auto`): apart from engine.spark so the choice
imports neither Spark's module nor the audit (start-up of every command); engine.spark
re-exports it."""

from __future__ import annotations

import os


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
