"""Incidents (audit/stories/incidents.py): the findings of one anomaly - on several replicas, on the wire
and on disk, under several rules - make one incident with a stable id."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from kaudit.audit.stories import incidents
from kaudit.audit import sort_findings
from kaudit.cli import app
from tests.audit.disk.diskcraft import logdir
from tests.audit.wire.wirecraft import batch, send
from tests.sources.pcap.craft import Conn, write_capture

REPO = Path(__file__).resolve().parents[2]
DEMO_PCAPS = REPO / "pcaps"
PORTS = ["--kafka-port", "9092", "--kafka-port", "9093", "--kafka-port", "9094"]
runner = CliRunner()


def _state_loss_replicas(tmp_path) -> list[Path]:
    """Producer 7 epoch 0 on orders-0, on three brokers: sequences 0-2 stored again at offsets
    6-8 after the brokers lost its state (a byte-identical copy), as every replica holds it."""
    roots = []
    for node in (1, 2, 3):
        ld = logdir(tmp_path, name=f"broker{node}", node_id=node, start_time_ms=1_700_000_000_000, tick_ms=10)
        p = ld.partition("orders", 0).producer(7, 0)
        p.send([b"a0", b"a1", b"a2"], timestamp=1_700_000_000_000)
        p.send([b"b0", b"b1", b"b2"])
        p.send([b"a0", b"a1", b"a2"], base_sequence=0, timestamp=1_700_000_000_000)
        roots.append(ld.write())
    return roots


def _wire_duplicate(path) -> None:
    """The same story on the wire: sequences 0-2 acknowledged at offset 0, then again at 6."""
    m = (send(1, batch(7, 0, 0, 3), offset=0) + send(2, batch(7, 0, 3, 3), offset=3)
         + send(3, batch(7, 0, 0, 3), offset=6))
    write_capture(path, Conn(m))


def test_duplicate_on_three_replicas_and_the_wire_is_one_incident(tmp_path):
    roots = _state_loss_replicas(tmp_path)
    cap = tmp_path / "wire.pcap"
    _wire_duplicate(cap)
    args = ["audit", "--pcap", str(cap), *[a for r in roots for a in ("--segments", str(r))], "-f", "json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    report = json.loads(r.stdout)
    dup = [f for f in report["findings"] if f["rule"] == "duplicate-batch"]
    assert len(dup) == 4                        # replicas 1, 2, 3 and the wire
    (iid,) = {f["incident"] for f in dup}
    inc = next(i for i in report["incidents"] if i["id"] == iid)
    # 4 pieces of evidence: each replica and the capture
    assert [p["place"] for p in inc["places"]] == ["replica 1", "replica 2", "replica 3", "capture wire.pcap"]
    # every finding of that sequence range tells the same story (both rules, the join, the retry)
    members = [f for f in report["findings"] if f["incident"] == iid]
    assert Counter(f["rule"] for f in members)["out-of-order-sequence"] == 4
    assert inc["kind"] == "duplicate" and inc["severity"] == "error" and inc["consumer_visible"]
    assert "offsets 6-8 repeat offsets 0-2" in inc["narrative"]["impact"]
    assert sum(1 for i in report["incidents"] if i["kind"] != "coverage") == 1
    # every finding has an incident id, the same in a second run
    again = json.loads(runner.invoke(app, args).stdout)
    assert [f["incident"] for f in again["findings"]] == [f["incident"] for f in report["findings"]]
    assert all(f["incident"] for f in report["findings"])


def test_the_zombie_is_one_incident():
    r = runner.invoke(app, ["pcap", str(DEMO_PCAPS / "05-fence-java.pcap"), *PORTS, "-f", "json"])
    report = json.loads(r.stdout)
    story = {f["incident"] for f in report["findings"]
             if f["rule"] in ("fenced-epoch", "coordinator-abort", "producer-error")}
    assert len(story) == 1
    (inc,) = [i for i in report["incidents"] if i["id"] in story]
    assert inc["kind"] == "zombie"
    assert inc["rules"] == {"coordinator-abort": 1, "fenced-epoch": 2, "producer-error": 3}
    assert inc["producer_ids"] == [2003] and inc["transactional_ids"] == ["java-fence"]
    assert set(inc["client_ids"]) == {"java-fence-A", "java-fence-B"}
    assert "fenced by epoch 2" in inc["title"]
    assert "the brokers refused the zombie's 2 request(s) in the evidence" in inc["narrative"]["impact"]


def test_demo_capture_leads_with_its_incidents():
    r = runner.invoke(app, ["pcap", str(DEMO_PCAPS), *PORTS])
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[0].startswith("kaudit pcap: 4 incident(s) (1 error, 3 warning)")
    assert lines[1].strip().startswith("1. ERROR") and "Records stored twice on ck-retry-noidem-0" in lines[1]
    assert "Zombie producer" in lines[2]
    # info: among them 11-crafted's write under the idempotent id its client had replaced (KIP-360)
    assert "2 info incident(s) hidden: --min-severity info shows them" in lines[5]
    # coverage: one section, not 57 findings of their own
    assert r.stdout.count("── coverage") == 1
    assert not any("stream-gap" in line or "undecodable" in line for line in lines[:6])
    cov = r.stdout.split("── coverage")[1]
    assert "stream-gap ×24" in cov and "undecodable-frame ×20" in cov and "unanswered-request ×13" in cov


def test_machine_formats_keep_every_finding_with_its_incident(tmp_path):
    js = json.loads(runner.invoke(app, ["pcap", str(DEMO_PCAPS), *PORTS, "-f", "json"]).stdout)
    assert js["summary"]["findings"] == len(js["findings"]) == 76
    nd = runner.invoke(app, ["pcap", str(DEMO_PCAPS), *PORTS, "-f", "ndjson"]).stdout.splitlines()
    assert [json.loads(x)["incident"] for x in nd] == [f["incident"] for f in js["findings"]]
    out = tmp_path / "pq"
    runner.invoke(app, ["pcap", str(DEMO_PCAPS), *PORTS, "--parquet", str(out), "-f", "json"])
    import pyarrow.parquet as pq

    t = pq.read_table(out / "finding.parquet")
    assert sorted(zip(t.column("id").to_pylist(), t.column("incident").to_pylist())) == \
        sorted((f["id"], f["incident"]) for f in js["findings"])


def _f(rule, **kw):
    base = dict(id=rule + str(kw), rule=rule, severity="error", message="", topic="t", partition=0,
                replica=None, connection=None, producer_id=5, producer_epoch=0, transactional_id=None,
                first_offset=None, last_offset=None, base_sequence=None, last_sequence=None,
                first_ts_ms=None, last_ts_ms=None, evidence=[], remediation="", details=None,
                timeline=None, topic_id=None, client_id=None, incident=None)
    base.update(kw)
    return base


def test_overlapping_sequences_link_and_distinct_ones_do_not():
    fs = incidents.assign([
        _f("duplicate-batch", replica="1", base_sequence=0, last_sequence=4),
        _f("out-of-order-sequence", replica="2", base_sequence=3, last_sequence=4),
        _f("duplicate-batch", replica="1", base_sequence=10, last_sequence=12),
        _f("duplicate-batch", replica="1", base_sequence=0, last_sequence=4, producer_epoch=1),
    ])
    assert fs[0]["incident"] == fs[1]["incident"]
    assert len({f["incident"] for f in fs}) == 3


def test_transactions_group_on_their_name_else_producer_and_epoch():
    fs = incidents.assign([
        _f("hanging-transaction", details=json.dumps({"transaction": "tx@1"}), first_offset=3),
        _f("torn-transaction", details=json.dumps({"transaction": "tx@1"}), partition=1),
        _f("hanging-transaction", details=json.dumps({"transaction": "tx@2"}), partition=2, first_offset=9),
        _f("lso-stuck", first_offset=3, producer_id=None, producer_epoch=None),
        _f("dangling-transaction", transactional_id="other", producer_id=9, partition=4),
        _f("unregistered-partition", producer_id=9, partition=5),     # its producer's only transactional id
    ])
    assert fs[0]["incident"] == fs[1]["incident"] == fs[3]["incident"]   # the stuck LSO at offset 3 too
    assert fs[2]["incident"] != fs[0]["incident"]
    assert fs[4]["incident"] == fs[5]["incident"]


def test_incident_ids_do_not_depend_on_order():
    fs = [_f("duplicate-batch", replica=str(r), base_sequence=0, last_sequence=4) for r in (1, 2, 3)]
    a = [f["incident"] for f in incidents.assign([dict(f) for f in fs])]
    b = [f["incident"] for f in incidents.assign([dict(f) for f in reversed(fs)])]
    assert a == list(reversed(b)) and len(set(a)) == 1
    assert sort_findings([dict(f) for f in fs])[0]["incident"] == a[0]
