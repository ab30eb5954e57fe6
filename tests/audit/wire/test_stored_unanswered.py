"""An idempotent Produce the capture holds no answer to, shown stored by a consumer's Fetch
(audit/producers/stored_unanswered.py): its produce-outcome settles the unanswered-request, and
proves stored the first send of records a new producer session re-sent. Each case against its
negative twin: another epoch, fewer records, a follower's Fetch."""

from __future__ import annotations

import pytest

from kaudit.audit.producers import wire_acked
from tests.audit.wire import wirecraft as wc
from tests.audit.wire.test_wire_acked import READER, P1, P2, at, fetch
from tests.audit.wire.wirecraft import TOPIC, audit, by_rule, details, send
from tests.protocol.wire.wirebytes import array, frame, i8, i16, i32, i64, nbytes, request_header, response_header, string
from tests.sources.pcap.craft import Conn

RULES = ("unanswered-request", "produce-outcome", "duplicate-records", "retried-batch")


@pytest.fixture(autouse=True, params=["certified", "uncertified"])
def _both_ways(request, monkeypatch):
    monkeypatch.setattr(wire_acked, "CERTIFY", request.param == "certified")


def _unanswered(pid: int = 7, epoch: int = 0, seq: int = 0, n: int = 3):
    """Producer `pid`'s Produce on P1 that the connection's close (FIN) leaves unanswered."""
    return Conn(send(1, wc.batch(pid, epoch, seq, n), error=None), **P1)


def follower_fetch(corr: int, records: bytes, *, hw: int, replica: int = 2):
    """wire_acked's Fetch v4 as a follower (replica id `replica`) sends it."""
    req = (request_header(1, 4, corr, f"broker-{replica}-fetcher-0", False)
           + i32(replica) + i32(500) + i32(1) + i32(52428800) + i8(0)
           + array(1) + string(TOPIC) + array(1) + i32(0) + i64(5) + i32(1048576))
    resp = (response_header(corr, False) + i32(0) + array(1) + string(TOPIC)
            + array(1) + i32(0) + i16(0) + i64(hw) + i64(hw) + array(0) + nbytes(records))
    return [(0, frame(req)), (1, frame(resp))]


def _run(tmp_path, conns):
    fs = audit(tmp_path, conns, select=RULES)
    return fs, sorted((f["rule"], f["severity"]) for f in fs)


def test_a_consumers_copy_settles_the_unanswered_produce(tmp_path):
    reader = Conn(fetch(1, at(5, 7, 0, 0), hw=8, fetch_offset=5), **READER)
    fs, brief = _run(tmp_path, [_unanswered(), reader])
    assert brief == [("produce-outcome", "info"), ("unanswered-request", "info")]
    out = by_rule(fs, "produce-outcome")[0]
    assert (out["topic"], out["partition"], out["producer_id"], out["first_offset"], out["last_offset"]) == (TOPIC, 0, 7, 5, 7)
    assert details(out)["outcome"] == "stored once" and details(out)["fetched_at"] == 5
    assert [e["kind"] for e in out["evidence"]] == ["produce", "fetch"]
    assert "served this batch at offset 5" in out["message"] and "client reader" in out["message"]
    req = by_rule(fs, "unanswered-request")[0]
    assert "resolved: a consumer's Fetch shows it stored once - nothing lost" in req["message"]


@pytest.mark.parametrize("copy, why", [
    (lambda: fetch(1, at(5, 7, 1, 0), hw=8, fetch_offset=5), "another epoch"),
    (lambda: fetch(1, at(5, 7, 0, 0, n=2), hw=7, fetch_offset=5), "fewer records"),
    (lambda: fetch(1, at(5, 8, 0, 0), hw=8, fetch_offset=5), "another producer"),
    (lambda: follower_fetch(1, at(5, 7, 0, 0), hw=8), "a follower's fetch"),
])
def test_no_copy_no_settling(tmp_path, copy, why):
    """Not the same batch, or served to a follower (the leader's tail, which a leader change may
    still truncate): the request stays a warning, no outcome is told."""
    fs, brief = _run(tmp_path, [_unanswered(), Conn(copy(), **READER)])
    assert brief == [("unanswered-request", "warning")], why


def test_a_resend_by_a_new_session_is_stored_twice(tmp_path):
    """Producer 7's send got no answer; producer 8 (a restarted application) sent the same records
    and they were acknowledged at 8: on the capture alone a possible duplicate (warning) - the
    consumer's copy of 7's batch at 5 makes it certain (error)."""
    resend = Conn(send(1, wc.batch(8, 0, 0), offset=8, client_id="app-b"), **P2)
    reader = Conn(fetch(1, at(5, 7, 0, 0) + at(8, 8, 0, 0), hw=11, fetch_offset=5), **READER)
    fs, brief = _run(tmp_path, [_unanswered(), resend, reader])
    assert brief == [("duplicate-records", "error"), ("produce-outcome", "info"), ("unanswered-request", "info")]
    dup = by_rule(fs, "duplicate-records")[0]
    assert details(dup)["outcome"] == "stored twice"
    assert "a consumer's Fetch shows the first send stored too" in dup["message"]
    # without the copy: the suspicion stays a warning
    fs, brief = _run(tmp_path, [_unanswered(), resend, Conn(fetch(1, at(8, 8, 0, 0), hw=11, fetch_offset=8), **READER)])
    assert brief == [("duplicate-records", "warning"), ("unanswered-request", "warning")]


