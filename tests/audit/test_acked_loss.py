"""acknowledged-write-lost (audit/joint/acked_loss.py) in `kaudit audit`: a crafted capture of
acknowledged Produce requests joined with a crafted 3-node cluster's log dirs and KRaft metadata
(fixture builders), each case against its negative twin; and the leadership and loss findings
told which of their offsets were acknowledged."""

from __future__ import annotations

import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.builder import LogDirBuilder
from fixtures.builder.metadata import election_history
from fixtures.builder.replicas import write_replicas
from kaudit.audit.joint.join import JoinInput, join
from kaudit.engine.joint import audit_both
from kaudit.sources.pcap import PcapOptions
from tests.audit.wire import wirecraft as wc
from tests.sources.pcap.craft import Conn

TID = "b3JkZXJzLXRvcGljLWlkAA"
PID = 7
LOSS = ("acknowledged-write-lost", "unclean-leader-election", "missing-offsets", "unexplained-divergence",
        "offset-acknowledged-twice", "acknowledged-records-replaced", "outcome-mismatch")


def _cluster(tmp_path, *, election: str, old_hw: int = 10, metadata_on=(1,)):
    """orders-0: broker 1 led epoch 0 and holds producer 7's one-record batches at 0-9; brokers 2
    and 3 hold 0-4 of them, then broker 2 led epoch 1 and wrote producer 9's batches at 5-7.
    `election`: "unclean" (broker 2 outside the ISR, RECOVERING) or "clean" (2 back in the ISR
    first: broker 1's 5-9 were above the high watermark)."""
    def build(ld, node):
        if node in metadata_on:
            election_history(ld, "orders", TID, election)
        pb = ld.partition("orders", 0, topic_id=TID, role="leader" if node == 1 else "follower")
        for i in range(10 if node == 1 else 5):
            pb.append_batch(values=[b"v%d" % i], producer_id=PID, producer_epoch=0, base_sequence=i)
        if node != 1:
            pb.set_leader_epoch(1)
            for i in range(3):
                pb.append_batch(values=[b"w%d" % i], producer_id=9, producer_epoch=0, base_sequence=i)
        pb.high_watermark = old_hw if node == 1 else 8
    return write_replicas(tmp_path / "cluster", build)


def _capture(tmp_path, acked, *, acks=-1, unanswered=(), name="c.pcap"):
    """Producer 7's one-record batches: `acked` offsets answered, `unanswered` sent without answer."""
    msgs = []
    for i in sorted(set(acked) | set(unanswered)):
        msgs += wc.send(i + 1, wc.batch(PID, 0, i, n=1), offset=i, acks=acks,
                        error=None if i in unanswered else 0, client_id="orders-app")
    path = tmp_path / name
    wc.write_capture(path, [Conn(msgs)])
    return str(path)


def _audit(pcap, roots, **kw):
    r = audit_both([pcap], [str(x) for x in roots], PcapOptions(), select=LOSS, **kw)
    assert not r.errors, r.errors
    return r


def _brief(fs):
    return sorted((f["rule"], f["severity"], f["first_offset"], f["last_offset"], f["replica"]) for f in fs)


def _details(f):
    return json.loads(f["details"]) if f.get("details") else {}


def test_unclean_election_whose_lost_tail_was_acknowledged(tmp_path):
    r = _audit(_capture(tmp_path, range(10)), _cluster(tmp_path, election="unclean"))
    fs = r.findings
    assert _brief(fs) == [("acknowledged-write-lost", "critical", 5, 9, "1"),
                          ("unclean-leader-election", "critical", 5, 9, "1")]
    lost = next(f for f in fs if f["rule"] == "acknowledged-write-lost")
    unclean = next(f for f in fs if f["rule"] == "unclean-leader-election")
    d = _details(lost)
    assert d["lost_writes"] == 5 and d["still_on"] == ["1"] and d["other_records_on"] == ["2", "3"]
    assert d["lost"][0]["client_id"] == "orders-app" and d["lost"][0]["offsets"] == [5, 5]
    assert "leader epoch 0, older than the epoch 1" in lost["message"]
    # the election names the acknowledged offsets it cost, to whom and when
    u = _details(unclean)
    assert [a["offsets"][0] for a in u["acknowledged"]] == [5, 6, 7, 8, 9]
    assert all(a["lost"] and a["client_id"] == "orders-app" for a in u["acknowledged"])
    assert "Acknowledged to clients: 5 writes at offsets 5-9" in unclean["message"]
    assert "5 of them lost" in unclean["message"]
    # one incident, told on the damaged partition, with the frames and batches that show it
    assert lost["incident"] == unclean["incident"]
    assert (lost["topic"], lost["partition"]) == ("orders", 0)
    kinds = {e["kind"] for e in lost["evidence"]}
    assert kinds == {"produce", "batch"}
    # each batch is told as its own replica's file (the finding's replica is the holder, 1)
    own = dict(zip(((e["kind"], e["source"]) for e in lost["evidence"]), d["evidence_replicas"]))
    assert {k: v for k, v in own.items() if k[0] == "batch"} == {
        ("batch", e["source"]): e["source"].split("/node")[1][0] for e in lost["evidence"] if e["kind"] == "batch"}
    assert all(v is None for k, v in own.items() if k[0] == "produce")
    assert r.coverage["join"]["acknowledged_lost"] == 5


