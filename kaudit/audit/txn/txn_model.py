"""One transaction model for wire and disk evidence (docs/architecture.md §4; KIP-98, KIP-890).

Both feeds build the same facts for one producer id: its data and end markers per partition
(`Part`: the data of one transaction on one partition, up to the COMMIT/ABORT marker that ends
it), the coordinator's transactions (`coordinator_state.CoordTxn`: registered partitions, states
with epochs and times, the result, who ended it) and what the evidence covers. On disk the facts
come from the log's batches and `__transaction_state` (transactions.py), on the wire from the
requests and responses (txn_wire.py); `Transaction` groups the parts of one transaction, and the
rules (txn_rules.py) and the `kaudit txn` view (`describe`) read only these. The parts and their
markers' matching to the coordinator's transactions are the floor below (txn_parts.py); here the
producer's facts are assembled on them and its transactions grouped.

Order within a partition: the log's (txn_parts.log_order), which every rule reads through a
part's `previous` and the parts' order - on disk the offset; on the wire the offset wherever the
evidence gives it (a Produce's answer, a served marker), else the order the broker appended in,
which rows carry as `rank` - a batch by its request, a marker by its answer (data sent before a
marker was answered may have landed before it), placed after the highest offset known by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from kaudit.audit.txn.coordinator_state import CoordTxn, CoordView
from kaudit.audit.thresholds import EPOCH_SLACK_MS, MARKER_CLUSTER_MS, MATCH_WINDOW_MS  # noqa: F401  (MATCH_WINDOW_MS: the model's names)
from kaudit.audit.txn.txn_lost import split_lost_markers
from kaudit.audit.txn.txn_parts import (  # noqa: F401  (the parts, as the model's names)
    ADMIN, COORDINATOR, Marker, Part, assemble_replica, log_order, match_markers, merge_replicas,
)


@dataclass
class Coverage:
    """What the evidence of one producer shows, so that a rule never reads an absence of evidence
    as an absence of the event. Disk: the log and, when present, `__transaction_state`. Wire:
    what the capture holds of the client's coordinator traffic, of the partition leaders' KIP-890
    registrations and of the coordinator's WriteTxnMarkers."""

    source: str = "disk"                 # disk | wire
    coordinator: bool = False            # the coordinator's view of the producer is known
    registrations: bool = False          # every partition registration would show
    markers: bool = True                 # the markers written would show
    slack_ms: int = 100                  # clock slack between data times and coordinator times
    # disk: the time of the producer's earliest coordinator record - before it the records are
    # gone (`__transaction_state` is compacted: its cleaner keeps a transactional id's latest
    # records only) or were never written
    since_ms: int | None = None

    def sees_registration(self, tp: str, ts_ms: int | None) -> bool:
        """Whether a registration of `tp` for data at `ts_ms` would be in the evidence."""
        return self.registrations and (ts_ms is None or self.since_ms is None or ts_ms >= self.since_ms)

    def sees_marker(self, tp: str, part=None) -> bool:
        """Whether a marker written to `tp` would be in the evidence (`part`: the one it would
        end)."""
        return self.markers

    def marker_unproven(self, part) -> bool:
        """Whether `part`'s marker may be in evidence that was lost (a capture's lost bytes to
        its leader after its data: txn_wire_cover.leader_lost; a log dir: never)."""
        return False

    def lost_within(self, part) -> bool:
        """Whether the evidence lost what would split `part` or date its end (a capture's
        lost bytes: txn_wire_cover.lost_within; a log dir: never - its losses are told apart)."""
        return False


