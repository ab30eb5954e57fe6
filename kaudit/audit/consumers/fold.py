"""The consumers fold: one capture's group events, consumer Fetch responses and transaction ends
made into timelines (timeline.py), judged by the consumer rules (rules.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit import read_committed
from kaudit.audit.consumers.serve_table import ServeTable, int_values
from kaudit.audit.consumers.timeline import Timelines
from kaudit.audit.consumers.settle import ConsumersSettle
from kaudit.audit.folds import Fold, KeyedState, np_indices
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
                 "control_type", "record_count")
TXN_COLUMNS = ("source", "position", "ts", "event", "producer_id", "producer_epoch", "partitions", "result",
               "error_codes")
# FindCoordinator requests for a group: the clients that are group members (Timelines.seekers)
FIND_COLUMNS = ("source", "connection", "request_frame", "client_id", "api_key", "coordinator_key_type")
FIND_COORDINATOR = 10
# the brokers the Metadata answers list (Timelines.note_brokers: a capture of some brokers only)
ANSWER_COLUMNS = ("source", "connection", "position", "brokers")


RESPONSE = ["connection", "position", "topic", "partition"]
INT64_MAX = np.iinfo(np.int64).max
REPLAYED = RESPONSE + ["base_offset", "last_offset", "producer_id", "is_transactional", "is_control", "control_type",
                       "record_count"]


def _named(t: pa.Table) -> pa.Table:
    """topic <- topic id where a row has no name (Fetch v13+; the timelines name them)."""
    return t.set_column(t.schema.get_field_index("topic"), "topic",
                        pc.coalesce(t.column("topic"), t.column("topic_id").cast(pa.string())))


def _flag(t: pa.Table, name: str):
    return pc.fill_null(t.column(name), False)


def _no_data(t: pa.Table):
    """Batches that deliver no record: control batches, and batches compaction emptied (count
    0: the cleaner keeps a producer's last batch for its state, LogCleaner's retained empty
    batch) - their offsets hold nothing a consumer is returned."""
    return pc.or_(_flag(t, "is_control"), pc.fill_null(pc.equal(t.column("record_count"), 0), False))


def _response_ranges(fetch: pa.Table, batches: pa.Table) -> dict[str, tuple]:
    """Per fetch row (by its response and partition): the lowest base offset and highest last
    offset of its batches (lo, hi), and of its data batches (lo_data, hi_data), as (values, mask).
    In numpy where the response key fits one integer (else `_response_ranges_joined`): the
    batches grouped by it, a fetch row given its group's values; a row with a null in its key
    matches none (as in the join)."""
    keys = _response_keys(fetch, batches)
    if keys is None:
        return _response_ranges_joined(fetch, batches)
    fkey, fvalid, bkey, bvalid = keys
    no_data = _no_data(batches).to_numpy(zero_copy_only=False)
    base, has_base = int_values(batches.column("base_offset"))
    last, has_last = int_values(batches.column("last_offset"))
    values = {"lo": (base, has_base, np.minimum), "hi": (last, has_last, np.maximum),
              "lo_data": (base, has_base & ~no_data, np.minimum), "hi_data": (last, has_last & ~no_data, np.maximum)}
    n = fetch.num_rows
    out = {name: (np.zeros(n, np.int64), np.zeros(n, bool)) for name in values}
    rows = np.flatnonzero(bvalid)
    if not rows.size:
        return out
    order = rows[np.argsort(bkey[rows], kind="stable")]
    k = bkey[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    groups = k[starts]
    # each fetch row's group, where it has one
    at = np.clip(np.searchsorted(groups, fkey), 0, groups.size - 1)
    hit = fvalid & (groups[at] == fkey)
    for name, (v, has, reduce) in values.items():
        has_o = has[order]
        fill = np.iinfo(np.int64).max if reduce is np.minimum else np.iinfo(np.int64).min
        agg = reduce.reduceat(np.where(has_o, v[order], fill), starts)
        some = np.logical_or.reduceat(has_o, starts)
        out[name][0][hit] = np.where(some, agg, 0)[at[hit]]
        out[name][1][hit] = some[at[hit]]
    return out


def _response_keys(fetch: pa.Table, batches: pa.Table):
    """The response key (RESPONSE) of every fetch and batch row as one int64, and whether it has
    no null: None where the key's ranges do not fit one int64."""
    parts, valid = [], [np.ones(fetch.num_rows, bool), np.ones(batches.num_rows, bool)]
    n = fetch.num_rows
    for name in ("position", "partition", "connection", "topic"):   # position major: the rows come by it
        col = pa.chunked_array(fetch.column(name).chunks + batches.column(name).chunks).combine_chunks()
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = col.dictionary_encode().indices
        elif not pa.types.is_integer(col.type):
            return None
        ok = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else np.ones(len(col), bool)
        v = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) if col.null_count else \
            col.to_numpy(zero_copy_only=False).astype(np.int64)
        valid[0] &= ok[:n]
        valid[1] &= ok[n:]
        parts.append(v)
    key, span = np.zeros(len(parts[0]), np.int64), 1
    for v in parts:
        lo, hi = (int(v.min()), int(v.max())) if v.size else (0, 0)
        width = hi - lo + 1
        span *= width
        if span >= 1 << 62:
            return None
        key = key * width + (v - lo)
    return key[:n], valid[0], key[n:], valid[1]


