"""Transaction rules on disk (DESIGN.md §4), judged per producer id once its transactions are
assembled (transactions.py) and matched with the coordinator's records (coordinator_state.py)."""

from __future__ import annotations

from kaudit.audit.coordinator_state import CoordTxn
from kaudit.audit.registry import evidence, finding, rule
from kaudit.audit.transactions import Part, ProducerTxns

# transaction.max.timeout.ms default: the longest a transaction may stay open when its own
# timeout is not in the evidence.
DEFAULT_MAX_TIMEOUT_MS = 900_000
# A late write is data created after the previous marker of its partition and this long before
# the coordinator registered the partition for the transaction whose marker ends it.
LATE_SLACK_MS = 100
# Markers of one transaction are written by the coordinator within moments of each other.
MARKER_CLUSTER_MS = 2_000

ABORT_HINT = ("kafka-transactions.sh --bootstrap-server <broker> abort --topic {topic} "
              "--partition {partition} --start-offset {offset}")


@rule("dangling-transaction", "warning", "disk", "open transaction, no marker yet",
      "Nothing to do while the producer or the coordinator can still end it; if it stays open "
      "past its timeout it is hanging: abort it with kafka-transactions.sh abort.")
def dangling_transaction(part: Part) -> bool:
    """Invariant: every transactional batch is followed, in its partition, by a COMMIT or ABORT
    marker of its producer (KIP-98: the coordinator writes markers to every registered partition;
    ProducerStateManager keeps the partition's last stable offset at the first offset of the
    oldest open transaction).
    Benign causes: a transaction still in progress when the evidence was taken (its coordinator
    lists the partition and its timeout has not passed)."""
    return part.marker is None and bool(part.data)


@rule("hanging-transaction", "critical", "disk", "open txn nothing will end",
      ABORT_HINT.format(topic="T", partition="P", offset="O"))
def hanging_transaction(part: Part, pt: ProducerTxns, reference_ms: int | None) -> list[str]:
    """Invariant: a dangling transaction is ended by its producer or its coordinator: it must
    still be open at the coordinator for that partition, within its timeout. Otherwise it is
    hanging: the last stable offset stays at its first offset forever and read_committed
    consumers stop there (KAFKA-12671, KIP-664: `kafka-transactions.sh find-hanging` / `abort`).
    Hanging when: older than its timeout at the reference time (transaction.timeout.ms from the
    coordinator's records, else transaction.max.timeout.ms 15 min), absent from the
    coordinator's state for that partition, or the coordinator's transaction for that producer is
    already complete (or the coordinator has no record of the producer).
    Benign causes: none once these hold; an evidence whose __transaction_state is missing only
    judges by age."""
    if not dangling_transaction(part):
        return []
    reasons = []
    t = part.coord
    timeout = (t.timeout_ms if t is not None else pt.view.timeout_ms) or DEFAULT_MAX_TIMEOUT_MS
    start = t.start_ms if t is not None else part.first_ts
    if reference_ms is not None and start is not None and reference_ms - start > timeout:
        reasons.append(f"open for {reference_ms - start} ms, past its timeout of {timeout} ms")
    if pt.coordinator_known:
        view = pt.view
        if view.last_state is None:
            reasons.append("the coordinator has no record of this producer id")
        elif view.open_txn is None:
            reasons.append(f"the coordinator's transaction for this producer is already complete "
                           f"({view.last_state})")
        elif part.tp not in view.open_txn.partitions:
            reasons.append(f"the coordinator's open transaction does not list {part.tp}")
    return reasons


@rule("torn-transaction", "critical", "disk", "txn ended differently",
      "Atomicity is broken: consumers saw part of the transaction. Find which partitions are "
      "wrong (the coordinator's result is the intended one), repair downstream, and check the "
      "brokers for lost markers (unclean leader election, truncation).")
def torn_transaction(results: dict[str, str | None]) -> bool:
    """Invariant: a transaction's markers carry one result on every partition it registered
    (TransactionMarkerChannelManager writes the same marker to all of them, KIP-98).
    Torn: COMMIT on some partitions and ABORT on others, or markers on some partitions and none
    on others.
    Benign causes: none; a partition whose log is not in the evidence is not judged."""
    vals = set(results.values())
    return len(vals) > 1


