"""Episodes: what one producer (or application) does in a history, with the fault injected into it
and the oracle's expectations the fault implies. A history is a list of episodes (a JSON-able
dict each, see strategies.py) run one after the other on one simulated cluster; each episode uses
its own topic `e<i>` (partitions 0..parts-1), its own producer ids and transactional id.

Idempotent faults: none, retry (same connection), retry_new_conn, leader_failover, kip360 (epoch
bump and sequence reset after an unresolved batch), split (MESSAGE_TOO_LARGE, split and re-sent),
seq_wrap (sequences past 2^31-1 after retention), unknown_pid (retention deleted the producer's
last batches and its state), expiry_dup (state expired, the retry stored again), restart_dup (a
restarted application resends under a new producer id), noidem_retry (no idempotence, a retry),
app_repeat (the application sends the same values again an hour later: not a duplicate).
"""

from __future__ import annotations

from tests.sim.broker import NONE, SEQ_MOD
from tests.sim.cluster import Client, Sim


def values(i: int, j: int, n: int, tag: str = "") -> list[bytes]:
    return [f"e{i}{tag}-b{j}-r{k}".encode() for k in range(n)]


def run_history(sim: Sim, history: dict) -> None:
    for i, ep in enumerate(history["episodes"]):
        KINDS[ep["kind"]](sim, i, ep)
        sim.wait(100)


# ---- idempotent producers ------------------------------------------------------------------------

def idem(sim: Sim, i: int, ep: dict) -> None:
    fault, at = ep["fault"], ep["at"] % max(1, ep["batches"])
    topic = ep.get("topic") or f"e{i}"
    start = 5000 if fault == "seq_wrap" else 0
    parts = [sim.partition(topic, p, start_offset=start) for p in range(ep["parts"])]
    c = Client(sim, f"idem-{i}", idempotent=fault not in ("noidem_retry", "noidem_repeat"))
    c.init()
    if fault == "seq_wrap":      # retention removed the first 2^31 records' segments and the state
        for p in parts:
            c.seq[p.name] = SEQ_MOD - 2
    for j in range(ep["batches"]):
        p = parts[j % len(parts)]
        vals = values(i, j, ep["sizes"][j % len(ep["sizes"])])
        if j != at or fault in ("none", "seq_wrap"):
            c.send(p, vals)
            continue
        IDEM_FAULTS[fault](sim, c, p, vals, i, j)


def _retry(sim, c, p, vals, i, j, *, new_conn=False, failover=False):
    data, s = c.batch(p, vals)
    c.send(p, vals, answered=False, data=data, seq=s)
    sim.wait(30000 if new_conn else 1000)        # request.timeout.ms, then the retry
    if failover:
        p.fail_over(sim.nodes[(sim.nodes.index(p.leader) + 1) % len(sim.nodes)])
    if new_conn or failover:
        c.reconnect()
    err, _ = c.send(p, vals, data=data, seq=s)
    assert err == NONE


def _kip360(sim, c, p, vals, i, j):
    """The batch's request is lost and unresolved: the producer bumps its epoch (InitProducerId
    with its id and epoch, KIP-360) and sends it again from sequence 0."""
    c.send(p, vals, answered=False, stored=False)
    sim.wait(30000)
    c.reconnect()
    c.epoch += 1
    c.seq.clear()
    node = sim.coord.node
    from tests.sim import wire
    c.exchange(node, wire.init_producer_id(c.corr(node), c.pid, c.epoch, txn_id=None, client_id=c.name))
    _, off = c.send(p, vals)
    # the capture alone cannot tell whether the unanswered first send was stored: if it was, the
    # bumped epoch's re-send (sequence 0, a new session to the broker) is a second copy
    sim.expect("possible-duplicate", p, off, off + len(vals) - 1, c.pid, feeds=("pcap",),
               note="unanswered, then re-sent under the bumped epoch")


def _split(sim, c, p, vals, i, j):
    """MESSAGE_TOO_LARGE: the producer splits the batch and sends the halves, same sequences."""
    big = vals + [b"x" * 2000 for _ in range(2)]
    limit, p.max_batch_bytes = p.max_batch_bytes, 1500
    c.send(p, big, advance=False)
    p.max_batch_bytes = limit
    half = len(big) // 2
    c.send(p, big[:half])
    c.send(p, big[half:])


