"""Today's transaction failure modes on the wire (issue 30 item 5), crafted positive and negative:
WriteTxnMarkers v2's TransactionVersion (KIP-1228) read on each marker, the coordinator's
markers refused again and again for one producer and epoch (KAFKA-19999), and a transaction left
open at the producer epoch's limit, 32767 (KAFKA-20090)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.audit.txn.txn_stuck import PERMANENT, RETRIED_S, markers_refused

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


# -- the coordinator's markers refused again and again (KAFKA-19999) ------------------------------

def _prepared(tv: int = 2) -> Story:
    """A producer's transaction on orders-0 and orders-1, committed by the client (EndTxn)."""
    from tests.audit.wire.wirecraft import end_txn
    from tests.audit.wire.wirecraft_txn import end_txn_v5

    s = Story(tv)
    s.send(0, 0)
    s.send(1, 0)
    end = end_txn_v5 if tv == 2 else end_txn
    s.on("client", end(s._c(), PID, 0, committed=True, txn_id=s.txn_id))
    return s


def _mk(s: Story, parts, error: int = 0, epoch: int = 1):
    s.on("coord", markers(s._c(), PID, epoch, committed=True, parts=[("orders", p) for p in parts], version=2,
                          transaction_version=s.tv, error=error))


@pytest.mark.parametrize("tv", [1, 2])
def test_markers_refused_again_and_again_leave_a_partition_open(tmp_path, tv):
    """orders-0's marker lands; orders-1's is refused INVALID_PRODUCER_EPOCH, then again after a
    coordinator reload; the producer's InitProducerId is answered CONCURRENT_TRANSACTIONS."""
    from tests.audit.wire.wirecraft import init_producer_id

    s = _prepared(tv)
    e = 1 if tv == 2 else 0
    _mk(s, [0], epoch=e)
    _mk(s, [1], error=47, epoch=e)
    _mk(s, [1], error=47, epoch=e)
    s.on("client", init_producer_id(s._c(), PID, 1, txn_id=s.txn_id, error=51))
    fs = run(tmp_path, s, now_ms=T0_MS + 5_000)
    (f,) = by_rule(fs, "txn-markers-refused")
    d = details(f)
    assert (f["topic"], f["partition"], f["producer_id"], f["producer_epoch"]) == ("orders", 1, PID, e)
    assert (d["partitions"], d["error_codes"], d["refusals"], d["concurrent_transactions"]) == (
        ["orders-1"], [47], 2, 1)
    assert d["read_committed_stops"] == {"orders-1": 0} and f["severity"] == "critical"
    assert "INVALID_PRODUCER_EPOCH (47)" in f["message"] and "read_committed consumers stop at offset 0" in f["message"]
    assert d["marker_transaction_version"] == tv


def test_a_landed_marker_refused_when_re_sent_is_kafka_19999(tmp_path):
    s = _prepared()
    _mk(s, [0, 1])
    _mk(s, [1], error=47)   # a coordinator reload re-sends it: the leader's strict TV2 check refuses
    _mk(s, [1], error=47)
    (f,) = by_rule(run(tmp_path, s, now_ms=T0_MS + 5_000), "txn-markers-refused")
    assert "had landed" in f["message"] and "KAFKA-19999" in f["message"]
    assert details(f)["read_committed_stops"] == {} and f["severity"] == "error"


def _run_spread(tmp_path, s: Story, step: float, now_ms=None):
    """As `run`, one message every `step` seconds (retriable refusals need time between them)."""
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap import PcapOptions
    from tests.audit.wire.wirecraft_txn import write_ordered
    from tests.sources.pcap.craft import Conn

    conns, index, order = [], {}, []
    for name, msgs in s.events:
        if name not in index:
            index[name] = len(conns)
            conns.append(Conn([], **Story.ENDS[name]))
        c = conns[index[name]]
        for m in msgs:
            order.append((index[name], len(c.messages)))
            c.messages.append(m)
    path = tmp_path / "spread.pcap"
    write_ordered(path, conns, order, step=step)
    return audit_pcaps([str(path)], PcapOptions(), now_ms=now_ms).findings


@pytest.mark.parametrize("spread", [False, True])
def test_retriable_refusals_over_time_are_flagged_moments_are_not(tmp_path, spread):
    """NOT_ENOUGH_REPLICAS again and again: over half a minute it is reported; within moments (a leader
    election) it is not, though nothing accepted them before the capture ended."""
    s = _prepared()
    _mk(s, [0])
    for _ in range(4):
        _mk(s, [1], error=19)
    fs = by_rule(_run_spread(tmp_path, s, 2.0 if spread else 0.001), "txn-markers-refused")
    if spread:
        (f,) = fs
        assert details(f)["error_codes"] == [19] and details(f)["refusals"] == 4
        assert "NOT_ENOUGH_REPLICAS (19)" in f["message"]
    else:
        assert fs == []


