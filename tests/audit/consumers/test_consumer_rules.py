"""The consumer rules (audit/consumers) on crafted captures: each check against its negative twin,
classic group protocol and KIP-848."""

from __future__ import annotations

from tests.audit.wire.wirecraft import audit, by_rule, details
from tests.audit.wire import wirecraft_group as g
from tests.sources.pcap.craft import Conn

RULES = ("consumer-redelivery", "consumer-commit-beyond-served", "consumer-reset-skip",
         "consumer-start-beyond-commit", "consumer-nonmonotonic-poll", "consumer-poll-skip",
         "eos-double-commit", "uncommitted-aborted-read")
A = dict(client=("10.0.0.4", 41001))
B = dict(client=("10.0.0.5", 41002))
A2 = dict(client=("10.0.0.4", 41003))
B2 = dict(client=("10.0.0.5", 41004))
MA, MB = "app-a-1111", "app-b-2222"


def _brief(fs):
    return sorted((f["rule"], f["severity"], f["topic"], f["partition"], f["first_offset"], f["last_offset"])
                  for f in fs)


def _member(client, member, gen, committed):
    return (g.join(1, client, member, gen) + g.sync(2, client, member, gen, [(g.TOPIC, [0])])
            + g.offset_fetch(3, client, committed))


# ---- redelivery after a rebalance ----------------------------------------------------------------

def _first_owner(end_with):
    return (_member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=10)
            + g.commit(5, "app-a", MA, 1, 5) + g.fetch(6, "app-a", 5, g.records(5, 5), hw=10) + end_with)


def test_redelivery_after_a_silent_death(tmp_path):
    a = _first_owner([])
    b = _member("app-b", MB, 2, 5) + g.fetch(4, "app-b", 5, g.records(5, 5), hw=10)
    fs = audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 5, 9)]
    d = details(fs[0])
    assert (d["first_member"], d["next_member"], d["committed"]) == (MA, MB, 5)
    assert "no LeaveGroup seen" in d["cause"]


def test_redelivery_of_a_fenced_member_names_the_cause(tmp_path):
    a = _first_owner(g.heartbeat(7, "app-a", MA, 1, error=25))
    b = _member("app-b", MB, 2, 5) + g.fetch(4, "app-b", 5, g.records(5, 5), hw=10)
    fs = audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 5, 9)]
    assert "UNKNOWN_MEMBER_ID" in details(fs[0])["cause"]


def _emptied(base: int, n: int) -> bytes:
    """A batch of offsets base..base+n-1 whose records the cleaner all removed: it keeps the
    batch (a producer's last, for its state) with no record (count 0)."""
    return g.ke.encode_record_batch_v2(base, [], last_offset_delta=n - 1, producer_id=7, producer_epoch=0,
                                       base_sequence=5)


def test_a_batch_compaction_emptied_served_twice_redelivers_nothing(tmp_path):
    # the first member was served offsets 5-9 past its commit, but they hold no record (a
    # compacted topic): its successor is served the same empty batch - nothing delivered twice
    a = _member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=10) \
        + g.commit(5, "app-a", MA, 1, 5) + g.fetch(6, "app-a", 5, _emptied(5, 5), hw=10)
    b = _member("app-b", MB, 2, 5) + g.fetch(4, "app-b", 5, _emptied(5, 5), hw=10)
    assert audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES) == []
    # its twin: one record kept at offset 9 is served twice
    kept = g.ke.encode_record_batch_v2(5, [{"offset_delta": 4, "value": b"v9"}], producer_id=7, producer_epoch=0,
                                       base_sequence=5)
    a = a[:-2] + g.fetch(6, "app-a", 5, kept, hw=10)
    b = b[:-2] + g.fetch(4, "app-b", 5, kept, hw=10)
    assert _brief(audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES)) == [
        ("consumer-redelivery", "warning", "orders", 0, 5, 9)]


def test_commit_before_leaving_redelivers_nothing(tmp_path):
    a = _first_owner(g.commit(7, "app-a", MA, 1, 10) + g.leave(8, "app-a", MA))
    b = _member("app-b", MB, 2, 10) + g.fetch(4, "app-b", 10, g.records(10, 3), hw=13)
    assert audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES) == []