@rule("unregistered-partition", "error", "disk",
      "txn data, unregistered",
      "The producer wrote without AddPartitionsToTxn (a client bug, or a pre-KIP-890 race): its "
      "data is outside the coordinator's transaction and no marker will end it. Abort it with "
      "kafka-transactions.sh abort; upgrade the client and brokers (KIP-890 verification).")
def unregistered_partition(part: Part, pt: ProducerTxns) -> bool:
    """Invariant: a producer writes transactional data only to partitions its transaction
    registered (AddPartitionsToTxn; the coordinator's partition set in __transaction_state;
    enforced by the broker only since KIP-890, Kafka 3.6).
    Benign causes: coordinator records removed by compaction or retention (kaudit judges only
    producers the coordinator's records know)."""
    return (bool(part.data) and pt.coordinator_known and bool(pt.view.txns)
            and part.tp not in pt.view.registered)


@rule("coordinator-abort", "info", "disk", "coordinator aborted a txn",
      "Informational. Timeout: the producer stalled past transaction.timeout.ms. Fencing: a new "
      "instance with the same transactional.id started (InitProducerId) while a transaction was open.")
def coordinator_abort(part: Part) -> str | None:
    """Invariant: an ABORT written by the coordinator itself, not on the producer's EndTxn,
    carries the producer epoch + 1 (TransactionCoordinator.abortTimedOutTransactions and
    fencing in handleInitProducerId bump the epoch; transaction version 0/1). Told apart from the
    coordinator's states: a PrepareAbort after the transaction's timeout elapsed (since its
    start) is a timeout; a PrepareEpochFence, or an epoch-bumped PrepareAbort before the timeout
    (a new InitProducerId) is fencing.
    Benign: this is the coordinator doing its job; under transaction version 2 every marker
    bumps the epoch (then the coordinator's states tell)."""
    m = part.marker
    if m is None or m.result != "ABORT":
        return None
    data_epoch = part.data_epoch if part.data else (part.coord.epoch if part.coord else None)
    if data_epoch is None or m.epoch != data_epoch + 1:
        return None
    t = part.coord
    if t is None:
        return "timeout or fencing (no coordinator records)"
    if any(s["state"] == "PrepareEpochFence" for s in t.states):
        return "fencing"
    if t.prepare_ts is not None and t.start_ms is not None and t.timeout_ms is not None \
            and t.prepare_ts - t.start_ms >= t.timeout_ms:
        return "timeout"
    # aborted before its timeout with a bumped epoch: a new InitProducerId fenced it (the id's
    # next record then carries a higher epoch still)
    return "fencing"


@rule("stray-marker", "info", "disk", "marker with no open txn",
      "Informational: usually a marker the coordinator wrote to a registered partition the "
      "producer never wrote to, or one whose data retention removed.")
def stray_marker(part: Part) -> bool:
    """Invariant: an end marker closes an open transaction of its producer on that partition
    (ProducerStateManager.completeTxn).
    Benign causes: a registered partition the producer never wrote to (an empty transaction:
    the coordinator still writes its marker: not flagged when the coordinator's records list
    it), data removed by retention or compaction."""
    return part.marker is not None and not part.data and part.coord is None


@rule("coordinator-epoch-regression", "error", "disk", "marker from old coordinator",
      "A zombie coordinator wrote a marker after a newer one took over the transaction log "
      "partition. Check the coordinator failover around that time; compare the replicas.")
def coordinator_epoch_regression(previous: int | None, current: int | None) -> bool:
    """Invariant: for one producer and partition, markers carry non-decreasing coordinator epochs
    (the partition leader rejects older ones: ProducerStateManager / ProducerAppendInfo
    .appendEndTxnMarker, TRANSACTION_COORDINATOR_FENCED; KIP-98).
    Benign causes: none."""
    return previous is not None and current is not None and current < previous


@rule("non-transactional-write-in-transaction", "error", "disk",
      "plain write inside a txn",
      "The same producer id wrote outside its transaction while one was open: consumers read it "
      "whatever the outcome. Check for a client bug or a re-used producer id.")