def test_unclean_election_whose_lost_tail_was_not_acknowledged(tmp_path):
    """The tail 5-9 was sent but never answered: nothing acknowledged was lost; the election says
    the captures acknowledged none of its lost offsets."""
    r = _audit(_capture(tmp_path, range(5), unanswered=range(5, 10)), _cluster(tmp_path, election="unclean"))
    assert _brief(r.findings) == [("unclean-leader-election", "critical", 5, 9, "1")]
    unclean = r.findings[0]
    assert _details(unclean)["acknowledged"] == []
    assert "The captures acknowledged none of offsets 5-9" in unclean["message"]


def test_clean_election_truncating_an_unacknowledged_tail(tmp_path):
    """Broker 1's 5-9 were above its high watermark (never acknowledged with acks=all): the clean
    election truncates them, nothing to report."""
    roots = _cluster(tmp_path, election="clean", old_hw=5)
    assert _audit(_capture(tmp_path, range(5), unanswered=range(5, 10)), roots).findings == []


def test_clean_election_losing_an_acks1_tail(tmp_path):
    """The same tail acknowledged with acks=1 (by the leader alone): lost, as Kafka documents -
    a warning naming the deposed leader that still holds it."""
    roots = _cluster(tmp_path, election="clean", old_hw=5)
    pcap = _capture(tmp_path, range(5, 10), acks=1)
    assert _brief(_audit(pcap, roots).findings) == [("acknowledged-write-lost", "warning", 5, 9, "1")]


def test_acknowledged_offsets_holding_other_records_in_every_replica(tmp_path):
    """Without the deposed leader's log dir: the acknowledged batches at 5-7 are other records on
    both replicas given, 8-9 are past their logs - every acknowledged write from 5 on is lost."""
    roots = _cluster(tmp_path, election="unclean", metadata_on=(1, 2, 3))
    fs = _audit(_capture(tmp_path, range(10)), roots[1:]).findings
    assert _brief(fs) == [("acknowledged-write-lost", "critical", 5, 9, None),
                          ("unclean-leader-election", "critical", None, None, None)]
    lost = next(f for f in fs if f["rule"] == "acknowledged-write-lost")
    assert ("replica 2 holds other records at 5-7 (producer 9 epoch 0 sequences 0-0 of leader epoch 1, and 2 "
            "more batches) and nothing at 8-9") in lost["message"]
    # the election, whose lost records no replica given still holds, still names what it cost
    unclean = next(f for f in fs if f["rule"] == "unclean-leader-election")
    assert [a["offsets"][0] for a in _details(unclean)["acknowledged"]] == [5, 6, 7, 8, 9]
    assert lost["incident"] == unclean["incident"]


def test_missing_offsets_say_whether_they_held_acknowledged_writes(tmp_path):
    ld = LogDirBuilder(tmp_path / "broker", node_id=1)
    pb = ld.partition("orders", 0, index_interval_bytes=100)
    p = pb.producer(PID, 0)
    for n, k in enumerate((6, 6, 3)):
        if n:
            pb.roll_segment()
        for i in range(k):
            p.send([b"v%d" % i * 20])
    root = ld.write()
    os.remove(root / "orders-0" / f"{6:020d}.log")
    fs = _audit(_capture(tmp_path, range(15)), [root]).findings
    assert _brief(fs) == [("acknowledged-write-lost", "critical", 6, 11, None),
                          ("missing-offsets", "error", 6, 11, "1")]
    missing = next(f for f in fs if f["rule"] == "missing-offsets")
    assert "Acknowledged to clients: 6 writes at offsets 6-11" in missing["message"]
    assert len({f["incident"] for f in fs}) == 1
    # the same loss with nothing acknowledged there
    fs = _audit(_capture(tmp_path, range(6), name="d.pcap"), [root]).findings
    assert _brief(fs) == [("missing-offsets", "error", 6, 11, "1")]
    assert "The captures acknowledged none of offsets 6-11" in fs[0]["message"]


# ---- generated: a log rewritten from a write on, in every combination of replicas given --------