def test_a_copy_served_while_its_write_is_in_flight(tmp_path):
    """The consumer is served the copy while the Produce still waits for its answer, to the
    capture's end: no unanswered-request (in flight), its outcome told (a live capture keeps the
    copy until the write's row comes, at the end)."""
    write = Conn(send(1, wc.batch(7, 0, 0), error=None), handshake=False, fin=False, **P1)
    reader = Conn(fetch(1, at(5, 7, 0, 0), hw=8, fetch_offset=5), handshake=False, **READER)
    fs = audit(tmp_path, [write, reader], select=RULES, interleave=True)
    assert sorted((f["rule"], f["severity"]) for f in fs) == [("produce-outcome", "info")]


def test_a_copy_served_before_the_write_was_sent_is_another_batch(tmp_path):
    """A Fetch answered before the Produce was sent cannot hold its batch."""
    reader = Conn(fetch(1, at(5, 7, 0, 0), hw=8, fetch_offset=5), **READER)
    fs = audit(tmp_path, [reader, _unanswered()], select=RULES)
    assert sorted((f["rule"], f["severity"]) for f in fs) == [("unanswered-request", "warning")]


def test_the_joins_outcome_of_the_same_send_replaces_the_captures():
    """`kaudit audit`: the log dirs resolved the send (joint/join.py): the capture's own
    produce-outcome of it gives way (one story per send), another send's stays."""
    from kaudit.audit.joint.settle import settle_wire
    from kaudit.audit.registry import evidence, finding

    def outcome(position, fetched: bool):
        ev = [evidence("w.pcap", position, "produce", "the send")]
        if fetched:
            ev.append(evidence("w.pcap", 99, "fetch", "the copy"))
        return finding("produce-outcome", f"send {position}", evidence=ev,
                       details={"outcome": "stored once", **({"fetched_at": 5} if fetched else {})})

    wire = [outcome(3, True), outcome(4, True)]
    kept = settle_wire(wire, [outcome(3, False)])
    assert [f["message"] for f in kept] == ["send 4"]


def test_a_non_idempotent_retry_whose_first_attempt_a_follower_fetched_is_stored_twice(tmp_path):
    """No producer id: the first attempt got no answer (its connection closed), the retry was
    acknowledged at 8; the followers fetched the same bytes at 5 and at 8 - the broker stored
    both attempts (it cannot deduplicate without idempotence): a duplicate consumers process
    twice, where the capture alone could only say it might be."""
    first = Conn(send(1, wc.batch(-1, -1, 0), error=None), **P1)
    retry = Conn(send(1, wc.batch(-1, -1, 0), offset=8), **P2)
    both = Conn(follower_fetch(1, at(5, -1, -1, 0) + at(8, -1, -1, 0), hw=11), **READER)
    fs, brief = _run(tmp_path, [first, retry, both])
    assert brief == [("duplicate-records", "error"), ("produce-outcome", "warning"), ("retried-batch", "info"),
                     ("unanswered-request", "info")]
    dup = by_rule(fs, "duplicate-records")[0]
    assert (dup["first_offset"], details(dup)["original_first_offset"]) == (8, 5)
    assert "stored at offset 5" in dup["message"] and "acknowledged again at 8" in dup["message"]
    assert details(by_rule(fs, "retried-batch")[0])["outcome"] == "stored twice"
    assert "resolved: a Fetch shows it stored twice - nothing lost, but duplicated" in \
        by_rule(fs, "unanswered-request")[0]["message"]
    # the followers fetched the retry's copy only: whether the first attempt was stored the
    # capture cannot tell
    one = Conn(follower_fetch(1, at(8, -1, -1, 0), hw=11), **READER)
    fs, brief = _run(tmp_path, [first, retry, one])
    assert brief == [("retried-batch", "warning"), ("unanswered-request", "warning")]


def test_a_non_idempotent_send_without_an_answer_a_fetch_served_lost_nothing(tmp_path):
    reader = Conn(fetch(1, at(5, -1, -1, 0), hw=8, fetch_offset=5), **READER)
    fs, brief = _run(tmp_path, [Conn(send(1, wc.batch(-1, -1, 0), error=None), **P1), reader])
    assert brief == [("produce-outcome", "info"), ("unanswered-request", "info")]
    assert details(by_rule(fs, "produce-outcome")[0])["outcome"] == "stored"
    other = Conn(fetch(1, at(5, -1, -1, 0, tag="other"), hw=8, fetch_offset=5), **READER)   # other bytes
    fs, brief = _run(tmp_path, [Conn(send(1, wc.batch(-1, -1, 0), error=None), **P1), other])
    assert brief == [("unanswered-request", "warning")]
