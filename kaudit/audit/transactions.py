"""Transaction assembly on disk, per producer id across partitions (DESIGN.md §4).

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
batches and the txn_log rows, so an engine buffers its selection (`CrossPartitionFold.buffered`:
lean, dictionary-encoded columns), passes it through `prepare` — which leaves out the producers
txn_clean.py certifies finding-free, vectorised over all of them — and feeds the rest sorted by
(key, order); each producer's rows become Python objects only in its own group (txn_rows.py).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit import coordinator_state, txn_rows
from kaudit.audit.coordinator_state import CoordTxn, CoordView
from kaudit.audit.folds import Context, Fold, KeyedState

KEY = ("producer_id",)
ORDER = ("replica", "topic", "partition", "base_offset")
BATCH_COLUMNS = ("replica", "topic", "partition", "source", "position", "base_offset", "last_offset",
                 "is_transactional", "is_control", "control_type", "coordinator_epoch", "producer_id",
                 "producer_epoch", "base_timestamp_ms", "max_timestamp_ms")
TXN_LOG_COLUMNS = ("replica", "topic", "partition", "source", "position", "offset", "timestamp_ms",
                   "transactional_id", "tombstone", "producer_id", "producer_epoch",
                   "transaction_timeout_ms", "state", "state_id", "partitions", "start_ms",
                   "client_transaction_version")
MATCH_WINDOW_MS = 60_000   # a marker further than this from every window has no coordinator txn


@dataclass
class Marker:
    offset: int
    result: str               # COMMIT | ABORT
    epoch: int
    coordinator_epoch: int | None
    ts: int | None
    source: str
    position: int


@dataclass
class Part:
    """One producer's transaction on one partition (merged over the replicas that hold it)."""

    topic: str
    partition: int
    producer_id: int
    replicas: list[str] = field(default_factory=list)
    data: list[dict] = field(default_factory=list)          # transactional data batches
    # non-transactional writes inside it: one row per stretch (none of its transactional batches
    # between), `batches` counting them
    nontxn: list[dict] = field(default_factory=list)
    marker: Marker | None = None
    replicas_without_marker: list[str] = field(default_factory=list)
    coord: CoordTxn | None = None                           # matched coordinator transaction
    previous: "Part | None" = None                          # the part before it on the partition
    tp: str = field(init=False, default="")                 # "topic-partition"

    def __post_init__(self):
        self.tp = f"{self.topic}-{self.partition}"

    @property
    def start_offset(self) -> int:
        return self.data[0]["base_offset"] if self.data else self.marker.offset

    @property
    def last_data_offset(self) -> int | None:
        return self.data[-1]["last_offset"] if self.data else None

    @property
    def data_epoch(self) -> int | None:
        return self.data[-1]["producer_epoch"] if self.data else None

    @property
    def first_ts(self) -> int | None:
        ts = [b["base_timestamp_ms"] for b in self.data if b["base_timestamp_ms"] is not None]
        return min(ts) if ts else (self.marker.ts if self.marker else None)

    @property
    def last_ts(self) -> int | None:
        ts = [b["max_timestamp_ms"] for b in self.data if b["max_timestamp_ms"] is not None]
        if self.marker and self.marker.ts is not None:
            ts.append(self.marker.ts)
        return max(ts) if ts else None


def assemble_replica(batches: list[dict]) -> list[Part]:
    """The parts of one producer on one replica of one partition, batches in offset order."""
    parts: list[Part] = []
    cur: Part | None = None
    plain = False   # the previous batch was a non-transactional write inside `cur`
    for b in batches:
        was_plain, plain = plain, False
        if b["is_control"]:
            if b["control_type"] not in ("COMMIT", "ABORT"):
                continue
            if cur is None:
                cur = Part(b["topic"], b["partition"], b["producer_id"], [b["replica"]])
            cur.marker = Marker(b["base_offset"], b["control_type"], b["producer_epoch"],
                                b["coordinator_epoch"], b["base_timestamp_ms"], b["source"], b["position"])
            parts.append(cur)
            cur = None
        elif b["is_transactional"]:
            if cur is None:
                cur = Part(b["topic"], b["partition"], b["producer_id"], [b["replica"]])
            cur.data.append(b)
        elif cur is not None and cur.data:
            if was_plain:   # one stretch: its rows may come as runs cut anywhere (txn_rows.runs)
                prev = cur.nontxn[-1]
                cur.nontxn[-1] = dict(prev, last_offset=b["last_offset"],
                                      batches=prev.get("batches", 1) + b.get("batches", 1))
            else:
                cur.nontxn.append(b)
            plain = True
    if cur is not None:
        parts.append(cur)
    return parts


