"""The cluster's finalized transaction.version from its KRaft metadata settles what the markers
leave open (txn_model.transaction_version): a producer whose only transaction ended with an ABORT
at its epoch + 1, without coordinator records, is a coordinator abort under transaction version
0/1 (a client's abort does not bump the epoch) and tells nothing under version 2."""

from __future__ import annotations

from diskcraft import audit, logdir

from fixtures.builder.metadata import MetadataLog

RULES = ("coordinator-abort",)


def _log_dir(tmp_path, tv: int | None, metadata: bool = True):
    ld = logdir(tmp_path)
    if metadata:
        md = MetadataLog(ld)
        if tv is not None:
            md.feature("transaction.version", tv)
    pb = ld.partition("t", 0)
    pb.append_batch(values=[b"a"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    pb.append_control(7, 1, "ABORT")
    return ld.write()


def test_tv1_cluster_makes_the_bumped_abort_the_coordinators(tmp_path, txn_path):
    fs = audit(_log_dir(tmp_path, 1), rules=RULES)
    assert [f["rule"] for f in fs] == ["coordinator-abort"]


def test_a_whole_metadata_log_without_the_feature_is_level_0(tmp_path, txn_path):
    assert [f["rule"] for f in audit(_log_dir(tmp_path, None), rules=RULES)] == ["coordinator-abort"]


def test_tv2_cluster_or_no_metadata_leave_it_open(tmp_path, txn_path):
    assert audit(_log_dir(tmp_path / "a", 2), rules=RULES) == []
    assert audit(_log_dir(tmp_path / "b", None, metadata=False), rules=RULES) == []


def test_kaudit_txn_listing_takes_the_clusters_version(tmp_path):
    from kaudit.engine.local import list_transactions

    _, rows = list_transactions([str(_log_dir(tmp_path / "a", 1))])
    assert rows and {r["transaction_version"] for r in rows} == {"0/1"}
    _, rows = list_transactions([str(_log_dir(tmp_path / "b", 2))])
    assert rows and {r["transaction_version"] for r in rows} == {None}


def test_a_bootstrap_checkpoint_below_2_decides_nothing(tmp_path, txn_path):
    from fixtures.builder.metadata import snapshot_checkpoint
    from fixtures.encoder import metadata as me
    from kaudit.engine.plan import cluster_transaction_version

    boot = [{"source": "d/bootstrap.checkpoint", "offset": 1, "record_type": "FEATURE_LEVEL_RECORD",
             "issue": None, "feature": "transaction.version", "feature_level": 1}]
    assert cluster_transaction_version(boot, False) is None            # may have been raised since
    assert cluster_transaction_version([dict(boot[0], feature_level=2)], False) == 2
    ld = logdir(tmp_path)
    ld.add_file("bootstrap.checkpoint", snapshot_checkpoint([me.feature_level_record("transaction.version", 1)],
                                                            end_offset=0)[1])
    pb = ld.partition("t", 0)
    pb.append_batch(values=[b"a"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    pb.append_control(7, 1, "ABORT")
    assert audit(ld.write(), rules=RULES) == []