def _response_ranges_joined(fetch: pa.Table, batches: pa.Table) -> dict[str, tuple]:
    """_response_ranges by Arrow's group_by and join (the reference)."""
    empty = _no_data(batches)
    data_base = pc.if_else(empty, pa.scalar(None, pa.int64()), batches.column("base_offset"))
    data_last = pc.if_else(empty, pa.scalar(None, pa.int64()), batches.column("last_offset"))
    b = batches.select(RESPONSE + ["base_offset", "last_offset"]).append_column("data_base", data_base) \
        .append_column("data_last", data_last)
    agg = b.group_by(RESPONSE).aggregate([("base_offset", "min"), ("last_offset", "max"), ("data_base", "min"),
                                          ("data_last", "max")])
    agg = agg.rename_columns(RESPONSE + ["lo", "hi", "lo_data", "hi_data"])
    keyed = fetch.select(RESPONSE).append_column("_row", np_indices(np.arange(fetch.num_rows)))
    j = keyed.join(agg, RESPONSE, join_type="left outer")
    rows = j.column("_row").to_numpy()
    out = {}
    for name in ("lo", "hi", "lo_data", "hi_data"):
        v, has = int_values(j.column(name))
        out[name] = (np.zeros(fetch.num_rows, np.int64), np.zeros(fetch.num_rows, bool))
        out[name][0][rows], out[name][1][rows] = v, has
    return out


def serves_of(fetch: pa.Table | None, batches: pa.Table | None) -> tuple[ServeTable, pa.Table | None]:
    """The consumers' served ranges per response and partition (a ServeTable), and the fetched
    transactional and control batches (for the outcomes of what was served). The ranges are
    computed over whole columns; only responses listing aborted transactions are replayed batch
    by batch."""
    if fetch is None:
        return ServeTable.of_serves([]), None
    fetch = _named(fetch)
    n = fetch.num_rows
    none = (np.zeros(n, np.int64), np.zeros(n, bool))
    txn = None
    if batches is not None and batches.num_rows:
        batches = _named(batches)
        r = _response_ranges(fetch, batches)
        txn = batches.filter(pc.or_(_flag(batches, "is_transactional"), _flag(batches, "is_control")))
    else:
        r = {"lo": none, "hi": none, "lo_data": none, "hi_data": none}
    (lo, has_lo), (hi, _), (lo_d, has_lo_d), (hi_d, _) = r["lo"], r["hi"], r["lo_data"], r["hi_data"]
    error, has_error = int_values(fetch.column("error_code"))
    fo, has_fo = int_values(fetch.column("fetch_offset"))
    start = np.where(has_fo, np.maximum(lo, fo), lo)
    has = has_lo & (~has_error | (error == 0)) & (hi >= start)
    listing = pc.fill_null(pc.and_(pc.greater(pc.utf8_length(fetch.column("aborted_transactions")), 0),
                                   pc.equal(fetch.column("isolation_level"), "read_committed")), False)
    replay = has & listing.to_numpy(zero_copy_only=False)
    data = has & ~replay & has_lo_d & (hi_d >= start)
    ranges = {"first": (start, has), "end": (hi + 1, has), "data_first": (np.maximum(lo_d, start), data),
              "data_end": (hi_d + 1, data)}
    delivered = _replays(fetch, batches, np.flatnonzero(replay), start) if replay.any() else {}
    # a range ending at the largest offset (corrupt input) ends past int64: told in Python ints
    exact = {}
    for row in np.flatnonzero((has & (hi == INT64_MAX)) | (data & (hi_d == INT64_MAX))).tolist():
        got = delivered.get(row) if replay[row] else (
            (max(int(lo_d[row]), int(start[row])), int(hi_d[row]) + 1) if data[row] else None)
        exact[row] = (int(start[row]), int(hi[row]) + 1) + (got or (None, None))
    return ServeTable.of_fetch(fetch, ranges, delivered, exact), txn


