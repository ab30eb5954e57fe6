"""Hypothesis strategies of histories: one episode carrying the fault kind under test (at any
point: which batch, which transaction, which partitions), beside clean background episodes.
A history is JSON: a shrunk failing one is kept under tests/sim/regressions/ as it is."""

from __future__ import annotations

import os

from hypothesis import strategies as st

from tests.sim.episodes import IDEM_FAULT_NAMES

TXN_KINDS = ("none", "fence-registered", "fence-unregistered", "fence-race", "admin_abort", "admin_abort_ended",
             "coord_failover",
             "timeout", "late_endtxn", "two_pc", "exhaust", "stuck_markers")
GROUP_KINDS = ("none", "die", "fenced", "static_restart", "reset", "reset_range", "reset_range_session", "start_beyond", "commit_beyond",
               "uncommitted_read", "seek_back", "eos", "eos_double", "offsets_compacted")
# log: what the brokers themselves do to a partition's log (compacted: the log cleaner, fault-free)
LOG_KINDS = ("compacted", "compacted_coordinator", "compacted_compressed", "clean_interrupted", "compacted_consumers")
# elections under a transactional producer and of `__transaction_state` (elect_txn_episodes.py)
ELECT_TXN_KINDS = ("txn_clean", "txn_tail", "txn_marker", "txn_unclean", "coordinator")
ELECT_KINDS = ("clean", "tail", "stale", "flap", "unclean") + ELECT_TXN_KINDS
KINDS = tuple(f"idem:{f}" for f in IDEM_FAULT_NAMES) + tuple(f"txn:{f}" for f in TXN_KINDS) \
    + tuple(f"log:{f}" for f in LOG_KINDS) + tuple(f"group:{f}" for f in GROUP_KINDS) \
    + tuple(f"elect:{f}" for f in ELECT_KINDS)


def idem_episode(fault: str):
    return st.fixed_dictionaries({
        "kind": st.just("idem"), "parts": st.integers(1, 3), "batches": st.integers(1, 5),
        "sizes": st.lists(st.integers(1, 3), min_size=1, max_size=3), "fault": st.just(fault),
        "at": st.integers(0, 4)})


def compact_episode(fault: str = "compacted"):
    """A compacted topic written by an idempotent and a transactional producer, cleaned between
    rounds on some replicas (compact_episodes.py); `compacted_coordinator`: the transactional
    id's `__transaction_state` partition rolls and is cleaned with it."""
    rnd = st.fixed_dictionaries({
        "idem": st.integers(0, 3), "size": st.integers(1, 4), "tombstone": st.booleans(),
        "txn": st.sampled_from([None, True, True, False]), "mid": st.booleans(),
        "clean": st.lists(st.sampled_from([1, 2, 3]), unique=True, max_size=3),
        "wait": st.sampled_from([10, 5_000, 70_000]), "expire": st.sampled_from([False] * 5 + [True])})
    codecs = {"compacted_compressed": st.sampled_from(["gzip", "snappy", "lz4", "zstd"]),
              "compacted_consumers": st.sampled_from(["none", "none", "gzip", "zstd"]),
              "clean_interrupted": st.sampled_from(["none", "none", "gzip", "lz4", "zstd", "snappy"])}
    # clean_interrupted: one partition's cleaner on one node stopped mid-round (clean_crash.py)
    cut = st.fixed_dictionaries({
        "node": st.sampled_from([1, 2, 3]), "part": st.integers(0, 1), "at": st.integers(0, 2),
        "stage": st.sampled_from(["cleaned", "swap", "swap_deleting", "deleting"]), "deleted": st.integers(0, 3),
        "lingering": st.booleans(), "partial": st.booleans(), "crash": st.booleans(), "behind": st.integers(1, 9)})
    return st.fixed_dictionaries({
        "codec": codecs.get(fault, st.just("none")),
        "interrupt": cut if fault == "clean_interrupted" else st.none(),
        "kind": st.just("compact"), "fault": st.just(fault), "tv": st.sampled_from([1, 2]),
        # compacted_coordinator: __transaction_state compacted too
        "coord_compact": st.just(fault == "compacted_coordinator"),
        "parts": st.integers(1, 2), "keys": st.integers(2, 6),
        # an interrupted round needs closed dirty segments: more rounds
        "rounds": st.lists(rnd, min_size=6 if fault == "clean_interrupted" else 3, max_size=9)})


