"""One description of an audit (docs/architecture.md §5), which both executors run: engine.local in one
process, engine.spark in tasks. Neither decides anything this plan does not say.

An audit reads (kind, Arrow table) chunks from its sources and hands them to folds. For each fold
the plan says:
- what it reads: `Fold.select` (its kinds, columns and `where` filters);
- whether it *streams* or *buffers*: a fold streams when the sources deliver its key groups one
  after the other in its order - a log-dir plan yields each (replica, topic, partition)'s files
  together, in offset order (STREAM), for the row kinds tagged `partitioned` -, so it is fed
  chunk by chunk as they are decoded; any other fold buffers its selection, which is prepared (`Fold.prepare`) and sorted by (key, kind,
  order) once every row is read (`fold_selection`). Grouping is derived from the folds' keys, and
  KeyedState checks it: a key that comes back after it was closed is an error, never a restart;
- how a buffered fold's keys may be shared out among workers (`route`): by the key columns that
  naming topics cannot change, or not at all when its `prepare` needs the whole selection;
- how the facts each piece of work gathers are settled (`Facts`, `Audit.settle`): coverage
  counters, the reference time (`--now`, else the latest broker-side timestamp or the last
  packet), topic id -> name facts, and which row kinds each buffered fold selected anywhere.
A streamed fold reads no settled fact: an executor may finish it where it holds its keys whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

import kaudit.audit
from kaudit.audit import capture_holes, sort_findings
from kaudit.audit.folds import Context, Fold, run_selection
from kaudit.audit.consumers.fold import replica_brokers
from kaudit.audit.txn import txn_lineage
from kaudit.engine import coverage
from kaudit.model import ROW_KINDS
from kaudit.protocol.metadata.history import latest_features
from kaudit.sources.marker_names import MarkerNames
from kaudit.sources.topics import BatchNames, TopicNames

STREAM = (("replica", "topic", "partition"), ("source", "position"))   # a log-dir plan's (key, order)


@dataclass
class AuditRun:
    """What an audit produced: findings, coverage and the reference time, for the report."""

    findings: list[dict] = field(default_factory=list)
    coverage: dict = field(default_factory=dict)
    reference_time_ms: int | None = None
    errors: list[str] = field(default_factory=list)
    engine: str = "local"
    application_id: str | None = None   # the Spark application, when the Spark engine ran
    topic_names: dict = field(default_factory=dict)   # topic id -> name, from every input
    internal_errors: list[str] = field(default_factory=list)   # broken engine contracts (reported)
    clusters: object = None   # audit.clusters.ClusterMap of the inputs (incident ids)
    # wire: where the captures lost bytes (audit.capture_holes.CaptureHoles; None: nowhere), for
    # the join of `kaudit audit`
    capture_holes: object = None


class Facts:
    """What one piece of work learns besides its fold rows, merged over the pieces: coverage
    counters, topic id -> name facts and the ids rows name topics by (wire), the row kinds each
    buffered fold selected, capture summaries and errors, and its tap's facts."""

    def __init__(self, side: str, names: dict | None = None):
        self.side = side
        self.cov = coverage.new_disk() if side == "disk" else coverage.new_wire()
        self.names = TopicNames(names)
        self.kinds: dict[str, set] = {}
        self.captures: dict = {}   # capture path -> PcapSummary
        self.errors: list[tuple[int, str]] = []   # (split, "path: reason")
        self.stitched: dict = {}   # capture path -> [connections, kafka connections, {TLS outcome: n}] stitched in
        self.tap: list[dict] = []
        self.features: list[dict] = []   # KRaft FeatureLevelRecords (disk), for the context
        self.metadata_complete = False   # a metadata log from offset 0, or a KRaft snapshot
        self.cluster_ids: dict[str, set] = {}   # capture path -> Metadata cluster ids
        self.links: list[dict] = []   # txn_lineage's link rows (transactional id -> producer ids)
        self.txn_ends: list[tuple] = []   # wire: the EndTxns answered without error (txn_lineage.wire_ends)
        self.linked = 0               # link rows the context's lineage was last built from (so_far)
        self.holes: list[tuple] = []      # wire: where the captures lost bytes (audit.capture_holes)
        self.carriers: set[tuple] = set()   # wire: (event, connection) of markers and registrations
        self.replicas: set[tuple] = set()   # wire: (capture, broker id) of replicas' Fetches
        self.batch_names = BatchNames()   # wire: topic ids a batch seen by name too names (settle)
        self.marker_names = MarkerNames()   # wire: topic ids a transaction's markers name (settle)
        self._holes_made: tuple | None = None   # (the facts it was made of, CaptureHoles): capture_holes

    def add(self, kind: str, table: pa.Table) -> None:
        if self.side == "disk":
            coverage.add_disk(self.cov, kind, table)
            if kind == "metadata_record":
                self.features.extend(feature_rows(table))
                self.metadata_complete |= complete_metadata(table)
            elif kind == "txn_log":
                self.links.extend(txn_lineage.disk_links(table))
        else:
            if kind == "txn_event":
                self.links.extend(txn_lineage.wire_links(table))
                self.txn_ends.extend(txn_lineage.wire_ends(table))
                self.carriers.update(capture_holes.carrier_rows(table))
                self.marker_names.note(kind, table)
            elif kind == "decode_issue":
                self.holes.extend(capture_holes.hole_rows(table))
            elif kind == "fetch_partition":
                self.replicas |= replica_brokers(table)
            elif kind == "batch":
                self.batch_names.note(table)
                self.marker_names.note(kind, table)
            coverage.add_wire(self.cov, kind, table)
            if kind == "topic_name" and "cluster_id" in table.schema.names and table.column("cluster_id").null_count < table.num_rows:
                for src, cid in set(zip(table.column("source").to_pylist(), table.column("cluster_id").to_pylist())):
                    if cid:
                        self.cluster_ids.setdefault(src, set()).add(cid)
            self.names.learn(kind, table)
            self.names.unnamed(kind, table)   # notes the ids rows name topics by

    def merge(self, other: "Facts") -> None:
        coverage.merge(self.cov, other.cov)
        self.names.add(other.names.names)
        self.names.seen_ids |= other.names.seen_ids
        for name, kinds in other.kinds.items():
            self.kinds.setdefault(name, set()).update(kinds)
        self.captures.update(other.captures)
        self.errors.extend(other.errors)
        for source, (conns, kafka, tls) in other.stitched.items():
            have = self.stitched.setdefault(source, [0, 0, {}])
            have[0], have[1] = have[0] + conns, have[1] + kafka
            for status, n in tls.items():
                have[2][status] = have[2].get(status, 0) + n
        self.tap.extend(other.tap)
        self.features.extend(other.features)
        self.metadata_complete |= other.metadata_complete
        self.links.extend(getattr(other, "links", ()))
        self.txn_ends.extend(getattr(other, "txn_ends", ()))
        self.holes.extend(getattr(other, "holes", ()))
        self.carriers.update(getattr(other, "carriers", ()))
        self.replicas |= getattr(other, "replicas", set())
        if getattr(other, "batch_names", None) is not None:
            self.batch_names.merge(other.batch_names)
        if getattr(other, "marker_names", None) is not None:
            self.marker_names.merge(other.marker_names)
        for src, ids in getattr(other, "cluster_ids", {}).items():
            self.cluster_ids.setdefault(src, set()).update(ids)

    def settle_names(self) -> None:
        """Names the batches give to the topic ids nothing else names (BatchNames), then those the
        transactions' markers give (MarkerNames), added once all the work is in: every later step
        reads `names` (the folds' context, the findings)."""
        for voter, label in ((self.batch_names, "batches"), (self.marker_names, "markers")):
            learned = voter.names(self.names.names)
            if learned:
                self.names.add(learned)
                self.cov[f"topic_ids_named_by_{label}"] = dict(sorted(learned.items()))

    def capture_holes(self):
        """The captures' holes (audit.capture_holes), their files in the order they were read;
        made once for the facts known (the settled context and the report share it; a live audit's
        facts grow between checkpoints)."""
        if not self.holes:
            return None
        key = (len(self.holes), len(self.carriers), tuple(self.captures))
        made = self._holes_made
        if made is None or made[0] != key:
            made = self._holes_made = (key, capture_holes.CaptureHoles(self.holes, self.carriers, self.captures))
        return made[1]

    def summaries(self) -> dict:
        """The capture summaries, the connections stitched across files counted in their first
        file's (once)."""
        for source, (conns, kafka, tls) in self.stitched.items():
            if source in self.captures:
                self.captures[source].connections += conns
                self.captures[source].kafka_connections += kafka
                for status, n in tls.items():
                    self.captures[source].tls[status] = self.captures[source].tls.get(status, 0) + n
        self.stitched = {}
        return self.captures

    def reference_time(self) -> int | None:
        if self.side == "disk":
            return self.cov.get(coverage.LATEST)
        last = [s.last_ts for s in self.captures.values() if s.last_ts is not None]
        return int(max(last) * 1000) if last else None