REPLAY_ROWS = 4096   # responses replayed at once: their batches become Python rows (bounded memory)


def _replays(fetch: pa.Table, batches: pa.Table, rows: np.ndarray, start: np.ndarray) -> dict[int, tuple]:
    """row -> (data_first, data_end) or None of the read_committed rows listing aborted
    transactions, replayed over their batches (`_delivered`), REPLAY_ROWS responses at a time."""
    out: dict[int, tuple] = {}
    for i in range(0, len(rows), REPLAY_ROWS):
        out.update(_replayed(fetch, batches, rows[i:i + REPLAY_ROWS], start))
    return out


def _replayed(fetch: pa.Table, batches: pa.Table, rows: np.ndarray, start: np.ndarray) -> dict[int, tuple]:
    listing = fetch.take(np_indices(rows)).select(RESPONSE + ["aborted_transactions"]).to_pydict()
    keys = set(zip(listing["connection"], listing["position"]))
    positions = pa.array(sorted({p for _, p in keys}), batches.column("position").type)
    at = pc.fill_null(pc.is_in(batches.column("position"), positions), False).to_numpy(zero_copy_only=False)
    txn = (_flag(batches, "is_transactional").to_numpy(zero_copy_only=False)
           | _flag(batches, "is_control").to_numpy(zero_copy_only=False))
    # the response's transactional and control batches first, then its others (as they were kept)
    sub = batches.select(REPLAYED).take(np_indices(np.concatenate([np.flatnonzero(at & txn),
                                                                   np.flatnonzero(at & ~txn)]))).to_pylist()
    by_key: dict[tuple, list] = {}
    for b in sub:
        if (b["connection"], b["position"]) in keys:
            by_key.setdefault((b["connection"], b["position"], b["topic"], b["partition"]), []).append(b)
    out = {}
    for i, row in enumerate(rows.tolist()):
        key = (listing["connection"][i], listing["position"][i], listing["topic"][i], listing["partition"][i])
        out[row] = _delivered(int(start[row]), by_key.get(key, []), listing["aborted_transactions"][i])
    return out


def _delivered(first: int, batches: list[dict], aborted: str) -> tuple | None:
    """(first offset, one past the last) of the records a read_committed client delivers of a
    response listing aborted transactions (read_committed.delivered: every batch of the
    response's partition, `aborted` its list as the response gives it), None if none; `first`:
    the first offset served."""
    kept = [(b["base_offset"], b["last_offset"])
            for b in read_committed.delivered(batches, read_committed.parse_aborted(aborted))
            if b["last_offset"] >= first]
    if not kept:
        return None
    return max(min(r[0] for r in kept), first), max(r[1] for r in kept) + 1


