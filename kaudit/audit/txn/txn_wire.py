"""Transactions on the wire: one producer id's requests and responses turned into the facts of
txn_model - its data and end markers per partition, and the coordinator's transactions as the
requests show them - which the same rules as the log's judge (txn_findings.judge).

What each request says (KIP-98, KIP-890; Kafka's TransactionCoordinator, AddPartitionsToTxnManager,
TransactionMarkerChannelManager):
- InitProducerId (answered): the id's Empty state at the new epoch; asked while a transaction is
  open, it fences it: the coordinator aborts it (ABORT markers at epoch + 1) before it answers.
- AddPartitionsToTxn: from the client (v0-3, transaction version 0/1) it registers partitions;
  from a partition leader (v4+, client id AddPartitionsManager-client-N) with verifyOnly=false it
  registers the partition of a version-2 producer's Produce (or TxnOffsetCommit v5), with
  verifyOnly=true it checks a version 0/1 producer registered it. Only answered partitions count.
- AddOffsetsToTxn / TxnOffsetCommit: the group's `__consumer_offsets` partition joins the
  transaction (its number shows in the markers).
- EndTxn (answered): PrepareCommit/PrepareAbort, by the client; v5 answers the bumped epoch
  (version 2) - the markers then carry it.
- WriteTxnMarkers: the coordinator's (client id broker-N-txn-marker-sender) end the transaction
  on each partition answered; any other sender is an admin (kafka-transactions.sh abort). A
  coordinator's ABORT without an EndTxn before it is its own: a fencing when a new instance's
  InitProducerId came, else a timeout.
- Produce: accepted (or unanswered) transactional batches are the data; the broker appended
  them at their request, a marker at its answer (`rank`).
- Fetch: a COMMIT/ABORT control batch a leader served is its log's marker at that offset: it ends
  the producer's data on that partition below it, as the WriteTxnMarkers that wrote it would
  (one marker however many consumers fetch it; the same as the WriteTxnMarkers when both show).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.fetched_copies import fetched_data
from kaudit.audit.folds import Context, Fold, KeyedState
from kaudit.audit.txn import txn_kept
from kaudit.audit.txn.txn_model import ProducerTxns
from kaudit.audit.txn.txn_settle import TxnSettle
from kaudit.audit.txn.txn_wire_feed import WireFeed
from kaudit.audit.txn.txn_wire_rows import PRODUCED_COLUMNS, copies_of_unanswered, drop_fetched_repeats, produced, rows_of

KEY = ("producer_id",)
TXN_COLUMNS = ("source", "connection", "position", "ts", "event", "transactional_id", "producer_id",
               "producer_epoch", "partitions", "result", "coordinator_epoch", "timeout_ms", "group_id",
               "new_producer_id", "new_producer_epoch", "error_codes", "transaction_version", "enable_2pc",
               "keep_prepared_txn", "ongoing_txn_producer_id", "ongoing_txn_producer_epoch")
BATCH_COLUMNS = ("source_kind", "source", "connection", "position", "request_ts", "response_ts", "topic", "topic_id",
                 "partition",
                 "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count",
                 "transactional_id", "response_error", "response_base_offset", "correlation_id", "client_id",
                 "base_offset", "is_control", "control_type", "coordinator_epoch")
FRAME_COLUMNS = ("source", "connection", "request_frame", "response_ts", "api_key", "client_id", "api_version",
                 "partition_errors", "markers")
TXN_APIS = (22, 24, 25, 26, 27, 28)
ADMIN_APIS = (61, 65, 66)   # DescribeProducers, DescribeTransactions, ListTransactions (KIP-664)


class ProducerWire:
    """Fold group of one producer id: its rows, judged in `finish`."""

    def __init__(self, key: tuple, ctx: Context):
        self.pid = key[0]
        self.ctx = ctx
        self.rows: list[tuple[float, int, str, dict]] = []

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        names = table.column_names
        if kind not in ("txn_event", "batch") or not set(FEED_COLUMNS[kind]) <= set(names):
            self.rows.extend((row_ts(kind, r) or 0.0, r["position"] or 0, kind, r) for r in rows_of(table))
            return []
        self.rows.extend(feed_rows(self.pid, kind, names, [table.column(c).to_pylist() for c in names]))
        return []

    def finish(self) -> list[dict]:
        from kaudit.audit.txn import txn_findings

        if self.pid is None or self.pid < 0:
            return []
        return txn_findings.judge(producer_facts(self.pid, self.rows, self.ctx), self.ctx.reference_time_ms)


def row_ts(kind: str, r: dict) -> float | None:
    """When a row happened: an event's request; a produced batch's request (the broker appends it
    then); a fetched marker's answer (the leader's log held it by then)."""
    if kind == "txn_event":
        return r["ts"]
    if r.get("source_kind") == "fetch":
        return r["response_ts"] if r["response_ts"] is not None else r["request_ts"]
    return r["request_ts"]


FEED_COLUMNS = {"txn_event": ("ts", "position"),
                "batch": ("source_kind", "request_ts", "response_ts") + PRODUCED_COLUMNS}


def feed_rows(pid: int, kind: str, names: list[str], cols: list[list]) -> Iterator[tuple]:
    """ProducerWire's (row_ts or 0.0, position or 0, kind, row) of a table's rows (`cols`: its
    columns as lists, `names` theirs): a Produce row as txn_wire_rows.produced keeps it (no
    row dict first), any other as its row dict."""
    at = {c: k for k, c in enumerate(names)}
    p = at["position"]
    if kind == "txn_event":
        ts = at["ts"]
        for v in zip(*cols):
            yield v[ts] or 0.0, v[p] or 0, kind, dict(zip(names, v))
        return
    sk, req, resp = at["source_kind"], at["request_ts"], at["response_ts"]
    values = itemgetter(*(at[c] for c in PRODUCED_COLUMNS))
    for v in zip(*cols):
        if v[sk] == "fetch":   # row_ts: a served marker's answer, else its request
            yield (v[resp] if v[resp] is not None else v[req]) or 0.0, v[p] or 0, kind, dict(zip(names, v))
        else:
            ts = v[req] or 0.0
            yield ts, v[p] or 0, kind, produced(pid, ts, values(v))


def producer_facts(pid: int, rows: list[tuple], ctx: Context) -> ProducerTxns:
    """The facts of one producer id from its (ts, position, kind, row) tuples."""
    feed = WireFeed(pid, ctx)
    for ts, _, kind, r in sorted(rows, key=itemgetter(0, 1)):
        (feed.event if kind == "txn_event" else feed.batch)(ts, r)
    pt = feed.facts()
    pt.lineage = (ctx.producer_lineage or {}).get(pid)
    return pt


def prepare(items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
    """The fold needs the txn_event rows' response times, senders and per-partition answers
    (from their frames) and the producer id of failed InitProducerId requests (from their
    transactional id): added before sorting, from the whole selection - column by column (the
    table Table.from_pylist of the rows with those fields would give)."""
    frames: dict = {}   # (source, connection, request frame) -> its FRAME_JOINED values
    admins = set()
    for kind, t in items:
        if kind == "frame":
            cols = [t.column(c).to_pylist() for c in ("source", "connection", "request_frame", "api_key",
                                                        "client_id") + FRAME_JOINED]
            for src, conn, frame, api, client, *joined in zip(*cols):
                frames[(src, conn, frame)] = (joined[0], client, *joined[1:])
                if api in ADMIN_APIS and client:
                    admins.add(client)
    out = []
    events = [t for k, t in items if k == "txn_event"]
    if events:
        out.append(("txn_event", _joined_events(pa.concat_tables(events), frames, admins)))
    batches = [t for k, t in items if k == "batch" and t.num_rows]
    if batches:
        out.append(("batch", drop_fetched_repeats(copies_of_unanswered(pa.concat_tables(batches)))))
    return out


FRAME_JOINED = ("response_ts", "api_version", "partition_errors", "markers")   # with client_id
JOINED = ("response_ts", "client_id", "api_version", "partition_errors", "markers")


def _joined_events(t: pa.Table, frames: dict, admins: set) -> pa.Table:
    """The events with their producer ids filled in and their frames' fields joined (prepare)."""
    if not t.num_rows:
        return pa.Table.from_pylist([])   # as the rows' table was
    cols = {c: t.column(c).to_pylist() for c in t.column_names}
    tid, pid, ts, pos = cols["transactional_id"], list(cols["producer_id"]), cols["ts"], cols["position"]
    order = sorted(range(t.num_rows), key=lambda i: (ts[i] or 0.0, pos[i] or 0), reverse=True)
    # a failed request names no producer id: it is the one its transactional id obtains next
    # (else the last it had), in time order
    nxt: dict = {}
    for i in order:
        if tid[i] and pid[i] is not None and pid[i] >= 0:
            nxt[tid[i]] = pid[i]
        elif tid[i] and tid[i] in nxt:
            pid[i] = nxt[tid[i]]
    last: dict = {}
    for i in sorted(range(t.num_rows), key=lambda i: (ts[i] or 0.0, pos[i] or 0)):
        if tid[i] and pid[i] is not None and pid[i] >= 0:
            last[tid[i]] = pid[i]
        elif tid[i] in last:
            pid[i] = last[tid[i]]
    cols["producer_id"] = pid
    none = (None,) * len(JOINED)
    joined = [frames.get(key, none) for key in zip(cols["source"], cols["connection"], pos)]
    for k, c in enumerate(JOINED):
        cols[c] = [f[k] for f in joined]
    listed = sorted(admins)
    cols["admin_clients"] = [listed if e == "WRITE_MARKERS" else None for e in cols["event"]]
    if "ongoing_txn_producer_id" in cols:
        # KIP-939: a recovery under another producer id reaches the kept transaction's producer id
        for row in txn_kept.linked_rows(cols):
            for c in cols:
                cols[c].append(row[c])
    return pa.Table.from_pydict(cols)


