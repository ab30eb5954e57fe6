"""`kaudit audit`: the wire audit and the disk audit in one run, and their join (audit/join.py).

The captures are decoded first (their selection is small: a few columns of the Produce batches
and the EndTxn events); the log dirs then, keeping only the batches the join can use: those of
the producer ids seen on the wire, the non-idempotent ones whose CRC or offset a capture names,
the transaction markers of the wire's transactional producer ids, and each partition's offset
range per replica. Both audits run on the same decode pass (a tap on their chunk loops).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit import sort_findings
from kaudit.audit import join as J
from kaudit.audit.folds import Fold
from kaudit.engine.local import AuditRun, _keep, audit_pcaps, audit_segments
from kaudit.sources.logdir import plan
from kaudit.sources.topics import TopicNames, from_plan


def _produce_where(t: pa.Table):
    return pc.and_(pc.fill_null(pc.equal(t.column("source_kind"), "produce"), False),
                   pc.invert(pc.fill_null(t.column("is_control"), False)))


# What the join takes from the wire, as selections (no rule runs them): both engines select with
# them, the Spark engine in its tasks.
PRODUCE_TAP = Fold("join-produce", {"batch": J.PRODUCE_COLUMNS}, (), (), None, where={"batch": _produce_where})
END_TXN_TAP = Fold("join-end-txn", {"txn_event": J.END_TXN_COLUMNS}, (), (), None,
                   where={"txn_event": lambda t: pc.fill_null(pc.equal(t.column("event"), "END_TXN"), False)})
WIRE_TAPS = (PRODUCE_TAP, END_TXN_TAP)


class _WireTap:
    def __init__(self):
        self.produce: list[pa.Table] = []
        self.end_txn: list[pa.Table] = []

    def __call__(self, kind: str, t: pa.Table) -> None:
        for tap in WIRE_TAPS:
            sel = tap.select(kind, t)
            if sel is not None:
                self.add(tap.name, sel)

    def add(self, tap: str, selected: pa.Table) -> None:
        (self.produce if tap == PRODUCE_TAP.name else self.end_txn).append(selected)


class _DiskTap:
    """The log's batches the join can use (of the wire's producer ids, the markers of its
    transactional ones, non-idempotent batches a capture names by CRC or offset) and each
    partition's offset range per replica."""

    def __init__(self, produce: list[dict] | None = None, *, sets: dict | None = None):
        if sets is None:
            sets = self.sets_of(produce)
        self.sets = sets
        self.pids, self.txn_pids, self.crcs, self.offsets = (
            pa.array(sets[k], pa.int64()) for k in ("pids", "txn_pids", "crcs", "offsets"))
        self.rows: list[pa.Table] = []
        self.ranges: dict = {}
        self.cleaned: dict = {}   # (replica, topic, partition) -> cleaner-offset-checkpoint offset

    @staticmethod
    def sets_of(produce: list[dict]) -> dict:
        anon = [r for r in produce if r["producer_id"] is None or r["producer_id"] < 0]
        return {
            "pids": sorted({r["producer_id"] for r in produce if r["producer_id"] is not None and r["producer_id"] >= 0}),
            "txn_pids": sorted({r["producer_id"] for r in produce if r["is_transactional"]
                                and r["producer_id"] is not None and r["producer_id"] >= 0}),
            "crcs": sorted({r["crc"] for r in anon if r["crc"] is not None}),
            "offsets": sorted({r["response_base_offset"] for r in anon
                               if r["response_base_offset"] is not None and r["response_base_offset"] >= 0}),
        }

    def __call__(self, kind: str, t: pa.Table) -> None:
        if kind == "checkpoint_entry" and t.num_rows:
            for rep, top, part, name, off in zip(*(t.column(c).to_pylist() for c in
                                                   ("replica", "topic", "partition", "checkpoint", "offset"))):
                if name == "cleaner-offset-checkpoint" and off is not None:
                    self.cleaned[(rep, top, part)] = max(off, self.cleaned.get((rep, top, part), -1))
            return
        if kind != "batch" or not t.num_rows:
            return
        t = t.filter(pc.and_(pc.fill_null(pc.equal(t.column("source_kind"), "log"), False),
                             pc.invert(pc.ends_with(t.column("source"), ".checkpoint"))))
        if not t.num_rows:
            return
        g = t.group_by(["replica", "topic", "partition"]).aggregate(
            [("base_offset", "min"), ("last_offset", "max")])
        merge_ranges(self.ranges, zip(*(g.column(c).to_pylist() for c in
                                        ("replica", "topic", "partition", "base_offset_min", "last_offset_max"))))
        pid = t.column("producer_id").cast(pa.int64())
        control = pc.fill_null(t.column("is_control"), False)
        data = pc.and_(pc.invert(control), pc.is_in(pid, value_set=self.pids))
        marker = pc.and_(control, pc.is_in(pid, value_set=self.txn_pids))
        anon = pc.and_(pc.invert(control), pc.fill_null(pc.less(pid, 0), True))
        anon = pc.and_(anon, pc.or_(pc.is_in(t.column("crc").cast(pa.int64()), value_set=self.crcs),
                                    pc.is_in(t.column("base_offset"), value_set=self.offsets)))
        keep = pc.fill_null(pc.or_(pc.or_(data, marker), anon), False)
        t = t.filter(keep)
        if t.num_rows:
            self.rows.append(t.select(list(J.DISK_COLUMNS)))