@dataclass
class ProducerTxns:
    """Everything known about one producer id's transactions."""

    producer_id: int
    partitions: dict[str, list[Part]]            # tp -> parts in the log's order (txn_parts.log_order)
    view: CoordView
    coverage: Coverage = field(default_factory=Coverage)
    version: str | None = None                   # "2" | "0/1" | "mixed" | None (see transaction_version)
    timeline: list[str] = field(default_factory=list)   # wire: the producer's story, for findings
    # wire: the coordinator's WriteTxnMarkers per partition with its answer (txn_wire_feed: tp,
    # epoch, result, code - None unanswered -, ts, frame), and the client's requests answered
    # CONCURRENT_TRANSACTIONS (ts, frame, event)
    marker_writes: list[dict] = field(default_factory=list)
    busy: list[tuple] = field(default_factory=list)
    lineage: object = None   # txn_lineage.Lineage: its transactional id's producer ids, cluster-wide
    # another feed's InitProducerIds of this producer id, ((epoch, enable_2pc, transactional id),
    # ...) (`kaudit audit`: the capture's, for the log dirs; folds.Context.two_pc_inits)
    two_pc_inits: tuple = ()
    # the end of the evidence (ms; --now, else the latest broker time or the last packet), set by
    # the judgement: the rules that ask what may still be on its way at that end read it
    reference_ms: int | None = None

    def two_pc_at(self, epoch: int | None) -> bool:
        """Whether the InitProducerId in effect at `epoch` (the latest one answered at or below
        it: later epochs come from EndTxn bumps under TV2 or fencings) asked for KIP-939 two-phase
        commit, as another feed shows it."""
        return two_pc_at(self.two_pc_inits, epoch)

    @property
    def init_transactional_id(self) -> str | None:
        """The transactional id another feed's InitProducerIds name (the log dirs may not)."""
        return next((x[2] for x in self.two_pc_inits if len(x) > 2 and x[2]), None)

    @property
    def coordinator_known(self) -> bool:
        return self.coverage.coordinator

    def all_parts(self) -> list[Part]:
        return [p for ps in self.partitions.values() for p in ps]

    @cached_property
    def epochs(self) -> dict:
        """Epoch -> txn_history.EpochSpan: when each epoch began and ended at the coordinator (or
        when its transactional id moved on to a newer producer id: `lineage`)."""
        from kaudit.audit.txn.txn_history import producer_epochs

        return producer_epochs(self)


def assemble(producer_id: int, batches: list[dict], txn_log: list[dict],
             coordinator_known: bool | None = None, coverage: Coverage | None = None,
             cluster_tv: int | None = None, two_pc_inits=None) -> ProducerTxns:
    """The facts of one producer from its batch rows (data and markers, any replica; in the log's
    order per partition: log_order) and coordinator records (`__transaction_state` rows, or the wire's);
    `two_pc_inits`: another feed's InitProducerIds (ProducerTxns.two_pc_inits)."""
    from kaudit.audit.txn import coordinator_state

    view = coordinator_state.build(txn_log, check=coverage is None or coverage.source == "disk")
    if coverage is None:
        coverage = Coverage(coordinator=bool(txn_log) if coordinator_known is None else coordinator_known,
                            registrations=bool(txn_log) if coordinator_known is None else coordinator_known,
                            since_ms=min((r["timestamp_ms"] for r in txn_log if r.get("timestamp_ms") is not None),
                                         default=None))
    # a log holds every marker between its data; a capture may miss one (not captured, or
    # ordered by the answers): lost markers are read on disk only
    split = view.txns and coverage.source == "disk"
    by_rep: dict[tuple, list[dict]] = {}
    for b in batches:
        by_rep.setdefault((b["topic"], b["partition"], b["replica"]), []).append(b)
    per_tp: dict[tuple, dict] = {}
    for (t, p, rep), bs in by_rep.items():
        parts = assemble_replica(bs, log_order(bs))
        per_tp.setdefault((t, p), {})[rep] = split_lost_markers(parts, view, EPOCH_SLACK_MS) if split else parts
    partitions = {}
    for (t, p) in sorted(per_tp):
        parts = merge_replicas(per_tp[(t, p)])
        if parts:
            partitions[f"{t}-{p}"] = parts
    pt = ProducerTxns(producer_id, partitions, view, coverage, two_pc_inits=tuple(two_pc_inits or ()))
    match_markers(pt.all_parts(), view, since_ms=coverage.since_ms)
    pt.version = transaction_version(pt, cluster_tv)
    return pt


def shown_stored(b: dict, pt: ProducerTxns) -> bool:
    """Whether the evidence shows data batch `b` stored: on disk, always; on the wire, a
    Produce answered (or its batch served to a consumer)."""
    return pt.coverage.source != "wire" or not (
        b.get("response_error") is None and b.get("answered") is None and not b.get("fetched"))


