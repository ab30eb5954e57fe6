"""The consumers fold: one capture's group events, consumer Fetch responses and transaction ends
made into timelines (timeline.py), judged by the consumer rules (rules.py)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.consumers.timeline import Serve, Timelines, host
from kaudit.audit.folds import Fold, KeyedState, Settler
from kaudit.audit.consistency.log_chunks import TablesByKind

KEY = ("source",)
GROUP_COLUMNS = ("source", "connection", "position", "ts", "response_ts", "client_id", "event", "group_id",
                 "member_id", "generation", "reason", "partitions", "topic", "topic_id", "partition", "offset",
                 "timestamp", "error_code", "transactional_id", "producer_id", "producer_epoch")
FETCH_COLUMNS = ("source", "connection", "position", "request_ts", "response_ts", "client_id", "topic", "topic_id", "partition",
                 "isolation_level", "replica_id", "fetch_offset", "error_code", "high_watermark",
                 "last_stable_offset", "log_start_offset", "aborted_transactions")
BATCH_COLUMNS = ("source_kind", "source", "connection", "position", "topic", "topic_id", "partition", "base_offset",
                 "last_offset", "producer_id", "producer_epoch", "is_transactional", "is_control",
                 "control_type")
TXN_COLUMNS = ("source", "position", "ts", "event", "producer_id", "producer_epoch", "partitions", "result",
               "error_codes")


RESPONSE = ["connection", "position", "topic", "partition"]


def _named(t: pa.Table) -> pa.Table:
    """topic <- topic id where a row has no name (Fetch v13+; the timelines name them)."""
    return t.set_column(t.schema.get_field_index("topic"), "topic",
                        pc.coalesce(t.column("topic"), t.column("topic_id").cast(pa.string())))


def _ranges(batches: pa.Table, suffix: str) -> pa.Table:
    """Per response and partition: the lowest base offset and the highest last offset."""
    agg = batches.group_by(RESPONSE).aggregate([("base_offset", "min"), ("last_offset", "max")])
    return agg.rename_columns(RESPONSE + [f"lo{suffix}", f"hi{suffix}"])


def serves_of(fetch: pa.Table | None, batches: pa.Table | None) -> tuple[list[Serve], list[dict]]:
    """The consumers' served ranges per response and partition, and the fetched transactional and
    control batches (for the outcomes of what was served). Per-response ranges are aggregated in
    Arrow; only responses listing aborted transactions are replayed batch by batch."""
    if fetch is None:
        return [], []
    fetch = _named(fetch)
    blist: list[dict] = []
    by_key: dict[tuple, list] = {}
    if batches is not None and batches.num_rows:
        batches = _named(batches)
        data = batches.filter(pc.invert(pc.fill_null(batches.column("is_control"), False)))
        fetch = fetch.join(_ranges(batches, ""), RESPONSE, join_type="left outer")
        fetch = fetch.join(_ranges(data, "_data"), RESPONSE, join_type="left outer")
        txn = batches.filter(pc.or_(pc.fill_null(batches.column("is_transactional"), False),
                                    pc.fill_null(batches.column("is_control"), False)))
        blist = txn.to_pylist()
        for b in blist:
            by_key.setdefault((b["connection"], b["position"], b["topic"], b["partition"]), []).append(b)
        # the other batches of the responses that list aborted transactions (replayed with them)
        for b in _plain_of_listing(fetch, batches):
            by_key.setdefault((b["connection"], b["position"], b["topic"], b["partition"]), []).append(b)
    out = []
    have = "lo" in fetch.column_names
    keep = [c for c in fetch.column_names if c not in ("topic_id", "replica_id")]
    clients: dict = {}
    for r in fetch.select(keep).to_pylist():
        client = clients.get((r["connection"], r["client_id"]))
        if client is None:
            client = clients[(r["connection"], r["client_id"])] = (host(r["connection"]), r["client_id"])
        s = Serve(r["response_ts"] or 0.0, r["position"], r["source"], r["connection"],
                  client, r["client_id"], (r["topic"], r["partition"]),
                  r["isolation_level"], r["fetch_offset"], r["error_code"], r["high_watermark"],
                  r["last_stable_offset"], r["log_start_offset"], request_ts=r["request_ts"])
        if have and r["lo"] is not None and s.error in (0, None):
            start = r["lo"] if s.fetch_offset is None else max(r["lo"], s.fetch_offset)
            if r["hi"] >= start:
                s.first, s.end = start, r["hi"] + 1
                if r["aborted_transactions"] and s.isolation == "read_committed":
                    key = (r["connection"], r["position"], r["topic"], r["partition"])
                    _delivered(s, by_key.get(key, []), r["aborted_transactions"])
                elif r["lo_data"] is not None and r["hi_data"] >= s.first:
                    s.data_first, s.data_end = max(r["lo_data"], s.first), r["hi_data"] + 1
        out.append(s)
    out.sort(key=lambda s: (s.ts, s.position))
    return out, blist


def _plain_of_listing(fetch: pa.Table, batches: pa.Table) -> list[dict]:
    """The non-transactional data batches of the read_committed responses that list aborted
    transactions (rare: only those responses are replayed batch by batch)."""
    listing = fetch.filter(pc.and_(
        pc.fill_null(pc.greater(pc.utf8_length(fetch.column("aborted_transactions").cast(pa.string())), 0), False),
        pc.fill_null(pc.equal(fetch.column("isolation_level"), "read_committed"), False)))
    if not listing.num_rows:
        return []
    keys = set(zip(listing.column("connection").to_pylist(), listing.column("position").to_pylist()))
    plain = batches.filter(pc.and_(
        pc.is_in(batches.column("position"), pa.array(sorted({p for _, p in keys}), batches.column("position").type)),
        pc.invert(pc.or_(pc.fill_null(batches.column("is_transactional"), False),
                         pc.fill_null(batches.column("is_control"), False)))))
    return [b for b in plain.to_pylist() if (b["connection"], b["position"]) in keys]


def _delivered(s: Serve, batches: list[dict], aborted: str) -> None:
    """The records a read_committed client delivers of a response listing aborted transactions
    (CompletedFetch: the listed aborted transactions in order of their first offset; a batch at
    or past one's first offset puts its producer among the aborting ones, that producer's ABORT
    marker takes it out again, and its transactional batches in between are dropped - a
    producer may have several aborted transactions in one response; non-transactional batches
    are always delivered). `batches`: every batch of the response's partition."""
    listed = []
    for a in aborted.split(","):
        pid, _, first = a.partition("@")
        if pid.lstrip("-").isdigit() and first.lstrip("-").isdigit():
            listed.append((int(first), int(pid)))
    listed.sort()
    kept, aborting, i = [], set(), 0
    for b in sorted(batches, key=lambda b: b["base_offset"]):
        while i < len(listed) and listed[i][0] <= b["last_offset"]:
            aborting.add(listed[i][1])
            i += 1
        if b["is_control"]:
            if b["control_type"] == "ABORT":
                aborting.discard(b["producer_id"])
            continue
        if (b["is_transactional"] and b["producer_id"] in aborting) or b["last_offset"] < s.first:
            continue
        kept.append((b["base_offset"], b["last_offset"]))
    if kept:
        s.data_first = max(min(r[0] for r in kept), s.first)
        s.data_end = max(r[1] for r in kept) + 1


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
    serves, batches = serves_of(fetch, batch)
    g, t = tables.get("group_event"), tables.get("txn_event")
    tl = Timelines([] if g is None else g.to_pylist(), serves, [] if t is None else t.to_pylist(), topic_names)
    tl.batches = batches   # the fetched transactional and control batches (the rules read them)
    return tl


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


class ConsumersSettle(Settler):
    """In a live capture the consumers' timelines span the whole stream (one key per capture):
    nothing settles before its end. Only the consumers' rows are kept (followers' Fetches and
    every Produce are not in the selection)."""

    def __init__(self, fold=None):
        self.fold = fold

    def settle(self, items: list, now: float) -> list:
        return []


FOLD = Fold("consumers", {"group_event": GROUP_COLUMNS, "fetch_partition": FETCH_COLUMNS, "batch": BATCH_COLUMNS,
                          "txn_event": TXN_COLUMNS},
            KEY, ("position",), lambda ctx: KeyedState(KEY, lambda k: CaptureConsumers(k, ctx)),
            where={"fetch_partition": _fetch_where, "batch": _batch_where,
                   "txn_event": lambda t: pc.fill_null(pc.is_in(t.column("event"),
                                                                pa.array(["END_TXN", "WRITE_MARKERS"])), False)},
            live=ConsumersSettle)
