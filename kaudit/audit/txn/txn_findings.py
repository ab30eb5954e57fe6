"""The findings of the transaction rules (txn_rules.py) over one producer's facts: the rules
decide, this module says it - place, evidence (file and byte position, or capture and frame),
the producer's story around it, who ended the transaction, and the remediation. Every finding
names its transaction (`details["transaction"]`: the same from wire and disk evidence)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from kaudit.audit.registry import evidence, finding, fold_rules
from kaudit.audit.txn.txn_model import Part, ProducerTxns, Range, Transaction, group
from kaudit.audit.txn.txn_rules import ABORT_HINT, two_phase_commit
from kaudit.audit.thresholds import CLIENT_TIMEOUT_MS
from kaudit.timefmt import duration, iso_ms
from kaudit.ranges import offsets as offset_span

TIMELINE = 16   # lines of the producer's story a wire finding carries
FOLD = "transactions"   # the rules registered for this judge (registry.fold_rules)


class Judgement:
    """What the rules' checks read: one producer's history (`pt`), its transactions, the
    reference time, and the finding builder (`say`)."""

    def __init__(self, pt: ProducerTxns, reference_ms: int | None):
        self.pt = pt
        self.reference_ms = pt.reference_ms = reference_ms
        self.txns = group(pt)
        self.of = {id(p): t for t in self.txns for p in t.parts}
        self.say = _Say(pt, self.of)


def judge(pt: ProducerTxns, reference_ms: int | None) -> list[dict]:
    """Every finding of one producer's transactions: each registered transaction rule's check
    over its history, in registration order. Linear in its parts and coordinator transactions
    (the lookups are indexed: CoordView.registered, .follows)."""
    j = Judgement(pt, reference_ms)
    out: list[dict] = []
    for r in fold_rules(FOLD):
        if r.check is not None:
            out.extend(r.check(j))
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
        self._tail: list[str] | None = None
        self._ms: tuple[list, bool] | None = None   # the story's times in ms, and whether in order
        ids = sorted(i for i in pt.view.transactional_ids if i)
        self.tid = ids[0] if len(ids) == 1 else None
        if self.tid is None and not ids and pt.lineage is not None:
            self.tid = pt.lineage.transactional_id   # its records gone: the id's lineage names it

    def where(self, part: Part) -> str:
        if self.wire:
            return part.tp
        many = len(part.replicas) > 1
        return f"{part.tp} (replica{'s' if many else ''} {','.join(str(r) for r in part.replicas)})"

    def fields(self, part: Part, **kw) -> dict:
        t = self.of.get(id(part))
        tid = (part.coord.transactional_id if part.coord else None) or (t.transactional_id if t else None) or self.tid
        first = part.data[0] if part.data else None
        out = dict(topic=part.topic, partition=part.partition,
                   replica=None if self.wire else ",".join(str(r) for r in part.replicas),
                   producer_id=part.producer_id,
                   producer_epoch=part.data_epoch if part.data else (part.marker.epoch if part.marker else None),
                   transactional_id=tid, first_offset=part.start_offset,
                   last_offset=(part.marker.offset if part.marker and part.marker.offset is not None
                                and not part.borrowed_marker else part.last_data_offset),
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
            ev.append(evidence(part.marker.source, part.marker.position, "marker",
                               _writer(part.marker).strip().strip("()") or None))
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
        lin = self.pt.lineage
        if lin is not None:   # its transactional id's history across producer ids (txn_lineage)
            d["transactional_id_history"] = {"transactional_id": lin.transactional_id,
                                             "producer_ids": list(lin.producer_ids)}
            for key, m in (("previous_producer_id", lin.previous_move(self.pt.producer_id)),
                           ("next_producer_id", lin.next_move(self.pt.producer_id))):
                if m is not None:
                    d[key] = m.old if key == "previous_producer_id" else m.new
                    d[key.replace("producer_id", "move")] = m.text
        admin = [p.marker.client_id for p in (txn.parts if txn is not None else [part] if part is not None else [])
                 if p.marker is not None and p.marker.writer == "admin"]
        if admin:
            d["admin_client"] = admin[0]   # kafka-transactions.sh abort's admin client
        return d

    def timeline(self, txn: Transaction | None = None) -> list[str] | None:
        """The producer's story (wire): the last steps, or those of one transaction - from its
        start to its end - when given."""
        if not self.pt.timeline:
            return None
        if txn is not None and txn.start_ms is not None:
            lo, hi = txn.start_ms, txn.end_ms if txn.end_ms is not None else float("inf")
            steps = self._steps(lo, hi)
            if steps is not None:
                return self.pt.timeline[max(steps[0], steps[1] + 1 - TIMELINE): steps[1] + 1]
        if self._tail is None:   # the producer's last steps: the same for all its findings
            self._tail = self.pt.timeline[-TIMELINE:]
        return list(self._tail)

    def _steps(self, lo: float, hi: float) -> tuple[int, int] | None:
        """The first and last of the story's steps from `lo` to `hi` ms: by bisection over its
        times, which the replay gives in order (a scan where they are not) - not a walk of the
        whole story for each finding (a producer's long life: thousands of both)."""
        if self._ms is None:
            ms = [x[0] * 1000 for x in list.__iter__(self.pt.timeline)]
            self._ms = ms, all(a <= b for a, b in zip(ms, ms[1:]))
        ms, ordered = self._ms
        if ordered:
            first, end = bisect_left(ms, lo), bisect_right(ms, hi)
            return (first, end - 1) if first < end else None
        ks = [k for k, v in enumerate(ms) if lo <= v <= hi]
        return (ks[0], ks[-1]) if ks else None

    def replica_evidence(self, part: Part, pick=None) -> tuple[list[dict], list | None]:
        """The part's evidence (`pick(part)`, by default `evidence`) in each replica's own files
        - a part merged over replicas reads one replica's batches - and whose each piece is (None:
        one replica or the wire - the finding's replica says it)."""
        pick = pick or self.evidence
        if self.wire or len(part.copies) < 2:
            return pick(part), None
        ev, reps = [], []
        for rep, cp in sorted(part.copies.items(), key=lambda kv: str(kv[0])):
            got = pick(cp)
            ev.extend(got)
            reps.extend([rep] * len(got))
        return ev, reps

    def part(self, rule_id: str, part: Part, text: str, details: dict, *, extra=None, **kw) -> dict:
        """A finding of one part; `extra(part)`: evidence of its own before the part's (read in each
        replica's files, as the part's is)."""
        ev, reps = self.replica_evidence(part, (lambda p: extra(p) + self.evidence(p)) if extra else None)
        details = self.details(part, None, details)
        if reps is not None:
            details["evidence_replicas"] = reps
        return finding(rule_id, f"{self.where(part)}: {text}", evidence=ev,
                       details=details, timeline=self.timeline(), **self.fields(part, **kw))

    def said(self, part: Part, pick, own: list[dict], details: dict, after: bool = False) -> dict:
        """The evidence and details of a finding with the evidence `pick(part)` read in each
        replica's own files, before its `own` (`after`: after it)."""
        ev, reps = self.replica_evidence(part, pick)
        if reps is not None:
            mine = [None] * len(own)
            details = {**details, "evidence_replicas": mine + reps if after else reps + mine}
        return dict(evidence=own + ev if after else ev + own, details=details)

    @staticmethod
    def writer(m) -> str:
        return _writer(m)

    def plain(self, part: Part) -> dict:
        b = part.nontxn[0]
        return self.part("non-transactional-write-in-transaction", part,
                         f"producer {part.producer_id} wrote {sum(x.get('batches', 1) for x in part.nontxn)} "
                         f"non-transactional batch(es) from offset {b['base_offset']} inside its transaction "
                         f"open since offset {part.start_offset}",
                         {"offsets": [[x["base_offset"], x["last_offset"]] for x in part.nontxn]},
                         extra=lambda p: [evidence(x["source"], x["position"], "batch") for x in p.nontxn[:1]])

    def late(self, part: Part, why: str, batches: list[dict]) -> dict:
        prev = part.previous.marker
        last = batches[-1]["last_offset"]
        text = (f"producer {part.producer_id}'s data at {offset_span(_off(part.start_offset), _off(last))} reached the "
                f"partition after its previous {prev.result} marker at {_at(prev)}: {why}")
        # its own transaction aborted, the next one's COMMIT took it in: read_committed consumers
        # read aborted data - an atomicity break, as a torn transaction is
        exposed = prev.result == "ABORT" and part.marker is not None and part.marker.result == "COMMIT"
        details = self.details(part, None, {
            "previous_marker_offset": prev.offset, "outcome": why,
            "late_offsets": [[b["base_offset"], b["last_offset"]] for b in batches],
            "accepted": all(b.get("response_error", 0) == 0 for b in batches)})
        return finding("late-transactional-write", f"{self.where(part)}: {text}",
                       severity="critical" if exposed else None,
                       **self.said(part, self.evidence, [evidence(prev.source, prev.position, "marker", "previous marker")],
                                   details),
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
        undecided = self._undecided_aborts(part)
        if undecided:
            details["aborted_elsewhere"] = undecided
        if reasons:
            note = ""
            if undecided:
                # its transaction's ABORT at the data's epoch on other partitions: not the
                # coordinator's decision (an admin's abort writes it to the partitions it names)
                note = (f"; the ABORT at epoch {epoch} on {', '.join(undecided)} does not end it: an admin's "
                        "kafka-transactions.sh abort writes that marker to the partitions it names only"
                        + ("" if self.pt.coordinator_known else
                           " (the client's EndTxn ABORT would too, and the capture does not hold its coordinator "
                           "traffic)"))
            return self.part("hanging-transaction", part, f"{text}: hanging ({'; '.join(reasons)}){note}",
                             details, remediation=f"{cmd} ({known})")
        if two_phase_commit(part, self.pt):
            return self._prepared(part, text, details)
        if self.pt.coordinator_known and part.coord is not None and part.coord.result is None:
            # the coordinator lists it open, within its timeout: a transaction in progress when the
            # evidence was taken, what the rule's invariant allows - told at info
            return self.part("dangling-transaction", part, f"{text} (still open at the coordinator, within its "
                             "timeout: in progress when the evidence was taken)", details, severity="info")
        if not self.pt.coordinator_known:
            young = self._in_progress(part)
            if young is not None:
                # the coordinator's view is not in the evidence, and its age is within its timeout
                return self.part("dangling-transaction", part, f"{text} ({young}: a transaction in progress when "
                                 "the evidence ends, as far as it shows; the coordinator's view of it is not in the "
                                 "evidence)", details, severity="info")
        why = ("still open at the coordinator" if self.pt.coordinator_known else
               "within the transaction timeout; the coordinator's view of it is not in the evidence")
        return self.part("dangling-transaction", part, f"{text} ({why})", details)

    def _in_progress(self, part: Part) -> str | None:
        """How long an open part had been open at the reference time, where that is within the
        producer's transaction timeout (its InitProducerId's, else the client default's); None
        otherwise, or where the times are not known."""
        ref, start = self.pt.reference_ms, part.first_ts
        if ref is None or start is None:
            return None
        t = part.coord
        timeout = (t.timeout_ms if t is not None else None) or self.pt.view.timeout_ms
        limit = timeout or CLIENT_TIMEOUT_MS
        if ref - start > limit:
            return None
        whose = "the producer's" if timeout else "the clients' default"
        return f"open for {duration(ref - start)}, within {whose} transaction timeout of {duration(limit)}"

    def _undecided_aborts(self, part: Part) -> list[str]:
        """Wire: the other partitions of the part's transaction ended by an ABORT at its data's
        epoch that the coordinator's decision does not back (txn_fetched.decides)."""
        t = self.of.get(id(part))
        if not self.wire or t is None or part.data_epoch is None or (t.coord is not None and t.coord.result):
            return []
        return sorted({p.tp for p in t.parts if p is not part and p.tp != part.tp and p.marker is not None
                       and p.marker.result == "ABORT" and p.marker.epoch == part.data_epoch})

    def _prepared(self, part: Part, text: str, details: dict) -> dict:
        """A KIP-939 two-phase-commit transaction: open by design until its external transaction
        manager decides - what read_committed consumers wait for, and what to do."""
        tid = self.fields(part).get("transactional_id") or self.pt.init_transactional_id or "<transactional id>"
        details["two_phase_commit"] = True
        return self.part(
            "dangling-transaction", part,
            f"{text}: a two-phase-commit transaction (KIP-939), which its coordinator never times out: it "
            f"stays open - prepared, or still being written - until its external transaction manager commits "
            f"or aborts it; read_committed consumers of {part.tp} wait at offset {_off(part.start_offset)} "
            "until then", details,
            remediation=("Have the external transaction manager complete it (its recovery commits or aborts the "
                         "prepared transaction: a producer with the same transactional id, InitProducerId with "
                         "keepPreparedTxn=true, then completeTransaction). Only if that manager has lost its "
                         "decision for good, abort it: kafka-transactions.sh --bootstrap-server <broker> "
                         f"forceTerminateTransaction --transactionalId {tid}"))

    def coordinator_abort(self, t: Transaction, cause: str) -> dict:
        parts = [p for p in t.parts if p.marker is not None or p.data]
        first = min(parts, key=lambda p: (p.tp, p.key)) if parts else None
        marker = next((p.marker for p in parts if p.marker is not None), None)
        data_epoch = t.epoch
        c = t.coord
        seen = marker is not None
        where = ",".join(sorted({p.tp for p in parts})) or "no partition"
        served = seen and all(p.marker.fetched for p in parts if p.marker is not None)
        how = (f"ABORT markers at epoch {marker.epoch}" if seen else
               "its ABORT markers are not in the evidence")
        if served:
            # known from a consumer's Fetch only: the coordinator had aborted by then, not then
            how += " (served to consumers; the coordinator's WriteTxnMarkers are not in the capture)"
        if c is not None and c.next_epoch is not None and cause == "fencing":
            how += f"; a new instance got epoch {c.next_epoch}"
        if cause != "fencing" and c is not None and c.timeout_ms and c.prepare_ts and c.start_ms:
            how += (f" seen {c.prepare_ts - c.start_ms} ms after it began" if served
                    else f" after {c.prepare_ts - c.start_ms} ms") + f" (timeout {c.timeout_ms} ms)"
        unseen = self._unseen(t)
        if unseen:
            many = len(unseen) > 1
            how += (f"; its marker{'s' if many else ''} on {', '.join(unseen)} {'were' if many else 'was'} not seen "
                    "in the capture (ended by the same decision: the coordinator writes it to every registered "
                    "partition)")
        ev = [e for e in c.evidence if e["position"] is not None][-2:] if c is not None else []
        details = self.details(None, t, {
            "cause": cause, "partitions": sorted({p.tp for p in parts}), "data_epoch": data_epoch,
            "marker_epoch": marker.epoch if seen else None, "markers_seen": seen,
            "new_epoch": c.next_epoch if c is not None else None,
            "coordinator_epoch": marker.coordinator_epoch if seen else None,
            "timeout_ms": c.timeout_ms if c else None, "start_ms": c.start_ms if c else None,
            "prepare_ms": c.prepare_ts if c else None})
        if unseen:
            details["markers_unseen"] = unseen
        if served:
            details["markers_served_only"] = True
        fields = self.fields(first) if first is not None else dict(producer_id=t.producer_id)
        fields.update(producer_epoch=data_epoch, transactional_id=t.transactional_id or fields.get("transactional_id"),
                      first_ts_ms=t.start_ms, last_ts_ms=t.end_ms)
        said = self.said(first, self.evidence, ev, details, after=True) if first is not None else \
            dict(evidence=ev, details=details)
        return finding("coordinator-abort",
                       f"the coordinator aborted producer {t.producer_id}'s transaction (epoch {data_epoch}, "
                       f"{t.transactional_id!r}) on {where} by {cause}: {how}",
                       timeline=self.timeline(), **said, **fields)

    def _unseen(self, t: Transaction) -> list[str]:
        """Wire: the registered partitions of a transaction some of whose markers the capture shows
        where it shows none (their leaders' traffic, or the Fetch serving them, is not in it)."""
        c = t.coord
        if not self.wire or c is None or not any(p.marker is not None for p in t.parts):
            return []
        marked = {p.tp for p in t.parts if p.marker is not None}
        parts = {p.tp: p for p in t.parts}
        return sorted(tp for tp in c.partitions if tp not in marked and not self.pt.coverage.sees_marker(tp, parts.get(tp)))

    def torn(self, t: Transaction, damaged: list[Range]) -> dict:
        c = t.coord
        decided = c.result if c is not None else None
        ranges = t.ranges()
        lead = min(damaged, key=lambda r: (r.tp, -1 if r.first is None else r.first))
        results: dict = {}
        for r in ranges:   # per partition: its damaged stretch's outcome, else its data's, else its marker's
            if r in damaged and (r.tp not in results or results[r.tp] == decided):
                results[r.tp] = r.result
            elif r.has_data and r.tp not in results:
                results[r.tp] = r.result
        for r in ranges:
            results.setdefault(r.tp, r.result)
        if decided is not None and any(v not in (None, decided) for v in results.values()):
            results.setdefault("(coordinator)", decided)
        with_data = {r.tp for r in ranges if r.has_data}
        nothing = [self._ends_nothing(r, ranges) for r in ranges if not r.has_data and r.marker is not None
                   and r.tp in with_data]
        start = f" started at {iso_ms(t.start_ms)}" if t.start_ms is not None else ""
        tid = t.transactional_id or self.tid
        text = (f"producer {t.producer_id}'s transaction (epoch {t.epoch}" + (f", {tid!r}" if tid else "") + f"){start} "
                "ended differently across its partitions: ")
        if decided is not None:
            how = f" ({c.ended_by}: {c.end_detail})" if c.ended_by and c.end_detail else ""
            text += f"the coordinator decided {decided}{how}, but " + "; ".join(self._range(r, c) for r in damaged)
            kept = [r for r in ranges if r.has_data and r not in damaged]
            if kept:
                text += "; as decided: " + ", ".join(f"{r.tp} {r.offsets}" for r in kept)
        else:
            text += "; ".join(self._range(r, None) for r in ranges if r.has_data or r.result)
        notes = [n for n in nothing if n["why"] != "registered, never written"]
        if notes:
            text += ". " + "; ".join(f"{n['tp']}: its {n['result']} marker at {n['at']} {n['why']}"
                                     for n in notes)
        ev, reps = [], []
        for r in damaged + [r for r in ranges if not r.has_data and r not in damaged]:
            for rep, cp in sorted(r.part.copies.items(), key=lambda kv: str(kv[0])) or [(None, r.part)]:
                for e in self.evidence(cp):
                    if len(ev) < 16:
                        ev.append(e)
                        reps.append(None if self.wire else rep)
        details = self.details(None, t, {
            "results": results, "coordinator_result": decided,
            "damaged": [[r.tp, r.first, r.last, r.result, r.marker.offset if r.marker else None] for r in damaged],
            "ranges": [[r.tp, r.first, r.last, r.result, r.marker.offset if r.marker else None] for r in ranges],
            "ends_nothing": nothing, "topic_partitions": sorted({r.tp for r in ranges}),
            # per partition, its damaged stretch's marker (else its data's)
            "markers": {r.tp: r.marker.offset for r in ranges + damaged if r.marker is not None and r.has_data},
            "writers": {r.tp: r.marker.writer for r in ranges + damaged if r.marker is not None and r.marker.writer},
            "evidence_replicas": reps})
        fields = self.fields(lead.part, producer_epoch=t.epoch, first_ts_ms=t.start_ms, last_ts_ms=t.end_ms,
                             transactional_id=t.transactional_id or self.tid)
        if not lead.has_data:
            fields.update(first_offset=lead.marker.offset, last_offset=lead.marker.offset)
        else:
            fields.update(first_offset=lead.first, last_offset=lead.last)
        return finding("torn-transaction", text, evidence=ev, details=details, timeline=self.timeline(t), **fields)

    def _range(self, r: Range, c) -> str:
        """One stretch and what ended it, in words (with why its marker is not the coordinator's
        when the evidence shows it: its writer, or an epoch other than the coordinator's)."""
        if r.result is None:
            return f"{r.tp} {r.offsets} got no marker"
        m = r.marker
        verb = {"COMMIT": "committed", "ABORT": "aborted"}.get(r.result, r.result)
        by = ""
        if r.part.borrowed_marker:   # split_lost_markers
            return (f"{r.tp} {r.offsets} {verb} by the {m.result} at {_at(m)} of a later transaction (epoch "
                    f"{m.epoch}): its own marker there is missing")
        if m.writer == "admin":
            by = f" by an admin (WriteTxnMarkers from {m.client_id!r}, not the coordinator)"
        elif c is not None and c.prepare_epoch is not None and m.epoch is not None and m.epoch != c.prepare_epoch:
            by = (f" by a marker of epoch {m.epoch}, not the coordinator's epoch {c.prepare_epoch} "
                  "(an admin's kafka-transactions.sh abort writes the data's epoch)")
        return f"{r.tp} {r.offsets} {verb} (marker at {_at(m)}){by}"

    @staticmethod
    def _ends_nothing(r: Range, ranges: list[Range]) -> dict:
        """Why a marker of the transaction ends no data on its partition."""
        m = r.marker
        at = m.offset if m.offset is not None else 1 << 62
        before = [x for x in ranges if x.tp == r.tp and x.has_data and x.marker is not None
                  and (x.marker.offset if x.marker.offset is not None else -1) < at]
        prev = r.part.previous
        if before:
            x = before[-1]
            why = (f"ends no data: the transaction's data there ({x.offsets}) had already been "
                   f"{'committed' if x.result == 'COMMIT' else 'aborted'} at {_at(x.marker)}")
        elif prev is not None and prev.marker is not None and prev.marker.result == m.result and prev.marker.epoch == m.epoch:
            why = ("is a re-sent marker (a coordinator or leader failover makes the coordinator write a completed "
                   "transaction's markers again): not an anomaly")
        else:
            why = "registered, never written"
        return {"tp": r.tp, "offset": m.offset, "at": _at(m), "result": m.result, "why": why}