def feature_rows(table: pa.Table) -> list[dict]:
    """The FeatureLevelRecords of a metadata_record chunk, as latest_features reads them."""
    import pyarrow.compute as pc

    mask = pc.fill_null(pc.equal(table.column("record_type"), "FEATURE_LEVEL_RECORD"), False)
    if not pc.any(mask).as_py():
        return []
    cols = ["source", "offset", "record_type", "issue", "feature", "feature_level"]
    return table.filter(mask).select(cols).to_pylist()


def cluster_transaction_version(features: list[dict], complete: bool) -> int | None:
    """The finalized transaction.version the metadata gives: the log's or a snapshot's newest
    record; a feature no record of a whole history finalizes is at level 0 (Kafka's default);
    a bootstrap.checkpoint alone only where it says 2 or more (it holds the level the cluster
    was formatted with, which kafka-features may have raised since)."""
    logged = [r for r in features if not str(r["source"]).endswith("bootstrap.checkpoint")]
    tv = latest_features(logged).get("transaction.version", 0 if complete else None)
    if tv is None:
        boot = latest_features(features).get("transaction.version")
        tv = boot if boot is not None and boot >= 2 else None
    return tv


def complete_metadata(table: pa.Table) -> bool:
    """Whether a metadata_record chunk starts a whole history: a KRaft snapshot's records, or a
    metadata log's offset 0 (not a bootstrap.checkpoint: features may be raised after it)."""
    import pyarrow.compute as pc

    src = table.column("source")
    ours = pc.match_substring(src, "__cluster_metadata-")   # not __remote_log_metadata's rows
    snap = pc.and_(pc.ends_with(src, ".checkpoint"), pc.invert(pc.ends_with(src, "bootstrap.checkpoint")))
    log0 = pc.and_(pc.ends_with(src, ".log"), pc.equal(table.column("offset"), 0))
    log0, snap = pc.and_(log0, ours), pc.and_(snap, ours)
    return bool(pc.any(pc.fill_null(pc.or_(snap, log0), False)).as_py())


