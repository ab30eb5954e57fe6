"""Today's transaction failure modes on the wire (issue 30 item 5), crafted positive and negative:
WriteTxnMarkers v2's TransactionVersion (KIP-1228) read on each marker, the coordinator's
markers refused again and again for one producer and epoch (KAFKA-19999), and a transaction left
open at the producer epoch's limit, 32767 (KAFKA-20090)."""

from __future__ import annotations

import pytest

from tests.audit.wire.test_wire_txn_versions import PID, T0_MS, Story, run
from tests.audit.wire.wirecraft import by_rule, details
from tests.audit.wire.wirecraft_txn import markers


def _v2_end(s: Story, *, committed: bool, epoch: int, tv: int, parts=(0,)) -> None:
    """The client's EndTxn and the coordinator's WriteTxnMarkers v2 at `epoch`, saying `tv`."""
    from tests.audit.wire.wirecraft import end_txn
    from tests.audit.wire.wirecraft_txn import end_txn_v5

    if s.tv == 2:
        s.on("client", end_txn_v5(s._c(), s.pid, s.epoch, committed=committed, txn_id=s.txn_id))
    else:
        s.on("client", end_txn(s._c(), s.pid, s.epoch, committed=committed, txn_id=s.txn_id))
    s.on("coord", markers(s._c(), s.pid, epoch, committed=committed, parts=[("orders", p) for p in parts],
                          version=2, transaction_version=tv))
    s.open = []


# -- WriteTxnMarkers v2: the transaction version on the marker ----------------------------------

@pytest.mark.parametrize("tv", [1, 2])
def test_marker_version_matching_its_epoch_is_clean(tmp_path, tv):
    s = Story(tv)
    s.send(0, 0)
    _v2_end(s, committed=True, epoch=s.epoch + (1 if tv == 2 else 0), tv=tv)
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    assert by_rule(fs, "mixed-epoch-transaction") == []
    assert by_rule(fs, "hanging-transaction") == [] and by_rule(fs, "dangling-transaction") == []


@pytest.mark.parametrize("committed", [True, False])
def test_version_2_marker_at_the_data_epoch_is_flagged(tmp_path, committed):
    """The coordinator says version 2 (KIP-1228) but the marker carries the data's epoch: a
    version-2 marker is exactly epoch + 1 (the leader refuses one at or below the data's epoch),
    an ABORT included - which the epochs alone would have allowed."""
    s = Story(1)
    s.send(0, 0)
    _v2_end(s, committed=committed, epoch=0, tv=2)
    (m,) = by_rule(run(tmp_path, s, now_ms=T0_MS + 5_000), "mixed-epoch-transaction")
    assert "transaction version 2 (its WriteTxnMarkers v2 says so) allows 1" in m["message"]


def test_version_1_marker_one_above_on_a_commit_is_flagged(tmp_path):
    s = Story(1)
    s.send(0, 0)
    _v2_end(s, committed=True, epoch=1, tv=1)
    (m,) = by_rule(run(tmp_path, s, now_ms=T0_MS + 5_000), "mixed-epoch-transaction")
    assert "transaction version 0/1 (its WriteTxnMarkers v2 says so) allows 0" in m["message"]


def test_marker_version_names_the_producers_version(tmp_path):
    """No EndTxn v5, no leader registration: only the markers say version 2."""
    s = Story(1)
    s.send(0, 0)
    s.on("coord", markers(s._c(), PID, 1, committed=True, parts=[("orders", 0)], version=2, transaction_version=2))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    assert by_rule(fs, "mixed-epoch-transaction") == []