def listed(items: list[tuple[str, pa.Table]], ctx: Context, producer_id: int | None = None,
           transactional_id: str | None = None) -> list[dict]:
    """`kaudit txn` on captures: each producer's transactions as its requests show them
    (txn_view rows), from the fold's whole selection (`items`, topics named)."""
    from collections import defaultdict

    from kaudit.audit.txn import txn_lineage, txn_view

    links = [x for kind, t in items if kind == "txn_event" for x in txn_lineage.wire_links(t)]
    ctx.producer_lineage = txn_lineage.build(links) or None
    rows: dict = defaultdict(list)
    for kind, t in prepare(items, ctx):
        for r in t.to_pylist():
            if r["producer_id"] is not None and r["producer_id"] >= 0:
                rows[r["producer_id"]].append((row_ts(kind, r) or 0.0, r["position"] or 0, kind, r))
    out = []
    for pid in sorted(rows):
        if producer_id is None or pid == producer_id:
            out.extend(txn_view.describe(producer_facts(pid, rows[pid], ctx)))
    return txn_lineage.annotate(txn_view.follow(out, transactional_id), ctx.producer_lineage or {})


def _txn_batch_where(t: pa.Table):
    """Produced transactional batches, and the COMMIT/ABORT markers Fetch responses served (the
    leader's log: the end of the producer's transaction on that partition, txn_fetched.fetched)
    and their transactional data (a stored copy of a write whose answer the capture lacks:
    txn_fetched.stored_copy; `prepare` keeps only those)."""
    kind = t.column("source_kind")
    txn = pc.fill_null(pc.equal(t.column("is_transactional"), True), False)
    produced = pc.and_(pc.equal(kind, "produce"), txn)
    fetched = pc.and_(pc.equal(kind, "fetch"), pc.or_(pc.fill_null(pc.equal(t.column("is_control"), True), False), txn))
    return pc.fill_null(pc.or_(produced, fetched), False)


def _weigh(kind: str, t: pa.Table) -> int:
    """The rows `cost` is per: fetched copies of writes are selected for the few `prepare` keeps
    (copies_of_unanswered) - an engine's estimate counts none."""
    if kind != "batch" or not t.num_rows:
        return t.num_rows
    return t.num_rows - (pc.sum(fetched_data(t)).as_py() or 0)


FOLD = Fold("wire-txn", {"txn_event": TXN_COLUMNS, "batch": BATCH_COLUMNS, "frame": FRAME_COLUMNS},
            KEY, ("ts", "request_ts", "position"),
            lambda ctx: KeyedState(KEY, lambda k: ProducerWire(k, ctx)),
            where={"batch": _txn_batch_where,
                   "txn_event": lambda t: pc.invert(pc.equal(t.column("event"), "STATE")),
                   "frame": lambda t: pc.is_in(t.column("api_key"),
                                               pa.array(TXN_APIS + ADMIN_APIS, t.column("api_key").type))},
            prepare=prepare, live=lambda fold: TxnSettle(fold, ADMIN_APIS), per_key=True, cost=10.5, weigh=_weigh)
