"""The findings of the transaction rules (txn_rules.py) over one producer's facts: the rules
decide, this module says it - place, evidence (file and byte position, or capture and frame),
the producer's story around it, who ended the transaction, and the remediation. Every finding
names its transaction (`details["transaction"]`: the same from wire and disk evidence)."""

from __future__ import annotations

from kaudit.audit.registry import evidence, finding
from kaudit.audit.txn_model import Part, ProducerTxns, Transaction, group
from kaudit.audit.txn_rules import (
    ABORT_HINT,
    coordinator_abort,
    coordinator_epoch_regression,
    dangling_transaction,
    hanging_transaction,
    late_transactional_write,
    nontransactional_write,
    stray_marker,
    torn_transaction,
    unregistered_partition,
)
from kaudit.timefmt import iso_ms

TIMELINE = 16   # lines of the producer's story a wire finding carries


def judge(pt: ProducerTxns, reference_ms: int | None) -> list[dict]:
    """Every finding of one producer's transactions. Linear in its parts and coordinator
    transactions (the lookups are indexed: CoordView.registered, .follows)."""
    out = list(pt.view.findings)
    txns = group(pt)
    of = {id(p): t for t in txns for p in t.parts}
    say = _Say(pt, of)
    for tp, parts in pt.partitions.items():
        prev_ce = None
        last_ce = None              # the latest marker's coordinator epoch before the part
        unregistered_done = False
        for part in parts:
            m = part.marker
            if m is not None:
                if coordinator_epoch_regression(prev_ce, m.coordinator_epoch):
                    out.append(say.part("coordinator-epoch-regression", part,
                               f"producer {part.producer_id} {m.result} marker at {_at(m)} has coordinator epoch "
                               f"{m.coordinator_epoch}, below the earlier {prev_ce}",
                               {"previous_coordinator_epoch": prev_ce, "coordinator_epoch": m.coordinator_epoch}))
                if m.coordinator_epoch is not None:
                    prev_ce = m.coordinator_epoch if prev_ce is None else max(prev_ce, m.coordinator_epoch)
            if nontransactional_write(part):
                b = part.nontxn[0]
                out.append(say.part(
                    "non-transactional-write-in-transaction", part,
                    f"producer {part.producer_id} wrote {sum(x.get('batches', 1) for x in part.nontxn)} "
                    f"non-transactional batch(es) from offset {b['base_offset']} inside its transaction "
                    f"open since offset {part.start_offset}",
                    {"offsets": [[x["base_offset"], x["last_offset"]] for x in part.nontxn]},
                    extra=[evidence(b["source"], b["position"], "batch")]))
            if stray_marker(part):
                out.append(say.part("stray-marker", part,
                                    f"{m.result} marker of producer {part.producer_id} at {_at(m)} with no "
                                    f"transactional data before it" + _writer(m),
                                    {"coordinator_epoch": m.coordinator_epoch, "writer": m.writer}))
            late = late_transactional_write(part, pt)
            if late is not None:
                out.append(say.late(part, *late))
            if not unregistered_done and unregistered_partition(part, pt):
                unregistered_done = True
                out.append(say.unregistered(part))
            if dangling_transaction(part, pt):
                out.append(say.dangling(part, hanging_transaction(part, pt, reference_ms), last_ce))
            if m is not None and m.coordinator_epoch is not None:
                last_ce = m.coordinator_epoch
    for t in txns:
        cause = coordinator_abort(t, pt)
        if cause is not None:
            out.append(say.coordinator_abort(t, cause))
        results = {tp: r for tp, r in t.results.items() if r is not None or pt.coverage.sees_marker(tp)}
        if t.coord is not None and t.coord.result is not None and any(r not in (None, t.coord.result)
                                                                        for r in results.values()):
            results.setdefault("(coordinator)", t.coord.result)
        if torn_transaction(results):
            out.append(say.torn(t, results))
    return out


def _at(m) -> str:
    return f"offset {m.offset}" if m.offset is not None else f"frame {m.position}"


def _writer(m) -> str:
    return f" (written by {m.client_id!r}, not the coordinator)" if m.writer == "admin" else ""


def _off(x) -> str:
    return "?" if x is None else str(x)