def nontransactional_write(part: Part) -> bool:
    """Invariant: while a producer has an open transaction on a partition, its writes there are
    transactional (ProducerAppendInfo: a non-transactional append with an ongoing transaction is
    rejected with INVALID_TXN_STATE).
    Benign causes: none."""
    return bool(part.nontxn)


@rule("late-transactional-write", "error", "disk",
      "txn data after its marker",
      "The data belongs to a transaction already ended on that partition: it opens a transaction "
      "no coordinator knows (hanging: abort it with kafka-transactions.sh) or is committed or "
      "aborted by the producer's next transaction. Upgrade to brokers with KIP-890 verification.")
def late_transactional_write(part: Part, pt: ProducerTxns) -> tuple[str, list[dict]] | None:
    """Invariant: a transaction's data reaches a partition before that transaction's marker
    there (pre-KIP-890 brokers do not check it: a delayed or retried Produce can land after the
    marker, KAFKA-14402).
    Detected when data follows a marker of the producer on the partition and was created after
    that marker, and then either no coordinator transaction lists the partition again (it opens
    a transaction no coordinator knows) or the producer's very next transaction ends it and the
    data was created more than 100 ms before the coordinator registered the partition for it.
    This is a heuristic on client timestamps (no append time on disk).
    Benign causes: the next transaction's first batches, created before its AddPartitionsToTxn
    (timestamps are the client's: within 100 ms is not flagged)."""
    prev = part.previous
    if not part.data or prev is None or prev.marker is None or prev.marker.ts is None:
        return None
    ts = part.data[0]["base_timestamp_ms"]
    if ts is None or ts <= prev.marker.ts:
        return None
    if part.marker is None:
        if pt.coordinator_known and part.coord is None and pt.view.last_state is not None:
            return "it opens a transaction no coordinator knows", part.data
        return None
    t = part.coord
    if t is None or prev.coord is None:
        return None
    # only when the producer's transaction right before this one is the one that ended the
    # partition (the late data's own transaction); otherwise this is the next one's early data
    if not pt.view.follows(prev.coord, t):
        return None
    reg = t.registered_at.get(part.tp)
    if reg is not None and reg - ts > LATE_SLACK_MS:
        late = [b for b in part.data if b["max_timestamp_ms"] is not None and reg - b["max_timestamp_ms"] > LATE_SLACK_MS]
        return (f"it was {'committed' if part.marker.result == 'COMMIT' else 'aborted'} by the next "
                f"transaction's {part.marker.result} at offset {part.marker.offset}", late or part.data[:1])
    return None


# -- judging -------------------------------------------------------------------------------------

def _fields(part: Part, **kw) -> dict:
    tid = kw.pop("tid", None)
    return dict(topic=part.topic, partition=part.partition,
                replica=",".join(part.replicas), producer_id=part.producer_id,
                producer_epoch=kw.pop("producer_epoch", part.data_epoch if part.data else
                                      (part.marker.epoch if part.marker else None)),
                transactional_id=part.coord.transactional_id if part.coord else tid,
                first_offset=part.start_offset,
                last_offset=kw.pop("last_offset", part.marker.offset if part.marker else part.last_data_offset),
                first_ts_ms=part.first_ts, last_ts_ms=part.last_ts, **kw)


def _ev(part: Part) -> list[dict]:
    ev = [evidence(part.data[0]["source"], part.data[0]["position"], "batch", "first data")] if part.data else []
    if part.marker is not None:
        ev.append(evidence(part.marker.source, part.marker.position, "marker"))
    return ev


def _tid(pt: ProducerTxns) -> str | None:
    ids = sorted(pt.view.transactional_ids)
    return ids[0] if len(ids) == 1 else None


