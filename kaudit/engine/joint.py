"""`kaudit audit`: the wire audit and the disk audit in one run, and their join (audit/joint/join.py).

The captures are audited first, with a tap on their decode (audit/joint/join_rows.py: their selection
is small); the log dirs then, with a tap keeping only the batches the join can use. Either
engine runs both audits.
"""

from __future__ import annotations

import pyarrow as pa

from kaudit.audit.joint import acked_loss as AL
from kaudit.audit.joint import join as J
from kaudit.audit.joint import reader_join as RJ
from kaudit.audit.joint.settle import settle_wire
from kaudit.audit import sort_findings
from kaudit.audit.joint.join_rows import (END_TXN_TAP, INIT_TAP, PRODUCE_TAP, READER_BATCH_TAP, READER_FETCH_TAP,
                                          DiskTap, WireTap, two_pc_inits)
from kaudit.engine import local
from kaudit.engine.plan import AuditRun, keep_rules
from kaudit.sources.logdir import plan
from kaudit.sources.topics import TopicNames, from_plan


def _rows(tables: list[pa.Table], names: TopicNames | None = None) -> list[dict]:
    """The rows of some selections; `names`: their topics named (or labelled by id) first."""
    if not tables:
        return []
    t = pa.concat_tables(tables)
    if names is not None:
        t = names.label(t)
    return t.to_pylist()


def _readers(wire_tap: WireTap, disk_tap: DiskTap, names: TopicNames, wire_findings: list[dict],
             jcov: dict) -> list[dict]:
    """The readers' join (audit/joint/reader_join.py); an aborted read the wire audit already reported
    from the capture's own evidence is not reported again."""
    inp = RJ.ReaderInput(fetch=_rows(wire_tap.of(READER_FETCH_TAP.name), names),
                         batches=_rows(wire_tap.of(READER_BATCH_TAP.name), names),
                         disk=_rows(disk_tap.of("reader")), txnindex=_rows(disk_tap.of("txnindex")),
                         ranges=disk_tap.ranges)
    jcov.update(reader_responses=len(inp.fetch), reader_batches=len(inp.batches),
                reader_disk_batches=len(inp.disk), reader_txnindex_entries=len(inp.txnindex))
    if not inp.fetch:
        return []
    done = {_read_key(f) for f in wire_findings if f["rule"] == "aborted-read"}
    return [f for f in RJ.join_readers(inp) if f["rule"] != "aborted-read" or _read_key(f) not in done]


def _read_key(f: dict) -> tuple:
    return (f["connection"], f["first_ts_ms"], f["producer_id"], f["first_offset"], f["last_offset"])


def audit_both(pcaps: list[str], segments: list[str], options, *, now_ms: int | None = None,
               select=(), ignore=(), max_batch_bytes: int = 64 << 20, jobs: int | None = None,
               progress: bool = False, spark_options=None) -> AuditRun:
    disk_names = from_plan(plan(segments))   # partition.metadata names the wire's topic ids too
    engine, wire_kw, disk_kw = local, {}, {"jobs": jobs, "progress": progress}
    if spark_options is not None:
        from kaudit.engine import spark as engine

        wire_kw = disk_kw = {"spark_options": spark_options}
    wire_tap = WireTap()
    wire = engine.audit_pcaps(pcaps, options, now_ms=now_ms, select=select, ignore=ignore, tap=wire_tap,
                              topic_names=disk_names, **wire_kw)
    names = TopicNames({**disk_names, **wire.topic_names})
    produce = _rows(wire_tap.of(PRODUCE_TAP.name), names)
    disk_tap = DiskTap(produce, _rows(wire_tap.of(READER_BATCH_TAP.name), names))
    # what the capture knows that the log dirs' transactions fold needs (KIP-939 two-phase commit)
    inits = two_pc_inits(_rows(wire_tap.of(INIT_TAP.name)))
    disk = engine.audit_segments(segments, now_ms=now_ms, select=select, ignore=ignore,
                                 max_batch_bytes=max_batch_bytes, tap=disk_tap,
                                 known={"two_pc_inits": inits} if inits else None, **disk_kw)
    inp = J.JoinInput(produce=produce, end_txn=_rows(wire_tap.of(END_TXN_TAP.name)), disk=_rows(disk_tap.of("rows")),
                      ranges=disk_tap.ranges, cleaned=disk_tap.cleaned, at_acked=_rows(disk_tap.of("acked")),
                      epoch_starts=disk_tap.epoch_starts, latest=disk_tap.latest,
                      holes=wire.capture_holes)
    joined, jcov = J.join(inp)
    # the partition's leadership and loss findings told which of their offsets clients were given
    AL.annotate(disk.findings, inp.verdicts, produce)
    joined += _readers(wire_tap, disk_tap, names, wire.findings, jcov)
    joined = names.name_findings(joined)
    keep = keep_rules(select, ignore)
    run = AuditRun(errors=wire.errors + disk.errors, engine=disk.engine, application_id=disk.application_id,
                   internal_errors=wire.internal_errors + disk.internal_errors)
    run.clusters = disk.clusters.merge(wire.clusters) if disk.clusters is not None else wire.clusters
    # the capture's suspicions the log decides (a re-send's first send stored once, or twice)
    wire_findings = settle_wire(wire.findings, joined)
    run.findings = sort_findings(wire_findings + disk.findings + [f for f in joined if keep(f)], run.clusters)
    jcov["disk_batches_kept"] = len(inp.disk)
    jcov["disk_batches_at_acknowledged_offsets"] = len(inp.at_acked)
    run.coverage = {"wire": wire.coverage, "disk": disk.coverage, "join": jcov}
    refs = [r for r in (wire.reference_time_ms, disk.reference_time_ms) if r is not None]
    run.reference_time_ms = now_ms if now_ms is not None else (max(refs) if refs else None)
    return run