def keep_rules(select=(), ignore=()) -> Callable[[dict], bool]:
    selected, ignored = set(select), set(ignore)

    def keep(f: dict) -> bool:
        return (not selected or f["rule"] in selected) and f["rule"] not in ignored
    return keep


@dataclass
class Audit:
    """An audit: its side and sources, its folds (bound to the inputs' layout), the reference time
    given (`now_ms`), the rules kept, a tap, and (wire) topic names known from elsewhere."""

    side: str                      # "disk" (log dirs) | "wire" (captures)
    paths: list[str]
    folds: tuple[Fold, ...] = ()
    now_ms: int | None = None
    keep: Callable[[dict], bool] = field(default=keep_rules())
    tap: Callable | None = None
    layout: object = None          # disk: the sources.logdir.Plan of the paths
    options: object = None         # sources.segments.Options | sources.pcap.PcapOptions
    names: dict | None = None
    # facts of the other feed (`kaudit audit`, disk side): {"two_pc_inits": ...} (folds.Context)
    known: dict | None = None

    streamed: tuple[Fold, ...] = field(init=False)
    buffered: tuple[Fold, ...] = field(init=False)

    def __post_init__(self):
        """A fold streams when the sources deliver its keys one after the other in its order: a
        log dir's rows of the kinds tagged `partitioned` (model.RowKind), for a fold keyed and
        ordered as STREAM; the others buffer."""
        streams = [self.side == "disk" and (f.key, f.order) == STREAM
                   and all(ROW_KINDS[k].partitioned for k in f.inputs) for f in self.folds]
        self.streamed = tuple(f for f, s in zip(self.folds, streams) if s)
        self.buffered = tuple(f for f, s in zip(self.folds, streams) if not s)

    def route(self, fold: Fold) -> tuple[str, ...]:
        """The columns a buffered fold's rows may be shared out by: its key, less `topic` on the
        wire (named only once every capture is read), none when its prepare needs it all."""
        if fold.prepare is not None and not fold.prepare_by_key:
            return ()
        return tuple(c for c in fold.key if self.side == "disk" or c != "topic")

    def facts(self) -> Facts:
        return Facts(self.side, self.names)

    def settle(self, ctx: Context, facts: Facts) -> None:
        """The context every fold finishes with, from the facts of all the work."""
        ctx.reference_time_ms = self.now_ms if self.now_ms is not None else facts.reference_time()
        if facts.features or facts.metadata_complete:
            ctx.cluster_transaction_version = cluster_transaction_version(facts.features, facts.metadata_complete)
        if facts.links:
            ctx.producer_lineage = txn_lineage.build(facts.links)   # {}: built, nothing to link
        if self.side == "wire":
            facts.settle_names()
            ctx.topic_names = facts.names.names
            ctx.txn_ends = txn_lineage.ends_by_producer(facts.txn_ends) or None
            ctx.capture_holes = facts.capture_holes()
            ctx.replica_brokers = frozenset(facts.replicas) or None
        if self.known:
            ctx.two_pc_inits = self.known.get("two_pc_inits")
        elif self.side == "wire" and facts.links:   # the captures' own InitProducerIds (wire-lso)
            ctx.two_pc_inits = txn_lineage.two_pc_inits(facts.links) or None

    def so_far(self, ctx: Context, facts: Facts) -> None:
        """A live audit's context between checkpoints: the producers' lineage from the facts known
        so far, for the streamed folds that read it as rows arrive (wire-produce: KIP-360 moves),
        and the captures' two-phase-commit InitProducerIds, for the settlers (wire-lso)."""
        if facts.links and len(facts.links) != facts.linked:
            facts.linked = len(facts.links)
            ctx.producer_lineage = txn_lineage.build(facts.links) or None
            if self.side == "wire" and not self.known:
                ctx.two_pc_inits = txn_lineage.two_pc_inits(facts.links) or None
        if self.side == "wire" and facts.txn_ends:
            ctx.txn_ends = txn_lineage.ends_by_producer(facts.txn_ends) or None
        if self.side == "wire" and facts.holes:
            ctx.capture_holes = facts.capture_holes()

    def context(self, ctx: Context, facts: Facts, fold: Fold) -> Context:
        """The context a buffered fold runs with; a live audit's, before `settle`, with the
        transactional ids' lineage known so far."""
        lineage = ctx.producer_lineage
        if lineage is None and facts.links:
            lineage = txn_lineage.build(facts.links) or None
        return dataclasses.replace(ctx, selected_kinds=frozenset(facts.kinds.get(fold.name, ())),
                                   producer_lineage=lineage)

    def clusters(self, facts: Facts):
        """The inputs' cluster ids: each log dir's meta.properties; each capture's Metadata
        responses (Facts.cluster_ids)."""
        from kaudit.audit.stories import clusters

        if self.side == "disk":
            return clusters.from_layout(self.layout)
        return clusters.ClusterMap(captures=getattr(facts, "cluster_ids", None))

    def result(self, findings: list[dict], facts: Facts, errors: list[str], engine: str = "local",
               internal: list[str] = ()) -> AuditRun:
        """The run's report data, the same whichever executor gathered `facts`."""
        cov = facts.cov
        ref = self.now_ms if self.now_ms is not None else facts.reference_time()
        cov.pop(coverage.LATEST, None)
        if self.side == "disk":
            cov["files"] = sum(1 for t in self.layout.targets if t.kind != "skipped")
            cov["bytes"] = self.layout.total_bytes
            if self.layout.remote_not_read:
                cov["remote_not_read"] = [dict(r) for r in self.layout.remote_not_read]
        else:
            findings = facts.names.name_findings(findings)
            coverage.note_names(cov, facts.names.names)
        coverage.settle(cov)
        if self.side == "wire":
            captures = facts.summaries()
            cov["packets"] = sum(s.packets for s in captures.values())
            cov["captures"] = {p: {"packets": s.packets, "tcp_packets": s.tcp_packets,
                                   "kafka_connections": s.kafka_connections,
                                   **({"tls": dict(s.tls)} if s.tls else {})} for p, s in captures.items()}
        if internal:
            cov["internal_errors"] = list(internal)
        clusters = self.clusters(facts)
        return AuditRun(findings=sort_findings(findings, clusters), coverage=cov, reference_time_ms=ref,
                        clusters=clusters,
                        errors=errors + [e for _, e in sorted(facts.errors, key=lambda x: x[0])], engine=engine,
                        topic_names=facts.names.names if self.side == "wire" else {},
                        internal_errors=list(internal),
                        capture_holes=facts.capture_holes() if self.side == "wire" else None)