def judge(pt: ProducerTxns, reference_ms: int | None) -> list[dict]:
    """Every finding of one producer's assembled transactions. Linear in its parts and
    coordinator transactions (the lookups are indexed: CoordView.registered, .follows)."""
    out = list(pt.view.findings)
    tid = _tid(pt)
    for tp, parts in pt.partitions.items():
        prev_ce = None
        last_ce = None              # the latest marker's coordinator epoch before the part
        unregistered_done = False
        for part in parts:
            where = f"{tp} (replicas {','.join(part.replicas)})"
            m = part.marker
            if m is not None:
                if coordinator_epoch_regression(prev_ce, m.coordinator_epoch):
                    out.append(finding(
                        "coordinator-epoch-regression",
                        f"{where}: producer {part.producer_id} {m.result} marker at offset {m.offset} "
                        f"has coordinator epoch {m.coordinator_epoch}, below the earlier {prev_ce}",
                        evidence=_ev(part), details={"previous_coordinator_epoch": prev_ce,
                                                     "coordinator_epoch": m.coordinator_epoch},
                        **_fields(part, tid=tid)))
                if m.coordinator_epoch is not None:
                    prev_ce = m.coordinator_epoch if prev_ce is None else max(prev_ce, m.coordinator_epoch)
            if nontransactional_write(part):
                b = part.nontxn[0]
                out.append(finding(
                    "non-transactional-write-in-transaction",
                    f"{where}: producer {part.producer_id} wrote "
                    f"{sum(x.get('batches', 1) for x in part.nontxn)} non-transactional "
                    f"batch(es) from offset {b['base_offset']} inside its transaction open since "
                    f"offset {part.start_offset}",
                    evidence=[evidence(b["source"], b["position"], "batch")] + _ev(part),
                    details={"offsets": [[x["base_offset"], x["last_offset"]] for x in part.nontxn]},
                    **_fields(part, tid=tid)))
            if stray_marker(part):
                out.append(finding(
                    "stray-marker", f"{where}: {m.result} marker of producer {part.producer_id} at "
                    f"offset {m.offset} with no transactional data before it",
                    evidence=_ev(part), details={"coordinator_epoch": m.coordinator_epoch},
                    **_fields(part, tid=tid)))
            cause = coordinator_abort(part)
            if cause is not None:
                t = part.coord
                out.append(finding(
                    "coordinator-abort",
                    f"{where}: the coordinator aborted producer {part.producer_id}'s transaction "
                    f"(offsets {part.start_offset}-{m.offset}) by {cause}: ABORT at offset {m.offset} "
                    f"with epoch {m.epoch} (data epoch {part.data_epoch if part.data else m.epoch - 1})",
                    evidence=_ev(part), details={"cause": cause, "marker_epoch": m.epoch,
                                                 "coordinator_epoch": m.coordinator_epoch,
                                                 "timeout_ms": t.timeout_ms if t else None,
                                                 "start_ms": t.start_ms if t else None,
                                                 "prepare_ms": t.prepare_ts if t else None},
                    **_fields(part, tid=tid)))
            late = late_transactional_write(part, pt)
            if late is not None:
                late, batches = late
                out.append(finding(
                    "late-transactional-write",
                    f"{where}: producer {part.producer_id}'s data at offsets {part.start_offset}-"
                    f"{batches[-1]['last_offset']} reached the partition after its previous "
                    f"{part.previous.marker.result} marker at offset {part.previous.marker.offset}: {late}",
                    evidence=_ev(part) + [evidence(part.previous.marker.source, part.previous.marker.position,
                                                   "marker", "previous marker")],
                    details={"previous_marker_offset": part.previous.marker.offset, "outcome": late,
                             "late_offsets": [[b["base_offset"], b["last_offset"]] for b in batches]},
                    **_fields(part, tid=tid, last_offset=batches[-1]["last_offset"])))
            if not unregistered_done and unregistered_partition(part, pt):
                unregistered_done = True
                out.append(finding(
                    "unregistered-partition",
                    f"{where}: producer {part.producer_id} wrote transactional data at offsets "
                    f"{part.start_offset}-{part.data[-1]['last_offset']} but no transaction in the "
                    f"coordinator's records ever listed {tp}",
                    evidence=_ev(part), details={"coordinator_partitions": sorted(pt.view.registered)},
                    **_fields(part, tid=tid, last_offset=part.data[-1]["last_offset"])))
            if dangling_transaction(part):
                out.append(_dangling(part, pt, reference_ms, last_ce, tid))
            if m is not None and m.coordinator_epoch is not None:
                last_ce = m.coordinator_epoch
    out.extend(_torn(pt, tid))
    return out


