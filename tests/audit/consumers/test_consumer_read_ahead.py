"""consumer-redelivery tells which of a redelivered range the first member's application was
surely returned and which it was only served: a client fetches a partition only with nothing of it
buffered, from its position (AbstractFetch.fetchablePartitions), so a Fetch from offset p proves
every record below p was returned by poll(); the records served past its last Fetch offset may have
been read ahead and dropped at the revocation. Both stay in the finding (the wire cannot tell them
unprocessed either). Classic and KIP-848 members."""

from __future__ import annotations

from tests.audit.consumers.test_consumer_rules import A, B, MA, MB, RULES, _brief, _member
from tests.audit.wire import wirecraft_group as g
from tests.audit.wire.wirecraft import audit, details
from tests.sources.pcap.craft import Conn

REBALANCE = 27


def _next_owner(committed: int, end: int = 10):
    return _member("app-b", MB, 2, committed) + g.fetch(4, "app-b", committed, g.records(committed, end - committed),
                                                          hw=end)


def test_records_served_past_the_last_fetch_are_told_possibly_read_ahead(tmp_path):
    # A's Fetch from 5 proves 0-4 were returned to it; it commits 5 at the revocation and leaves:
    # 5-9 it was only served (its buffer), the next owner is served them again
    a = (_member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=10)
         + g.fetch(5, "app-a", 5, g.records(5, 5), hw=10) + g.heartbeat(6, "app-a", MA, 1, error=REBALANCE)
         + g.commit(7, "app-a", MA, 1, 5) + g.leave(8, "app-a", MA))
    fs = audit(tmp_path, [Conn(a, **A), Conn(_next_owner(5), **B)], select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 5, 9)]
    d = details(fs[0])
    assert d["returned_to_application"] is None and d["served_past_last_fetch"] == [5, 9]
    assert "offsets 5-9 were served to the first member past its last Fetch offset" in fs[0]["message"]
    assert "read them ahead" in fs[0]["message"]


def test_records_below_a_later_fetch_are_told_returned_to_the_application(tmp_path):
    # committed 2 while its Fetch from 5 shows 0-4 returned: 2-4 were returned, 5-9 only served
    a = (_member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=10)
         + g.commit(5, "app-a", MA, 1, 2) + g.fetch(6, "app-a", 5, g.records(5, 5), hw=10))
    fs = audit(tmp_path, [Conn(a, **A), Conn(_next_owner(2), **B)], select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 2, 9)]
    d = details(fs[0])
    assert d["returned_to_application"] == [2, 4] and d["served_past_last_fetch"] == [5, 9]
    assert "offsets 2-4 had been returned to the first member's application (a Fetch of it asked from 5)" \
        in fs[0]["message"]


def test_a_range_all_below_the_last_fetch_was_all_returned(tmp_path):
    # served 0-4, then an empty Fetch from 5: committed 2, so 2-4 were returned to the application
    a = (_member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=5)
         + g.commit(5, "app-a", MA, 1, 2) + g.fetch(6, "app-a", 5, b"", hw=5))
    fs = audit(tmp_path, [Conn(a, **A), Conn(_next_owner(2, 5), **B)], select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 2, 4)]
    d = details(fs[0])
    assert d["returned_to_application"] == [2, 4] and d["served_past_last_fetch"] is None
    assert "application had been returned all of them (a Fetch of it asked from 5)" in fs[0]["message"]


def test_a_commit_covering_the_read_ahead_is_clean(tmp_path):
    # the negative twin: the revocation's commit covers all it was served
    a = (_member("app-a", MA, 1, 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=10)
         + g.fetch(5, "app-a", 5, g.records(5, 5), hw=10) + g.heartbeat(6, "app-a", MA, 1, error=REBALANCE)
         + g.commit(7, "app-a", MA, 1, 10) + g.leave(8, "app-a", MA))
    b = _member("app-b", MB, 2, 10) + g.fetch(4, "app-b", 10, g.records(10, 2), hw=12)
    assert audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES) == []


def test_kip848_member_read_ahead_and_returned_parts(tmp_path):
    def owner(client, member, epoch, committed, fetches, tail):
        out = (g.metadata_ids(1, client) + g.cg_heartbeat(2, client, member, 0, answer_epoch=epoch, partitions=[0])
               + g.offset_fetch(3, client, committed))
        for i, (first, n) in enumerate(fetches):
            out += g.fetch(4 + i, client, first, g.records(first, n), hw=10)
        return out + tail
    a = owner("app-a", MA, 1, 0, [(0, 4), (4, 4)],
              g.commit(8, "app-a", MA, 1, 3) + g.cg_heartbeat(9, "app-a", MA, 1, error=110))
    b = owner("app-b", MB, 2, 3, [(3, 7)], [])
    fs = audit(tmp_path, [Conn(a, **A), Conn(b, **B)], select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 3, 7)]
    d = details(fs[0])
    assert d["returned_to_application"] == [3, 3] and d["served_past_last_fetch"] == [4, 7]