def test_kip848_redelivery_after_fencing_and_its_clean_twin(tmp_path):
    def owner(client, member, epoch, committed, first, n, tail):
        return (g.metadata_ids(1, client) + g.cg_heartbeat(2, client, member, 0, answer_epoch=epoch, partitions=[0])
                + g.offset_fetch(3, client, committed) + g.fetch(4, client, first, g.records(first, n), hw=10)
                + tail)
    a = owner("app-a", MA, 1, 0, 0, 5, g.commit(5, "app-a", MA, 1, 3) + g.cg_heartbeat(6, "app-a", MA, 1, error=110))
    b = owner("app-b", MB, 2, 3, 3, 7, [])
    fs = audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 3, 4)]
    assert "FENCED_MEMBER_EPOCH" in details(fs[0])["cause"]
    a = owner("app-a", MA, 1, 0, 0, 5, g.commit(5, "app-a", MA, 1, 5) + g.cg_heartbeat(6, "app-a", MA, -1))
    b = owner("app-b", MB, 2, 5, 5, 5, [])
    assert audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES, name="clean.pcap") == []


# ---- skipped records -----------------------------------------------------------------------------

def test_commit_beyond_served(tmp_path):
    a = _member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=30)
    fs = audit(tmp_path, Conn(a + g.commit(5, "app-a", MA, 1, 20), **A), select=RULES)
    assert _brief(fs) == [("consumer-commit-beyond-served", "error", "orders", 0, 5, 19)]
    assert audit(tmp_path, Conn(a + g.commit(5, "app-a", MA, 1, 5), **A), select=RULES, name="ok.pcap") == []


def test_reset_to_the_log_end_after_out_of_range(tmp_path):
    a = _member("app-a", MA, 1, 3) + g.fetch(4, "app-a", 3, b"", hw=50, error=1, log_start=0)
    end = g.fetch(6, "app-a", 50, b"", hw=50)
    fs = audit(tmp_path, Conn(a + g.list_offsets(5, "app-a", -1, 50) + end, **A), select=RULES)
    assert _brief(fs) == [("consumer-reset-skip", "error", "orders", 0, 3, 49)]
    clean = Conn(a + g.list_offsets(5, "app-a", -2, 0) + g.fetch(6, "app-a", 0, g.records(0, 3), hw=50), **A)
    assert audit(tmp_path, clean, select=RULES, name="earliest.pcap") == []


def test_reset_to_the_log_end_over_a_committed_offset(tmp_path):
    a = _member("app-a", MA, 1, 5) + g.list_offsets(4, "app-a", -1, 50) + g.fetch(5, "app-a", 50, b"", hw=50)
    fs = audit(tmp_path, Conn(a, **A), select=RULES)
    assert _brief(fs) == [("consumer-reset-skip", "error", "orders", 0, 5, 49)]


def test_a_watermark_query_is_no_reset(tmp_path):
    """librdkafka's query_watermark_offsets looks the end up; the consumer reads on from 0."""
    a = (_member("app-a", MA, 1, -1) + g.list_offsets(4, "app-a", -1, 50)
         + g.fetch(5, "app-a", 0, g.records(0, 5), hw=50, log_start=0))
    assert audit(tmp_path, Conn(a, **A), select=RULES) == []
    reading = (_member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 50), hw=50)
               + g.list_offsets(5, "app-a", -2, 0) + g.list_offsets(6, "app-a", -1, 50)
               + g.fetch(7, "app-a", 50, b"", hw=50))
    assert audit(tmp_path, Conn(reading, **A), select=RULES, name="reading.pcap") == []


def test_a_new_group_starting_at_the_log_end_is_info(tmp_path):
    a = (_member("app-a", MA, 1, -1) + g.list_offsets(4, "app-a", -1, 50)
         + g.fetch(5, "app-a", 50, b"", hw=50, log_start=0))
    fs = audit(tmp_path, Conn(a, **A), select=RULES)
    assert _brief(fs) == [("consumer-reset-skip", "info", "orders", 0, 0, 49)]


def test_member_starting_beyond_the_committed_offset(tmp_path):
    a = _member("app-a", MA, 1, 5)
    fs = audit(tmp_path, Conn(a + g.fetch(4, "app-a", 12, g.records(12, 3), hw=15), **A), select=RULES)
    assert _brief(fs) == [("consumer-start-beyond-commit", "error", "orders", 0, 5, 11)]
    ok = Conn(a + g.fetch(4, "app-a", 5, g.records(5, 3), hw=15), **A)
    assert audit(tmp_path, ok, select=RULES, name="ok.pcap") == []


# ---- poll order --------------------------------------------------------------------------------

def test_nonmonotonic_poll_and_poll_skip(tmp_path):
    first = g.fetch(1, "solo", 0, g.records(0, 5), hw=20)
    back = audit(tmp_path, Conn(first + g.fetch(2, "solo", 2, g.records(2, 3), hw=20), **A), select=RULES)
    assert _brief(back) == [("consumer-nonmonotonic-poll", "warning", "orders", 0, 2, 4)]
    skip = audit(tmp_path, Conn(first + g.fetch(2, "solo", 8, g.records(8, 3), hw=20), **A), select=RULES,
                 name="skip.pcap")
    assert _brief(skip) == [("consumer-poll-skip", "error", "orders", 0, 5, 7)]