def _unknown_pid(sim, c, p, vals, i, j):
    """Retention deleted the producer's last batches (log start past them) and with them its
    state: the next Produce is accepted as the first of an unknown producer."""
    sim.wait(3_600_000)
    p.delete_before(p.next_offset)
    p.expire(c.pid)
    c.send(p, vals)


def _expiry_dup(sim, c, p, vals, i, j):
    """Stored, the answer lost; the producer state expires before the retry: stored twice."""
    data, s = c.batch(p, vals)
    _, first = c.send(p, vals, answered=False, data=data, seq=s)
    sim.wait(86_400_000)                              # producer.id.expiration.ms
    p.expire(c.pid)
    c.reconnect()
    err, off = c.send(p, vals, data=data, seq=s)
    sim.expect("duplicate-sequence-stored", p, off, off + len(vals) - 1, c.pid, feeds=("segments", "audit"),
               note=f"copy of offsets {first}-{first + len(vals) - 1}")


def _restart_dup(sim, c, p, vals, i, j):
    """Stored, the answer lost; the application times out, restarts under a new producer id and
    sends the same records again: idempotence protects one producer session only."""
    _, first = c.send(p, vals, answered=False)
    sim.wait(120_000)
    c.reconnect()
    c.init()
    c.name += "-restarted"
    _, off = c.send(p, vals)
    sim.expect("duplicate-records-resent", p, off, off + len(vals) - 1, c.pid, feeds=("segments", "audit"),
               note=f"copy of offsets {first}-{first + len(vals) - 1} after an unanswered send")
    # the capture alone: an unanswered send, the same records under a new producer id - whether the
    # first was stored it cannot tell (the log dirs can)
    # (no producer id: the unanswered send is the old id's, the copy the new one's)
    sim.expect("possible-duplicate", p, off, off + len(vals) - 1, None, feeds=("pcap",),
               note="unanswered, then re-sent by the restarted application")


def _noidem(sim, c, p, vals, i, j):
    data, _ = c.batch(p, vals)
    _, first = c.send(p, vals, answered=False, data=data)
    sim.wait(30000)
    _, off = c.send(p, vals, data=data)
    sim.expect("duplicate-records-resent", p, off, off + len(vals) - 1, None, feeds=("segments", "audit"),
               note=f"retry of offsets {first}-{first + len(vals) - 1} without idempotence")
    sim.expect("possible-duplicate", p, off, off + len(vals) - 1, -1, feeds=("pcap", "audit"))


def _app_repeat(sim, c, p, vals, i, j):
    """The application itself sends the same values again an hour later, every send answered:
    no sign of a failed send, so no duplicate an SRE must chase (at most a low-severity note)."""
    c.send(p, vals)
    sim.wait(3_600_000)
    c.send(p, vals)


IDEM_FAULTS = {
    "retry": _retry,
    "retry_new_conn": lambda *a: _retry(*a, new_conn=True),
    "leader_failover": lambda *a: _retry(*a, failover=True),
    "kip360": _kip360,
    "split": _split,
    "unknown_pid": _unknown_pid,
    "expiry_dup": _expiry_dup,
    "restart_dup": _restart_dup,
    "noidem_retry": _noidem,
    "app_repeat": _app_repeat,
    "noidem_repeat": _app_repeat,      # the same, from a producer without idempotence (pid -1)
}
IDEM_FAULT_NAMES = ("none", "seq_wrap") + tuple(IDEM_FAULTS)


def _txn_kinds():
    from tests.sim import txn_episodes

    from tests.sim import compact_episodes, consumer_episodes

    from tests.sim import elect_episodes, elect_txn_episodes

    return {"txn": txn_episodes.txn, "group": consumer_episodes.group, "compact": compact_episodes.compact,
            "elect": elect_episodes.elect, "elect_txn": elect_txn_episodes.elect_txn}


KINDS = {"idem": idem}
KINDS.update(_txn_kinds())