def disk_audit(paths: list[str], *, now_ms=None, select=(), ignore=(), tap=None, max_batch_bytes: int = 64 << 20,
               deep: bool = False, folds: tuple[Fold, ...] | None = None, known: dict | None = None,
               layout=None) -> Audit:
    """The audit of log dirs: the disk folds, the replicas fold bound to the partitions the
    inputs hold in several log dirs and to each log dir's cluster; `known`: facts of the
    captures audited with them (Audit.known); `layout`: the paths' plan, when already made."""
    from kaudit.sources.logdir import log_dir_clusters, plan, replicated_partitions
    from kaudit.sources.segments import Options

    layout = plan(paths) if layout is None else layout
    clusters = log_dir_clusters(layout)
    replicated = replicated_partitions(layout, clusters)
    bound = tuple(f.bind(replicated, clusters, layout) for f in (kaudit.audit.DISK_FOLDS if folds is None else folds))
    if layout.remote_not_read:   # tiered ranges no input holds: not read, not lost (sources.remote)
        from kaudit.sources.remote import unread_spans

        spans = unread_spans(layout.remote_not_read)
        bound = tuple(f.bind_unread(spans) if hasattr(f, "bind_unread") else f for f in bound)
    return Audit("disk", paths, bound, now_ms, keep_rules(select, ignore), tap, layout,
                 Options(deep=deep, max_batch_bytes=max_batch_bytes), known=known)


