"""The audit plan both engines execute (kaudit/engine/plan.py): row kinds and their tags, typed row
views, what streams and what buffers, the ordering contract, and a toy row kind with toy folds
added here only, which both executors pick up."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kaudit import model
from kaudit.audit import DISK_FOLDS, WIRE_FOLDS, registry
from kaudit.audit import folds as F
from kaudit.audit.txn import txn_wire
from kaudit.audit.producers import wire_produce
from kaudit.audit.wire import wire_readers
from kaudit.audit.joint.join_rows import WIRE_TAPS
from kaudit.audit.registry import evidence, finding, rule
from kaudit.engine import local as L
from kaudit.engine import spark as S
from kaudit.engine.plan import STREAM, disk_audit, wire_audit
from kaudit.protocol import file_kinds
from kaudit.sources.pcap import PcapOptions

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "logdirs" / "demo"
SPARK = S.SparkOptions(master="local[2]")


# -- row kinds and views --------------------------------------------------------------------------

def test_every_kind_has_a_typed_row_view_checked_against_its_schema():
    for kind, schema in model.SCHEMAS.items():
        assert model.ROWS[kind]._fields == tuple(schema.names)
    with pytest.raises(KeyError, match="producre_id"):
        model.view("batch", ("topic", "producre_id"))
    Row = model.view("batch", ("topic", "partition"))
    rows = Row.of(pa.table({"topic": ["a", None], "partition": pa.array([3, 4], pa.int32())}))
    assert rows == [("a", 3), (None, 4)] and rows[0].topic == "a" and rows[1].partition == 4


def test_every_fold_reads_columns_its_kinds_have():
    for fold in DISK_FOLDS + WIRE_FOLDS + WIRE_TAPS:
        for kind, cols in fold.inputs.items():
            model.view(kind, cols)   # raises on a column the kind lacks
            if fold.prepare is None:   # a prepare may join or explode rows into its key
                assert set(fold.key) <= set(cols), (fold.name, kind)


def test_the_kinds_a_decode_emits_are_tagged_with_its_side(tmp_path):
    _, chunks = L.decode_segments([str(DEMO)], deep=True)
    assert {k for k, _ in chunks} <= set(model.kinds_of("disk"))
    pcaps = sorted(str(p) for p in (ROOT / "pcaps").glob("*.pcap"))
    _, chunks = L.decode_pcaps(pcaps, PcapOptions(kafka_ports=frozenset({9092, 9093, 9094})), {})
    assert {k for k, _ in chunks} <= set(model.kinds_of("wire"))


# -- what streams, what buffers -------------------------------------------------------------------

def test_the_plan_streams_the_folds_keyed_by_a_log_partition_and_buffers_the_rest():
    audit = disk_audit([str(DEMO)])
    assert [f.name for f in audit.streamed] == ["disk-sequences", "disk-integrity", "disk-indexes", "disk-segment-loss",
                                                   "disk-state-files"]
    assert {f.name: audit.route(f) for f in audit.buffered} == {"transactions": ("producer_id",),
                                                              "replicas": ("topic", "partition"), "leadership": ()}
    wire = wire_audit([], PcapOptions())
    assert not wire.streamed and len(wire.buffered) == len(WIRE_FOLDS)
    # the wire's topics are named once every capture is read: not a key to share rows out by
    assert wire.route(wire_produce.FOLD) == ("partition",)
    # a prepare that needs the whole selection keeps it in one place
    assert wire.route(txn_wire.FOLD) == () and wire.route(wire_readers.FOLD) == ()
    # keyed like a partition, but reading a log dir's own checkpoints (entries of any partition)
    fold = F.Fold("x", {"checkpoint_entry": STREAM[0] + STREAM[1]}, *STREAM, None)
    assert disk_audit([str(DEMO)], folds=(fold,)).buffered == (fold,)


# -- the ordering contract ------------------------------------------------------------------------

class _Quiet:
    def __init__(self, key):
        pass

    def feed(self, kind, t):
        return []

    def finish(self):
        return []


QUIET = F.Fold("quiet", {"batch": STREAM[0] + STREAM[1]}, *STREAM, lambda ctx: F.KeyedState(STREAM[0], _Quiet))


def _batches(topic: str) -> pa.Table:
    return model.table_from_rows("batch", [{"source_kind": "log", "replica": "1", "topic": topic, "partition": 0,
                                            "source": f"{topic}-0/00000000000000000000.log", "position": 0}])


def test_a_key_that_comes_back_raises_under_the_strict_contract(monkeypatch):
    monkeypatch.setattr(F, "STRICT_ORDER", True)
    state = F.KeyedState(("topic",), _Quiet)
    state.feed("batch", _batches("a"))
    state.feed("batch", _batches("b"))
    with pytest.raises(F.KeyOrderError, match="'a'"):
        state.feed("batch", _batches("a"))


def test_a_key_that_comes_back_is_reported_as_an_internal_error(monkeypatch, tmp_path):
    monkeypatch.setattr(F, "STRICT_ORDER", False)
    audit = disk_audit([str(tmp_path)], folds=(QUIET,))
    run = L.execute(audit, [("batch", _batches("a")), ("batch", _batches("b")), ("batch", _batches("a"))], [])
    assert len(run.internal_errors) == 1 and "came back" in run.internal_errors[0]
    assert run.coverage["internal_errors"] == run.internal_errors


def test_a_nodes_log_dirs_own_files_come_together(tmp_path):
    """Two log dirs of one node (JBOD) with broken checkpoint files: their issues share a key
    (replica, no partition), which the plan yields once (the second log dir's used to come back
    after its partitions: the integrity fold started that key over)."""
    for d, partition in (("d1", "b-0"), ("d2", "c-0")):
        shutil.copytree(DEMO / "demo-idem-0", tmp_path / d / partition)
        shutil.copy(DEMO / "meta.properties", tmp_path / d / "meta.properties")
        (tmp_path / d / "replication-offset-checkpoint").write_bytes(b"not a checkpoint")
        (tmp_path / d / "recovery-point-offset-checkpoint").write_bytes(b"nor this")
    run = L.audit_segments([str(tmp_path)])   # the tests' contract is strict: a returning key raises
    assert not run.internal_errors and run.coverage["decode_issues"] >= 4


# -- a toy row kind and toy folds, added here only ------------------------------------------------

TOY_SCHEMA = pa.schema([("source", pa.string()), ("position", pa.int64()), ("replica", pa.string()),
                        ("log_dir", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                        ("offset", pa.int64())])
TOY_COLUMNS = STREAM[0] + STREAM[1] + ("offset",)
TOY_RULES = ("toy-offset-past-log", "toy-replicas-disagree")


def _register() -> None:
    """The toy kind, its file and its rules, in whichever process runs the toy: the Spark workers
    unpickle these functions by value (the test registers this module so) and call it there."""
    model.row_kind("toy_entry", TOY_SCHEMA, disk=True, partitioned=True)
    file_kinds.LOG_FILES.setdefault("toy-state", file_kinds.LogFile("toy-state", "partition", _toy_rows))
    if TOY_RULES[0] not in registry.RULES:   # (modules travel by reference, their dicts with them)
        rule(TOY_RULES[0], "warning", "disk", "a toy entry names an offset past its replica's log")(_doc)
        rule(TOY_RULES[1], "info", "disk", "the replicas of a partition hold different toy entries")(_doc)


def _doc():
    """Invariant: a toy's. Benign causes: none (a test's rule)."""


def _toy_rows(data, base_offset, name):
    """`toy-state`: one offset a line."""
    _register()
    rows, pos = [], 0
    for line in bytes(data).split(b"\n"):
        if line.strip():
            rows.append({"position": pos, "offset": int(line)})
        pos += len(line) + 1
    return [("toy_entry", rows)]


class _PastLog:
    """One (replica, topic, partition), streamed: its toy entries past its last batch."""

    def __init__(self, key):
        self.key, self.end, self.entries = key, -1, []

    def feed(self, kind, t):
        if kind == "batch":
            self.end = max(self.end, pc.max(t.column("last_offset")).as_py())
        else:
            self.entries += t.to_pylist()
        return []

    def finish(self):
        replica, topic, partition = self.key
        return [finding(TOY_RULES[0], f"{topic}-{partition}: toy offset {e['offset']} past {self.end}",
                        evidence=[evidence(e["source"], e["position"], "toy")], replica=replica, topic=topic,
                        partition=partition, first_offset=e["offset"])
                for e in self.entries if e["offset"] > self.end]


class _Agree:
    """One (topic, partition) across replicas, buffered: do they hold the same toy entries?"""

    def __init__(self, key):
        self.key, self.by_replica = key, {}

    def feed(self, kind, t):
        for r in t.to_pylist():
            self.by_replica.setdefault(r["replica"], set()).add(r["offset"])
        return []

    def finish(self):
        if len({frozenset(v) for v in self.by_replica.values()}) < 2:
            return []
        topic, partition = self.key
        return [finding(TOY_RULES[1], f"{topic}-{partition}: replicas hold different toy entries",
                        topic=topic, partition=partition, details={k: sorted(v) for k, v in self.by_replica.items()})]


def _make(key, group):
    def make(ctx):
        _register()
        return F.KeyedState(key, group)
    return make


TOY_STREAMED = F.Fold("toy-streamed", {"batch": STREAM[0] + STREAM[1] + ("last_offset",), "toy_entry": TOY_COLUMNS},
                      *STREAM, _make(STREAM[0], _PastLog),
                      where={"batch": lambda t: pc.equal(t.column("source_kind"), "log")})
TOY_BUFFERED = F.Fold("toy-buffered", {"toy_entry": TOY_COLUMNS}, ("topic", "partition"), ("replica", "offset"),
                      _make(("topic", "partition"), _Agree))


@pytest.fixture
def toy():
    """The toy registered in this process (and pickled by value to Spark's workers), removed after."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    _register()
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    for name in TOY_RULES:
        registry.RULES.pop(name, None)
    file_kinds.LOG_FILES.pop("toy-state", None)
    for kinds in (model.ROW_KINDS, model.SCHEMAS, model.ROWS):
        kinds.pop("toy_entry", None)
    model.KINDS.remove("toy_entry")


def _toy_log_dirs(tmp_path) -> list[str]:
    """Two copies of the demo log dir (one node, so two replicas told apart by path), with toy
    files: one past its log on the first copy, one partition whose toys differ between copies."""
    roots = [tmp_path / n / "demo" for n in ("before", "after")]
    for r in roots:
        shutil.copytree(DEMO, r)
        (r / "demo-idem-0" / "toy-state").write_bytes(b"0\n2\n")
    (roots[0] / "demo-plain-0" / "toy-state").write_bytes(b"1\n999999\n")
    (roots[1] / "demo-plain-0" / "toy-state").write_bytes(b"1\n")
    return [str(r) for r in roots]


@pytest.mark.parametrize("fold_in_tasks,part_bytes", [(True, S.PART_BYTES), (False, 1)])
def test_a_toy_row_kind_and_folds_run_on_both_executors(toy, tmp_path, monkeypatch, fold_in_tasks, part_bytes):
    """Streamed in the read tasks or shuffled to its partition's place, bucketed by (topic,
    partition) over one or two shuffle partitions: the toy's findings and rows are the local
    engine's."""
    monkeypatch.setattr(S, "FOLD_IN_TASKS", fold_in_tasks)
    monkeypatch.setattr(S, "PART_BYTES", part_bytes)
    paths = _toy_log_dirs(tmp_path)
    folds = DISK_FOLDS + (TOY_STREAMED, TOY_BUFFERED)
    local = L.audit_segments(paths, folds=folds, select=TOY_RULES)
    assert sorted((f["rule"], f["topic"]) for f in local.findings) == [
        ("toy-offset-past-log", "demo-plain"), ("toy-replicas-disagree", "demo-plain")]
    spark = S.audit_segments(paths, folds=folds, select=TOY_RULES, spark_options=SPARK)
    assert spark.findings == local.findings and spark.coverage == local.coverage
    _, chunks = L.decode_segments(paths)
    toys = pa.concat_tables([t for k, t in chunks if k == "toy_entry"])
    assert toys.num_rows == 7 and S.decoded_tables("kafka-segments", paths, {}, SPARK)["toy_entry"].equals(toys)
