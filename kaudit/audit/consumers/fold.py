"""The consumers fold: one capture's group events, consumer Fetch responses and transaction ends
made into timelines (timeline.py), judged by the consumer rules (rules.py)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.consumers.timeline import Serve, Timelines, host
from kaudit.audit.folds import Fold, KeyedState
from kaudit.audit.log_chunks import TablesByKind

KEY = ("source",)
GROUP_COLUMNS = ("source", "connection", "position", "ts", "response_ts", "client_id", "event", "group_id",
                 "member_id", "generation", "reason", "partitions", "topic", "topic_id", "partition", "offset",
                 "timestamp", "error_code", "transactional_id", "producer_id", "producer_epoch")
FETCH_COLUMNS = ("source", "connection", "position", "response_ts", "client_id", "topic", "topic_id", "partition",
                 "isolation_level", "replica_id", "fetch_offset", "error_code", "high_watermark",
                 "last_stable_offset", "log_start_offset", "aborted_transactions")
BATCH_COLUMNS = ("source_kind", "source", "connection", "position", "topic", "topic_id", "partition", "base_offset",
                 "last_offset", "producer_id", "producer_epoch", "is_transactional", "is_control",
                 "control_type")
TXN_COLUMNS = ("source", "position", "ts", "event", "producer_id", "producer_epoch", "partitions", "result",
               "error_codes")


def serves_of(fetch: pa.Table | None, batches: pa.Table | None) -> tuple[list[Serve], list[dict]]:
    """The consumers' served ranges per response and partition, and the fetched batches (for the
    transaction outcomes of what was served)."""
    if fetch is None:
        return [], []
    ends: dict[tuple, tuple] = {}
    blist: list[dict] = []
    by_key: dict[tuple, list] = {}
    if batches is not None and batches.num_rows:
        blist = batches.to_pylist()
        for b in blist:
            b["topic"] = b["topic"] or b["topic_id"]   # Fetch v13+: topic ids (named by the timelines)
            k = (b["connection"], b["position"], b["topic"], b["partition"])
            by_key.setdefault(k, []).append(b)
            lo, hi = ends.get(k, (None, None))
            ends[k] = (b["base_offset"] if lo is None else min(lo, b["base_offset"]),
                       b["last_offset"] if hi is None else max(hi, b["last_offset"]))
    out = []
    for r in fetch.to_pylist():
        r["topic"] = r["topic"] or r["topic_id"]
        s = Serve(r["response_ts"] or 0.0, r["position"], r["source"], r["connection"],
                  (host(r["connection"]), r["client_id"]), r["client_id"], (r["topic"], r["partition"]),
                  r["isolation_level"], r["fetch_offset"], r["error_code"], r["high_watermark"],
                  r["last_stable_offset"], r["log_start_offset"])
        lo_hi = ends.get((r["connection"], r["position"], r["topic"], r["partition"]))
        if lo_hi is not None and s.error in (0, None):
            lo, hi = lo_hi
            start = lo if s.fetch_offset is None else max(lo, s.fetch_offset)
            if hi >= start:
                s.first, s.end = start, hi + 1
                _delivered(s, by_key[(r["connection"], r["position"], r["topic"], r["partition"])],
                           r["aborted_transactions"])
        out.append(s)
    out.sort(key=lambda s: (s.ts, s.position))
    return out, blist


def _delivered(s: Serve, batches: list[dict], aborted: str | None) -> None:
    """The records the client delivers of a response: no control batch, and under read_committed
    no batch of a transaction the response lists as aborted (CompletedFetch's filtering)."""
    gone: dict[int, int] = {}
    if s.isolation == "read_committed":
        for a in (aborted or "").split(","):
            pid, _, first = a.partition("@")
            if pid.lstrip("-").isdigit() and first.lstrip("-").isdigit():
                gone[int(pid)] = min(gone.get(int(pid), 1 << 62), int(first))
    ends = {}   # producer -> its ABORT marker's offset, which ends its aborted run
    for b in batches:
        if b["is_control"] and b["control_type"] == "ABORT":
            ends.setdefault(b["producer_id"], []).append(b["base_offset"])
    lo = hi = None
    for b in batches:
        if b["is_control"] or b["last_offset"] < s.first:
            continue
        pid = b["producer_id"]
        if b["is_transactional"] and pid in gone and b["base_offset"] >= gone[pid] and not any(
                gone[pid] <= e < b["base_offset"] for e in ends.get(pid, ())):
            continue
        lo = max(b["base_offset"], s.first) if lo is None else min(lo, max(b["base_offset"], s.first))
        hi = b["last_offset"] + 1 if hi is None else max(hi, b["last_offset"] + 1)
    s.data_first, s.data_end = lo, hi


class CaptureConsumers(TablesByKind):
    def __init__(self, key: tuple, ctx):
        super().__init__()
        self.ctx = ctx

    def finish(self) -> list[dict]:
        from kaudit.audit.consumers import rules

        groups = self.concat("group_event")
        fetch = self.concat("fetch_partition")
        if groups is None and fetch is None:
            return []
        serves, batches = serves_of(fetch, self.concat("batch"))
        txn = self.concat("txn_event")
        tl = Timelines([] if groups is None else groups.to_pylist(), serves,
                       [] if txn is None else txn.to_pylist(), (self.ctx.topic_names if self.ctx else None))
        return rules.judge(tl, batches)


def timelines_of(tables: dict[str, pa.Table], topic_names: dict | None = None) -> Timelines:
    """Timelines straight from a capture's tables (kaudit consumers)."""
    fetch = tables.get("fetch_partition")
    if fetch is not None:
        fetch = fetch.filter(_fetch_where(fetch)).select(list(FETCH_COLUMNS))
    batch = tables.get("batch")
    if batch is not None:
        batch = batch.filter(_batch_where(batch)).select(list(BATCH_COLUMNS))
    serves, _ = serves_of(fetch, batch)
    g, t = tables.get("group_event"), tables.get("txn_event")
    return Timelines([] if g is None else g.to_pylist(), serves, [] if t is None else t.to_pylist(), topic_names)


# Fetch v15+ moved the replica id into a tagged ReplicaState the rows do not keep: a follower is
# then known by the client id Kafka's replica fetchers use (ReplicaFetcherThread)
FOLLOWER = r"^broker-[0-9]+-fetcher-[0-9]+$"


def _fetch_where(t: pa.Table):
    """A consumer's Fetch: replica id -1, or none with a client id that is no broker's fetcher."""
    rid = t.column("replica_id")
    follower_name = pc.fill_null(pc.match_substring_regex(t.column("client_id"), FOLLOWER), False)
    return pc.if_else(pc.is_null(rid), pc.invert(follower_name), pc.fill_null(pc.less(rid, 0), False))


def _batch_where(t: pa.Table):
    return pc.fill_null(pc.equal(t.column("source_kind"), "fetch"), False)


FOLD = Fold("consumers", {"group_event": GROUP_COLUMNS, "fetch_partition": FETCH_COLUMNS, "batch": BATCH_COLUMNS,
                          "txn_event": TXN_COLUMNS},
            KEY, ("position",), lambda ctx: KeyedState(KEY, lambda k: CaptureConsumers(k, ctx)),
            where={"fetch_partition": _fetch_where, "batch": _batch_where,
                   "txn_event": lambda t: pc.fill_null(pc.is_in(t.column("event"),
                                                                pa.array(["END_TXN", "WRITE_MARKERS"])), False)})
