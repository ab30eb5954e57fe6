"""What a person reads in an incident of several replicas: each replica's evidence is in that
replica's own files (issue 27: "its evidence for replica 2 and 3 points at node 1's files"), and a
zombie's title names the partition its data was stored on, with the zombie's epoch - not every
partition its fencing touched, nor its successor's epoch."""

from __future__ import annotations

import json
from pathlib import Path

from kaudit.report.story import _log_dirs, _places, incidents
from tests.sim.runner import audit, simulate

REGRESSIONS = Path(__file__).parents[1] / "sim" / "regressions"


def _zombie_committed(tmp_path):
    """A fenced instance (epoch 0) writes to a partition its transaction never registered; the
    new instance (epoch 2) writes there and commits (the simulator's regression history)."""
    h = json.loads((REGRESSIONS / "txn-fence-unregistered-commit.json").read_text())["history"]
    sim, dirs, pcap, end = simulate(h, tmp_path)
    return dirs, audit("audit", dirs, pcap, end), end


def test_each_replica_shows_its_own_files(tmp_path):
    dirs, findings, end = _zombie_committed(tmp_path)
    inc = next(i for i in incidents(findings, end) if i["kind"] == "zombie")
    reps = [p for p in inc["places"] if p["place"].startswith("replica ")]
    assert {p["place"] for p in reps} == {"replica 1", "replica 2", "replica 3"}
    for p in reps:
        node = "node" + p["place"].split()[-1]
        disk = [e for e in p["evidence"] if not e["source"].endswith(".pcap")]
        assert disk, p
        for e in disk:   # the stale data, the first data, the markers: that node's files only
            assert Path(e["source"]).parts[-3] == node, (p["place"], e["source"])
        assert any(e["note"] == "stale epoch data" for e in disk), p


def test_zombie_title_names_the_damaged_partition_and_the_zombies_epoch(tmp_path):
    dirs, findings, end = _zombie_committed(tmp_path)
    inc = next(i for i in incidents(findings, end) if i["kind"] == "zombie")
    assert inc["severity"] == "critical"
    # the fencing's ABORT on e0-0 is the coordinator's own (info): the damage is on e0-2
    assert inc["title"] == "Zombie producer: producer 1001 epoch 0 ('tx-0'), fenced by epoch 2 on e0-2", inc["title"]


def _f(replica, topic, partition, sources, rule="r", own=None):
    d = {"evidence_replicas": own} if own else {}
    return {"rule": rule, "severity": "error", "replica": replica, "topic": topic, "partition": partition,
            "evidence": [{"source": s, "position": 0, "kind": "batch"} for s in sources],
            "details": json.dumps(d)}


def test_a_merged_findings_file_goes_to_the_replica_whose_log_dir_holds_it():
    one = _f("2", "t", 0, ["/x/node2/t-0/0.log"])
    merged = _f("1,2", "t", 0, ["/x/node2/t-0/0.log", "/x/node9/__transaction_state-1/0.log"])
    assert _log_dirs([one, merged]) == {"/x/node2": "2"}
    places = {p["place"]: [e["source"] for e in p["evidence"]] for p in _places([one, merged])}
    assert places["replica 2"] == ["/x/node2/t-0/0.log", "/x/node9/__transaction_state-1/0.log"]
    # replica 1's place gets no file of replica 2's log dir; a file of no known replica stays shown
    assert places["replica 1"] == ["/x/node9/__transaction_state-1/0.log"]


def test_a_one_replica_findings_other_partitions_file_names_no_log_dir():
    # the coordinator's record of another partition, in a finding of replica 3: not replica 3's dir
    f = _f("3", "t", 0, ["/x/node1/__transaction_state-4/0.log"])
    assert _log_dirs([f]) == {}


def _torn(tmp_path):
    """An admin aborts two of a TV2 transaction's three partitions; the producer writes again and
    commits (the simulator's regression history)."""
    h = json.loads((REGRESSIONS / "txn-admin_abort-tv2-two-of-three.json").read_text())["history"]
    sim, dirs, pcap, end = simulate(h, tmp_path)
    return audit("audit", dirs, pcap, end), end


def test_the_clients_told_outcome_joins_the_torn_transactions_incident(tmp_path):
    findings, end = _torn(tmp_path)
    incs = incidents(findings, end)
    assert len(incs) == 1, [i["title"] for i in incs]
    inc = incs[0]
    assert inc["title"].startswith("Torn transaction on e0-0, e0-1:"), inc["title"]
    assert set(inc["rules"]) == {"torn-transaction", "outcome-mismatch"}
    # the EndTxn's log evidence is placed under each replica, not under a nameless "log"
    places = {p["place"]: p for p in inc["places"]}
    assert "log" not in places
    assert all("outcome-mismatch" in places[f"replica {r}"]["rules"] for r in "123")


