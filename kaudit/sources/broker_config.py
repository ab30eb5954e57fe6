"""A broker's static configuration (`server.properties`), when the inputs hold it: read for the
retention a topic falls back on when neither its own config nor a dynamic default in the KRaft
metadata sets one (audit/cluster/retention.py).

Looked for in the log dir root, then beside it (its parent: `/data/kafka-logs` and
`/data/server.properties`): any `*.properties` but `meta.properties` that reads as a broker's
(it sets one of BROKER_KEYS). A file beside several log dirs is taken for a log dir only when it
names it (`log.dirs`/`log.dir`) or its node (`node.id`/`broker.id`), or names neither.
Java properties syntax (java.util.Properties.load): `key=value`, `key: value` or `key value`,
`#`/`!` comments, a trailing backslash continues the line. Read-only, at most MAX_BYTES a file;
values of secret-looking keys are never kept.
"""

from __future__ import annotations

import glob
import os
import re

MAX_BYTES = 1 << 20
BROKER_KEYS = ("log.dirs", "log.dir", "node.id", "broker.id", "process.roles", "listeners",
               "log.retention.ms", "log.retention.minutes", "log.retention.hours", "log.retention.bytes",
               "log.cleanup.policy", "zookeeper.connect", "controller.quorum.voters",
               "controller.quorum.bootstrap.servers")
KEPT = re.compile(r"^(log\.|node\.id$|broker\.id$|remote\.log\.|process\.roles$)")
_SPLIT = re.compile(r"\s*[=:]\s*|\s+")


def _entries(text: str):
    """(key, the rest of the logical line) of each property."""
    lines = iter(text.splitlines())
    for line in lines:
        line = line.lstrip()
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and not line.endswith("\\\\"):
            line = line[:-1] + next(lines, "").lstrip()
        parts = _SPLIT.split(line, maxsplit=1)
        yield parts[0], parts[1] if len(parts) > 1 else ""


def parse(text: str) -> dict[str, str]:
    """The properties the audit reads (KEPT): no credential's value is ever kept."""
    return {k: v.strip() for k, v in _entries(text) if KEPT.match(k)}


def _read(path: str) -> dict[str, str] | None:
    try:
        with open(path, "rb") as f:   # read-only
            text = f.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    keys = {k for k, _ in _entries(text)}
    return parse(text) if keys & set(BROKER_KEYS) else None


def _candidates(d: str) -> list[str]:
    names = sorted(glob.glob(os.path.join(glob.escape(d), "*.properties")))
    names = [n for n in names if os.path.basename(n) != "meta.properties" and os.path.isfile(n)]
    # server.properties / broker.properties first: Kafka's own names
    return sorted(names, key=lambda n: (os.path.basename(n) not in ("server.properties", "broker.properties"), n))


def _names(props: dict, log_dir: str, node_id: int | None) -> bool | None:
    """Whether a file beside log dirs names this one (None: it names none)."""
    said = None
    node = props.get("node.id") or props.get("broker.id")
    if node is not None and node.strip().lstrip("-").isdigit() and node_id is not None:
        said = int(node) == node_id
        if not said:
            return False
    dirs = props.get("log.dirs") or props.get("log.dir")
    if dirs:
        mine = {os.path.normpath(log_dir), os.path.basename(os.path.normpath(log_dir))}
        listed = {os.path.normpath(x.strip()) for x in dirs.split(",") if x.strip()}
        listed |= {os.path.basename(x) for x in listed}
        return bool(mine & listed) or bool(said)
    return said


def for_log_dir(log_dir: str, node_id: int | None) -> tuple[str, dict] | None:
    """(path, properties) of the broker config that goes with `log_dir`, or None."""
    for path in _candidates(log_dir):
        props = _read(path)
        if props is not None:
            return path, props
    parent = os.path.dirname(os.path.normpath(log_dir))
    for path in _candidates(parent):
        props = _read(path)
        if props is not None and _names(props, log_dir, node_id) is not False:
            return path, props
    return None


def static_retention_ms(props: dict) -> int | None:
    """log.retention.ms, else .minutes, else .hours (KafkaConfig.logRetentionTimeMillis); None
    when the file sets none (Kafka's default: 168 hours)."""
    for key, unit in (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)):
        v = props.get(key)
        if v is not None:
            try:
                n = int(v)
            except ValueError:
                return None
            return n if n < 0 else n * unit
    return None