class _Say:
    """Builds the findings of one producer (the fields, evidence and story they share)."""

    def __init__(self, pt: ProducerTxns, of: dict):
        self.pt = pt
        self.of = of
        self.wire = pt.coverage.source == "wire"
        ids = sorted(i for i in pt.view.transactional_ids if i)
        self.tid = ids[0] if len(ids) == 1 else None

    def where(self, part: Part) -> str:
        if self.wire:
            return part.tp
        return f"{part.tp} (replicas {','.join(str(r) for r in part.replicas)})"

    def fields(self, part: Part, **kw) -> dict:
        t = self.of.get(id(part))
        tid = (part.coord.transactional_id if part.coord else None) or (t.transactional_id if t else None) or self.tid
        first = part.data[0] if part.data else None
        out = dict(topic=part.topic, partition=part.partition,
                   replica=None if self.wire else ",".join(str(r) for r in part.replicas),
                   producer_id=part.producer_id,
                   producer_epoch=part.data_epoch if part.data else (part.marker.epoch if part.marker else None),
                   transactional_id=tid, first_offset=part.start_offset,
                   last_offset=part.marker.offset if part.marker and part.marker.offset is not None else part.last_data_offset,
                   first_ts_ms=part.first_ts, last_ts_ms=part.last_ts)
        if self.wire:
            out["connection"] = (first or {}).get("connection") or (part.marker.connection if part.marker else None)
            out["client_id"] = (first or {}).get("client_id") or (part.marker.client_id if part.marker else None)
            if first is not None:
                out["base_sequence"], out["last_sequence"] = first.get("base_sequence"), part.data[-1].get("last_sequence")
        out.update(kw)
        return out

    def evidence(self, part: Part) -> list[dict]:
        kind = "produce" if self.wire else "batch"
        ev = [evidence(b["source"], b["position"], kind, "first data" if i == 0 else None)
              for i, b in enumerate(part.data[: 8 if self.wire else 1])]
        if part.marker is not None:
            ev.append(evidence(part.marker.source, part.marker.position, "marker", _writer(part.marker).strip() or None))
        return ev

    def details(self, part: Part | None, txn: Transaction | None, extra: dict) -> dict:
        txn = txn or (self.of.get(id(part)) if part is not None else None)
        d = dict(extra)
        if txn is not None:
            d["transaction"] = txn.key
            who, how = txn.ended_by()
            if who is not None:
                d["ended_by"] = who if how is None else f"{who} ({how})"
        d["transaction_version"] = self.pt.version
        admin = [p.marker.client_id for p in (txn.parts if txn is not None else [part] if part is not None else [])
                 if p.marker is not None and p.marker.writer == "admin"]
        if admin:
            d["admin_client"] = admin[0]   # kafka-transactions.sh abort's admin client
        return d

    def timeline(self) -> list[str] | None:
        return self.pt.timeline[-TIMELINE:] if self.pt.timeline else None

    def part(self, rule_id: str, part: Part, text: str, details: dict, *, extra=(), **kw) -> dict:
        return finding(rule_id, f"{self.where(part)}: {text}", evidence=list(extra) + self.evidence(part),
                       details=self.details(part, None, details), timeline=self.timeline(), **self.fields(part, **kw))

    def late(self, part: Part, why: str, batches: list[dict]) -> dict:
        prev = part.previous.marker
        last = batches[-1]["last_offset"]
        text = (f"producer {part.producer_id}'s data at offsets {_off(part.start_offset)}-{_off(last)} reached the "
                f"partition after its previous {prev.result} marker at {_at(prev)}: {why}")
        # its own transaction aborted, the next one's COMMIT took it in: read_committed consumers
        # read aborted data - an atomicity break, as a torn transaction is
        exposed = prev.result == "ABORT" and part.marker is not None and part.marker.result == "COMMIT"
        return finding("late-transactional-write", f"{self.where(part)}: {text}",
                       severity="critical" if exposed else None,
                       evidence=self.evidence(part) + [evidence(prev.source, prev.position, "marker", "previous marker")],
                       details=self.details(part, None, {
                           "previous_marker_offset": prev.offset, "outcome": why,
                           "late_offsets": [[b["base_offset"], b["last_offset"]] for b in batches],
                           "accepted": all(b.get("response_error", 0) == 0 for b in batches)}),
                       timeline=self.timeline(), **self.fields(part, last_offset=last))

    def unregistered(self, part: Part) -> dict:
        view = self.pt.view
        accepted = all(b.get("response_error", 0) == 0 for b in part.data)
        how = ""
        if self.wire:
            how = ("; the broker accepted it: its leader did not verify the registration (KIP-890 "
                   "verification, Kafka 3.6+, would have refused it)" if accepted else "; unanswered")
        text = (f"producer {part.producer_id} wrote transactional data at offsets {_off(part.start_offset)}-"
                f"{_off(part.last_data_offset)} but no transaction of its coordinator ever registered {part.tp}{how}: "
                "no marker will end it")
        return self.part("unregistered-partition", part, text,
                         {"coordinator_partitions": sorted(view.registered), "registered": sorted(view.registered),
                          "accepted": accepted}, last_offset=part.last_data_offset)

    def dangling(self, part: Part, reasons: list[str], ce: int | None) -> dict:
        epoch = part.data_epoch
        start = part.start_offset
        cmd = ABORT_HINT.format(topic=part.topic, partition=part.partition,
                                offset=start if start is not None else "<first offset>")
        known = f"producer id {part.producer_id}, producer epoch {epoch}"
        if ce is not None:
            known += f", coordinator epoch {ce}"
        t = part.coord
        details = {"start_offset": start, "last_data_offset": part.last_data_offset, "coordinator_epoch": ce,
                   "reasons": reasons, "coordinator_state": self.pt.view.last_state,
                   "end_txn": t.result if t is not None and t.ended_by == "client" else None}
        since = f" since {iso_ms(part.first_ts)}" if part.first_ts is not None else ""
        text = (f"producer {part.producer_id} epoch {epoch} has transactional data at offsets {_off(start)}-"
                f"{_off(part.last_data_offset)}{since} with no end marker"
                + (" by the end of the capture" if self.wire else ""))
        if reasons:
            return self.part("hanging-transaction", part, f"{text}: hanging ({'; '.join(reasons)})", details,
                             remediation=f"{cmd} ({known})")
        return self.part("dangling-transaction", part, f"{text} (still open at the coordinator)", details)

    def coordinator_abort(self, t: Transaction, cause: str) -> dict:
        parts = [p for p in t.parts if p.marker is not None or p.data]
        first = min(parts, key=lambda p: (p.tp, p.key)) if parts else None
        marker = next((p.marker for p in parts if p.marker is not None), None)
        data_epoch = t.epoch
        c = t.coord
        seen = marker is not None
        where = ",".join(sorted({p.tp for p in parts})) or "no partition"
        how = (f"ABORT markers at epoch {marker.epoch}" if seen else
               "its ABORT markers are not in the evidence")
        if c is not None and c.next_epoch is not None and cause == "fencing":
            how += f"; a new instance got epoch {c.next_epoch}"
        if cause != "fencing" and c is not None and c.timeout_ms and c.prepare_ts and c.start_ms:
            how += f" after {c.prepare_ts - c.start_ms} ms (timeout {c.timeout_ms} ms)"
        ev = self.evidence(first) if first is not None else []
        if c is not None:
            ev = [e for e in c.evidence if e["position"] is not None][-2:] + ev
        details = self.details(None, t, {
            "cause": cause, "partitions": sorted({p.tp for p in parts}), "data_epoch": data_epoch,
            "marker_epoch": marker.epoch if seen else None, "markers_seen": seen,
            "new_epoch": c.next_epoch if c is not None else None,
            "coordinator_epoch": marker.coordinator_epoch if seen else None,
            "timeout_ms": c.timeout_ms if c else None, "start_ms": c.start_ms if c else None,
            "prepare_ms": c.prepare_ts if c else None})
        fields = self.fields(first) if first is not None else dict(producer_id=t.producer_id)
        fields.update(producer_epoch=data_epoch, transactional_id=t.transactional_id or fields.get("transactional_id"),
                      first_ts_ms=t.start_ms, last_ts_ms=t.end_ms)
        return finding("coordinator-abort",
                       f"the coordinator aborted producer {t.producer_id}'s transaction (epoch {data_epoch}, "
                       f"{t.transactional_id!r}) on {where} by {cause}: {how}",
                       evidence=ev, details=details, timeline=self.timeline(), **fields)

    def torn(self, t: Transaction, results: dict) -> dict:
        parts = [p for p in t.parts if p.marker is not None]
        first = min(parts, key=lambda p: (p.tp, p.key)) if parts else t.parts[0]
        start = f" started at {iso_ms(t.start_ms)}" if t.start_ms is not None else ""
        ending = {}   # per partition, the part whose marker gave its result (the data's, as results)
        for p in sorted(parts, key=lambda p: bool(p.data)):
            ending[p.tp] = p
        details = self.details(None, t, {"results": results, "coordinator_result": t.coord.result if t.coord else None,
                                         "markers": {tp: p.marker.offset for tp, p in ending.items()},
                                         "writers": {tp: p.marker.writer for tp, p in ending.items() if p.marker.writer}})
        fields = self.fields(first, producer_epoch=t.epoch, first_ts_ms=t.start_ms, last_ts_ms=t.end_ms,
                             transactional_id=t.transactional_id or self.tid)

        def said(tp, r):
            m = ending[tp].marker if tp in ending else None
            by = (f" (an admin: WriteTxnMarkers from {m.client_id!r})" if m is not None and m.writer == "admin"
                  else "")
            return f"{tp}: {r or 'no marker'}{by}"
        desc = ", ".join(said(tp, r) for tp, r in sorted(results.items()) if tp != "(coordinator)")
        c = t.coord
        if c is not None and c.result is not None:
            desc += f"; the coordinator's result: {c.result}" + (
                f" ({c.ended_by}: {c.end_detail})" if c.ended_by and c.end_detail else "")
        if first.marker is not None:
            fields.update(first_offset=first.marker.offset, last_offset=first.marker.offset)
        return finding("torn-transaction",
                       f"producer {t.producer_id}'s transaction{start} ended differently across its "
                       f"partitions: {desc}",
                       evidence=[e for p in parts for e in self.evidence(p)], details=details,
                       timeline=self.timeline(), **fields)