def episode_of(kind: str):
    """The episode strategy of a producer, log or election kind."""
    family, fault = kind.split(":")
    if family == "log":
        return compact_episode(fault)
    return {"idem": idem_episode, "txn": txn_episode, "elect": elect_episode}[family](fault)


def elect_episode(fault: str):
    """A partition-leader election (elect_episodes.py); `kraft`: the log dirs hold the
    `__cluster_metadata` log (moved to the history by _fix)."""
    if fault in ELECT_TXN_KINDS:
        return elect_txn_episode(fault)
    return st.fixed_dictionaries({
        "kind": st.just("elect"), "fault": st.just(fault), "parts": st.integers(1, 2),
        "before": st.integers(1, 4), "tail": st.integers(1, 3), "fetched": st.integers(0, 3),
        "after": st.integers(0, 3),
        "sizes": st.lists(st.integers(1, 3), min_size=1, max_size=3), "acks": st.sampled_from(["all", "1"]),
        "rejoin": st.booleans(), "kraft": st.booleans(), "alive": st.booleans(), "fetch_wire": st.booleans()})


def elect_txn_episode(fault: str):
    """An election under a transactional producer, or of the coordinator's partitions
    (elect_txn_episodes.py)."""
    stage = {"txn_marker": st.sampled_from(["before", "deposed"]),
             "coordinator": st.sampled_from(["ongoing", "prepare", "prepare_lost"])}.get(fault, st.just("none"))
    return st.fixed_dictionaries({
        "kind": st.just("elect_txn"), "fault": st.just(fault), "tv": st.sampled_from([1, 2]),
        "parts": st.integers(1, 2), "before": st.integers(0, 2), "batches": st.integers(1, 2),
        "tail": st.integers(1, 3), "fetched": st.integers(0, 3), "after": st.integers(0, 2),
        "commit": st.booleans(), "rejoin": st.booleans(), "alive": st.booleans(), "fetch_wire": st.booleans(),
        "lose": st.sampled_from(["data", "marker"]), "stage": stage, "sent": st.integers(0, 2),
        "kraft": st.booleans()})


def _txn():
    return st.fixed_dictionaries({
        "parts": st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True),
        "batches": st.integers(1, 2), "commit": st.booleans()})


def txn_episode(kind: str, tv=None):
    fault, _, zombie = kind.partition("-")
    return st.fixed_dictionaries({
        "kind": st.just("txn"), "tv": st.sampled_from([1, 2]) if tv is None else st.just(tv),
        "parts": st.integers(1, 3), "txns": st.lists(_txn(), min_size=1, max_size=3), "fault": st.just(fault),
        "at": st.integers(0, 2), "zombie": st.just(zombie or "registered"),
        "zombie_then": st.sampled_from(["commit", "abort", "none"]),
        "admin": st.lists(st.integers(0, 2), min_size=1, max_size=3),
        "admin_then_write": st.booleans(),
        # two_pc: whether the log dirs given hold `__transaction_state` (txn_episodes._two_pc_left_open)
        "coord_log": st.booleans() if fault == "two_pc" else st.just(True),
        # two_pc, version 2: a new instance recovers the prepared transaction (KeepPreparedTxn) and
        # ends it, under the same producer id or a new one (txn_episodes._recover)
        "recover": st.sampled_from(["none", "same", "new_id"]) if fault == "two_pc" else st.just("none")})


def _fix(h: dict) -> dict:
    """Versions the faults need: transaction version 2 and KIP-939 on a 4.x broker."""
    if any(e["kind"] in ("txn", "compact", "elect_txn") and (e["tv"] >= 2 or e["fault"] == "two_pc")
           for e in h["episodes"]):
        h["broker"] = "4.1"
    if any(e["kind"] in ("elect", "elect_txn") and e.get("kraft") for e in h["episodes"]):
        h["kraft"] = True       # the cluster's metadata log in the log dirs
    return h


