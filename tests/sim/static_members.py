"""Static members (KIP-345, `group.instance.id`) restarted (consumer_episodes: group:static_restart):
the coordinator's replacement of a member by its restarted process, classic (GroupCoordinator's
static member replacement) and KIP-848 (GroupMetadataManager: UNRELEASED_INSTANCE_ID while the old
member holds the instance id, its copy under the new member id after a static leave)."""

from __future__ import annotations

from tests.sim import wire_group as wg
from tests.sim.consumer_group import Group, Member

FENCED_INSTANCE_ID = 82
UNRELEASED_INSTANCE_ID = 111
SESSION_WAIT_MS = 6_000   # two refused heartbeats span a session timeout (consumer_episodes.SESSION_MS)


def restart_848(g: Group, old: Member) -> Member:
    """KIP-848: a static member's instance id stays the crashed process's until its session
    expires (it sent no leave, epoch -2): the new process's heartbeats (epoch 0, a new member
    id) are refused UNRELEASED_INSTANCE_ID (GroupMetadataManager.throwIfInstanceIdIsUnreleased);
    once the old member is removed, it joins as a new static member (a new group epoch)."""
    m = _successor(g, old)
    m.hello(list(g.sim.nodes)[0])   # its Metadata first: its assignment names topics by id
    m.alive = False
    for _ in range(2):
        m.coord(lambda c: wg.cg_heartbeat(c, m.client_id, g.name, m.member_id, 0, 0, None, topics=g.topics,
                                          error=UNRELEASED_INSTANCE_ID, instance=m.instance))
        g.sim.wait(SESSION_WAIT_MS)
    g.drop(old)
    m.alive = True
    g.rebalance(joining=[m])
    return m


def rejoin_848(g: Group, old: Member) -> Member:
    """KIP-848: a static member's graceful restart - it committed and left with epoch -2 (a
    static leave: the coordinator keeps its partitions for the session timeout); the new
    process (epoch 0, a new member id) replaces it with no new group epoch and the same
    partitions (GroupMetadataManager: the member copied under its new id)."""
    old.coord(lambda c: wg.cg_heartbeat(c, old.client_id, g.name, old.member_id, -2, -2, None,
                                        topics=g.topics, instance=old.instance))
    g.sim.wait(SESSION_WAIT_MS // 3)
    m = _successor(g, old)
    m.hello(list(g.sim.nodes)[0])
    tps = sorted(old.owned)
    g.drop(old)
    m.generation = g.generation
    m.coord(lambda c: wg.cg_heartbeat(c, m.client_id, g.name, m.member_id, 0, g.generation, tps,
                                      topics=g.topics, instance=m.instance))
    g.take(m, set(tps))
    return m


def _successor(g: Group, old: Member) -> Member:
    """The restarted process of a static member: same host, client id and instance id, new
    connections, a new member id."""
    m = g.member(old.k, old.isolation, max_batches=old.max_batches, reset=old.reset,
                    sessions={} if old.sessions is not None else None)
    m.instance, m.incarnation, m.rack = old.instance, old.incarnation + 1, old.rack
    m.member_id = f"{old.member_id.split('~')[0]}~{m.incarnation}"
    return m


def restart(g: Group, old: Member) -> Member:
    """A static member's process restarted within the session timeout (KIP-345): the new one
    (same host, client id and group.instance.id, new connections) joins with no member id, is
    given a new one and the old one's assignment with no rebalance (the generation and the
    other members stay: GroupCoordinator's static member replacement), and starts from the
    group's committed offsets."""
    m = _successor(g, old)
    m.generation = g.generation
    tps = sorted(old.owned)
    g.drop(old)
    leader = min(g.alive(), key=lambda x: x.k).member_id
    m.coord(lambda c: wg.join(c, m.client_id, g.name, m.member_id, g.generation, leader,
                              instance=m.instance, asked=""))
    m.coord(lambda c: wg.sync(c, m.client_id, g.name, m.member_id, g.generation, tps, instance=m.instance))
    g.take(m, set(tps))
    return m
