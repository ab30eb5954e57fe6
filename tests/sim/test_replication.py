"""The simulator's replication (tests/sim/replication.py) against Kafka's rules: the leader epoch
cache's end offsets (LeaderEpochFileCache.endOffsetFor), a follower's truncation point
(KIP-101/KIP-279), the high watermark, and what an election leaves on each replica's disk."""

from __future__ import annotations

from tests.sim import replication as R
from tests.sim.cluster import Client, Sim


def test_end_offset_for_is_the_next_epochs_start_or_the_log_end():
    cache = [(0, 0), (2, 5), (4, 9)]
    assert R.end_offset_for(cache, 12, 0) == (0, 5)
    assert R.end_offset_for(cache, 12, 3) == (2, 9)      # an epoch it never had: the largest below
    assert R.end_offset_for(cache, 12, 4) == (4, 12)
    # an epoch below every entry: (that epoch, the first entry's start) - LeaderEpochFileCache's
    # floorEntry null branch (a leader elected with an empty log answers its log end)
    assert R.end_offset_for([(3, 4)], 8, 1) == (1, 4)
    assert R.end_offset_for([], 8, 1) == (-1, -1)


def _sim(tmp_path, **kw):
    sim = Sim(tmp_path, **kw)
    p = sim.partition("t", 0, leader=2)
    c = Client(sim, "p")
    c.init()
    return sim, p, c


def test_a_deposed_leaders_unfetched_tail_is_truncated_at_the_new_epochs_start(tmp_path):
    sim, p, c = _sim(tmp_path)
    for i in range(2):
        c.send(p, [b"a%d" % i])
    p.behind |= {1, 3}
    c.send(p, [b"tail"], answered=False)
    assert (p.rhw[2], p.log_end(2), p.log_end(3)) == (2, 3, 2)    # the high watermark: the ISR's least end
    R.fall_behind(p, 2, leave_isr=False)
    p.behind.discard(1)
    R.elect(p, 3, isr={1, 3})
    assert p.pbs[3].epochs == [(0, 0), (1, 2)]      # makeLeader: (epoch, log end) before any append
    c.reconnect()
    c.send(p, [b"b"])
    assert R.truncation_offset(p, 2) == 2
    assert R.rejoin(p, 2) == 2
    assert p.rlog[2] == p.rlog[3] == p.rlog[1]


def test_an_unclean_leader_starts_its_epoch_at_its_own_log_end(tmp_path):
    sim, p, c = _sim(tmp_path, kraft=True)
    c.send(p, [b"a"])
    R.fall_behind(p, 1, leave_isr=True)
    c.send(p, [b"committed"])
    assert p.rhw[2] == p.rhw[3] == 2 and p.rhw[1] == 1
    R.elect(p, 1, unclean=True)
    assert p.next_offset == 1 and p.isr == {1}
    assert R.truncation_offset(p, 2) == 1             # the committed offset 1 goes


def test_a_replica_with_an_epoch_the_leader_never_had_truncates_in_two_steps(tmp_path):
    """KIP-279: node 2 led epoch 0 (offset 1 unfetched), node 3 led epoch 1 from offset 1 (1-2
    unfetched), node 1 leads epoch 2 from offset 1. Node 3 asks for epoch 1: node 1 never had it
    and answers epoch 0 ending at 1; node 3 cuts to its own end of epoch 0 (1) and asks again."""
    sim, p, c = _sim(tmp_path)
    c.send(p, [b"a"])
    p.behind |= {1, 3}
    c.send(p, [b"t0"], answered=False)           # offset 1, epoch 0, node 2 only
    R.fall_behind(p, 2, leave_isr=False)
    p.behind -= {1, 3}
    R.elect(p, 3, isr={1, 3})
    p.behind |= {1}
    c.reconnect()
    c.send(p, [b"t0"], answered=False, seq=1)     # the retry: offset 1, epoch 1, node 3 only
    c.send(p, [b"t1"], answered=False)            # offset 2, epoch 1
    R.fall_behind(p, 3, leave_isr=False)
    p.behind.discard(1)
    R.elect(p, 1, isr={1})
    assert p.pbs[1].epochs == [(0, 0), (2, 1)]
    assert R.truncation_offset(p, 3) == 1 and R.truncation_offset(p, 2) == 1