def merge_replicas(per_replica: dict[str, list[Part]]) -> list[Part]:
    """One list of parts per partition: parts starting at the same offset on several replicas are
    one part; a replica missing a marker another replica holds is noted (a lagging replica)."""
    merged: dict[int, Part] = {}
    for rep in sorted(per_replica):
        for p in per_replica[rep]:
            m = merged.get(p.start_offset)
            if m is None:
                merged[p.start_offset] = p
                if p.marker is None:
                    p.replicas_without_marker = [rep]
                continue
            m.replicas.append(rep)
            if p.marker is None:
                m.replicas_without_marker.append(rep)
            elif m.marker is None:
                m.marker = p.marker
            if len(p.data) > len(m.data):
                m.data, m.nontxn = p.data, p.nontxn
    out = [merged[k] for k in sorted(merged)]
    for a, b in zip(out, out[1:]):
        b.previous = a
    for p in out:
        if p.marker is not None and len(p.replicas_without_marker) == len(p.replicas):
            p.replicas_without_marker = []
    return out


def match_markers(parts: list[Part], view: CoordView) -> None:
    """Each part with a marker gets the coordinator transaction that wrote it: one listing its
    partition, with the marker's result, whose [PrepareX, CompleteX] window is nearest the
    marker's time (the first such in the coordinator's order on a tie; a transaction with
    another result only when none has the marker's; none further than MATCH_WINDOW_MS). A part
    without marker gets the coordinator's open transaction if it lists the partition."""
    by_tp: dict[str, list[CoordTxn]] = {}   # the coordinator transactions listing each partition, in order
    for t in view.txns:
        for tp in t.partitions:
            by_tp.setdefault(tp, []).append(t)
    matchers: dict[tuple, _Nearest] = {}
    for p in parts:
        tp = p.tp
        if p.marker is None:
            t = view.open_txn
            if t is not None and tp in t.partitions:
                p.coord = t
            continue
        cands = by_tp.get(tp)
        if not cands:
            continue
        key = (tp, p.marker.result)
        m = matchers.get(key)
        if m is None:
            # a marker whose result differs from its transaction's is still its (torn)
            same = [t for t in cands if t.result is None or t.result == p.marker.result]
            m = matchers[key] = _Nearest(same or cands)
        best, d = m.nearest(p.marker.ts)
        if d <= MATCH_WINDOW_MS:
            p.coord = best


def _window(t: CoordTxn) -> tuple[int | None, int | None]:
    return (t.prepare_ts if t.prepare_ts is not None else t.start_ms), t.complete_ts


def _distance(t: CoordTxn, ts: int | None) -> int:
    lo, hi = _window(t)
    if ts is None or lo is None:
        return 0
    if ts < lo:
        return lo - ts
    if hi is not None and ts > hi:
        return ts - hi
    return 0