def _row(lo, n, pid, seq, crc, replica, epoch, **kw):
    return dict({"source": f"n{replica}/orders-0/0.log", "position": lo * 100 + epoch, "replica": replica,
                 "topic": "orders", "partition": 0, "base_offset": lo, "last_offset": lo + n - 1, "producer_id": pid,
                 "producer_epoch": 0 if pid >= 0 else -1, "base_sequence": seq, "last_sequence": seq + n - 1,
                 "record_count": n, "crc": crc, "is_control": False, "control_type": None,
                 "partition_leader_epoch": epoch}, **kw)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=1, max_size=6), st.data())
def test_lost_exactly_from_the_rewrite_on(writes, data):
    """Writes acknowledged at consecutive offsets; replica 1 (epoch 0) keeps them all, replica 2
    keeps the first `cut` and then holds other records of epoch 1 (or nothing) from there. Lost:
    exactly the writes from `cut` on - with replica 1 given too, only when replica 2 wrote over
    them in a later epoch (else it is a follower behind); none with replica 1 alone."""
    cut = data.draw(st.integers(0, len(writes)))
    other_len = data.draw(st.integers(0, 4))
    produce, old, new, lo = [], [], [], 0
    for i, (n, idem) in enumerate(writes):
        pid, seq = (7, lo) if idem else (-1, -1)
        produce.append(dict(_row(lo, n, pid, seq, 1000 + i, None, 0), position=i, connection="c", correlation_id=i,
                            request_ts=float(i), response_ts=i + 0.5, acks=-1, is_transactional=False,
                            transactional_id=None, response_error=0, response_base_offset=lo, client_id="app",
                            base_offset=0, last_offset=n - 1, topic_id=None))
        old.append(_row(lo, n, pid, seq, 1000 + i, "1", 0))
        if i < cut:
            new.append(_row(lo, n, pid, seq, 1000 + i, "2", 0))
        lo += n
    start = sum(n for n, _ in writes[:cut])
    if other_len:
        new.append(_row(start, other_len, 9, 0, 5, "2", 1))
    expect = set(range(start, lo)) if cut < len(writes) else set()
    for given_reps, want in ((("1", "2"), expect if other_len else set()), (("2",), expect if new else set()),
                             (("1",), set())):
        rows = [r for r in old + new if r["replica"] in given_reps]
        ranges = {}
        for r in rows:
            rng = ranges.setdefault((r["replica"], "orders", 0), [r["base_offset"], r["last_offset"]])
            rng[0], rng[1] = min(rng[0], r["base_offset"]), max(rng[1], r["last_offset"])
        fs = join(JoinInput(produce=produce, disk=rows, at_acked=rows, ranges=ranges))[0]
        got = {o for f in fs if f["rule"] == "acknowledged-write-lost"
               for d in json.loads(f["details"])["lost"] for o in range(d["offsets"][0], d["offsets"][1] + 1)}
        assert got == want, (given_reps, cut, writes, other_len)


def test_acknowledged_tail_past_the_new_leaders_log_end(tmp_path):
    """Only 8-9 were acknowledged (5-7 sent but not answered): the new leader's epoch-1 batches
    at 5-7 overlap no acknowledged write, yet its log reached epoch 1 before 8 - replica 1's copy
    of 8-9 in epoch 0 is a deposed leader's, and both writes are lost."""
    r = _audit(_capture(tmp_path, range(8, 10), unanswered=range(5, 8)), _cluster(tmp_path, election="unclean"))
    lost = [f for f in r.findings if f["rule"] == "acknowledged-write-lost"]
    assert _brief(lost) == [("acknowledged-write-lost", "critical", 8, 9, "1")]


def _deposed_tail(tmp_path, *, new_epoch_entry: bool):
    """orders-0: broker 1 led epoch 0 and appended producer 7's batches 0-9, brokers 2 and 3 had
    fetched 0-4 (high watermark 5) when broker 1 died; broker 2 was elected (clean) and has written
    nothing yet. `new_epoch_entry`: broker 2's leader-epoch-checkpoint holds (1, 5), as
    Partition.makeLeader records it before any append (False: the file of a broker that never led)."""
    def build(ld, node):
        pb = ld.partition("orders", 0, topic_id=TID, role="leader" if node == 1 else "follower")
        for i in range(10 if node == 1 else 5):
            pb.append_batch(values=[b"v%d" % i], producer_id=PID, producer_epoch=0, base_sequence=i)
        if node == 2 and new_epoch_entry:
            pb.epochs.append((1, 5))
        pb.high_watermark = 5
    return write_replicas(tmp_path / "cluster", build)


def test_acks1_tail_lost_to_a_new_leader_that_has_written_nothing_yet(tmp_path):
    """The acks=1 writes at 5-9 only the deposed leader holds, in epoch 0: broker 2 began epoch 1
    at offset 5 (its leader-epoch-checkpoint), so broker 1 truncates them when it follows."""
    r = _audit(_capture(tmp_path, range(10), acks=1), _deposed_tail(tmp_path, new_epoch_entry=True))
    assert _brief(r.findings) == [("acknowledged-write-lost", "warning", 5, 9, "1")]