def test_poll_order_in_a_capture_of_some_brokers_is_told_at_info(tmp_path):
    """A client with no group request in the capture, whose Metadata answer lists three brokers
    while the capture reaches one: if it is a group member its coordinator - and so a rebalance
    or the offset fetch after an abort - may be on a broker the capture does not hold. Its twin,
    whose Metadata lists the one broker the capture holds, is judged as before."""
    def poll(nodes, fetch_offset, name):
        conv = (g.metadata_brokers(1, "solo", nodes) + g.fetch(2, "solo", 0, g.records(0, 5), hw=20)
                + g.fetch(3, "solo", fetch_offset, g.records(fetch_offset, 3), hw=20))
        return audit(tmp_path, Conn(conv, **A), select=RULES, name=name)

    back, skip = poll((1, 2, 3), 2, "back.pcap"), poll((1, 2, 3), 8, "skip.pcap")
    assert _brief(back) == [("consumer-nonmonotonic-poll", "info", "orders", 0, 2, 4)]
    assert _brief(skip) == [("consumer-poll-skip", "info", "orders", 0, 5, 7)]
    for f in back + skip:
        assert "its clients reach 1 of the 3 brokers it names (Metadata answers, replicas' Fetches)" in f["message"]
        assert "a rebalance or an offset fetch may have moved it" in f["message"]
    assert _brief(poll((1,), 2, "one-back.pcap")) == [("consumer-nonmonotonic-poll", "warning", "orders", 0, 2, 4)]
    assert _brief(poll((1,), 8, "one-skip.pcap")) == [("consumer-poll-skip", "error", "orders", 0, 5, 7)]


def test_replicas_fetches_name_the_brokers_of_a_capture_without_metadata(tmp_path):
    """No Metadata answer, but the followers of the captured broker fetch from it as brokers 2
    and 3: the capture names two brokers (the captured one's own id it does not show) and its
    clients reach one, so the client with no group request is told at info. Without the
    followers' traffic nothing names another broker: the warning stays."""
    solo = (g.fetch(1, "solo", 0, g.records(0, 5), hw=20) + g.fetch(2, "solo", 2, g.records(2, 3), hw=20))
    followers = [Conn(g.fetch(1, f"broker-{n}-fetcher-0", 5, b"", hw=20, replica=n),
                      client=(f"10.0.1.{n}", 42000 + n)) for n in (2, 3)]
    [f] = audit(tmp_path, [Conn(solo, **A)] + followers, select=RULES)
    assert (f["rule"], f["severity"]) == ("consumer-nonmonotonic-poll", "info")
    assert "its clients reach 1 of the 2 brokers it names" in f["message"]
    [f] = audit(tmp_path, [Conn(solo, **A)], select=RULES, name="alone.pcap")
    assert (f["rule"], f["severity"]) == ("consumer-nonmonotonic-poll", "warning")


def test_poll_order_clean_twins(tmp_path):
    first = g.fetch(1, "solo", 0, g.records(0, 5), hw=20)
    onward = first + g.fetch(2, "solo", 5, g.records(5, 3), hw=20)
    sought = first + g.list_offsets(2, "solo", -2, 0) + g.fetch(3, "solo", 0, g.records(0, 5), hw=20)
    assert audit(tmp_path, [Conn(onward, **A), Conn(sought, **B)], select=RULES) == []


def test_read_committed_refetch_of_an_aborted_tail_is_no_nonmonotonic_poll(tmp_path):
    """The client delivered 0-1; the aborted batch and its marker (2-4) are fetched again."""
    data = g.records(0, 2) + g.records(2, 2, pid=9, epoch=0, txn=True, seq=0) + g.marker(4, "ABORT", 9)
    again = g.records(2, 2, pid=9, epoch=0, txn=True, seq=0) + g.marker(4, "ABORT", 9)
    conv = (g.fetch(1, "rc", 0, data, hw=5, isolation=1, aborted=[(9, 2)])
            + g.fetch(2, "rc", 2, again, hw=5, isolation=1, aborted=[(9, 2)]))
    assert by_rule(audit(tmp_path, Conn(conv, **A), select=RULES), "consumer-nonmonotonic-poll") == []


# ---- exactly-once --------------------------------------------------------------------------------

def _ctp(client, member, gen, txn_id, pid, committed_first: bool, epoch=0):
    consumer = _member(client, member, gen, 0) + g.fetch(4, client, 0, g.records(0, 5), hw=5, isolation=1)
    producer = (g.txn_offset_commit(1, client + "-producer", txn_id, pid, epoch, member, 5, generation=gen)
                + g.end_txn(2, client + "-producer", txn_id, pid, epoch, committed_first))
    return consumer, producer


