"""consumer-redelivery across rebalances, by the protocol's own rules: the classic eager protocol
revokes every partition (a member given the same partition again restarts from the group's commit),
cooperative and KIP-848 members keep the position of a partition they keep. Crafted positives and
negative twins."""

from __future__ import annotations

from tests.audit.consumers.test_consumer_rules import A, B, MA, MB, RULES, _brief
from tests.audit.wire import wirecraft_group as g
from tests.audit.wire.wirecraft import audit, details
from tests.sources.pcap.craft import Conn

REBALANCE = 27


def _gen1(client, member, parts=(0,)):
    return g.join(1, client, member, 1) + g.sync(2, client, member, 1, [(g.TOPIC, list(parts))])


def _eager(commit_at_revoke: int | None):
    """Served 0-9, committed 5; the rebalance to generation 2 gives it partition 0 again."""
    out = (_gen1("app-a", MA) + g.offset_fetch(3, "app-a", 0) + g.fetch(4, "app-a", 0, g.records(0, 5), hw=10)
           + g.commit(5, "app-a", MA, 1, 5) + g.fetch(6, "app-a", 5, g.records(5, 5), hw=10)
           + g.heartbeat(7, "app-a", MA, 1, error=REBALANCE))
    committed = 5
    if commit_at_revoke is not None:   # onPartitionsRevoked commits what it processed
        out += g.commit(8, "app-a", MA, 1, commit_at_revoke)
        committed = commit_at_revoke
    out += (g.join(9, "app-a", MA, 2) + g.sync(10, "app-a", MA, 2, [(g.TOPIC, [0])])
            + g.offset_fetch(11, "app-a", committed))
    if committed < 10:
        out += g.fetch(12, "app-a", committed, g.records(committed, 10 - committed), hw=10)
    return out + g.fetch(13, "app-a", 10, g.records(10, 2), hw=12)


def test_eager_rebalance_rereads_past_the_members_commit(tmp_path):
    fs = audit(tmp_path, Conn(_eager(None), **A), select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 5, 9)]
    d = details(fs[0])
    assert d["same_member"] and d["first_member"] == d["next_member"] == MA
    assert d["generations"] == [1, 2] and d["committed"] == 5
    assert "generation 1 -> 2" in d["cause"] and "eager" in d["cause"]
    assert "again to the same member" in fs[0]["message"]


def test_eager_rebalance_with_a_commit_covering_what_was_served_is_clean(tmp_path):
    assert audit(tmp_path, Conn(_eager(10), **A), select=RULES) == []


def test_eager_commit_covering_part_of_it_names_the_rest(tmp_path):
    fs = audit(tmp_path, Conn(_eager(8), **A), select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 8, 9)]


def _cooperative(b_committed: int):
    """A held partitions 0 and 1 (served 0-9 of each, committed 5 of each); the cooperative
    rebalance to generation 2 leaves it partition 0 (it reads on from 10) and moves 1 to B."""
    a = (_gen1("app-a", MA, (0, 1)) + g.offset_fetch(3, "app-a", 0) + g.offset_fetch(4, "app-a", 0, partition=1)
         + g.fetch(5, "app-a", 0, g.records(0, 10), hw=10) + g.fetch(6, "app-a", 0, g.records(0, 10), hw=10, partition=1)
         + g.commit(7, "app-a", MA, 1, 5) + g.commit(8, "app-a", MA, 1, 5, partition=1)
         + g.heartbeat(9, "app-a", MA, 1, error=REBALANCE)
         + g.join(10, "app-a", MA, 2) + g.sync(11, "app-a", MA, 2, [(g.TOPIC, [0])])
         + g.fetch(12, "app-a", 10, g.records(10, 3), hw=13))
    if b_committed == 10:   # the revoked partition's commit covered what A was served
        a = a[:-len(g.fetch(12, "app-a", 10, g.records(10, 3), hw=13))]
        a += g.commit(13, "app-a", MA, 2, 10, partition=1) + g.fetch(12, "app-a", 10, g.records(10, 3), hw=13)
    b = (g.join(1, "app-b", MB, 2) + g.sync(2, "app-b", MB, 2, [(g.TOPIC, [1])])
         + g.offset_fetch(3, "app-b", b_committed, partition=1)
         + g.fetch(4, "app-b", b_committed, g.records(b_committed, 12 - b_committed), hw=12, partition=1))
    return [Conn(a, **A), Conn(b, **B)]


