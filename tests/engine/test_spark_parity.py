"""The Spark engine (master local[2]) against the local engine: identical findings (by id, and
whole), coverage, reference time and decoded tables, on the real corpus and the crafted fixtures.
One Spark session serves the whole test process (kaudit.engine.spark.session)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from kaudit.engine import local as L
from kaudit.engine import spark as S
from kaudit.sources.pcap import PcapOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audit" / "disk"))

ROOT = Path(__file__).resolve().parents[2]
PORTS = PcapOptions(kafka_ports=frozenset({9092, 9093, 9094}))
SPARK = S.SparkOptions(master="local[2]")


@pytest.fixture(scope="module")
def spark():
    return S.session(SPARK)


def _same(spark_run, local_run):
    assert spark_run.engine == "spark" and spark_run.application_id
    assert sorted(f["id"] for f in spark_run.findings) == sorted(f["id"] for f in local_run.findings)
    assert spark_run.findings == local_run.findings
    assert spark_run.coverage == local_run.coverage
    assert spark_run.reference_time_ms == local_run.reference_time_ms
    assert spark_run.errors == local_run.errors


def _local_tables(chunks) -> dict[str, pa.Table]:
    by_kind: dict[str, list] = {}
    for kind, t in chunks:
        if t.num_rows:
            by_kind.setdefault(kind, []).append(t)
    return {k: pa.concat_tables(v) for k, v in by_kind.items()}


def _same_tables(spark_tables, local_tables):
    assert set(spark_tables) == set(local_tables)
    for kind, t in local_tables.items():
        assert spark_tables[kind].equals(t), kind


def _segments(paths, spark_options=SPARK, **kw):
    names = [str(p) for p in paths]
    _same(S.audit_segments(names, spark_options=spark_options, **kw), L.audit_segments(names, **kw))


def _pcaps(paths, options=PORTS):
    names = [str(p) for p in paths]
    _same(S.audit_pcaps(names, options, spark_options=SPARK), L.audit_pcaps(names, options))


# -- log dirs -----------------------------------------------------------------------------------

def test_logdirs_final_findings_and_tables(spark, corpus):
    root = corpus / "real-kafka-3.0.2" / "logdirs-final"
    _segments([root])
    _, chunks = L.decode_segments([str(root)])
    _same_tables(S.decoded_tables("kafka-segments", [str(root)], {}, SPARK), _local_tables(chunks))


def test_extra_log_dirs(spark, corpus):
    for d in sorted((corpus / "real-kafka-3.0.2-extra").glob("*/logdirs")):
        _segments([d])


def test_transactions_shared_out_by_producer_id(spark, corpus, monkeypatch):
    """Two shuffle partitions (as on a big input): the transactions fold runs on each one's share
    of the producer ids, with every task's reference time and coordinator facts; and every
    partition's rows shuffled to its folds (as a partition bigger than a core's share is)."""
    monkeypatch.setattr(S, "PART_BYTES", 1)
    monkeypatch.setattr(S, "FOLD_IN_TASKS", False)
    roots = [corpus / "real-kafka-3.0.2" / "logdirs-final",
             *sorted((corpus / "real-kafka-3.0.2-extra").glob("*/logdirs"))]
    for root in roots:
        _segments([root])
        _segments([root], now_ms=10**13)


def test_transactions_view(spark, corpus):
    root = str(corpus / "real-kafka-3.0.2" / "logdirs-final")
    sel = S.transactions_selection([root], SPARK)
    assert L.list_transactions([root], selected=sel)[1] == L.list_transactions([root])[1]


@pytest.mark.parametrize("fold_in_tasks", [True, False])
@pytest.mark.parametrize("case", ["state-loss", "retries", "integrity", "benign"])
def test_crafted_log_dirs(spark, case, tmp_path, monkeypatch, fold_in_tasks):
    """`fold_in_tasks`: the partitions folded by the tasks that read them, or shuffled to them."""
    from test_disk_golden import CASES

    monkeypatch.setattr(S, "FOLD_IN_TASKS", fold_in_tasks)
    root = CASES[case](tmp_path)
    _segments([root])
    _, chunks = L.decode_segments([str(root)])
    _same_tables(S.decoded_tables("kafka-segments", [str(root)], {}, SPARK), _local_tables(chunks))


@pytest.mark.parametrize("part_bytes,fold_in_tasks", [(S.PART_BYTES, True), (1, False)])
def test_crafted_transaction_log_dirs(spark, tmp_path, monkeypatch, part_bytes, fold_in_tasks):
    """Every crafted transaction test of the disk audit, its audits checked against Spark's; with
    `part_bytes` 1 the producer ids are shared out over two shuffle partitions (and the
    partitions' rows shuffled to their folds)."""
    import inspect

    import test_disk_transactions as T

    monkeypatch.setattr(S, "PART_BYTES", part_bytes)
    monkeypatch.setattr(S, "FOLD_IN_TASKS", fold_in_tasks)

    def both(root, **kw):
        kw = dict(kw, select=T.TXN_RULES)
        _segments([root], **kw)
        return L.audit_segments([str(root)], **kw).findings

    monkeypatch.setattr(T, "audit", both)
    tests = [f for n, f in sorted(vars(T).items()) if n.startswith("test_") and callable(f)
             and list(inspect.signature(f).parameters) == ["tmp_path"]]
    assert len(tests) >= 12
    for i, test in enumerate(tests):
        test(tmp_path / str(i))


def test_crafted_consistency_log_dirs(spark, tmp_path, monkeypatch):
    """Every crafted test of the replica, checkpoint, leader-epoch and state-file rules, its
    audits checked against Spark's, the partitions shared out over two shuffle partitions (the
    cross-replica fold bucketed by (topic, partition)) and shuffled to the per-replica folds (the
    folds run in the read tasks in the corpus parity tests)."""
    import test_disk_checkpoints
    import test_disk_leader_epochs
    import test_disk_replica_divergence
    import test_disk_state_files

    monkeypatch.setattr(S, "PART_BYTES", 1)
    monkeypatch.setattr(S, "FOLD_IN_TASKS", False)
    for module in (test_disk_replica_divergence, test_disk_checkpoints, test_disk_leader_epochs,
                   test_disk_state_files):
        real = module.audit

        def both(root, real=real, **kw):
            roots = [str(r) for r in root] if isinstance(root, (list, tuple)) else [str(root)]
            kw["select"] = kw.pop("rules")
            _segments(roots, **kw)
            return real(root, rules=kw["select"])

        monkeypatch.setattr(module, "audit", both)
        for i, test in enumerate(_plain_tests(module, 3)):
            test(tmp_path / f"{module.__name__}-{i}")


def test_consistency_corpus(spark, corpus, tmp_path, monkeypatch):
    """All nodes of every 4.1.0 scenario; the v7 changelog with a damaged replica."""
    import test_disk_consistency_corpus as C

    for scenario in C.SCENARIOS[3:]:
        _segments([corpus / scenario])
    monkeypatch.setattr(S, "PART_BYTES", 1)
    monkeypatch.setattr(S, "FOLD_IN_TASKS", False)
    monkeypatch.setattr(C, "_findings", lambda paths: _segments(paths, select=C.RULES) or
                        L.audit_segments([str(p) for p in paths], select=C.RULES).findings)
    C.test_v7_with_a_damaged_replica(corpus, tmp_path)


def test_demo_log_dir(spark):
    _segments([ROOT / "fixtures" / "logdirs" / "demo"])


def test_one_node_in_two_log_dirs(spark, tmp_path):
    import shutil

    copies = [tmp_path / n / "demo" for n in ("before", "after")]
    for c in copies:
        shutil.copytree(ROOT / "fixtures" / "logdirs" / "demo", c)
    _segments(copies)


def test_a_segment_bigger_than_a_split(spark, tmp_path):
    from fixtures.builder.bench import write_bench_segment

    d = tmp_path / "big-0"
    d.mkdir()
    write_bench_segment(d / "00000000000000000000.log", target_bytes=3 << 20, producer_id=9)
    small = S.SparkOptions(master="local[2]", split_bytes=256 << 10)
    _segments([d], spark_options=small)
    _, chunks = L.decode_segments([str(d)])
    _same_tables(S.decoded_tables("kafka-segments", [str(d)], {"split_bytes": 256 << 10}, small),
                 _local_tables(chunks))


def test_plain_writes_inside_a_transaction_across_splits(spark, tmp_path, monkeypatch):
    """A transactional producer writing plainly inside its transaction, interleaved with an
    idempotent producer, in a segment cut into many splits and two shuffle partitions: the same
    findings (one stretch of offsets, whatever the cuts); and a producer without coordinator
    records in one bucket while the other bucket holds the coordinator's (the fact is global)."""
    from diskcraft import logdir

    monkeypatch.setattr(S, "PART_BYTES", 1)
    t0 = 1_700_000_000_000
    ld = logdir(tmp_path, start_time_ms=t0)
    ts = ld.partition("__transaction_state", 0)
    a = ld.partition("a", 0)
    tx = ld.producer(7, 0, transactional_id="tx", txn_state=ts)
    bare = ld.producer(8, 0, transactional=True)   # no coordinator records
    tx.send([b"t"], partition=a)
    bare.send([b"u"], partition=a)
    for i in range(600):
        a.append_batch(values=[b"p" * 200], producer_id=7, producer_epoch=0, base_sequence=1 + i,
                       is_transactional=False)
        if i % 3 == 0:
            a.append_batch(values=[b"i" * 200], producer_id=9, producer_epoch=0, base_sequence=i // 3)
    tx.commit()
    ld.write()
    small = S.SparkOptions(master="local[2]", split_bytes=16 << 10)
    # the big partition is cut and shuffled, the coordinator's is folded where it is read
    from kaudit.sources.logdir import plan
    from kaudit.sources.splits import keyed_split_plan

    p = plan([str(ld.root)])
    tasks = keyed_split_plan(p, 16 << 10, whole_key_bytes=S.whole_key_bytes(p.total_bytes, 2))
    assert {whole for _, whole in tasks} == {True, False}
    assert {s.target.topic for t, whole in tasks if whole for s in t} == {"__transaction_state"}
    for now in (None, t0 + 10**7):
        _segments([ld.root], spark_options=small, now_ms=now)
    fs = L.audit_segments([str(ld.root)]).findings
    [f] = [f for f in fs if f["rule"] == "non-transactional-write-in-transaction"]
    assert json.loads(f["details"])["offsets"] == [[2, 801]] and "wrote 600 non-transactional" in f["message"]
    assert any(f["producer_id"] == 8 for f in fs)


# -- captures -----------------------------------------------------------------------------------

def _captures(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.pcap*") if p.suffix in (".pcap", ".pcapng"))


def test_real_captures_findings_and_tables(spark, corpus):
    paths = _captures(corpus / "real-kafka-3.0.2" / "pcap")
    paths += [p for d in sorted((corpus / "real-kafka-3.0.2-extra").glob("*")) for p in _captures(d)]
    assert len(paths) >= 25
    for p in paths:
        _pcaps([p])
        summaries: dict = {}
        _, chunks = L.decode_pcaps([str(p)], PORTS, summaries)
        local = _local_tables(chunks)
        _same_tables(S.decoded_tables("kafka-pcap", [str(p)], S.pcap_source_options(PORTS), SPARK), local)


def test_mock_and_public_captures(spark, corpus):
    for p in _captures(corpus / "librdkafka-mock" / "pcap"):
        _pcaps([p], PcapOptions())
    public = [p for d in sorted((corpus / "public").glob("*")) for p in _captures(d)]
    for p in public:
        _pcaps([p], PcapOptions())
    _pcaps(public, PcapOptions())   # all at once: files ranked by time, connections stitched


@pytest.mark.parametrize("case", ["retries", "sequences", "frames", "benign"])
def test_crafted_captures(spark, case, tmp_path):
    from tests.audit.wire.test_wire_golden import CASES

    path = tmp_path / f"{case}.pcap"
    CASES[case](path)
    _pcaps([path], PcapOptions())
    _, chunks = L.decode_pcaps([str(path)], PcapOptions(), {})
    _same_tables(S.decoded_tables("kafka-pcap", [str(path)], S.pcap_source_options(PcapOptions()), SPARK),
                 _local_tables(chunks))


def test_crafted_readers(spark, tmp_path, monkeypatch):
    """Every crafted test of aborted-read and read-past-lso, its audits checked against Spark's."""
    from tests.audit.wire import test_wire_readers as T
    from tests.sources.pcap.craft import write_capture

    def both(tmp, conns, *, name="wire.pcap", select=(), **kw):
        path = tmp / name
        write_capture(path, conns)
        _same(S.audit_pcaps([str(path)], PcapOptions(), select=select, spark_options=SPARK),
              L.audit_pcaps([str(path)], PcapOptions(), select=select))
        return L.audit_pcaps([str(path)], PcapOptions(), select=select).findings

    monkeypatch.setattr(T, "audit", both)
    for i, test in enumerate(_plain_tests(T, 6)):
        (tmp_path / str(i)).mkdir()
        test(tmp_path / str(i))


def test_unreadable_inputs_are_reported_alike(spark, tmp_path):
    bad = tmp_path / "not-a-capture.pcap"
    bad.write_bytes(b"hello, not a capture" * 10)
    _pcaps([bad, tmp_path / "missing.pcap"])


# -- the sources from a user's own Spark code ---------------------------------------------------

def test_sources_from_spark_sql(spark, corpus):
    root = str(corpus / "real-kafka-3.0.2" / "logdirs-final")
    df = spark.read.format("kafka-segments").load(root)
    n = df.count()
    _, chunks = L.decode_segments([root])
    assert n == sum(t.num_rows for k, t in chunks if k == "batch")
    markers = df.where("is_control").groupBy("control_type").count().collect()
    assert {"COMMIT", "ABORT"} <= {r["control_type"] for r in markers}
    pcap = str(corpus / "real-kafka-3.0.2" / "pcap" / "03-txn-java.pcap")
    frames = spark.read.format("kafka-pcap").option("kind", "frame").load(pcap)
    assert frames.where("api_name = 'EndTxn'").count() >= 1


# -- wire and disk together ---------------------------------------------------------------------

@pytest.mark.parametrize("capture", ["02-retry-noidem-confluent.pcap", "06-dangling-open-txn-then-restart.pcap",
                                     "05-fence-java.pcap"])
def test_audit_join(spark, corpus, capture):
    from kaudit.engine.joint import audit_both

    pcap = [str(corpus / "real-kafka-3.0.2" / "pcap" / capture)]
    logs = [str(corpus / "real-kafka-3.0.2" / "logdirs-final")]
    _same(audit_both(pcap, logs, PORTS, spark_options=SPARK), audit_both(pcap, logs, PORTS))


@pytest.mark.parametrize("scenario", ["v2-txn-java-tv2", "v7-compacted-eos-changelog"])
def test_audit_join_readers(spark, corpus, scenario):
    """The readers' join (read_committed Fetch responses against the stored markers and .txnindex)
    and the consistency rules."""
    from kaudit.engine.joint import audit_both

    d = corpus / "real-kafka-4.1.0" / scenario
    args = ([str(d / f"{scenario}.pcap")], [str(d / "logdirs")], PORTS)
    kw = {"select": ("aborted-read", "read-past-lso", "txnindex-mismatch", "replica-divergence",
                     "checkpoint-mismatch", "leader-epoch-mismatch", "snapshot-mismatch")}
    _same(audit_both(*args, spark_options=SPARK, **kw), audit_both(*args, **kw))


def test_crafted_readers_joined(spark, tmp_path, monkeypatch):
    """Every crafted test of the readers' join, its audits checked against Spark's."""
    from tests.audit import test_reader_join as T

    real = T.audit_both

    def both(pcaps, logs, options, **kw):
        spark_run = real(pcaps, logs, options, spark_options=SPARK, **kw)
        local = real(pcaps, logs, options, **kw)
        _same(spark_run, local)
        return local

    monkeypatch.setattr(T, "audit_both", both)
    for i, test in enumerate(_plain_tests(T, 4)):
        (tmp_path / str(i)).mkdir()
        test(tmp_path / str(i))


def _plain_tests(module, at_least: int) -> list:
    """The test functions of a module that take only `tmp_path`."""
    import inspect

    tests = [f for n, f in sorted(vars(module).items()) if n.startswith("test_") and callable(f)
             and list(inspect.signature(f).parameters) == ["tmp_path"]]
    assert len(tests) >= at_least
    return tests


# -- rotated captures: connections that span files -------------------------------------------

def _sorted_tables(tables: dict[str, pa.Table]) -> dict[str, list]:
    """Per kind, the rows in a fixed order (several captures: the two engines emit the stitched
    connections' rows at different moments)."""
    return {k: sorted(t.to_pylist(), key=repr) for k, t in tables.items()}


def _rotated(spark, files, options):
    names = [str(f) for f in files]
    _pcaps(files, options)
    summaries: dict = {}
    _, chunks = L.decode_pcaps(names, options, summaries)
    local = _local_tables(chunks)
    spark_tables = S.decoded_tables("kafka-pcap", names, S.pcap_source_options(options), SPARK)
    assert _sorted_tables(spark_tables) == _sorted_tables(local)
    return local


def test_a_connection_split_across_two_rotated_files_is_reassembled(spark, tmp_path):
    from tests.sources.test_pcap_stitch import PRODUCE_CORR4, Conn, cut_inside, producer_messages, split_pcap
    from tests.sources.pcap.craft import write_capture

    whole = tmp_path / "whole.pcap"
    pkts = write_capture(whole, Conn(producer_messages()), segment=64)
    files, _ = split_pcap(whole, [cut_inside(pkts, PRODUCE_CORR4)], tmp_path)
    rows = _rotated(spark, files, PcapOptions())
    one = _local_tables(L.decode_pcaps([str(whole)], PcapOptions(), {})[1])
    assert rows["frame"].num_rows == one["frame"].num_rows and "decode_issue" not in rows


def test_real_captures_rotated(spark, corpus, tmp_path):
    from tests.sources.test_pcap_stitch import split_pcap

    for name in ("03-txn-java.pcap", "05-fence-java.pcap"):
        d = tmp_path / name
        d.mkdir()
        path = corpus / "real-kafka-3.0.2" / "pcap" / name
        n = split_pcap(path, [], d, "all")[1][-1]
        files, _ = split_pcap(path, [n // 3, 2 * n // 3], d)
        _rotated(spark, list(reversed(files)), PORTS)   # ranked by first packet, not by argv


def test_the_jvm_we_start_compiles_with_c1_only(spark):
    """The local-mode JVM only schedules tasks and moves their result rows: C2 cost ~0.4 s of
    CPU a job, taken from the Python workers (engine.spark.JIT_OPTIONS)."""
    args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                .getInputArguments())
    assert S.JIT_OPTIONS in args
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args)


# -- Kafka 4.1.0 --------------------------------------------------------------------------------

KAFKA_41 = ("v1-idempotent-clean", "v2-txn-java-tv2", "v3-txn-confluent", "v4-idem-retry-java",
            "v5-fencing-tv2", "v6-codecs", "v7-compacted-eos-changelog")


def test_kafka_41_log_dirs_captures_and_their_join(spark, corpus):
    """Topic ids named alike (the tasks' names united on the driver), transaction version 2 judged
    alike; decoded capture tables equal, topic names included."""
    from kaudit.engine.joint import audit_both

    for scn in KAFKA_41:
        d = corpus / "real-kafka-4.1.0" / scn
        caps = [p for p in sorted(d.iterdir()) if p.suffix in (".pcap", ".pcapng")]
        _segments([d / "logdirs"])
        _pcaps(caps)
        _, chunks = L.decode_pcaps([str(p) for p in caps], PORTS, {})
        _same_tables(S.decoded_tables("kafka-pcap", [str(p) for p in caps], S.pcap_source_options(PORTS), SPARK),
                     _local_tables(chunks))
        names, logs = [str(p) for p in caps], [str(d / "logdirs")]
        _same(audit_both(names, logs, PORTS, spark_options=SPARK), audit_both(names, logs, PORTS))


@pytest.mark.parametrize("fold_in_tasks", [True, False])
def test_crafted_losses(spark, tmp_path, monkeypatch, fold_in_tasks):
    """missing-offsets (segment_loss.py): a lost .log, a cut closed segment, a lost segment."""
    import os

    from test_disk_segment_loss import _seg, _three_segments

    from fixtures.builder import truncate_file

    monkeypatch.setattr(S, "FOLD_IN_TASKS", fold_in_tasks)
    roots = [_three_segments(tmp_path, name) for name in ("nolog", "cut", "gap")]
    os.remove(_seg(roots[0], 6))
    truncate_file(_seg(roots[1], 6), 150)
    for ext in ("log", "index", "timeindex"):
        os.remove(_seg(roots[2], 6, ext))
    _segments([r.parent for r in roots])
    assert len([f for f in L.audit_segments([str(r.parent) for r in roots]).findings
                if f["rule"] == "missing-offsets"]) == 3


def test_acknowledged_writes_lost_to_an_unclean_election(spark, tmp_path):
    """acknowledged-write-lost (the DiskTap's batches at acknowledged offsets, shipped from the
    tasks) and the unclean election told which offsets were acknowledged: the same on Spark."""
    from kaudit.engine.joint import audit_both
    from tests.audit.test_acked_loss import _capture, _cluster

    pcap = _capture(tmp_path, range(10))
    logs = [str(r) for r in _cluster(tmp_path, election="unclean")]
    got = audit_both([pcap], logs, PcapOptions(), spark_options=SPARK)
    _same(got, audit_both([pcap], logs, PcapOptions()))
    assert {f["rule"] for f in got.findings} >= {"acknowledged-write-lost", "unclean-leader-election"}


def test_acknowledged_writes_lost_on_the_wire(spark, tmp_path):
    """wire-acked: an offset acknowledged twice and a Fetch returning other records there."""
    from tests.audit.wire import wirecraft as wc
    from tests.audit.wire.test_wire_acked import P1, P2, READER, at, fetch
    from tests.sources.pcap.craft import Conn

    conns = [Conn(wc.send(1, wc.batch(7, 0, 0), offset=5), **P1), Conn(wc.send(1, wc.batch(8, 0, 0), offset=5), **P2),
             Conn(fetch(1, at(5, -1, -1, 0, tag="z"), hw=8, fetch_offset=5), **READER)]
    path = tmp_path / "acked.pcap"
    wc.write_capture(path, conns)
    _pcaps([path], PcapOptions())
    rules = {f["rule"] for f in L.audit_pcaps([str(path)], PcapOptions()).findings}
    assert {"offset-acknowledged-twice", "acknowledged-records-replaced"} <= rules


def test_crafted_transaction_failure_modes(spark, tmp_path, monkeypatch):
    """Issue 30 item 5's crafted log dirs and captures (txn-markers-refused, epoch-exhausted-
    transaction, WriteTxnMarkers v2's version), their audits checked against Spark's."""
    import test_disk_txn_failures as D

    from tests.audit.wire import test_wire_txn_failures as W
    from tests.audit.wire import test_wire_txn_versions as V

    def both(root, **kw):
        kw = dict(kw, select=D.RULES)
        _segments([root], **kw)
        return L.audit_segments([str(root)], **kw).findings

    def both_pcaps(paths, options, **kw):
        local = L.audit_pcaps(paths, options, **kw)
        _same(S.audit_pcaps(paths, options, spark_options=SPARK, **kw), local)
        return local

    monkeypatch.setattr(D, "audit", both)
    monkeypatch.setattr(V, "audit_pcaps", both_pcaps)
    for n in ("d1", "d2", "d3", "d4", "d5", "w1", "w2", "w3", "w4"):
        (tmp_path / n).mkdir()
    D.test_prepare_without_complete_and_a_missing_marker(tmp_path / "d1", 2)
    D.test_every_marker_landed_without_complete(tmp_path / "d2")
    D.test_open_at_the_limit_past_its_timeout(tmp_path / "d3", 2, 32766)
    D.test_version_2_prepared_at_the_limit_without_a_next_producer_id(tmp_path / "d4")
    D.test_epoch_rotation_at_the_limit_is_clean(tmp_path / "d5")
    W.test_markers_refused_again_and_again_leave_a_partition_open(tmp_path / "w1", 1)
    W.test_a_landed_marker_refused_when_re_sent_is_kafka_19999(tmp_path / "w2")
    W.test_open_at_the_limit_past_its_timeout(tmp_path / "w3", 2)
    W.test_version_2_marker_at_the_data_epoch_is_flagged(tmp_path / "w4", False)