@pytest.mark.parametrize("code", [6, 19])
def test_a_retriable_refusal_then_accepted_is_clean(tmp_path, code):
    s = _prepared()
    _mk(s, [0])
    _mk(s, [1], error=code)
    _mk(s, [1], error=code)
    _mk(s, [1])
    assert by_rule(run(tmp_path, s, now_ms=T0_MS + 5_000), "txn-markers-refused") == []


def test_one_refusal_without_consequence_is_clean(tmp_path):
    """A zombie coordinator's re-sent marker refused once after the marker landed: nothing stuck."""
    s = _prepared()
    _mk(s, [0, 1])
    _mk(s, [1], error=52)
    assert by_rule(run(tmp_path, s, now_ms=T0_MS + 5_000), "txn-markers-refused") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_refusals_before_a_later_end_accepted_are_clean(tmp_path, tv):
    """The refused transaction was completed after all: the producer's next transaction (version
    0/1: at the same epoch, on the other partition, an ABORT) ended."""
    s = _prepared(tv)
    e = 1 if tv == 2 else 0
    _mk(s, [0], epoch=e)
    _mk(s, [1], error=47, epoch=e)
    _mk(s, [1], error=47, epoch=e)
    s.epoch, s.open, s.seq = e, [], {}
    s.send(0, 2)
    s.end(False)
    assert by_rule(run(tmp_path, s, now_ms=T0_MS + 5_000), "txn-markers-refused") == []


# -- a transaction open at the epoch's limit (KAFKA-20090) ---------------------------------------

def _at_limit(tv: int, epoch: int = 32767) -> Story:
    from tests.audit.wire.wirecraft import init_producer_id

    s = Story(tv)
    s.epoch = epoch
    s.on("client", init_producer_id(s._c(), PID, epoch, txn_id=s.txn_id))
    s.send(0, 0)
    return s


@pytest.mark.parametrize("tv", [1, 2])
def test_open_at_the_limit_past_its_timeout(tmp_path, tv):
    s = _at_limit(tv)
    fs = run(tmp_path, s, now_ms=T0_MS + 120_000)
    (f,) = by_rule(fs, "epoch-exhausted-transaction")
    d = details(f)
    assert (f["partition"], f["producer_epoch"], d["read_committed_stops"]) == (0, 32767, {"orders-0": 0})
    assert "cannot abort it" in f["message"] and "KAFKA-20090" in f["message"]


def test_open_at_the_limit_within_its_timeout_is_not_flagged(tmp_path):
    fs = run(tmp_path, _at_limit(1), now_ms=T0_MS + 5_000)
    assert by_rule(fs, "epoch-exhausted-transaction") == []


@pytest.mark.parametrize("tv", [1, 2])
def test_open_below_the_limit_is_not_flagged(tmp_path, tv):
    fs = run(tmp_path, _at_limit(tv, epoch=32765), now_ms=T0_MS + 120_000)
    assert by_rule(fs, "epoch-exhausted-transaction") == []
    assert by_rule(fs, "hanging-transaction")   # an ordinary hanging transaction


def test_committed_at_the_limit_is_clean(tmp_path):
    s = _at_limit(1)
    s.end(True)
    assert by_rule(run(tmp_path, s, now_ms=T0_MS + 120_000), "epoch-exhausted-transaction") == []


# -- the refusal predicate, generated ------------------------------------------------------------

_write = st.fixed_dictionaries({"ts": st.integers(0, 50).map(float),
                                "code": st.sampled_from([0, None, 6, 7, 19, 47, 52, 56])})


@settings(max_examples=200, deadline=None)
@given(st.lists(_write, max_size=8))
def test_refused_means_never_accepted_after_and_repeated_or_permanent(writes):
    refused = [w for w in writes if w["code"] not in (0, None)]
    got = markers_refused(writes)
    if not refused:
        assert not got
        return
    first, last = min(w["ts"] for w in refused), max(w["ts"] for w in refused)
    later_ok = any(w["code"] == 0 and w["ts"] > last for w in writes)
    again = len(refused) >= 2 and last - first >= RETRIED_S
    assert got == (not later_ok and (again or any(w["code"] in PERMANENT for w in refused)))
    if got:   # an acceptance after every refusal always clears it
        assert not markers_refused(writes + [{"ts": last + 1, "code": 0}])


def test_kaudit_txn_shows_the_markers_version(tmp_path):
    """`kaudit txn` on a capture: a marker's row carries the version its WriteTxnMarkers v2 said."""
    import json

    from typer.testing import CliRunner

    from kaudit.cli import app

    s = Story(2)
    s.send(0, 0)
    _v2_end(s, committed=True, epoch=1, tv=2)
    run(tmp_path, s)
    r = CliRunner().invoke(app, ["txn", str(tmp_path / "story.pcap"), "-f", "json"])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert row["parts"][0]["marker"]["transaction_version"] == 2 and row["transaction_version"] == "2"