def _dangling(part: Part, pt: ProducerTxns, reference_ms, ce: int | None, tid) -> dict:
    """`ce`: the coordinator epoch of the latest marker before the part on its partition."""
    reasons = hanging_transaction(part, pt, reference_ms)
    where = f"{part.tp} (replicas {','.join(part.replicas)})"
    epoch = part.data_epoch
    cmd = ABORT_HINT.format(topic=part.topic, partition=part.partition, offset=part.start_offset)
    known = f"producer id {part.producer_id}, producer epoch {epoch}"
    if ce is not None:
        known += f", coordinator epoch {ce}"
    details = {"start_offset": part.start_offset, "last_data_offset": part.last_data_offset,
               "coordinator_epoch": ce, "reasons": reasons,
               "coordinator_state": pt.view.last_state}
    text = (f"{where}: producer {part.producer_id} epoch {epoch} has transactional data at offsets "
            f"{part.start_offset}-{part.last_data_offset} with no end marker")
    if reasons:
        return finding("hanging-transaction", f"{text}: hanging ({'; '.join(reasons)})",
                       evidence=_ev(part), details=details, remediation=f"{cmd} ({known})",
                       **_fields(part, tid=tid))
    return finding("dangling-transaction", f"{text} (still open at the coordinator)",
                   evidence=_ev(part), details=details, **_fields(part, tid=tid))


def _torn(pt: ProducerTxns, tid) -> list[dict]:
    """Transactions whose partitions ended differently: by coordinator transaction where its
    records are known, else by markers written together (same time, epochs)."""
    out = []
    groups: list[tuple[CoordTxn | None, list[Part]]] = []
    by_coord: dict[int, list[Part]] = {}
    loose: list[Part] = []
    for part in pt.all_parts():
        if part.marker is None:
            continue
        if part.coord is not None:
            by_coord.setdefault(id(part.coord), []).append(part)
        else:
            loose.append(part)
    for t in pt.view.txns:
        parts = by_coord.get(id(t), [])
        if parts:
            groups.append((t, parts))
    open_tps = {tp for tp, ps in pt.partitions.items() if any(p.marker is None and p.data for p in ps)}
    loose.sort(key=lambda p: (p.marker.ts or 0, p.tp))
    cluster: list[Part] = []
    in_cluster: set[str] = set()
    for p in loose:
        if cluster and (p.tp in in_cluster
                        or (p.marker.ts or 0) - (cluster[0].marker.ts or 0) > MARKER_CLUSTER_MS
                        or p.marker.epoch != cluster[0].marker.epoch
                        or p.marker.coordinator_epoch != cluster[0].marker.coordinator_epoch):
            groups.append((None, cluster))
            cluster, in_cluster = [], set()
        cluster.append(p)
        in_cluster.add(p.tp)
    if cluster:
        groups.append((None, cluster))
    for t, parts in groups:
        results: dict[str, str | None] = {p.tp: p.marker.result for p in parts}
        if t is not None and t.complete and open_tps:
            for tp in sorted(t.partitions):
                if tp not in results and tp in open_tps:
                    results[tp] = None
        if t is not None and t.result is not None and any(r not in (None, t.result) for r in results.values()):
            results.setdefault("(coordinator)", t.result)
        if not torn_transaction(results):
            continue
        first = min(parts, key=lambda p: p.marker.offset)
        desc = ", ".join(f"{tp}: {r or 'no marker'}" for tp, r in sorted(results.items()))
        out.append(finding(
            "torn-transaction",
            f"producer {first.producer_id}'s transaction"
            f"{' started at ' + str(t.start_ms) if t is not None else ''} ended differently "
            f"across its partitions: {desc}",
            evidence=[e for p in parts for e in _ev(p)],
            details={"results": results, "coordinator_result": t.result if t else None,
                     "markers": {p.tp: p.marker.offset for p in parts}},
            topic=first.topic, partition=first.partition, replica=",".join(first.replicas),
            producer_id=first.producer_id, producer_epoch=first.marker.epoch,
            transactional_id=t.transactional_id if t else tid, first_offset=first.marker.offset,
            last_offset=first.marker.offset, first_ts_ms=min(p.marker.ts or 0 for p in parts),
            last_ts_ms=max(p.marker.ts or 0 for p in parts)))
    return out