def transaction_version(pt: ProducerTxns, cluster_tv: int | None = None) -> str | None:
    """The producer's transaction version as the evidence shows it (KIP-890): "2" when its
    epoch is bumped at the end of every transaction, "0/1" when it is not, "mixed" when both
    show, None when nothing tells. The coordinator's records say it when they carry
    ClientTransactionVersion (flexible TransactionLogValue: 2 and above is "2"; the wire: EndTxn
    v5 and the leaders' AddPartitionsToTxn); else the markers do: a COMMIT marker with its
    data's epoch is "0/1", with that epoch + 1 is "2" (an ABORT with epoch + 1 tells nothing:
    the coordinator bumps the epoch when it aborts, whatever the version).
    `cluster_tv`: the cluster's finalized transaction.version from its KRaft metadata
    (FeatureLevelRecord), when the inputs hold it: below 2 no producer can run TV2 (the
    coordinator refuses it), so it is "0/1" whatever the markers suggest; at 2 each producer's
    own evidence still decides (a client without EndTxn v5 keeps TV1 on a TV2 cluster).
    WriteTxnMarkers v2 (KIP-1228) says each transaction's version: the coordinator's markers
    that carry it decide before the epochs are read."""
    if cluster_tv is not None and cluster_tv < 2:
        return "0/1"
    ctv = pt.view.client_transaction_version
    if ctv is not None:
        return "2" if ctv >= 2 else "0/1"
    said = {("2" if m.transaction_version >= 2 else "0/1") for p in pt.all_parts()
            if (m := p.marker) is not None and m.transaction_version is not None and m.writer != ADMIN}
    if said:
        return "mixed" if len(said) > 1 else said.pop()
    seen = set()
    for p in pt.all_parts():
        m = p.marker
        if m is not None and m.result == "COMMIT" and p.data and m.epoch is not None and p.data_epoch is not None:
            if m.epoch == p.data_epoch:
                seen.add("0/1")
            elif m.epoch == p.data_epoch + 1:
                seen.add("2")
    return "mixed" if len(seen) > 1 else next(iter(seen), None)


# -- transactions: the parts of one transaction together ---------------------------------------

@dataclass
class Transaction:
    """One transaction of a producer: the coordinator's (when its records or requests are in the
    evidence) with the parts it wrote markers for or lists, or parts grouped by their markers."""

    producer_id: int
    coord: CoordTxn | None
    parts: list[Part]
    transactional_id: str | None = None
    version: str | None = None   # its producer's transaction version (transaction_version)

    @property
    def results(self) -> dict[str, str | None]:
        """Per partition, the result of the marker that ended the transaction's data there
        (None: no marker yet); a partition with no data, its marker's result."""
        out: dict[str, str | None] = {}
        for p in self.parts:
            if p.data:
                out[p.tp] = p.marker.result if p.marker is not None else None
        for p in self.parts:
            if not p.data and p.marker is not None:
                out.setdefault(p.tp, p.marker.result)
        return out

    def ranges(self) -> list["Range"]:
        """Per partition, in offset order, what ended each stretch of the transaction's data:
        one Range per part (data up to its marker; a marker after data already ended ends
        nothing there and is a Range without data)."""
        return [Range(p.tp, p.start_offset if p.data else None, p.last_data_offset,
                      p.marker.result if p.marker is not None else None, p)
                for p in sorted(self.parts, key=lambda p: (p.tp, _order(p)))]

    @property
    def outcome(self) -> str:
        res = self.results
        # a marker that ends no data (an admin's abort of what had already ended there, a
        # re-sent one) decides nothing: only the partitions' results and the data's ranges tear
        if len(set(v for v in res.values() if v is not None)) > 1 or \
                len({r.result for r in self.ranges() if r.result is not None and r.part.data}) > 1:
            return "torn"
        if any(v is None for v in res.values()):
            return "open"
        done = {v for v in res.values()}
        if done:
            return done.pop()
        t = self.coord
        if t is not None:
            return t.result if t.complete else (t.last_state if t.result is None else t.result)
        return "open"

    @property
    def epoch(self) -> int | None:
        """The producer epoch of its data (of the coordinator's first record without data)."""
        for p in self.parts:
            if p.data:
                return p.first_epoch
        if self.coord is not None:
            return self.coord.epoch
        m = next((p.marker for p in self.parts if p.marker is not None), None)
        if m is None:
            return None
        # a version-2 coordinator's marker carries the epoch it bumped at the end: the data's is
        # one below (the log's data the cleaner removed: the key the capture's data gives)
        return m.epoch - 1 if self.version == "2" and m.writer != ADMIN and m.epoch is not None and m.epoch > 0 \
            else m.epoch

    @property
    def start_ms(self) -> int | None:
        if self.coord is not None and self.coord.start_ms is not None:
            return self.coord.start_ms
        ts = [p.first_ts for p in self.parts if p.first_ts is not None]
        return min(ts) if ts else None

    @property
    def end_ms(self) -> int | None:
        ts = [p.marker.ts for p in self.parts if p.marker is not None and p.marker.ts is not None]
        if self.coord is not None and self.coord.complete_ts is not None:
            ts.append(self.coord.complete_ts)
        return max(ts) if ts else None

    @property
    def key(self) -> str:
        """A stable name of the transaction, the same from wire and disk evidence (incidents
        group on it): producer id, data epoch, and its first data (or marker) by partition and
        offset, else its start time."""
        first = min((p for p in self.parts if p.start_offset is not None), default=None,
                    key=lambda p: (p.tp, p.start_offset))
        where = f"{first.tp}@{first.start_offset}" if first is not None else f"t{self.start_ms}"
        return f"{self.producer_id}/{self.epoch}/{where}"

    def ended_by(self) -> tuple[str | None, str | None]:
        """(who ended it, how) from the evidence: "client" (its EndTxn), "coordinator" (a
        timeout, or fencing by a new InitProducerId), "admin" (WriteTxnMarkers not from the
        coordinator: kafka-transactions.sh abort), None when nothing tells."""
        admin = [p.marker for p in self.parts if p.marker is not None and p.marker.writer == ADMIN]
        if admin:
            return ADMIN, f"WriteTxnMarkers from client {admin[0].client_id!r}" + (
                f" on {admin[0].connection}" if admin[0].connection else "")
        t = self.coord
        if t is not None and t.ended_by is not None:
            return t.ended_by, t.end_detail
        return None, None