def _rows(tables: list[pa.Table], names: TopicNames | None = None) -> list[dict]:
    """The rows of some selections; `names`: their topics named (or labelled by id) first."""
    if not tables:
        return []
    t = pa.concat_tables(tables)
    if names is not None:
        t = names.label(t)
    return t.to_pylist()


def merge_ranges(into: dict, ranges) -> dict:
    for rep, top, part, lo, hi in ranges:
        rng = into.setdefault((rep, top, part), [lo, hi])
        rng[0], rng[1] = min(rng[0], lo), max(rng[1], hi)
    return into


def audit_both(pcaps: list[str], segments: list[str], options, *, now_ms: int | None = None,
               select=(), ignore=(), max_batch_bytes: int = 64 << 20, jobs: int | None = None,
               progress: bool = False, spark_options=None) -> AuditRun:
    disk_names = from_plan(plan(segments))   # partition.metadata names the wire's topic ids too
    if spark_options is not None:
        from kaudit.engine import spark

        wire_tap = _WireTap()
        wire = spark.audit_pcaps(pcaps, options, now_ms=now_ms, select=select, ignore=ignore,
                                 spark_options=spark_options, taps=wire_tap, topic_names=disk_names)
        names = TopicNames({**disk_names, **wire.topic_names})
        produce = _rows(wire_tap.produce, names)
        disk_tap = _DiskTap(produce)
        disk = spark.audit_segments(segments, now_ms=now_ms, select=select, ignore=ignore,
                                    max_batch_bytes=max_batch_bytes, spark_options=spark_options, tap=disk_tap)
    else:
        wire_tap = _WireTap()
        wire = audit_pcaps(pcaps, options, now_ms=now_ms, select=select, ignore=ignore, tap=wire_tap,
                           topic_names=disk_names)
        names = TopicNames({**disk_names, **wire.topic_names})
        produce = _rows(wire_tap.produce, names)
        disk_tap = _DiskTap(produce)
        disk = audit_segments(segments, now_ms=now_ms, select=select, ignore=ignore,
                              max_batch_bytes=max_batch_bytes, jobs=jobs, progress=progress, tap=disk_tap)
    inp = J.JoinInput(produce=produce, end_txn=_rows(wire_tap.end_txn), disk=_rows(disk_tap.rows),
                      ranges=disk_tap.ranges, cleaned=disk_tap.cleaned)
    joined, jcov = J.join(inp)
    joined = names.name_findings(joined)
    keep = _keep(set(select), set(ignore))
    run = AuditRun(errors=wire.errors + disk.errors, engine=disk.engine, application_id=disk.application_id)
    run.findings = sort_findings(wire.findings + disk.findings + [f for f in joined if keep(f)])
    jcov["disk_batches_kept"] = len(inp.disk)
    run.coverage = {"wire": wire.coverage, "disk": disk.coverage, "join": jcov}
    refs = [r for r in (wire.reference_time_ms, disk.reference_time_ms) if r is not None]
    run.reference_time_ms = now_ms if now_ms is not None else (max(refs) if refs else None)
    return run
