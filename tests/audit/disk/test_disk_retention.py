"""missing-segments judged with the retention a topic falls back on (audit/cluster/retention.py):
the broker's server.properties in or beside the log dir root (sources/broker_config.py) and the
dynamic broker / cluster defaults of the KRaft metadata, under the topic's own config."""

from __future__ import annotations

from diskcraft import audit, brief

from fixtures.builder.logdir import LogDirBuilder
from fixtures.builder.metadata import MetadataLog
from kaudit.sources.broker_config import for_log_dir, parse

TID = "a2VlcC10b3BpYy1pZC0wMA"
RULES = ("missing-segments",)
FOREVER = "log.retention.hours=-1\n"


def _log_dir(tmp_path, *, configs=None, props=None, beside=None, broker_configs=(), start_entry=False,
             topic="keep"):
    """A topic created with `configs` whose log starts at 5 (its epoch cache still at 0: the
    broker never moved its start); `props` written as server.properties in the log dir root,
    `beside` in its parent; `broker_configs`: (resource, key, value) dynamic ConfigRecords."""
    ld = LogDirBuilder(tmp_path / "logs", node_id=1)
    md = MetadataLog(ld)
    for resource, key, value in broker_configs:
        md.config(4, resource, key, value)
    md.topic(topic, TID, {0: [1]}, configs=configs or {})
    pb = ld.partition(topic, 0, topic_id=TID, start_offset=5)
    for i in range(3):
        pb.append_batch(values=[b"k%d" % i])
    pb.epochs = [(0, 0)]
    root = ld.write()
    if not start_entry:
        (root / "log-start-offset-checkpoint").write_bytes(b"0\n0\n")
    if props is not None:
        (root / "server.properties").write_text(props)
    if beside is not None:
        (tmp_path / "server.properties").write_text(beside)
    return root


def test_retention_forever_only_in_server_properties_is_judged(tmp_path):
    fs = audit(_log_dir(tmp_path, props="node.id=1\n" + FOREVER), rules=RULES)
    assert brief(fs) == [("missing-segments", "error", "keep-0", 0, 4)]
    assert "server.properties log.retention.ms" in fs[0]["message"]
    assert any(e["source"].endswith("logs/server.properties") for e in fs[0]["evidence"])


def test_server_properties_beside_the_log_dir(tmp_path):
    beside = "process.roles=broker\nnode.id=1\nlog.dirs=/var/lib/kafka/logs\nlog.retention.ms = -1\n"
    assert brief(audit(_log_dir(tmp_path, beside=beside), rules=RULES)) == [
        ("missing-segments", "error", "keep-0", 0, 4)]


def test_a_file_beside_of_another_node_is_not_this_brokers(tmp_path):
    assert audit(_log_dir(tmp_path, beside="node.id=2\n" + FOREVER), rules=RULES) == []


def test_dynamic_cluster_default_and_broker_override(tmp_path):
    forever = [("", "log.retention.ms", "-1")]
    assert brief(audit(_log_dir(tmp_path / "a", broker_configs=forever), rules=RULES)) == [
        ("missing-segments", "error", "keep-0", 0, 4)]
    # the broker's own dynamic value wins over the cluster default, server.properties loses to both
    finite = forever + [("1", "log.retention.ms", "86400000")]
    assert audit(_log_dir(tmp_path / "b", broker_configs=finite), rules=RULES) == []
    assert audit(_log_dir(tmp_path / "c", props=FOREVER, broker_configs=[("", "log.retention.ms", "1000")]),
                 rules=RULES) == []


def test_retention_explained_is_no_finding(tmp_path):
    cases = {
        "none": dict(),                                                   # Kafka's 168 hours
        "bytes": dict(props=FOREVER + "log.retention.bytes=1073741824\n"),
        "compact": dict(props=FOREVER + "log.cleanup.policy=compact\n"),
        "topic": dict(props=FOREVER, configs={"retention.ms": "86400000"}),
        "deleterecords": dict(props=FOREVER, start_entry=True),
        "offsets": dict(props=FOREVER, topic="__consumer_offsets"),
    }
    for name, kw in cases.items():
        assert audit(_log_dir(tmp_path / name, **kw), rules=RULES) == [], name


def test_compacted_topic_config_over_server_properties(tmp_path):
    assert audit(_log_dir(tmp_path, props=FOREVER, configs={"cleanup.policy": "compact,delete"}), rules=RULES) == []


def test_properties_syntax_and_no_secrets():
    text = ("# comment\n! also\nlog.retention.ms: -1\nlog.dirs=/a,\\\n   /b\nbroker.id 3\n"
            "listener.name.sasl.plain.sasl.jaas.config=secret\nssl.keystore.password=x\n")
    assert parse(text) == {"log.retention.ms": "-1", "log.dirs": "/a,/b", "broker.id": "3"}


def test_meta_properties_is_not_a_broker_config(tmp_path):
    root = _log_dir(tmp_path)
    assert for_log_dir(str(root), 1) is None