@dataclass
class Range:
    """One stretch of a transaction on one partition and the marker that ended it."""

    tp: str
    first: int | None          # its data's offsets (None: a marker that ends no data)
    last: int | None
    result: str | None         # COMMIT | ABORT | None (no marker)
    part: Part

    @property
    def marker(self) -> Marker | None:
        return self.part.marker

    @property
    def has_data(self) -> bool:
        return bool(self.part.data)

    @property
    def offsets(self) -> str:
        if not self.has_data:
            return "no data"
        if self.first is None:   # the wire: data whose offsets the answers did not give
            return f"{len(self.part.data)} batch(es) at unknown offsets"
        return f"offset {self.first}" if self.last in (None, self.first) else f"offsets {self.first}-{self.last}"


def group(pt: ProducerTxns) -> list[Transaction]:
    """The producer's transactions: one per coordinator transaction (with the parts matched to
    it), then the parts no coordinator transaction claims - ended ones grouped by their markers
    (written together: moments apart, same epoch and coordinator epoch, one per partition), open
    ones alone - in time order."""
    by_coord: dict[int, list[Part]] = {}
    loose: list[Part] = []
    for p in pt.all_parts():
        if p.coord is not None:
            by_coord.setdefault(id(p.coord), []).append(p)
        else:
            loose.append(p)
    tid = next(iter(pt.view.transactional_ids), None) if len(pt.view.transactional_ids) == 1 else None
    out = [Transaction(pt.producer_id, t, sorted(by_coord.get(id(t), []), key=lambda p: (p.tp, _order(p))),
                       t.transactional_id, pt.version)
           for t in pt.view.txns]
    ended = sorted((p for p in loose if p.marker is not None), key=lambda p: (p.marker.ts or 0, p.tp))
    cluster: list[Part] = []
    for p in ended:
        if cluster and (p.tp in {q.tp for q in cluster}
                        or (p.marker.ts or 0) - (cluster[0].marker.ts or 0) > MARKER_CLUSTER_MS
                        or p.marker.epoch != cluster[0].marker.epoch
                        or p.marker.coordinator_epoch != cluster[0].marker.coordinator_epoch
                        or _written_after(p, cluster)):
            out.append(Transaction(pt.producer_id, None, cluster, tid, pt.version))
            cluster = []
        cluster.append(p)
    if cluster:
        out.append(Transaction(pt.producer_id, None, cluster, tid, pt.version))
    out.extend(Transaction(pt.producer_id, None, [p], tid, pt.version) for p in loose if p.marker is None)
    return sorted(out, key=lambda t: (t.start_ms is None, t.start_ms or 0, t.key))


def _written_after(p: Part, cluster: list[Part]) -> bool:
    """Whether `p` and a part of `cluster` ended differently and one's data was written after the
    other's marker: two transactions (a TV1 producer keeps its epoch from one to the next), not
    one torn - the coordinator writes a transaction's markers only once all its data was sent."""
    for q in cluster:
        if q.marker.result == p.marker.result:
            continue
        if (p.first_ts is not None and q.marker.ts is not None and p.first_ts > q.marker.ts) or \
                (q.first_ts is not None and p.marker.ts is not None and q.first_ts > p.marker.ts):
            return True
    return False


def _order(p: Part):
    return p.key if p.key is not None else -1


def two_pc_at(inits, epoch: int | None) -> bool:
    """Whether the InitProducerId in effect at `epoch` among `inits` ((epoch, enable_2pc, ...),
    folds.Context.two_pc_inits' values) asked for KIP-939 two-phase commit: the latest one
    answered at or below it (later epochs come from EndTxn bumps under TV2 or fencings)."""
    best = None
    for e, on, *_ in inits or ():
        if e is not None and (epoch is None or e <= epoch) and (best is None or e >= best[0]):
            best = (e, on)
    return bool(best and best[1])