def test_same_inputs_in_two_committed_transactions(tmp_path):
    ca, pa = _ctp("ctp-a", MA, 1, "t-a", 7, True)
    cb, pb = _ctp("ctp-b", MB, 2, "t-b", 8, True)
    fs = audit(tmp_path, [Conn(ca, **A), Conn(pa, **A2), Conn(cb, **B), Conn(pb, **B2)], select=RULES)
    assert _brief(fs) == [("eos-double-commit", "critical", "orders", 0, 0, 4)]
    assert details(fs[0])["first"][0] == "t-a" and details(fs[0])["second"][0] == "t-b"


def test_aborted_then_committed_is_normal(tmp_path):
    ca, pa = _ctp("ctp-a", MA, 1, "t-a", 7, False)
    cb, pb = _ctp("ctp-b", MB, 2, "t-b", 8, True)
    assert audit(tmp_path, [Conn(ca, **A), Conn(pa, **A2), Conn(cb, **B), Conn(pb, **B2)], select=RULES) == []


# ---- read_uncommitted reads of aborted data ------------------------------------------------------

def test_read_uncommitted_reader_of_an_aborted_transaction(tmp_path):
    data = g.records(0, 2, pid=9, epoch=0, txn=True, seq=0) + g.marker(2, "ABORT", 9)
    fs = audit(tmp_path, Conn(g.fetch(1, "ru", 0, data, hw=3), **A), select=RULES)
    assert _brief(fs) == [("uncommitted-aborted-read", "info", "orders", 0, 0, 1)]
    committed = g.records(0, 2, pid=9, epoch=0, txn=True, seq=0) + g.marker(2, "COMMIT", 9)
    assert audit(tmp_path, Conn(g.fetch(1, "ru", 0, committed, hw=3), **A), select=RULES, name="ok.pcap") == []
    rc = g.fetch(1, "rc", 0, data, hw=3, isolation=1, aborted=[(9, 0)])
    assert audit(tmp_path, Conn(rc, **B), select=RULES, name="rc.pcap") == []
    # the cleaner emptied the aborted batch (kept, count 0, as its producer's last): nothing read
    emptied = g.ke.encode_record_batch_v2(0, [], last_offset_delta=1, producer_id=9, producer_epoch=0,
                                          base_sequence=0, is_transactional=True) + g.marker(2, "ABORT", 9)
    assert audit(tmp_path, Conn(g.fetch(1, "ru", 0, emptied, hw=3), **A), select=RULES, name="empty.pcap") == []


def test_kip848_member_fenced_then_rejoining_with_its_id(tmp_path):
    """FENCED_MEMBER_EPOCH, then epoch 0 again with the same member id: a new stint of the same member."""
    def story(restart_at):
        return (g.metadata_ids(1, "app-a") + g.cg_heartbeat(2, "app-a", MA, 0, answer_epoch=1, partitions=[0])
                + g.offset_fetch(3, "app-a", 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=20)
                + g.commit(5, "app-a", MA, 1, 5) + g.cg_heartbeat(6, "app-a", MA, 1, error=110)
                + g.cg_heartbeat(7, "app-a", MA, 0, answer_epoch=3, partitions=[0]) + g.offset_fetch(8, "app-a", 5)
                + g.fetch(9, "app-a", restart_at, g.records(restart_at, 3), hw=20))
    assert audit(tmp_path, Conn(story(5), **A), select=RULES) == []
    fs = audit(tmp_path, Conn(story(12), **A), select=RULES, name="skip.pcap")
    assert _brief(fs) == [("consumer-start-beyond-commit", "error", "orders", 0, 5, 11)]


def test_same_inputs_twice_before_kip447(tmp_path):
    """TxnOffsetCommit v2 names no member: the partition's owner at the commit is the consumer."""
    def ctp(client, member, gen, txn_id, pid):
        consumer = _member(client, member, gen, 0) + g.fetch(4, client, 0, g.records(0, 5), hw=5, isolation=1)
        producer = (g.txn_offset_commit_v2(1, client + "-producer", txn_id, pid, 0, 5)
                    + g.end_txn(2, client + "-producer", txn_id, pid, 0, True))
        return consumer, producer
    ca, pa = ctp("ctp-a", MA, 1, "t-a", 7)
    cb, pb = ctp("ctp-b", MB, 2, "t-b", 8)
    fs = audit(tmp_path, [Conn(ca, **A), Conn(pa, **A2), Conn(cb, **B), Conn(pb, **B2)], select=RULES)
    assert _brief(fs) == [("eos-double-commit", "critical", "orders", 0, 0, 4)]