def history(kind: str):
    family, fault = kind.split(":")
    if family == "group":
        return group_history(fault)
    if kind == "log:compacted_consumers":
        return compacted_consumers_history()
    target = episode_of(kind)
    background = st.one_of(idem_episode("none"), txn_episode("none"))
    # retransmit_every: TCP segments sent twice in the capture (the wire must not count them twice)
    return st.builds(
        lambda b, t, bg, before, rt: {"broker": b, "episodes": ([bg] if bg and before else []) + [t]
                                      + ([bg] if bg and not before else []), "retransmit_every": rt},
        st.sampled_from(["3.0", "4.1"]), target, st.none() | background, st.booleans(),
        st.sampled_from([0, 0, 3, 7])).map(_fix)


# consumer faults a mix may hold (uncommitted_read's producer is the mix's own)
MIX_GROUP = tuple(f for f in GROUP_KINDS if f not in ("uncommitted_read", "seek_back"))

# faults that move a partition's log start (retention) or its leader, and compaction (it may
# remove another fault's evidence, as Kafka's cleaner would): kept on their own topic in a mix
_OWN_TOPIC = ("seq_wrap", "unknown_pid") + LOG_KINDS + ELECT_KINDS


def mix(passing, with_kind: str | None = None):
    """Several faulted episodes in one history, of the kinds the auditor passes (`passing`): the
    oracle is the union of theirs. `shared`: the producers share one topic's partitions (their
    batches, markers and transactions interleave in each partition's log). `with_kind`: one of
    the episodes is of that kind (anywhere among them)."""
    def share(h, shared):
        if shared:
            for ep in h["episodes"]:
                if ep["fault"] not in _OWN_TOPIC:
                    ep["topic"] = "shared"
        for ep in h["episodes"]:
            ep["coord_log"] = True    # the other faults' verdicts need the coordinator's records
            ep["coord_compact"] = False   # ... all of them (its cleaner would remove theirs too)
        h["shared"] = shared
        return h

    episode = episode_of
    producers = sorted(k for k in passing if not k.startswith("group:"))
    eps = st.lists(st.sampled_from(producers).flatmap(episode), min_size=2, max_size=3)
    if with_kind is not None:
        eps = st.builds(lambda one, rest, at: rest[:at] + [one] + rest[at:], episode(with_kind),
                        st.lists(st.sampled_from(producers).flatmap(episode), min_size=1, max_size=2),
                        st.integers(0, 2))
    # and often a consumer group reading one of their topics (zombie writes, hanging transactions
    # holding the last stable offset, aborts and retention under its Fetches)
    consumers = sorted(k for k in passing if k.startswith("group:") and k.split(":")[1] in MIX_GROUP)
    group = st.none() | (st.sampled_from(consumers).flatmap(lambda k: group_episode(k.split(":")[1]))
                         if consumers else st.none())

    def build(b, e, sh, rt, g, cin):
        h = share({"broker": b, "episodes": e, "retransmit_every": rt}, sh)
        if g is not None:
            h["episodes"].append(g)
            if cin and any(ep["kind"] == "compact" for ep in e):
                g["compacted_input"] = True      # it reads a compacted topic (compacted_fetch.py)
            if g["protocol"] == "848":
                h["broker"] = "4.1"
        return h
    return st.builds(build, st.sampled_from(["3.0", "4.1"]), eps, st.booleans(), st.sampled_from([0, 3]),
                     group, st.booleans()).map(_fix)


# ---- consumers (issue 31) ----------------------------------------------------------------------

def group_episode(kind: str):
    # reset_range_session: the reset under a KIP-227 fetch session (reset_range: Fetch v5, or
    # KIP-848's v13 - a session too)
    fault = "reset_range" if kind == "reset_range_session" else kind
    session = {"reset_range_session": st.just(True), "reset_range": st.just(False)}.get(kind, st.booleans())
    return st.fixed_dictionaries({
        "kind": st.just("group"), "protocol": st.sampled_from(["eager", "cooperative", "848"]),
        "members": st.integers(1, 3), "isolation": st.sampled_from(["read_committed", "read_uncommitted"]),
        "commit": st.sampled_from(["after", "before"]), "fault": st.just(fault), "at": st.integers(0, 3),
        "victim": st.integers(0, 2), "change": st.sampled_from(["none", "leave", "join"]),
        "fetch": st.integers(1, 2), "input": st.integers(0, 3), "session": session, "live": st.integers(0, 3),
        "rejoin": st.booleans(), "rack": st.booleans(),
        # offsets_compacted: the coordinator's __consumer_offsets log, its tombstones and cleaner (offsets_log.py)
        "offsets": st.fixed_dictionaries({
            "then": st.sampled_from(["delete", "expire", "none"]),
            "clean": st.lists(st.sampled_from([1, 2, 3]), unique=True, max_size=3),
            "wait": st.sampled_from([10, 70_000]),
            "again": st.lists(st.sampled_from([1, 2, 3]), unique=True, max_size=3)})
        if kind == "offsets_compacted" else st.none()})


