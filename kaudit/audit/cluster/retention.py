"""Whether a topic keeps every record on a broker, from the topic's config over time: its own
ConfigRecords, the broker's and the cluster's dynamic defaults (KRaft metadata, ConfigRecord of
resource BROKER `<node id>` and `""`), then the broker's static server.properties (sources/
broker_config.py), then Kafka's defaults - the precedence of Kafka's LogConfig / DynamicBrokerConfig.
Used by `missing-segments`: a log start above 0 on a topic that keeps everything needs a reason."""

from __future__ import annotations

from dataclasses import dataclass

from kaudit.protocol.metadata.history import BROKER_RESOURCE, TOPIC_RESOURCE
from kaudit.sources.broker_config import static_retention_ms

# Kafka's compacted internal topics (cleanup.policy=compact whatever the configs say)
COMPACTED_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
DEFAULTS = {"retention.ms": "604800000", "retention.bytes": "-1", "cleanup.policy": "delete"}
BROKER_KEY = {"retention.ms": "log.retention.ms", "retention.bytes": "log.retention.bytes",
              "cleanup.policy": "log.cleanup.policy"}


@dataclass(frozen=True)
class Broker:
    """One broker's config source besides the metadata: its node id and server.properties."""

    node_id: int | None = None
    path: str | None = None
    props: tuple = ()    # (key, value) pairs

    def static(self, key: str) -> str | None:
        props = dict(self.props)
        if key == "retention.ms":
            ms = static_retention_ms(props)
            return None if ms is None else str(ms)
        return props.get(BROKER_KEY[key])


def values_over_time(history, topic: str, created: int, key: str, broker: Broker) -> list[tuple[str, str]]:
    """(effective value, where it comes from) at the topic's creation and after each later
    ConfigRecord that could change it."""
    layers = [(TOPIC_RESOURCE, topic, key, f"topic config {key}")]
    if broker.node_id is not None:
        layers.append((BROKER_RESOURCE, str(broker.node_id), BROKER_KEY[key],
                       f"broker {broker.node_id} dynamic {BROKER_KEY[key]}"))
    layers.append((BROKER_RESOURCE, "", BROKER_KEY[key], f"cluster dynamic default {BROKER_KEY[key]}"))
    records = [(rt, name, history.config_values(rt, name, k), why) for rt, name, k, why in layers]
    points = sorted({created} | {o for _, _, vals, _ in records for o, _ in vals if o > created})
    static = broker.static(key)
    out = []
    for p in points:
        for _, _, vals, why in records:
            at = [v for o, v in vals if o <= p]
            if at and at[-1] is not None:
                out.append((at[-1], why))
                break
        else:
            out.append((static, f"{broker.path} {BROKER_KEY[key]}") if static is not None
                       else (DEFAULTS[key], f"Kafka's default {key}"))
    return out


def _unlimited(v: str) -> bool:
    try:
        return int(v) < 0
    except (TypeError, ValueError):
        return False


def keeps_everything(history, topic: str, topic_id: str, broker: Broker) -> tuple[bool, str]:
    """(whether the topic kept every record on this broker since its creation, on local disk,
    the words saying where that comes from). False when its creation is not in the metadata."""
    created = history.topic_created.get(topic_id)
    if created is None or topic in COMPACTED_TOPICS:
        return False, ""
    words = []
    for key in ("retention.ms", "retention.bytes"):
        vals = values_over_time(history, topic, created, key, broker)
        if not all(_unlimited(v) for v, _ in vals):
            return False, ""
        words.append(f"{key} -1 ({', '.join(dict.fromkeys(w for _, w in vals))})")
    policies = values_over_time(history, topic, created, "cleanup.policy", broker)
    if any("compact" in (v or "") for v, _ in policies):
        return False, ""
    remote = history.config_at_end(TOPIC_RESOURCE, topic, "remote.storage.enable") or "false"
    if remote.lower() == "true":
        return False, ""
    return True, "; ".join(words) + ", no compaction, no remote storage, since its creation"
