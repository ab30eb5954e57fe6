"""kaudit audit: read_committed Fetch responses against the log dirs (audit/joint/reader_join.py) - a
crafted capture beside a crafted log dir, each case with its negative twin."""

from __future__ import annotations

import json

from fixtures.builder import LogDirBuilder
from kaudit.engine.joint import audit_both
from kaudit.sources.pcap import PcapOptions
from tests.audit.wire.test_wire_readers import CONSUMER, EPOCH, PID, data, fetch
from tests.sources.pcap.craft import Conn, write_capture

RULES = ("aborted-read", "txnindex-mismatch")


def _log(tmp_path):
    """orders-0: producer PID's transaction at 0-3 aborted (ABORT at 4, indexed), then one at 5-6
    committed (COMMIT at 7)."""
    ld = LogDirBuilder(tmp_path / "broker", node_id=1)
    pb = ld.partition("orders", 0)
    p = ld.producer(PID, EPOCH, transactional_id="t", partition=pb)
    p.send([b"v0", b"v1"])
    p.send([b"v2", b"v3"])
    p.abort()
    p.send([b"v5", b"v6"])
    p.commit()
    assert pb.segments[0].txnindex == [(PID, 0, 4, 5)]
    return ld.write()


def _audit(tmp_path, conns, name="c.pcap"):
    path = tmp_path / name
    write_capture(path, conns)
    run = audit_both([str(path)], [str(_log(tmp_path / f"{name}.logs"))], PcapOptions(), select=RULES)
    assert not run.errors
    return run


def _brief(fs):
    return sorted((f["rule"], f["severity"], f["first_offset"], f["last_offset"]) for f in fs)


def test_the_log_knows_the_abort(tmp_path):
    """The capture holds no marker: only the log says the records at 0-3 were aborted; the
    response lists nothing, although the .txnindex has the entry."""
    run = _audit(tmp_path, Conn(fetch(1, data(0, 0) + data(2, 2), lso=4), **CONSUMER))
    assert _brief(run.findings) == [("aborted-read", "error", 0, 3), ("txnindex-mismatch", "error", 0, 4)]
    read = next(f for f in run.findings if f["rule"] == "aborted-read")
    assert "the log ends with ABORT (offset 4, replica 1)" in read["message"]
    assert run.coverage["join"]["reader_responses"] == 1 and run.coverage["join"]["reader_txnindex_entries"] == 1


def test_a_response_around_the_aborted_data_need_not_list_it(tmp_path):
    """Fetched from offset 3, the response returns the next transaction's records from 5: none of
    the aborted one's data (a replica whose cleaner discarded it drops its entry, while another
    replica may still list it), so its omission delivers nothing aborted."""
    run = _audit(tmp_path, Conn(fetch(1, data(5, 4), lso=8, fetch_offset=3), **CONSUMER))
    assert run.findings == []


def test_a_response_that_lists_the_abort_agrees(tmp_path):
    run = _audit(tmp_path, Conn(fetch(1, data(0, 0) + data(2, 2), lso=4, aborted=[(PID, 0)]), **CONSUMER))
    assert run.findings == []


def test_a_committed_transaction_listed_as_aborted(tmp_path):
    """The response asks the consumer to drop producer PID from offset 5: the log commits it."""
    run = _audit(tmp_path, Conn(fetch(1, data(5, 4), lso=8, aborted=[(PID, 5)], fetch_offset=5), **CONSUMER))
    (f,) = run.findings
    assert (f["rule"], f["severity"], f["first_offset"]) == ("txnindex-mismatch", "error", 5)
    assert "ends that transaction with COMMIT at offset 7" in f["message"]
    assert json.loads(f["details"])["aborted_transactions"] == f"{PID}@5"


def test_an_abort_the_capture_shows_is_reported_once(tmp_path):
    """The marker is in the response itself: the wire audit reports the aborted read, the join
    does not repeat it."""
    from tests.audit.wire.test_wire_readers import ABORTED_TXN

    run = _audit(tmp_path, Conn(fetch(1, ABORTED_TXN, lso=5), **CONSUMER))
    assert [f["rule"] for f in run.findings].count("aborted-read") == 1
