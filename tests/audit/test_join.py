"""kaudit audit: the wire/disk join (audit/joint/join.py) on crafted rows, a crafted capture + log dir,
and the real corpus."""

from __future__ import annotations

import glob
import json

import pytest

from kaudit.audit.joint.join import JoinInput, join

T, P = "orders", 0


def wire(seq, *, pid=7, epoch=0, err=0, offset=None, acks=-1, ts=1.0, n=3, txn=False, crc=11, position=1):
    return {"source": "c.pcap", "position": position, "connection": "a->b", "correlation_id": 1,
            "request_ts": ts, "topic": T, "partition": P, "producer_id": pid, "producer_epoch": epoch,
            "base_sequence": seq, "last_sequence": seq + n - 1, "record_count": n, "crc": crc,
            "acks": acks, "is_transactional": txn, "transactional_id": "tx" if txn else None,
            "response_error": err, "response_base_offset": offset}


def disk(seq, offset, *, pid=7, epoch=0, replica="1", n=3, control=None, crc=11):
    return {"source": "d/orders-0/0.log", "position": offset * 100, "replica": replica, "topic": T,
            "partition": P, "base_offset": offset, "last_offset": offset + n - 1, "producer_id": pid,
            "producer_epoch": epoch, "base_sequence": seq, "last_sequence": seq + n - 1,
            "record_count": n, "crc": crc, "is_control": control is not None, "control_type": control}


def run(produce, rows, ranges=None, end_txn=()):
    ranges = ranges if ranges is not None else {("1", T, P): [0, 100]}
    return join(JoinInput(produce=produce, end_txn=list(end_txn), disk=rows, ranges=ranges))[0]


def _details(f):
    d = f["details"]
    return json.loads(d) if isinstance(d, str) else d or {}


def brief(fs):
    return sorted((f["rule"], f["severity"], json.loads(f["details"]).get("outcome")) for f in fs)


def test_unanswered_resolved_once_twice_never():
    assert brief(run([wire(0, err=None)], [disk(0, 5)])) == [("produce-outcome", "info", "stored once")]
    assert brief(run([wire(0, err=None)], [disk(0, 5), disk(0, 9)])) == [("produce-outcome", "warning", "stored twice")]
    assert brief(run([wire(0, err=None)], [])) == [("produce-outcome", "warning", "never stored")]
    # the partition is not in the log dirs given: nothing to resolve against
    assert run([wire(0, err=None)], [], ranges={}) == []


def test_acknowledged_missing_is_acknowledged_write_lost():
    """acks=all, no transaction: the leader answered once the high watermark passed it (critical)."""
    fs = run([wire(0, offset=5)], [])
    assert brief(fs) == [("acknowledged-write-lost", "critical", None)]
    assert fs[0]["first_offset"] == 5 and "acknowledged at offset 5" in fs[0]["message"]
    # stored (on any replica): agreement
    assert run([wire(0, offset=5)], [disk(0, 5, replica="2")], ranges={("1", T, P): [0, 9], ("2", T, P): [0, 9]}) == []
    # the log starts after the acknowledged offset (retention): not covered, no finding
    assert run([wire(0, offset=5)], [], ranges={("1", T, P): [50, 100]}) == []
    # acks=1: a warning; a transaction's acks=all write whose commit the capture did not see: error
    assert brief(run([wire(0, offset=5, acks=1)], [])) == [("acknowledged-write-lost", "warning", None)]
    assert brief(run([wire(0, offset=5, txn=True)], [])) == [("acknowledged-write-lost", "error", None)]


def test_refused_but_stored_is_outcome_mismatch():
    assert brief(run([wire(0, err=47)], [disk(0, 5)])) == [("outcome-mismatch", "error", "stored once")]
    assert brief(run([wire(0, err=47)], [])) == [("produce-outcome", "info", "never stored")]


def test_end_txn_vs_markers():
    end = {"source": "c.pcap", "connection": "a->b", "position": 9, "ts": 5.0, "event": "END_TXN",
           "transactional_id": "tx", "producer_id": 7, "producer_epoch": 0, "result": "COMMIT",
           "error_codes": ""}
    produce = [wire(0, offset=0, txn=True)]
    assert run(produce, [disk(0, 0), disk(-1, 3, control="COMMIT", n=1)], end_txn=[end]) == []
    fs = run(produce, [disk(0, 0), disk(-1, 3, control="ABORT", n=1)], end_txn=[end])
    assert [f["rule"] for f in fs] == ["outcome-mismatch"]
    assert "told the transaction committed" in fs[0]["message"] and "ABORT" in fs[0]["message"]
    # an EndTxn refused (or unanswered) told the client nothing
    assert run(produce, [disk(0, 0), disk(-1, 3, control="ABORT", n=1)],
               end_txn=[dict(end, error_codes="47")]) == []


# ---- end to end: a crafted capture and log dir -------------------------------------------------

