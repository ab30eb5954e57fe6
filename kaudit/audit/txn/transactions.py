"""Transaction assembly on disk, per producer id across partitions (docs/architecture.md §4).

On one replica of a partition, a producer's transaction part is its transactional data batches
from the first one after its previous end marker up to the next COMMIT/ABORT marker (a marker
with no data before it closes an empty part: the coordinator writes markers to every partition it
registered, written to or not). `__consumer_offsets` partitions are partitions like the others:
offsets committed in a transaction (TxnOffsetCommit) are part of it. Replicas of one partition are
assembled separately, then merged: a part is the same part on every replica where it starts at
the same offset. The coordinator's transactions (coordinator_state.py) are matched to the parts by
their markers (a marker is written between the PrepareX and CompleteX records of its
transaction). The rules live in txn_rules.py.

The fold is cross-partition: keyed by producer id, it needs every partition's transactional
batches and the txn_log rows, so an engine buffers its selection (its key is not a partition's:
lean, dictionary-encoded columns), passes it through `prepare` — which leaves out the producers
txn_clean.py certifies finding-free, vectorised over all of them — and feeds the rest sorted by
(key, order); each producer's rows become Python objects only in its own group (txn_rows.py).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.txn import coordinator_state, txn_epoch_rules, txn_rows, txn_rules, txn_stuck  # noqa: F401  (register the rules)
from kaudit.audit.registry import fold_rules
from kaudit.audit.folds import Context, Fold, KeyedState, of_log_segments
from kaudit.audit.txn.txn_model import (  # noqa: F401  (the model's names, as the disk feed's)
    MATCH_WINDOW_MS, Marker, Part, ProducerTxns, assemble, assemble_replica, group, merge_replicas,
    transaction_version,
)
from kaudit.audit.txn.txn_view import describe  # noqa: F401

KEY = ("producer_id",)
ORDER = ("replica", "topic", "partition", "base_offset")
BATCH_COLUMNS = ("replica", "topic", "partition", "source", "position", "base_offset", "last_offset",
                 "is_transactional", "is_control", "control_type", "coordinator_epoch", "producer_id",
                 "producer_epoch", "base_timestamp_ms", "max_timestamp_ms", "has_delete_horizon")
TXN_LOG_COLUMNS = ("replica", "topic", "partition", "source", "position", "offset", "timestamp_ms",
                   "transactional_id", "tombstone", "producer_id", "producer_epoch",
                   "transaction_timeout_ms", "state", "state_id", "partitions", "start_ms",
                   "client_transaction_version", "previous_producer_id", "next_producer_id")


class ProducerGroup:
    """Fold group of one producer id: keeps its (Arrow) rows, assembles and judges at the end."""

    def __init__(self, key: tuple, ctx: Context):
        self.producer_id = key[0]
        self.ctx = ctx
        self.tables: dict[str, list[pa.Table]] = {"batch": [], "txn_log": []}

    def feed(self, kind: str, t: pa.Table) -> list[dict]:
        self.tables["batch" if kind == "batch" else "txn_log"].append(t)
        return []

    def finish(self) -> list[dict]:
        from kaudit.audit.txn import txn_findings

        if self.producer_id is None:
            return []
        batches, txn_log = txn_rows.rows(self.tables["batch"]), txn_rows.rows(self.tables["txn_log"])
        self.tables = {}
        if not any(b["is_transactional"] for b in batches) and not txn_log:
            return []
        pt = assemble(self.producer_id, batches, txn_log,
                      coordinator_known=bool(txn_log) or bool(self.ctx.txn_state_seen),
                      cluster_tv=self.ctx.cluster_transaction_version,
                      two_pc_inits=(self.ctx.two_pc_inits or {}).get(self.producer_id))
        pt.lineage = (self.ctx.producer_lineage or {}).get(self.producer_id)
        return txn_findings.judge(pt, self.ctx.reference_time_ms)


class CrossPartitionFold(Fold):
    """A fold whose key spans partitions: engines buffer its selection, pass it through
    `prepare` (by producer id: any share of them at a time) and feed it sorted by (key, order).
    See txn_rows.py for what `select` and `prepare` keep."""

    def select(self, kind: str, table: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table | None:
        sel = super().select(kind, table, extra)
        if sel is None:
            return None
        return txn_rows.lean(txn_rows.runs(sel) if kind == "batch" else sel)


def _prepare(items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
    return txn_rows.prepare(items, ctx, KEY + ORDER, rules=RULE_IDS)


# The rules this fold runs (txn_findings.judge: every rule registered with fold="transactions"):
# the fast path certifies a producer only through their own predicates, and not at all when one
# has none.
RULE_IDS = tuple(r.id for r in fold_rules("transactions"))


def _batch_where(t: pa.Table):
    ok = pc.and_(of_log_segments(t), pc.fill_null(pc.greater_equal(t.column("producer_id"), 0), False))
    ok = pc.and_(ok, pc.fill_null(pc.greater_equal(t.column("magic"), 2), False))
    return pc.and_(ok, pc.fill_null(t.column("crc_ok"), True))


def _txn_log_where(t: pa.Table):
    return pc.and_(pc.invert(pc.fill_null(t.column("tombstone"), False)),
                   pc.is_valid(t.column("producer_id")))


def _make(ctx: Context):
    return KeyedState(KEY, lambda k: ProducerGroup(k, ctx))


FOLD = CrossPartitionFold("transactions", {"batch": BATCH_COLUMNS, "txn_log": TXN_LOG_COLUMNS},
                          KEY, ORDER, _make, where={"batch": _batch_where, "txn_log": _txn_log_where},
                          prepare=_prepare, prepare_by_key=True)




def listed(chunks, transactional_id: str | None = None, producer_id: int | None = None,
           cluster_tv: int | None = None) -> list[dict]:
    """`kaudit txn` on log dirs: each producer's transactions (txn_view.describe) assembled from
    the fold's selection (`chunks`: (kind, table or None)), of one transactional id or producer
    id if given."""
    from collections import defaultdict

    from kaudit.audit.txn import txn_lineage

    batches: dict = defaultdict(list)
    states: dict = defaultdict(list)
    by_txn_id: set = set()
    links: list = []
    for kind, sel in chunks:
        if sel is None:
            continue
        if kind == "txn_log":
            links.extend(txn_lineage.disk_links(sel))
        for r in sel.to_pylist():
            if kind == "batch":
                batches[r["producer_id"]].append(r)
            else:
                states[r["producer_id"]].append(r)
                if r["transactional_id"] == transactional_id:
                    by_txn_id.add(r["producer_id"])
    pids = {pid for pid, rows in batches.items() if any(b["is_transactional"] for b in rows)}
    pids |= set(states)
    lineage = txn_lineage.build(links)
    if transactional_id is not None:   # every producer id its history moved through
        pids = set(by_txn_id)
        for q in by_txn_id:
            pids.update(lineage[q].producer_ids if q in lineage else ())
    if producer_id is not None:
        pids &= {producer_id}
    known = bool(states)
    out = []
    for pid in sorted(q for q in pids if q is not None):
        pt = assemble(pid, batches.get(pid, []), states.get(pid, []), coordinator_known=known,
                      cluster_tv=cluster_tv)
        pt.lineage = lineage.get(pid)
        out.extend(t for t in describe(pt)
                   if transactional_id is None or t["transactional_id"] in (transactional_id, None))
    return txn_lineage.annotate(out, lineage)