class _Nearest:
    """The first transaction (in the coordinator's order) whose window is nearest a time. When
    the windows follow each other without overlap (each ends before the next starts, only the
    last may be open) the nearest is one of the two around the time (bisect); else a scan."""

    def __init__(self, txns: list[CoordTxn]):
        self.txns = txns
        w = [_window(t) for t in txns]
        self.los = [lo for lo, _ in w]
        self.sorted = all(lo is not None for lo in self.los) and all(
            (hi is not None or i == len(w) - 1) and (hi is None or lo <= hi)
            and (i == len(w) - 1 or (hi is not None and hi < w[i + 1][0]))
            for i, (lo, hi) in enumerate(w))

    def nearest(self, ts: int | None) -> tuple[CoordTxn, int]:
        if ts is None:
            return self.txns[0], 0
        if self.sorted:
            j = bisect_right(self.los, ts) - 1
            around = [i for i in (j, j + 1) if 0 <= i < len(self.txns)]
        else:
            around = range(len(self.txns))
        best, dist = None, None
        for i in around:
            d = _distance(self.txns[i], ts)
            if dist is None or d < dist:
                best, dist = self.txns[i], d
        return best, dist


@dataclass
class ProducerTxns:
    """Everything known about one producer id's transactions."""

    producer_id: int
    partitions: dict[str, list[Part]]            # tp -> parts in offset order
    view: CoordView
    coordinator_known: bool                      # some __transaction_state rows in the evidence

    def all_parts(self) -> list[Part]:
        return [p for ps in self.partitions.values() for p in ps]


def assemble(producer_id: int, batches: list[dict], txn_log: list[dict],
             coordinator_known: bool | None = None) -> ProducerTxns:
    by_rep: dict[tuple, list[dict]] = {}
    for b in batches:
        by_rep.setdefault((b["topic"], b["partition"], b["replica"]), []).append(b)
    per_tp: dict[tuple, dict[str, list[Part]]] = {}
    for (t, p, rep), bs in by_rep.items():
        bs.sort(key=lambda b: b["base_offset"])
        per_tp.setdefault((t, p), {})[rep] = assemble_replica(bs)
    view = coordinator_state.build(txn_log)
    partitions = {}
    for (t, p) in sorted(per_tp):
        parts = merge_replicas(per_tp[(t, p)])
        if parts:
            partitions[f"{t}-{p}"] = parts
    pt = ProducerTxns(producer_id, partitions, view,
                      bool(txn_log) if coordinator_known is None else coordinator_known)
    match_markers(pt.all_parts(), view)
    return pt


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
        from kaudit.audit import txn_rules

        if self.producer_id is None:
            return []
        batches, txn_log = txn_rows.rows(self.tables["batch"]), txn_rows.rows(self.tables["txn_log"])
        self.tables = {}
        if not any(b["is_transactional"] for b in batches) and not txn_log:
            return []
        pt = assemble(self.producer_id, batches, txn_log,
                      coordinator_known=bool(txn_log) or bool(self.ctx.txn_state_seen))
        return txn_rules.judge(pt, self.ctx.reference_time_ms)