def wire_audit(paths: list[str], options, *, now_ms=None, select=(), ignore=(), tap=None, names=None,
               folds: tuple[Fold, ...] | None = None) -> Audit:
    """The audit of captures; `names`: topic id -> name facts from elsewhere (log dirs)."""
    return Audit("wire", paths, kaudit.audit.WIRE_FOLDS if folds is None else folds, now_ms, keep_rules(select, ignore),
                 tap, options=options, names=names)


class Work:
    """One piece of an audit's work - the whole input (local engine), one task or one shuffle
    partition (Spark): its facts and tap (`note`), the streamed folds it feeds when it holds their
    keys whole (`stream`), the buffered folds' selections (`select`), and their findings (`finish`)."""

    def __init__(self, audit: Audit, stream: bool = True, tap=None):
        self.audit = audit
        self.ctx = Context(reference_time_ms=audit.now_ms)
        self.facts = audit.facts()
        self.tap = tap
        self.states = [(f, f.make(self.ctx)) for f in audit.streamed] if stream else []
        self.selected: dict[str, list[tuple[str, pa.Table]]] = {f.name: [] for f in audit.buffered}
        self.findings: list[dict] = []
        self.internal: list[str] = []

    def note(self, kind: str, table: pa.Table) -> None:
        self.facts.add(kind, table)
        if self.tap is not None:
            self.tap(kind, table)

    def fold(self, kind: str, table: pa.Table) -> None:
        self.stream(kind, table)
        self.select(kind, table)

    def stream(self, kind: str, table: pa.Table, selected: dict | None = None) -> None:
        """Feed the streamed folds a chunk (`selected`: their selections, made elsewhere)."""
        keep = self.audit.keep
        for f, state in self.states:
            sel = f.select(kind, table) if selected is None else selected.get(f.name)
            if sel is not None:
                self.findings.extend(x for x in state.feed(kind, sel) if keep(x))

    def select(self, kind: str, table: pa.Table) -> None:
        for f in self.audit.buffered:
            sel = f.select(kind, table)
            if sel is not None:
                self.selected[f.name].append((kind, sel))
                self.facts.kinds.setdefault(f.name, set()).add(kind)

    def finish(self, buffered: bool = True, runner=None) -> list[dict]:
        """The findings: the streamed folds finished, then (`buffered`) the buffered folds run over
        their selections, with the context settled from the facts. `runner(work, folds)` runs
        the buffered folds (their findings and internal errors in the folds' order); by default
        `run_folds`, one after the other."""
        self.audit.settle(self.ctx, self.facts)
        keep, out = self.audit.keep, self.findings
        for f, state in self.states:
            out.extend(x for x in state.finish() if keep(x))
            self.internal.extend(f"{f.name}: {e}" for e in state.order_errors)
        if buffered:
            out.extend((runner or Work.run_folds)(self, self.audit.buffered))
        self.findings = []
        return out

    def run_folds(self, folds) -> list[dict]:
        """The findings of buffered folds over their selections (which are let go), in order."""
        keep, out = self.audit.keep, []
        for f in folds:
            items = self.selected.pop(f.name)
            out.extend(x for x in fold_selection(f, items, self.audit.context(self.ctx, self.facts, f),
                                                 self.internal) if keep(x))
        return out


def fold_selection(fold: Fold, items: list[tuple[str, pa.Table]], ctx: Context,
                   internal: list | None = None) -> Iterator[dict]:
    """A buffered fold over its whole selection (folds.run_selection), the wire's topics named
    first: before any key groups the rows."""
    items[:] = named(items, ctx)
    return run_selection(fold, items, ctx, internal)


def named(items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
    """A buffered fold's selection with the wire's topics named (TopicNames.label)."""
    if ctx.topic_names is None:
        return items
    names = TopicNames(ctx.topic_names)
    return [(kind, names.label(t)) for kind, t in items]