def _aborting(ep: dict) -> dict:
    """A transactional producer with at least one aborted transaction (what read_uncommitted
    consumers may read)."""
    ep["txns"][0]["commit"] = False
    return ep


def _several(ep: dict) -> dict:
    """At least two transactions on at least two partitions, the fault in the last transaction."""
    if len(ep["txns"]) < 2:
        ep["txns"] = ep["txns"] * 2
    ep["parts"], ep["at"] = max(ep["parts"], 2), len(ep["txns"]) - 1
    return ep


def group_history(fault: str):
    """Producers (clean) write; a consumer group reads one of their topics with the fault."""
    if fault == "uncommitted_read":
        producers = st.tuples(txn_episode("none").map(_aborting), st.none() | idem_episode("none")).map(
            lambda t: [e for e in t if e is not None])
    elif fault == "seek_back":
        # version 2 (a marker's epoch names its transaction) over 2-3 transactions on 2-3 partitions
        # (the coordinator's broker leads one), the coordinator failing over in the last one: the
        # markers written since carry a higher coordinator epoch
        producers = st.tuples(txn_episode("coord_failover", tv=2).map(_several),
                              st.none() | idem_episode("none")).map(lambda t: [e for e in t if e is not None])
    else:
        producers = st.lists(st.one_of(idem_episode("none"), txn_episode("none")), min_size=1,
                             max_size=2)

    def build(b, ps, g, rt, shared):
        if shared:   # the producers interleave in one topic's partitions (plain, idempotent and transactional batches)
            for ep in ps:
                ep["topic"] = "shared"
        h = {"broker": "4.1" if g["protocol"] == "848" else b, "episodes": ps + [g], "retransmit_every": rt}
        if fault == "seek_back":
            # the capture lacks the producers' Produce to the other leaders and the markers written:
            # the consumers read the markers without the offsets of the data below them
            h["capture"] = "no_produce"
        return _fix(h)
    return st.builds(build, st.sampled_from(["3.0", "4.1"]), producers, group_episode(fault),
                     st.sampled_from([0, 0, 5]), st.booleans())


# the group faults a compacted topic's consumers are drawn with (reset_range has a topic of its own)
COMPACTED_GROUP = ("none", "die", "fenced", "reset", "start_beyond", "commit_beyond", "uncommitted_read", "eos",
                   "eos_double")


def compacted_consumers_history():
    """log:compacted_consumers: a compacted topic (its codec none or drawn), then a consumer group
    or an exactly-once application reading it as the leader's cleaner left it (compacted_fetch.py)."""
    def build(b, c, g, rt):
        g["compacted_input"] = True
        if g["fault"] == "uncommitted_read":
            g["isolation"] = "read_uncommitted"
        h = {"broker": "4.1" if g["protocol"] == "848" else b, "episodes": [c, g], "retransmit_every": rt}
        return _fix(h)
    c = compact_episode("compacted_consumers").map(lambda e: dict(e, codec=e["codec"]))
    return st.builds(build, st.sampled_from(["3.0", "4.1"]), c,
                     st.sampled_from(COMPACTED_GROUP).flatmap(group_episode), st.sampled_from([0, 0, 5]))