class CrossPartitionFold(Fold):
    """A fold whose key spans partitions: engines buffer its selection, pass it through
    `prepare` and feed it sorted by (key, order). See txn_rows.py for what `select` and
    `prepare` keep."""

    buffered = True

    def select(self, kind: str, table: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table | None:
        sel = super().select(kind, table, extra)
        if sel is None:
            return None
        return txn_rows.lean(txn_rows.runs(sel) if kind == "batch" else sel)

    def prepare(self, items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
        return txn_rows.prepare(items, ctx, self.key + self.order)


def _batch_where(t: pa.Table):
    ok = pc.and_(pc.equal(t.column("source_kind"), "log"),
                 pc.invert(pc.ends_with(t.column("source"), ".checkpoint")))
    ok = pc.and_(ok, pc.fill_null(pc.greater_equal(t.column("producer_id"), 0), False))
    ok = pc.and_(ok, pc.fill_null(pc.greater_equal(t.column("magic"), 2), False))
    return pc.and_(ok, pc.fill_null(t.column("crc_ok"), True))


def _txn_log_where(t: pa.Table):
    return pc.and_(pc.invert(pc.fill_null(t.column("tombstone"), False)),
                   pc.is_valid(t.column("producer_id")))


def _make(ctx: Context):
    return KeyedState(KEY, lambda k: ProducerGroup(k, ctx))


FOLD = CrossPartitionFold("transactions", {"batch": BATCH_COLUMNS, "txn_log": TXN_LOG_COLUMNS},
                          KEY, ORDER, _make, where={"batch": _batch_where, "txn_log": _txn_log_where})


def transaction_version(pt: ProducerTxns) -> str | None:
    """The producer's transaction version as the evidence shows it (KIP-890): "2" when its
    epoch is bumped at the end of every transaction, "0/1" when it is not, "mixed" when both
    show, None when nothing tells. The coordinator's records say it when they carry
    ClientTransactionVersion (flexible TransactionLogValue: 2 and above is "2"); else the
    markers do: a COMMIT marker with its data's epoch is "0/1", with that epoch + 1 is "2" (an
    ABORT with epoch + 1 tells nothing: the coordinator bumps the epoch when it aborts, whatever
    the version)."""
    ctv = pt.view.client_transaction_version
    if ctv is not None:
        return "2" if ctv >= 2 else "0/1"
    seen = set()
    for p in pt.all_parts():
        m = p.marker
        if m is not None and m.result == "COMMIT" and p.data and m.epoch is not None and p.data_epoch is not None:
            if m.epoch == p.data_epoch:
                seen.add("0/1")
            elif m.epoch == p.data_epoch + 1:
                seen.add("2")
    return "mixed" if len(seen) > 1 else next(iter(seen), None)


def describe(pt: ProducerTxns) -> list[dict]:
    """The transactions of one producer as plain rows (the `kaudit txn` view): one per
    coordinator transaction, then one per part no coordinator transaction claims. Each row
    carries the producer's `transaction_version` (see transaction_version)."""
    out = []
    version = transaction_version(pt)
    claimed: set[int] = set()

    def part_row(p: Part) -> dict:
        m = p.marker
        return {"partition": p.tp, "replicas": p.replicas, "first_offset": p.start_offset,
                "last_data_offset": p.last_data_offset, "data_batches": len(p.data),
                "producer_epoch": p.data_epoch,
                "marker": None if m is None else {"offset": m.offset, "result": m.result, "epoch": m.epoch,
                                                  "coordinator_epoch": m.coordinator_epoch, "ts_ms": m.ts}}

    by_coord: dict[int, list[Part]] = {}
    for p in pt.all_parts():
        if p.coord is not None:
            by_coord.setdefault(id(p.coord), []).append(p)
    for t in pt.view.txns:
        parts = by_coord.get(id(t), [])
        claimed.update(id(p) for p in parts)
        results = {p.marker.result for p in parts if p.marker is not None}
        if any(p.marker is None for p in parts):
            outcome = "open"
        elif len(results) > 1:
            outcome = "torn"
        else:
            outcome = t.result or (t.last_state if not t.complete else None) or "open"
        out.append({"producer_id": pt.producer_id, "transactional_id": t.transactional_id,
                    "transaction_version": version,
                    "producer_epoch": t.epoch, "start_ms": t.start_ms, "timeout_ms": t.timeout_ms,
                    "registered_partitions": sorted(t.partitions), "outcome": outcome,
                    "coordinator_states": [{"state": s["state"], "epoch": s["epoch"], "ts_ms": s["ts"],
                                            "offset": s["offset"], "partitions": s["partitions"]}
                                           for s in t.states],
                    "parts": [part_row(p) for p in sorted(parts, key=lambda p: (p.tp, p.start_offset))]})
    for p in sorted(pt.all_parts(), key=lambda p: (p.first_ts or 0, p.tp, p.start_offset)):
        if id(p) in claimed:
            continue
        out.append({"producer_id": pt.producer_id, "transactional_id": None,
                    "transaction_version": version, "producer_epoch": p.data_epoch,
                    "start_ms": p.first_ts, "timeout_ms": None,
                    "registered_partitions": None,
                    "outcome": p.marker.result if p.marker is not None else "open",
                    "coordinator_states": [], "parts": [part_row(p)]})
    return out