def test_cooperative_rebalance_keeps_the_position_of_a_kept_partition(tmp_path):
    """Partition 0 stays with A (no re-read); partition 1 moves to B, which re-reads 5-9."""
    fs = audit(tmp_path, _cooperative(5), select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 1, 5, 9)]
    d = details(fs[0])
    assert (d["first_member"], d["next_member"], d["same_member"]) == (MA, MB, False)


def test_cooperative_rebalance_with_the_revoked_partition_committed_is_clean(tmp_path):
    assert audit(tmp_path, _cooperative(10), select=RULES) == []


def _kip848(reread_from: int | None):
    """A KIP-848 member served 0-9, committed 5; its member epoch goes 1 -> 2 with partition 0
    kept; it reads on from 10 (clean) or restarts from the commit (re-read)."""
    out = (g.metadata_ids(1, "app-a") + g.cg_heartbeat(2, "app-a", MA, 0, answer_epoch=1, partitions=[0])
           + g.offset_fetch(3, "app-a", 0) + g.fetch(4, "app-a", 0, g.records(0, 10), hw=10)
           + g.commit(5, "app-a", MA, 1, 5)
           + g.cg_heartbeat(6, "app-a", MA, 1, answer_epoch=2, partitions=[0]))
    if reread_from is not None:
        out += g.offset_fetch(7, "app-a", 5) + g.fetch(8, "app-a", 5, g.records(5, 5), hw=10)
    return out + g.fetch(9, "app-a", 10, g.records(10, 2), hw=12)


def test_kip848_epoch_bump_keeps_the_position(tmp_path):
    assert audit(tmp_path, Conn(_kip848(None), **A), select=RULES) == []


def test_kip848_member_rereading_after_an_epoch_bump(tmp_path):
    fs = audit(tmp_path, Conn(_kip848(5), **A), select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 5, 9)]
    assert "member epoch 1 -> 2" in details(fs[0])["cause"] and "eager" not in details(fs[0])["cause"]


def _kip848_moved(commit_before_revoke: bool):
    """KIP-848: A's partition 0 is revoked (epoch 2, nothing assigned) and given to B (epoch 3)."""
    a = (g.metadata_ids(1, "app-a") + g.cg_heartbeat(2, "app-a", MA, 0, answer_epoch=1, partitions=[0])
         + g.offset_fetch(3, "app-a", 0) + g.fetch(4, "app-a", 0, g.records(0, 10), hw=10)
         + g.commit(5, "app-a", MA, 1, 10 if commit_before_revoke else 4)
         + g.cg_heartbeat(6, "app-a", MA, 1, answer_epoch=2, partitions=[]))
    committed = 10 if commit_before_revoke else 4
    b = (g.metadata_ids(1, "app-b") + g.cg_heartbeat(2, "app-b", MB, 0, answer_epoch=3, partitions=[0])
         + g.offset_fetch(3, "app-b", committed)
         + g.fetch(4, "app-b", committed, g.records(committed, 12 - committed), hw=12))
    return [Conn(a, **A), Conn(b, **B)]


def test_kip848_revoked_partition_reread_by_the_next_owner(tmp_path):
    fs = audit(tmp_path, _kip848_moved(False), select=RULES)
    assert _brief(fs) == [("consumer-redelivery", "warning", "orders", 0, 4, 9)]
    assert "revoked" in details(fs[0])["cause"]
    assert audit(tmp_path, _kip848_moved(True), select=RULES, name="clean.pcap") == []