def wide(passing, size: int | None = None):
    """Several histories side by side in one input: an episode of each passing kind (`size`: of
    that many of them), in any order, each its own producer, topic and transactional id (two of
    them on one shared topic when `shared`), in one cluster's log dirs and one capture; the
    oracle is the union of theirs. The Spark engine's simulator test audits each in one run
    per feed."""
    def episode(kind):
        family, fault = kind.split(":")
        return group_episode(fault) if family == "group" else episode_of(kind)

    def build(b, eps, shared, rt):
        # a group reads an earlier producer episode's topic: the groups come after the producers
        producers_, groups = [e for e in eps if e["kind"] != "group"], [e for e in eps if e["kind"] == "group"]
        h = {"broker": b, "episodes": producers_ + groups, "retransmit_every": rt, "shared": shared}
        for ep in producers_:
            ep["coord_log"] = True    # the other faults' verdicts need the coordinator's records
            ep["coord_compact"] = False
        if shared:   # two of them on one topic: their batches and markers interleave
            for ep in [e for e in producers_ if e["fault"] not in _OWN_TOPIC][:2]:
                ep["topic"] = "shared"
        if any(g["protocol"] == "848" for g in groups):
            h["broker"] = "4.1"
        return _fix(h)

    # the producer kinds and the consumer groups a mix may hold (uncommitted_read brings its own producer)
    producers = sorted(k for k in passing if not k.startswith("group:")
                       or k.split(":")[1] in MIX_GROUP)
    kinds = st.permutations(producers).map(lambda ks: ks[:size] if size else ks)
    return kinds.flatmap(lambda ks: st.builds(
        build, st.sampled_from(["3.0", "4.1"]), st.tuples(*[episode(k) for k in ks]).map(list),
        st.booleans(), st.sampled_from([0, 3])))


# ---- capture faults (capture_faults.py): the capture point lost packets or saw one broker ----------

CAPTURE_KINDS = ("lossy", "one_broker")


def capture_fault(kind: str):
    """lossy: a drawn 1-5 % of the payload segments dropped, chosen by a drawn seed; one_broker:
    the capture of one node - its host's every connection, or only those to its listeners."""
    if kind == "lossy":
        most = int(os.environ.get("KAUDIT_SIM_LOSS") or 5)   # a heavier loss to try: KAUDIT_SIM_LOSS=15
        fault = {"kind": st.just("lossy"), "rate": st.integers(1, most).map(lambda r: r / 100),
                 "seed": st.integers(0, 2 ** 32 - 1)}
        if os.environ.get("KAUDIT_SIM_LOSS_ANY"):   # SYNs, ACKs and FINs lost too, not only data
            fault["any"] = st.just(True)
        return st.fixed_dictionaries(fault)
    return st.fixed_dictionaries({"kind": st.just("one_broker"), "node": st.sampled_from([1, 2, 3]),
                                  "side": st.sampled_from(["host", "listener"])})


def _clean_consumer(g: dict, tv: int) -> dict:
    """A read_committed group, or an exactly-once application aborting one of its first two
    transactions (it seeks back to the committed offsets - the log start when it had committed
    none) under transaction version `tv` (2: TxnOffsetCommit v5, no AddOffsetsToTxn)."""
    g = dict(g, isolation="read_committed")
    if g["fault"] == "eos":
        g.update(at=g["at"] % 2, eos_tv=tv)
    return g


def capture_history(kind: str):
    """capture:<kind>: a CLEAN history (idempotent producers, transactional ones of version 1 or
    2 committing and aborting, and often a read_committed consumer group - rebalancing or not -
    or an exactly-once application of transaction version 1 or 2 whose aborted transaction seeks
    back, reading one of their topics: no anomaly injected) whose capture the capture point damaged. Nothing at warning or
    above may be told: the lost bytes prove no absence."""
    producers = st.lists(st.one_of(idem_episode("none"), txn_episode("none")), min_size=1, max_size=3)
    consumers = st.sampled_from([None, "none", "eos", "eos"]).flatmap(
        lambda f: st.none() if f is None else st.builds(_clean_consumer, group_episode(f), st.sampled_from([1, 2])))

    def build(b, ps, g, rt, shared, fault):
        if shared:   # the producers interleave in one topic's partitions
            for ep in ps:
                ep["topic"] = "shared"
        h = {"broker": b, "episodes": ps + ([g] if g else []), "retransmit_every": rt, "capture_fault": fault}
        if g and (g["protocol"] == "848" or g.get("eos_tv") == 2):
            h["broker"] = "4.1"
        return _fix(h)
    return st.builds(build, st.sampled_from(["3.0", "4.1"]), producers, consumers, st.sampled_from([0, 0, 3, 7]),
                     st.booleans(), capture_fault(kind))