class CaptureConsumers(TablesByKind):
    def __init__(self, key: tuple, ctx):
        super().__init__()
        self.ctx = ctx
        self.source = key[0]   # the capture (KEY)

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
        tl.holes = getattr(self.ctx, "capture_holes", None)
        tl.note_finders(self.concat("frame"))
        tl.note_brokers(self.concat("topic_name"))
        tl.note_replicas(i for s, i in (getattr(self.ctx, "replica_brokers", None) or ()) if s == self.source)
        tl.note_unnamed(fetch)
        return rules.judge(tl, batches)


def timelines_of(tables: dict[str, pa.Table], topic_names: dict | None = None) -> Timelines:
    """Timelines straight from a capture's tables (kaudit consumers)."""
    fetch = tables.get("fetch_partition")
    replicas = set() if fetch is None else replica_brokers(fetch)
    if fetch is not None:
        fetch = fetch.filter(_fetch_where(fetch)).select(list(FETCH_COLUMNS))
    batch = tables.get("batch")
    if batch is not None:
        batch = batch.filter(_batch_where(batch)).select(list(BATCH_COLUMNS))
    serves, batches = serves_of(fetch, batch)
    g, t = tables.get("group_event"), tables.get("txn_event")
    tl = Timelines([] if g is None else g.to_pylist(), serves, [] if t is None else t.to_pylist(), topic_names)
    tl.batches = batches   # the fetched transactional and control batches (the rules read them)
    frames = tables.get("frame")
    if frames is not None and set(FIND_COLUMNS) <= set(frames.schema.names):
        tl.note_finders(frames.filter(_find_where(frames)))
    tl.note_brokers(tables.get("topic_name"))
    tl.note_replicas(i for _, i in replicas)
    return tl


def replica_brokers(t: pa.Table) -> set[tuple]:
    """(capture, broker id) of the replicas whose Fetches a fetch_partition table holds (replica
    id 0 or more; Fetch v15+: its ReplicaState's) - brokers the capture shows exist
    (Timelines.note_replicas: a capture of some brokers only)."""
    if t.num_rows == 0 or not {"source", "replica_id"} <= set(t.schema.names):
        return set()
    ids = pc.cast(t.column("replica_id"), pa.int64())
    keep = pc.fill_null(pc.greater_equal(ids, 0), False)
    if not pc.any(keep).as_py():
        return set()
    pairs = pa.table({"s": pc.filter(t.column("source"), keep), "i": pc.filter(ids, keep)})
    return set(zip(*(pairs.group_by(["s", "i"]).aggregate([]).column(c).to_pylist() for c in ("s", "i"))))


def _fetch_where(t: pa.Table):
    """A consumer's Fetch: replica id -1 (Fetch v15+: a request without a follower's
    ReplicaState), or none - an answer whose request the capture lacks."""
    return pc.fill_null(pc.less(t.column("replica_id"), 0), True)


def _find_where(t: pa.Table):
    """FindCoordinator requests for a group (key type 0, or none: versions before 1)."""
    return pc.and_(pc.fill_null(pc.equal(t.column("api_key"), FIND_COORDINATOR), False),
                   pc.fill_null(pc.equal(t.column("coordinator_key_type"), 0), True))


def _batch_where(t: pa.Table):
    return pc.fill_null(pc.equal(t.column("source_kind"), "fetch"), False)


FOLD = Fold("consumers", {"group_event": GROUP_COLUMNS, "fetch_partition": FETCH_COLUMNS, "batch": BATCH_COLUMNS,
                          "txn_event": TXN_COLUMNS, "frame": FIND_COLUMNS, "topic_name": ANSWER_COLUMNS},
            KEY, ("position",), lambda ctx: KeyedState(KEY, lambda k: CaptureConsumers(k, ctx)),
            where={"fetch_partition": _fetch_where, "batch": _batch_where, "frame": _find_where,
                   "topic_name": lambda t: pc.is_valid(t.column("brokers")),
                   "txn_event": lambda t: pc.fill_null(pc.is_in(t.column("event"),
                                                                pa.array(["END_TXN", "WRITE_MARKERS"])), False)},
            live=ConsumersSettle, per_key=True, cost=0.55)
