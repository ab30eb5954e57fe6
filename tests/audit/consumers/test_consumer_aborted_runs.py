"""What a read_committed consumer delivers of a response listing two aborted transactions of one
producer (fold._delivered as Kafka's CompletedFetch: the listed aborted transactions in order of
their first offset, each dropping the producer's transactional batches up to its ABORT marker).
Found by the history simulator (tests/sim, group:fenced): the batch of the producer's second
aborted transaction, after the first one's ABORT marker in the same response, was counted
delivered, and its re-fetch by the next owner told as a redelivery."""

from __future__ import annotations

from tests.audit.wire import wirecraft_group as g
from tests.audit.wire.wirecraft import audit
from tests.sources.pcap.craft import Conn

RULES = ("consumer-redelivery",)
PID = 4001
A = dict(client=("10.0.0.4", 41001))
B = dict(client=("10.0.0.5", 41002))


def _member(client, member, gen, committed):
    return (g.join(1, client, member, gen) + g.sync(2, client, member, gen, [(g.TOPIC, [0])])
            + g.offset_fetch(3, client, committed))


def _owners(second_aborted: bool):
    """The producer's first transaction 0-7 aborted (ABORT marker at 8); its next one at 9-10,
    aborted (listed too, ABORT at 11) or committed (COMMIT at 11). A is served 8-11 from its
    group's committed offset 8 and dies; B is served the same from 8."""
    data = g.marker(8, "ABORT", PID) + g.records(9, 2, pid=PID, epoch=0, txn=True, seq=8)
    aborted = [(PID, 0), (PID, 9)] if second_aborted else [(PID, 0)]
    end = g.marker(11, "ABORT" if second_aborted else "COMMIT", PID)

    def served(corr, client):
        return g.fetch(corr, client, 8, data + end, hw=12, isolation=1, aborted=aborted)
    a = _member("app-a", "m-a", 1, 8) + served(4, "app-a")
    b = _member("app-b", "m-b", 2, 8) + served(4, "app-b")
    return [Conn(a, **A), Conn(b, **B)]


def test_the_second_aborted_transaction_of_a_producer_is_not_delivered(tmp_path):
    assert audit(tmp_path, _owners(second_aborted=True), select=RULES) == []


def test_its_committed_twin_is_delivered_and_redelivered(tmp_path):
    fs = audit(tmp_path, _owners(second_aborted=False), select=RULES, name="committed.pcap")
    assert [(f["rule"], f["first_offset"], f["last_offset"]) for f in fs] == [("consumer-redelivery", 9, 10)]


def _mixed(plain: bool):
    """One partition, two producers: an idempotent one's batch at 0 (or a transactional committed
    one's), a transactional one's aborted batch at 1-2 (listed), its ABORT marker at 3. A is served
    0-3 from the committed offset 0 and dies; B is served the same."""
    first = (g.records(0, 1, pid=PID + 1, epoch=0, seq=0) if plain
             else g.records(0, 1, pid=PID + 1, epoch=0, txn=True, seq=0))
    data = first + g.records(1, 2, pid=PID, epoch=0, txn=True, seq=0) + g.marker(3, "ABORT", PID)
    if not plain:
        data += g.marker(4, "COMMIT", PID + 1)

    def served(corr, client):
        return g.fetch(corr, client, 0, data, hw=5, isolation=1, aborted=[(PID, 1)])
    a = _member("app-a", "m-a", 1, 0) + served(4, "app-a")
    b = _member("app-b", "m-b", 2, 0) + served(4, "app-b")
    return [Conn(a, **A), Conn(b, **B)]


def test_a_plain_batch_beside_an_aborted_transaction_is_delivered(tmp_path):
    """The idempotent producer's record 0 was delivered to both members: a redelivery (the fold
    counted no record of a response where a transactional batch was dropped)."""
    fs = audit(tmp_path, _mixed(plain=True), select=RULES)
    assert [(f["rule"], f["first_offset"], f["last_offset"]) for f in fs] == [("consumer-redelivery", 0, 0)]
    fs = audit(tmp_path, _mixed(plain=False), select=RULES, name="txn.pcap")
    assert [(f["rule"], f["first_offset"], f["last_offset"]) for f in fs] == [("consumer-redelivery", 0, 0)]
