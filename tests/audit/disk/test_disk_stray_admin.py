"""stray-marker for an admin's abort of a transaction that had already ended on a partition
(`kafka-transactions.sh abort --producer-id --producer-epoch --coordinator-epoch`): the leader
appends the ABORT (ProducerAppendInfo.appendEndTxnMarker checks only that the epochs are not
older) and it ends nothing. Told at info on the log dirs where the evidence shows it - after a
COMMIT of the same transaction, or before the data of the transaction it was matched to - and on
the wire by its sender; never for the coordinator's own marker written again after a failover.
Histories from the simulator (tests/sim), judged on `segments` and `pcap`."""

from __future__ import annotations

import pytest


def _run(tmp_path, script):
    from kaudit.engine.local import audit_pcaps, audit_segments
    from kaudit.sources.pcap import PcapOptions
    from tests.sim.cluster import Client, Sim

    sim = Sim(tmp_path)
    c = Client(sim, "p", txn_id="tx", tv=1)
    c.init()
    script(sim, c, sim.partition("t", 0))
    sim.wait(100)
    dirs, pcap, end = sim.write()
    out = {}
    for feed, run in (("segments", audit_segments([str(d) for d in dirs], now_ms=end)),
                      ("pcap", audit_pcaps([str(pcap)], PcapOptions(), now_ms=end))):
        assert not run.errors
        out[feed] = [f for f in run.findings if f["rule"] == "stray-marker" or f["severity"] != "info"]
    out["txn"] = _listed(dirs, pcap)
    return out


def _listed(dirs, pcap) -> dict:
    """feed -> `kaudit txn`'s outcomes of producer p's transactions, in order."""
    from kaudit.engine.local import list_transactions, wire_transactions
    from kaudit.sources.pcap import PcapOptions

    return {"segments": [r["outcome"] for r in list_transactions([str(d) for d in dirs])[1]],
            "pcap": [r["outcome"] for r in wire_transactions([str(pcap)], PcapOptions())[1]]}


def _admin_abort(sim, c, p):
    st = p.state[c.pid]
    sim.wait(1000)
    sim.coord.send_markers(c.pid, st.epoch, False, [p], client_id="adminclient-1",
                           coordinator_epoch=st.coordinator_epoch)


@pytest.mark.parametrize("next_txn", [False, True])
def test_an_admin_abort_after_a_commit(tmp_path, next_txn):
    def script(sim, c, p):
        c.send(p, [b"a"])
        c.end(True)
        _admin_abort(sim, c, p)
        if next_txn:
            sim.wait(10)
            c.send(p, [b"b"])
            c.end(True)
    out = _run(tmp_path, script)
    for feed in ("segments", "pcap"):
        (f,) = out[feed]
        assert (f["rule"], f["severity"]) == ("stray-marker", "info")
        assert "after the COMMIT" in f["message"] and "it ends nothing" in f["message"]
    assert out["segments"][0]["first_offset"] == 2
    # the ABORT decides nothing: the transaction committed, it is not torn
    assert out["txn"] == {feed: ["COMMIT"] * (2 if next_txn else 1) for feed in ("segments", "pcap")}


def test_an_admin_abort_after_an_abort_shows_on_the_wire(tmp_path):
    """The log dirs cannot tell it from the coordinator's ABORT written again (same result,
    same epochs); the capture names its sender."""
    def script(sim, c, p):
        c.send(p, [b"a"])
        c.end(False)
        _admin_abort(sim, c, p)
        sim.wait(10)
        c.send(p, [b"b"])
        c.end(False)
    out = _run(tmp_path, script)
    assert out["segments"] == []
    (f,) = out["pcap"]
    assert (f["rule"], f["severity"]) == ("stray-marker", "info") and "adminclient-1" in f["message"]


def test_markers_written_again_after_a_coordinator_failover_are_not_stray(tmp_path):
    def script(sim, c, p):
        c.send(p, [b"a"])
        c.end(True, resend=True)
        sim.wait(10)
        c.send(p, [b"b"])
        c.end(True)
    out = _run(tmp_path, script)
    found = [f for feed in ("segments", "pcap") for f in out[feed]]
    assert [f for f in found if "ends nothing" in f["message"]] == []
    assert all(f["severity"] == "info" for f in found)
    assert out["txn"] == {"segments": ["COMMIT", "COMMIT"], "pcap": ["COMMIT", "COMMIT"]}


def test_an_admin_abort_is_not_an_earlier_aborted_transactions_marker(tmp_path):
    """Matched by its result to the producer's earlier ABORTed transaction, the marker came after
    a later transaction's COMMIT there: not that one's marker either."""
    def script(sim, c, p):
        c.send(p, [b"a"])
        c.end(False)
        sim.wait(10)
        c.send(p, [b"b"])
        c.end(True)
        _admin_abort(sim, c, p)
    out = _run(tmp_path, script)
    for feed in ("segments", "pcap"):
        (f,) = out[feed]
        assert (f["rule"], f["severity"]) == ("stray-marker", "info") and "after the COMMIT" in f["message"]
    assert out["txn"] == {"segments": ["ABORT", "COMMIT"], "pcap": ["ABORT", "COMMIT"]}


def test_a_capture_lists_fetched_markers_out_of_the_logs_order():
    """A capture sees fetched markers in the order consumers fetched them: a COMMIT at offset
    320 fetched before an ABORT at offset 65 is not that ABORT's previous marker - the parts are
    in the log's order (txn_parts.log_order), the ABORT first: no 'after the COMMIT at offset 320'
    story, no re-send, no stray - while the COMMIT's previous part is the ABORT's."""
    from kaudit.audit.txn.coordinator_state import CoordTxn
    from kaudit.audit.txn.txn_parts import assemble_replica, log_order, merge_replicas
    from kaudit.audit.txn.txn_rules import stray_marker

    def row(offset, result, fetched_at):
        return {"topic": "payments", "partition": 1, "producer_id": 4002, "replica": None, "is_control": True,
                "is_transactional": True, "control_type": result, "base_offset": offset, "last_offset": offset,
                "producer_epoch": 1, "coordinator_epoch": 0, "base_timestamp_ms": 1000, "max_timestamp_ms": 1000,
                "source": "c.pcap", "position": offset, "rank": (fetched_at, offset), "fetched": True}
    rows = [row(320, "COMMIT", 1.0), row(65, "ABORT", 2.0)]   # the COMMIT fetched first
    keys = log_order(rows)
    early, later = merge_replicas({None: assemble_replica(rows, keys)})
    assert (early.marker.offset, later.marker.offset) == (65, 320)
    assert early.previous is None and later.previous is early
    a = CoordTxn("tx", 4002, 1, 0, 60_000, {"payments-1"}, result="COMMIT")
    early.coord = later.coord = a
    assert not stray_marker(early, [later])