def test_acks1_tail_on_one_replica_without_a_later_epoch_is_not_called_lost(tmp_path):
    """The twin: no replica's log or checkpoint reached a later epoch - the replicas are behind
    (not lost: they fetch 5-9 from broker 1)."""
    r = _audit(_capture(tmp_path, range(10), acks=1), _deposed_tail(tmp_path, new_epoch_entry=False))
    assert [f for f in r.findings if f["rule"] == "acknowledged-write-lost"] == []


def _cleaned_elsewhere(checkpoint: int | None) -> list[int]:
    """Writes acknowledged at 0-9; replica 1 lacks 5-7 (its cleaner-offset-checkpoint says
    nothing: an interrupted cleaning round swapped its segment in before writing it); replica 2
    holds 8-9 alone - its cleaner removed everything before, up to its checkpoint `checkpoint`."""
    produce, rows = [], []
    for i in range(10):
        produce.append(dict(_row(i, 1, 7, i, 1000 + i, None, 0), position=i, connection="c", correlation_id=i,
                            request_ts=float(i), response_ts=i + 0.5, acks=-1, is_transactional=False,
                            transactional_id=None, response_error=0, response_base_offset=i, client_id="app",
                            base_offset=0, last_offset=0, topic_id=None))
        if not 5 <= i <= 7:
            rows.append(_row(i, 1, 7, i, 1000 + i, "1", 0))
        if i >= 8:
            rows.append(_row(i, 1, 7, i, 1000 + i, "2", 0))
    ranges = {("1", "orders", 0): [0, 9], ("2", "orders", 0): [8, 9]}
    cleaned = {("2", "orders", 0): checkpoint} if checkpoint is not None else {}
    fs = join(JoinInput(produce=produce, disk=rows, at_acked=rows, ranges=ranges, cleaned=cleaned))[0]
    return sorted(o for f in fs if f["rule"] == "acknowledged-write-lost"
                  for d in json.loads(f["details"])["lost"] for o in range(d["offsets"][0], d["offsets"][1] + 1))


def test_a_write_another_replicas_cleaner_passed_is_not_judged():
    """Replica 2's cleaner processed offsets 0-7 (checkpoint 8) and removed them: each broker's
    cleaner decides from the same records, so replica 1 lacking 5-7 may be its own cleaner's
    work - not judged, though replica 2's first batch left is past them. Without replica 2's
    checkpoint nothing says a cleaner ran: lost."""
    assert _cleaned_elsewhere(8) == []
    assert _cleaned_elsewhere(None) == [5, 6, 7]


def _empty_new_leader(tmp_path, *, new_epoch_entry: bool):
    """orders-0: brokers 1 and 3 hold producer 7's batches 0-9 in epoch 0 (committed, high
    watermark 10); broker 2's log is empty - out of the ISR since before the writes - and
    (`new_epoch_entry`) its leader-epoch-checkpoint holds (1, 0): elected uncleanly with an empty
    log, it has written nothing yet."""
    def build(ld, node):
        pb = ld.partition("orders", 0, topic_id=TID, role="leader" if node == 1 else "follower")
        if node != 2:
            for i in range(10):
                pb.append_batch(values=[b"v%d" % i], producer_id=PID, producer_epoch=0, base_sequence=i)
        if node == 2 and new_epoch_entry:
            pb.epochs.append((1, 0))
        pb.high_watermark = 0 if node == 2 else 10
    return write_replicas(tmp_path / "cluster", build)


def test_acknowledged_writes_lost_to_a_new_leader_with_an_empty_log(tmp_path):
    """Broker 2 holds no batch, but its checkpoint says its log began epoch 1 at 0: the acks=all
    writes 0-9 the others hold in epoch 0 are lost (missed while only replicas with batches counted:
    the simulator's elect:txn_unclean, regressions/elect-txn_unclean-empty-leader.json)."""
    r = _audit(_capture(tmp_path, range(10)), _empty_new_leader(tmp_path, new_epoch_entry=True))
    lost = [f for f in r.findings if f["rule"] == "acknowledged-write-lost"]
    assert _brief(lost) == [("acknowledged-write-lost", "critical", 0, 9, "1,3")]   # the holders


def test_an_empty_replica_without_a_later_epoch_loses_nothing(tmp_path):
    """The twin: the empty replica began no epoch - a replica behind, nothing lost."""
    r = _audit(_capture(tmp_path, range(10)), _empty_new_leader(tmp_path, new_epoch_entry=False))
    assert [f for f in r.findings if f["rule"] == "acknowledged-write-lost"] == []