def test_crafted_capture_and_logdir(tmp_path):
    from fixtures.builder import LogDirBuilder
    from kaudit.engine.joint import audit_both
    from kaudit.sources.pcap import PcapOptions
    from tests.audit.wire import wirecraft as wc
    from tests.sources.pcap.craft import Conn

    # wire: seq 0 acknowledged at 0, seq 3 unanswered, seq 6 acknowledged at 6 (but lost)
    conn = Conn(wc.send(1, wc.batch(7, 0, 0)) + wc.send(2, wc.batch(7, 0, 3), error=None)
                + wc.send(3, wc.batch(7, 0, 6), offset=6))
    pcap = tmp_path / "c.pcap"
    wc.write_capture(pcap, [conn])
    b = LogDirBuilder(tmp_path / "broker", node_id=1)
    pb = b.partition(wc.TOPIC, 0)
    pb.append_batch(values=[b"a", b"b", b"c"], producer_id=7, producer_epoch=0, base_sequence=0)
    pb.append_batch(values=[b"d", b"e", b"f"], producer_id=7, producer_epoch=0, base_sequence=3)
    pb.append_batch(values=[b"x"] * 3, producer_id=-1, producer_epoch=-1, base_sequence=-1)
    root = b.write()
    r = audit_both([str(pcap)], [str(root)], PcapOptions())
    assert not r.errors
    joined = [f for f in r.findings if f["rule"] in ("produce-outcome", "outcome-mismatch", "acknowledged-write-lost")]
    assert brief(joined) == [("acknowledged-write-lost", "critical", None), ("produce-outcome", "info", "stored once")]
    assert set(r.coverage) == {"wire", "disk", "join"}


# ---- the real corpus ---------------------------------------------------------------------------

def test_corpus_agrees(corpus, tmp_path):
    from typer.testing import CliRunner

    from kaudit.cli import app

    base = corpus / "real-kafka-3.0.2"
    pcaps = sorted(p for p in glob.glob(str(base / "pcap" / "*.pcap*")) if not p.endswith(".tsv"))
    out = tmp_path / "r.json"
    args = ["audit", *[a for p in pcaps for a in ("--pcap", p)], "--segments", str(base / "logdirs-final"),
            "--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094", "-f", "json", "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output     # the non-idempotent retries stored twice (error)
    report = json.loads(out.read_text())
    assert report["command"] == "audit" and report["engine"] == "local"
    fs = report["findings"]
    assert {f["rule"] for f in fs if f["severity"] in ("error", "critical")} == {"duplicate-records"}
    assert not [f for f in fs if f["rule"] == "outcome-mismatch"]
    assert report["coverage"]["join"]["acknowledged_checked"] > 100
    assert report["coverage"]["join"]["end_txn_checked"] > 0
    outcome = {(f"{f['topic']}-{f['partition']}", f["producer_id"], f["base_sequence"]): _details(f)["outcome"]
               for f in fs if f["rule"] == "produce-outcome"}
    assert outcome[("ck-retry-noidem-0", -1, None)] == "stored twice"
    assert outcome[("j-fence-0", 2003, 3)] == "never stored"
    assert outcome[("ck-retry-idem-0", 2007, 5)] == "stored once"
    # both audits are in the report
    rules = {f["rule"] for f in fs}
    assert {"duplicate-records", "fenced-epoch", "coordinator-abort", "retried-batch"} <= rules


def test_values_without_timestamp_sent_again_are_separate_sends():
    """Issue 27: a non-idempotent batch without a timestamp acknowledged, then the same bytes sent
    and acknowledged again: two sends of the application (each stored once), not a retry stored
    twice. The twin - the first attempt unanswered - stays a retry whose outcome is resolved."""
    def w(ts, **kw):
        return dict(wire(-1, pid=-1, epoch=-1, ts=ts, **kw), max_timestamp_ms=-1,
                    response_ts=None if kw.get("err", 0) is None else ts + 0.01)
    rows = [disk(-1, 5, pid=-1, epoch=-1), disk(-1, 9, pid=-1, epoch=-1)]
    assert run([w(1.0, offset=5), w(2.0, offset=9)], rows) == []
    assert brief(run([w(1.0, err=None), w(2.0, offset=9)], rows)) == [("produce-outcome", "warning", "stored twice")]


def test_lost_transactional_write_is_critical_once_committed():
    """A transaction's acks=all write lost (replica 2 wrote over it in epoch 1; replica 1, the
    deposed leader, still holds it): error while its outcome is unknown, critical once replica 1
    holds its COMMIT marker or the client was told it committed."""
    def ep(row, epoch):
        return dict(row, partition_leader_epoch=epoch)
    held = ep(disk(0, 5, replica="1"), 0)
    other = ep(disk(0, 5, pid=9, replica="2"), 1)
    commit = ep(disk(-1, 8, replica="1", n=1, control="COMMIT"), 0)
    ranges = {("1", T, P): [0, 8], ("2", T, P): [0, 7]}
    produce = [dict(wire(0, offset=5, txn=True), response_ts=1.5)]
    assert brief(run(produce, [held, other], ranges=ranges)) == [("acknowledged-write-lost", "error", None)]
    fs = run(produce, [held, other, commit], ranges=ranges)
    assert brief(fs) == [("acknowledged-write-lost", "critical", None)]
    assert "COMMIT marker at offset 8" in fs[0]["message"]
    end = {"source": "c.pcap", "connection": "a->b", "position": 9, "ts": 5.0, "event": "END_TXN",
           "transactional_id": "tx", "producer_id": 7, "producer_epoch": 0, "result": "COMMIT", "error_codes": ""}
    assert brief(run(produce, [held, other], ranges=ranges, end_txn=[end])) == [("acknowledged-write-lost", "critical", None)]