def test_the_text_shows_the_admins_aborts_and_frames_not_bytes(tmp_path):
    from kaudit.report.console import _where, timeline_steps

    findings, end = _torn(tmp_path)
    inc = incidents(findings, end)[0]
    cap = next(p for p in inc["places"] if p["place"].startswith("capture"))
    marker = next(e for e in cap["evidence"] if e["kind"] == "marker")
    assert _where(marker) == f"capture.pcap frame {marker['position']} [marker] (written by 'adminclient-1', not the coordinator)"
    torn = next(f for f in findings if f["rule"] == "torn-transaction" and f.get("timeline"))
    shown = timeline_steps(torn["timeline"])
    assert len(torn["timeline"]) > len([x for x in shown if not x.startswith("…")])
    assert sum("from 'adminclient-1'" in x for x in shown) == 2, shown   # both aborts, early as they are
    assert shown[-1] == torn["timeline"][-1]


def test_a_late_endtxn_is_one_incident_titled_by_what_happened(tmp_path):
    """KAFKA-17754: a delayed EndTxn; the client was told COMMIT for data its partition's next
    ABORT discarded. The client's outcome (the join) and the late write (the transaction rules)
    are one story, titled by the anomaly, not "Transaction anomaly"."""
    h = json.loads((REGRESSIONS / "txn-late_endtxn-past-another.json").read_text())["history"]
    sim, dirs, pcap, end = simulate(h, tmp_path)
    incs = incidents(audit("audit", dirs, pcap, end), end)
    assert len(incs) == 1, [i["title"] for i in incs]
    assert incs[0]["title"] == "Transaction data after its marker on e0-0: producer 1001 epoch 0 ('tx-0')"
    assert {"late-transactional-write", "outcome-mismatch"} <= set(incs[0]["rules"])


def test_an_open_transactions_impact_is_the_consumers_wait_not_none(tmp_path):
    """A KIP-939 prepared transaction stays open: read_committed consumers wait at its first
    offset - never "none seen by consumers"."""
    h = json.loads((REGRESSIONS / "txn-two_pc.json").read_text())["history"]
    sim, dirs, pcap, end = simulate(h, tmp_path)
    inc = incidents(audit("audit", dirs, pcap, end), end)[0]
    assert inc["title"].startswith("Open transaction on e0-0:"), inc["title"]
    assert inc["narrative"]["impact"].startswith("read_committed consumers of e0-0 cannot read past offset 0 while it is open")


def test_a_consumers_incident_is_titled_by_what_happened_and_names_its_group(tmp_path):
    h = json.loads((REGRESSIONS / "group-eos_double-mixed-partition.json").read_text())["history"]
    sim, dirs, pcap, end = simulate(h, tmp_path)
    titles = [i["title"] for i in incidents(audit("pcap", dirs, pcap, end), end)]
    assert "Input committed twice by exactly-once transactions on shared-0: group g2" in titles, titles


def test_kaudit_txn_table_tells_the_admins_markers_and_the_empty_part(tmp_path):
    """`kaudit txn` given wire and disk: the log's ABORT markers name the admin client the
    capture shows wrote them, a COMMIT that ends no data says so, and both enders are named."""
    import io

    from kaudit.audit.txn.txn_view import merge_rows
    from kaudit.engine.local import list_transactions, wire_transactions
    from kaudit.report.transactions import write_transactions_table
    from kaudit.sources.pcap import PcapOptions

    h = json.loads((REGRESSIONS / "txn-admin_abort-tv2-two-of-three.json").read_text())["history"]
    sim, dirs, pcap, end = simulate(h, tmp_path)
    _, wire = wire_transactions([str(pcap)], PcapOptions())
    _, disk = list_transactions([str(d) for d in dirs])
    rows = merge_rows(disk, wire)
    out = io.StringIO()
    write_transactions_table([t for t in rows if t["outcome"] == "torn"], out, columns=300)
    text = out.getvalue()
    assert "e0-0 0 -> ABORT@2 epoch 0 (coord epoch -1, by adminclient-1)" in text, text
    assert "e0-1 (no data) -> COMMIT@3" in text, text
    assert "ended by client (EndTxn commit) and by admin" in text, text



def test_a_replica_s_own_state_is_titled_by_what_it_is(tmp_path):
    """Replica 3 holds another batch than the others at offset 1: titled "Replicas disagree on
    acct-0 (replica 3)", not by the rule's lower-case description, and its impact in words, not
    "see the findings"."""
    from fixtures.builder.replicas import write_replicas
    from kaudit.audit.stories import incidents as assign
    from kaudit.engine.local import audit_segments
    from kaudit.report import story

    def build(ld, node):
        pb = ld.partition("acct", 0)
        p = pb.producer(5, 0)
        for i in range(3):
            # replica 3's copy of the middle batch holds another value (bytes changed under a good CRC)
            p.send([b"x1" if node == 3 and i == 1 else b"v%d" % i])

    roots = write_replicas(tmp_path / "c", build, nodes=(1, 2, 3), start_time_ms=1_700_000_000_000)
    fs = audit_segments([str(r) for r in roots]).findings
    assign.assign(fs)
    incs = [i for i in story.incidents(fs, None) if "replica-divergence" in i["rules"]]
    assert incs, [(f["rule"], f["message"]) for f in fs]
    inc = incs[0]
    assert inc["title"].startswith("Replicas disagree on acct-0 (replica 3)"), inc["title"]
    assert inc["narrative"]["impact"].startswith("replica 3 of acct-0 differs from the others at offset 1:")
