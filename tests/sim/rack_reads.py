"""Rack-aware reads (KIP-392) in the simulated consumers: which followers a leader may name as a
consumer's preferred read replica, and the high watermark such a follower knows."""

from __future__ import annotations


def caught_up(part) -> list:
    """The partition's followers that hold every batch its leader does (a preferred read replica
    serves what the leader would, up to the high watermark it knows); none on a compacted
    partition (each replica's cleaner rewrites its own log)."""
    if getattr(part, "cleaned", False):
        return []
    have = part.rlog.get(part.leader)
    return [n for n in sorted(part.rlog) if n != part.leader and part.rlog[n] == have]


FOLLOWER_LAG_MS = 20   # a follower learns the high watermark with its next fetch from the leader


def follower_hw(part) -> int:
    """The high watermark a caught-up follower knows: the leader's log end FOLLOWER_LAG_MS ago."""
    known = [end for ts, end in part.ends if ts <= part.sim.clock - FOLLOWER_LAG_MS]
    return min(part.next_offset, max([part.log_start] + known[-1:]))
