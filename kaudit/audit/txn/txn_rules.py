"""Transaction rules (docs/architecture.md §4), judged once per producer id over the facts of txn_model -
whether they came from the log dirs (transactions.py) or a capture (txn_wire.py). A rule reads
only the facts and what the evidence covers (`ProducerTxns.coverage`), never its source's rows.
Each rule's `clean` predicate, beside it (txn_clean.py), is what the fast path may certify."""

from __future__ import annotations

from kaudit.audit.txn import txn_clean
from kaudit.audit.registry import rule
from kaudit.audit.txn.txn_model import Part, ProducerTxns, Range, Transaction, shown_stored
from kaudit.audit.txn.txn_parts import ADMIN, create_ms
from kaudit.timefmt import duration
from kaudit.audit.thresholds import (DEFAULT_MAX_TIMEOUT_MS, EPOCH_SLACK_MS, LATE_SLACK_MS, MARKERS_IN_FLIGHT_MS,
                                     NO_TIMEOUT_MS)


ABORT_HINT = ("kafka-transactions.sh --bootstrap-server <broker> abort --topic {topic} "
              "--partition {partition} --start-offset {offset}")


# -- the checks: each rule's findings over one producer's history (txn_findings.Judgement `j`:
# the facts `j.pt`, its transactions `j.txns`, the finding builder `j.say`) -----------------

def _check_dangling(j):
    """dangling-transaction and hanging-transaction (one finding per open part: which one its
    reasons decide)."""
    for parts in j.pt.partitions.values():
        last_ce = None              # the latest marker's coordinator epoch before the part
        for part in parts:
            if dangling_transaction(part, j.pt):
                yield j.say.dangling(part, hanging_transaction(part, j.pt, j.reference_ms), last_ce)
            if part.marker is not None and part.marker.coordinator_epoch is not None:
                last_ce = part.marker.coordinator_epoch


def markers_in_flight(t, reference_ms: int | None) -> bool:
    """Whether a coordinator transaction's markers may still be on their way at the end of the
    evidence: decided (PrepareX) but not completed, within MARKERS_IN_FLIGHT_MS of that end (a
    capture or a copy of the log dirs taken while it committed). The coordinator writes its
    Complete record only once every registered partition has its marker
    (TransactionMarkerChannelManager), so until then a partition without one is not told of."""
    return (t is not None and t.result is not None and not t.complete and t.prepare_ts is not None
            and reference_ms is not None and reference_ms - t.prepare_ts <= MARKERS_IN_FLIGHT_MS)


def _check_torn(j):
    for t in j.txns:
        damaged = torn_transaction(t, j.pt)
        if damaged is not None:
            yield j.say.torn(t, damaged)


def _check_unregistered(j):
    for parts in j.pt.partitions.values():
        part = next((p for p in parts if unregistered_partition(p, j.pt)), None)
        if part is not None:
            yield j.say.unregistered(part)


def _check_coordinator_abort(j):
    for t in j.txns:
        cause = coordinator_abort(t, j.pt)
        if cause is not None:
            yield j.say.coordinator_abort(t, cause)


def _check_stray(j):
    for parts in j.pt.partitions.values():
        # of the parts after one, stray_marker asks only whether one holds its transaction's data
        last = {id(q.coord): k for k, q in enumerate(parts) if q.coord is not None and q.data}
        for i, part in enumerate(parts):
            k = last.get(id(part.coord), -1) if part.coord is not None else -1
            yield from _stray(j, part, (parts[k],) if k > i else ())


def _stray(j, part, later):
    if not stray_marker(part, later):
        return
    m = part.marker
    prev = part.previous.marker if part.previous is not None else None
    again = prev is not None and prev.result == m.result and prev.epoch == m.epoch and m.writer != ADMIN
    why = (f": the {m.result} at {_at(prev)} re-sent (a coordinator or leader failover makes the coordinator "
           "write a completed transaction's markers again): not an anomaly") if again else ""
    if part.coord is not None and prev is not None and not again:
        who = "an admin's" if m.writer == ADMIN else "as an admin's"
        why = (f", after the {prev.result} at {_at(prev)}: it ends nothing ({who} kafka-transactions.sh abort "
               "of a transaction that had already ended there)")
    yield j.say.part("stray-marker", part, f"{m.result} marker of producer {part.producer_id} at {_at(m)} "
                     "with no transactional data before it" + j.say.writer(m) + why,
                     dict({"coordinator_epoch": m.coordinator_epoch, "writer": m.writer},
                          **({"resent": True} if again else {})))


def _check_ce(j):
    for parts in j.pt.partitions.values():
        prev_ce = None
        for part in parts:
            m = part.marker
            if m is None:
                continue
            if coordinator_epoch_regression(prev_ce, m.coordinator_epoch):
                yield j.say.part("coordinator-epoch-regression", part,
                                 f"producer {part.producer_id} {m.result} marker at {_at(m)} has coordinator epoch "
                                 f"{m.coordinator_epoch}, below the earlier {prev_ce}",
                                 {"previous_coordinator_epoch": prev_ce, "coordinator_epoch": m.coordinator_epoch})
            if m.coordinator_epoch is not None:
                prev_ce = m.coordinator_epoch if prev_ce is None else max(prev_ce, m.coordinator_epoch)


def _check_plain(j):
    for part in j.pt.all_parts():
        if nontransactional_write(part):
            yield j.say.plain(part)


def _check_late(j):
    for part in j.pt.all_parts():
        late = late_transactional_write(part, j.pt)
        if late is not None:
            yield j.say.late(part, *late)


@rule("dangling-transaction", "warning", "both", "an open transaction with no marker yet, still within its timeout",
      "Nothing to do while the producer or the coordinator can still end it; if it stays open "
      "past its timeout it is hanging: abort it with kafka-transactions.sh abort.",
      clean=txn_clean.every_part_ends,
      fold="transactions", check=_check_dangling)
def dangling_transaction(part: Part, pt: ProducerTxns) -> bool:
    """Invariant: every transactional batch is followed, in its partition, by a COMMIT or ABORT
    marker of its producer (KIP-98: the coordinator writes markers to every registered partition;
    ProducerStateManager keeps the partition's last stable offset at the first offset of the
    oldest open transaction).
    Benign causes: a transaction still in progress when the evidence was taken (its coordinator
    lists the partition and its timeout has not passed); on the wire, a transaction whose end the
    capture shows while its markers went to leaders outside it, or were served to no consumer it
    holds: an EndTxn answered, a fencing, or one marker that proves the coordinator's decision -
    the coordinator writes one result to every registered partition, only it commits, and its own
    abort bumps the epoch (version 0/1: a timeout or fencing abort's markers carry the data's
    epoch + 1; version 2: every end's), so a COMMIT or an ABORT at the data's epoch + 1 served on
    one partition ends them all (txn_fetched.decides). An ABORT at the data's epoch may be an
    admin's (kafka-transactions.sh abort writes the producer's current epoch to the partitions it
    names), as is any marker an admin's WriteTxnMarkers in the capture wrote: it ends its own
    partition only, the others stay open. On the wire the data of successive transactions on one
    partition is split at the coordinator's transaction boundary even where the marker between
    is not in the capture (a transaction begins only once the previous one's markers are
    written), so an open transaction's part starts at its own first offset. A part of Produce
    requests none of which was answered shows no stored data (`unconfirmed`): not judged; nor a
    part whose coordinator decided its transaction while its markers may still be on their way
    at the end of the evidence (`markers_in_flight`); nor one whose marker may be in bytes the
    capture lost after its data on the connections to its leader (`marker_unproven`: a capture
    that lost bytes proves no absence). Severity: info where the coordinator lists it open within
    its timeout, or - its view not in the evidence - where the part is no older than its
    producer's transaction timeout at the end of the evidence (its InitProducerId's, else the
    clients' default of 1 minute: a capture that ends mid-transaction); else a warning."""
    if part.marker is not None or not part.data or unconfirmed(part, pt) \
            or markers_in_flight(part.coord, pt.reference_ms) or pt.coverage.marker_unproven(part):
        return False
    t = part.coord
    return not (t is not None and t.result is not None and not pt.coverage.sees_marker(part.tp, part))


def unconfirmed(part: Part, pt: ProducerTxns) -> bool:
    """On the wire, a part whose every Produce went unanswered (a capture ending before the
    answers, a leader holding a version-2 Produce until its registration is verified): nothing
    shows its data was stored, so no open transaction is told of it."""
    return pt.coverage.source == "wire" and not any(shown_stored(b, pt) for b in part.data)


@rule("hanging-transaction", "critical", "both",
      "an open transaction that nothing will end: read_committed consumers stop at it",
      ABORT_HINT.format(topic="T", partition="P", offset="O"), clean=txn_clean.every_part_ends,
      fold="transactions")   # judged with dangling-transaction
def hanging_transaction(part: Part, pt: ProducerTxns, reference_ms: int | None) -> list[str]:
    """Invariant: a dangling transaction is ended by its producer or its coordinator: it must
    still be open at the coordinator for that partition, within its timeout. Otherwise it is
    hanging: the last stable offset stays at its first offset forever and read_committed
    consumers stop there (KAFKA-12671, KIP-664: `kafka-transactions.sh find-hanging` / `abort`).
    Hanging when: older than its timeout at the reference time (transaction.timeout.ms from the
    coordinator's records or the producer's InitProducerId, else transaction.max.timeout.ms 15 min),
    absent from the coordinator's state for that partition, or the coordinator's transaction for
    that producer already ended (or the coordinator has no record of the producer, or its
    transactional id had moved to a newer producer id before the data was written: txn_lineage).
    A KIP-939 two-phase-commit transaction (two_phase_commit: Int.MaxValue as its timeout in the
    coordinator's records, or an InitProducerId with Enable2Pc on the wire - in `kaudit audit` the
    capture's tells the log dirs') has no timeout: the coordinator keeps it open, prepared, until
    its external transaction manager commits or aborts it, so its age never makes it hanging (a
    dangling-transaction that says so); the other reasons still do. A KeepPreparedTxn recovery
    (InitProducerId v6) keeps the transaction its answer names (OngoingTxnProducerId/Epoch) open
    for the recovering session, whatever producer id and epoch that session got: not fenced, with
    Enable2Pc not timed out, ended by that session's EndTxn (txn_kept); one answered
    OngoingTxnProducerId -1, or naming another transaction, keeps nothing of it.
    Benign causes: none once these hold; evidence without the coordinator's view (no
    `__transaction_state`, a capture without the producer's coordinator traffic) judges by age
    only, and only registrations and markers the evidence would show count."""
    if not dangling_transaction(part, pt):
        return []
    reasons = []
    t = part.coord
    view = pt.view
    timeout = (t.timeout_ms if t is not None else view.timeout_ms) or DEFAULT_MAX_TIMEOUT_MS
    start = t.start_ms if t is not None and t.start_ms is not None else part.first_ts
    if not two_phase_commit(part, pt) and reference_ms is not None and start is not None \
            and reference_ms - start > timeout:
        reasons.append(f"open for {duration(reference_ms - start)}, past its timeout of {duration(timeout)}")
    if not pt.coordinator_known:
        return reasons
    move = getattr(pt.epochs, "move", None)
    if t is None and move is not None and move.ts_ms is not None and part.first_ts is not None \
            and part.first_ts > move.ts_ms + (0 if pt.coverage.source == "wire" else EPOCH_SLACK_MS):
        # written after its transactional id left this producer id: no coordinator will end it
        reasons.append(f"{move.text} before it was written: no transaction of producer id {move.old} "
                       "will ever end it")
    elif view.last_state is None:
        reasons.append("the coordinator has no record of this producer id")
    elif t is not None and t.result is not None:
        reasons.append(f"the coordinator's transaction for this producer is already "
                       f"{'complete' if t.complete else 'ending'} ({t.result}, by {t.ended_by or 'its coordinator'}) "
                       f"with no marker on {part.tp}")
    elif t is None and view.open_txn is None and pt.coverage.sees_marker(part.tp, part):
        reasons.append(f"the coordinator's transaction for this producer is already complete ({view.last_state})")
    elif t is None and view.open_txn is not None and pt.coverage.sees_registration(part.tp, part.first_ts):
        reasons.append(f"the coordinator's open transaction does not list {part.tp}")
    elif t is None:
        ended = _ended_epoch(part, pt)
        if ended is not None:
            reasons.append(ended)
    return reasons


def two_phase_commit(part: Part, pt: ProducerTxns) -> bool:
    """Whether the part belongs to a KIP-939 two-phase-commit transaction, which its coordinator
    never times out (TransactionStateManager skips isDistributedTwoPhaseCommitTxn): the
    coordinator keeps Int.MaxValue as its timeout - in its `__transaction_state` records (the
    log dirs) and in the wire's replay of an InitProducerId with Enable2Pc, or of a KeepPreparedTxn
    recovery with Enable2Pc that kept it - or, in `kaudit audit`, the capture shows the
    InitProducerId in effect at the part's epoch asking for it, or such a recovery naming the
    part's producer id and epoch as the transaction it kept (ProducerTxns.two_pc_inits: the log
    dirs may not hold the coordinator's records)."""
    t = part.coord
    timeout = t.timeout_ms if t is not None else pt.view.timeout_ms
    return (timeout is not None and timeout >= NO_TIMEOUT_MS) or pt.two_pc_at(part.data_epoch)


def _ended_epoch(part: Part, pt: ProducerTxns) -> str | None:
    """Data of an epoch the coordinator has moved past (fenced, aborted, ended under TV2) that no
    transaction of the coordinator lists: a fenced epoch begins no transaction (its registrations
    are refused) and its fencing marks only the partitions registered before, so no marker will
    ever end this part - where the evidence shows every registration, or the part's first data
    came after the epoch ended (a registration before it would have had no data yet)."""
    spans = [pt.epochs.get(e) for e in part.epochs]
    if not spans or any(s is None or s.ended_ms is None for s in spans):
        return None
    s = spans[-1]
    slack = 0 if pt.coverage.source == "wire" else EPOCH_SLACK_MS
    after = part.first_ts is not None and part.first_ts > max(x.ended_ms for x in spans) + slack
    if not (after or pt.coverage.sees_registration(part.tp, part.first_ts)):
        return None
    return (f"its epoch {s.epoch} was {s.how} and no transaction of the coordinator lists {part.tp}: "
            "no marker will end it")


@rule("torn-transaction", "critical", "both",
      "a transaction committed on some partitions and aborted or unended on others",
      "Atomicity is broken: consumers saw part of the transaction. Find which partitions are "
      "wrong (the coordinator's result is the intended one), repair downstream, and check the "
      "brokers for lost markers (unclean leader election, truncation) and for admins who "
      "aborted part of it (kafka-transactions.sh abort).", clean=txn_clean.one_result_per_transaction,
      fold="transactions", check=_check_torn)
def torn_transaction(t: Transaction, pt: ProducerTxns) -> list[Range] | None:
    """Invariant: a transaction's markers carry one result on every partition it registered, the
    coordinator's decision (TransactionMarkerChannelManager writes the same marker to all of
    them, KIP-98): every stretch of its data on every partition ends with that result.
    Torn: COMMIT on some stretches and ABORT on others (e.g. an admin's `kafka-transactions.sh
    abort` of some partitions of an open transaction the producer then commits: the aborted
    stretches are lost, the coordinator's COMMIT markers there end nothing), or markers on some
    partitions and none on others. Returns the stretches whose outcome differs from the
    coordinator's decision (every stretch when the coordinator's is unknown), else None.
    Benign causes: none; a partition whose log, or whose leader's traffic, is not in the
    evidence is not judged; a marker re-sent after a coordinator or leader failover (the same
    result again) is not a second outcome; nor a partition without a marker yet while the
    coordinator's markers may still be on their way at the end of the evidence
    (markers_in_flight)."""
    in_flight = markers_in_flight(t.coord, pt.reference_ms)
    ranges = [r for r in judged_ranges(t, pt) if not (in_flight and r.result is None)]
    results = {r.result for r in ranges}
    decided = t.coord.result if t.coord is not None else None
    if decided is not None and any(r.result != decided for r in ranges):
        results.add(decided)
    if len(results) <= 1:
        return None
    return [r for r in ranges if r.result != decided] if decided is not None else ranges


def judged_ranges(t: Transaction, pt: ProducerTxns) -> list[Range]:
    """The stretches whose outcome is judged: those with data (without a marker only where the
    evidence would show one, and shows the data stored: not `unconfirmed`; none across bytes a
    capture lost where its EndTxn or marker would be: Coverage.lost_within), and on a partition
    without data the first marker (a registered
    partition never written gets the coordinator's marker all the same; later markers there may
    be other transactions' the evidence could not tell apart: on the wire the offsets group's
    markers come without its data)."""
    out, bare = [], set()
    ranges = t.ranges()
    with_data = {r.tp for r in ranges if r.has_data}
    for r in ranges:
        if r.has_data:
            if pt.coverage.lost_within(r.part):
                continue   # which transaction its marker ended may be in bytes the capture lost
            if r.result is not None or (pt.coverage.sees_marker(r.tp, r.part) and not unconfirmed(r.part, pt)):
                out.append(r)
        elif r.tp not in with_data and r.tp not in bare:
            bare.add(r.tp)
            out.append(r)
    return out


@rule("unregistered-partition", "error", "both", "transactional data on a partition the transaction never registered",
      "The producer wrote without registering the partition (AddPartitionsToTxn; under "
      "transaction version 2 its leader registers it): its data is outside the coordinator's "
      "transaction and no marker will end it. Abort it with kafka-transactions.sh abort; use "
      "brokers that verify registrations (KIP-890, Kafka 3.6+) and current clients.",
      clean=txn_clean.every_partition_registered, fold="transactions", check=_check_unregistered)
def unregistered_partition(part: Part, pt: ProducerTxns) -> bool:
    """Invariant: a producer writes transactional data only to partitions its transaction
    registered (AddPartitionsToTxn from the client under transaction version 0/1, from the
    partition leader under version 2 - KIP-890; the coordinator's partition set in
    __transaction_state; the broker checks it since Kafka 3.6).
    Benign causes: coordinator records removed by compaction or retention (kaudit judges only
    producers the coordinator's records know); registrations outside the capture (a capture that
    starts mid-transaction, leaders whose traffic it lacks) are not judged."""
    return (bool(part.data) and pt.coordinator_known and bool(pt.view.txns)
            and part.tp not in pt.view.registered and pt.coverage.sees_registration(part.tp, part.first_ts))


@rule("coordinator-abort", "info", "both", "a transaction the coordinator aborted itself (timeout or fencing)",
      "Informational. Timeout: the producer stalled past transaction.timeout.ms. Fencing: a new "
      "instance with the same transactional.id started (InitProducerId) while a transaction was open.",
      clean=txn_clean.no_coordinator_abort, fold="transactions", check=_check_coordinator_abort)
def coordinator_abort(txn: Transaction, pt: ProducerTxns) -> str | None:
    """Invariant: a transaction is ended by its producer's EndTxn unless the coordinator aborts
    it itself: on a timeout (TransactionCoordinator.abortTimedOutTransactions) or when a new
    instance's InitProducerId fences it (handleInitProducerId). Told from the coordinator's
    records (transaction version 0/1: its PrepareAbort bumps the epoch, the client's does not;
    version 2: every end bumps it once, so a timeout shows by its time and a fencing by the new
    instance's Empty record right after) and from the requests on the wire (no EndTxn before
    the ABORT markers; a new InitProducerId). Without coordinator records, an ABORT marker at the
    data's epoch + 1 of a version 0/1 producer. On the wire an ABORT at the data's epoch + 1
    served in a Fetch response, with no EndTxn before it, is the coordinator's decision for
    every registered partition: the finding names the partitions whose marker the capture does
    not show (ended by that decision, not open).
    Benign: this is the coordinator doing its job."""
    who, how = txn.ended_by()
    if who == "coordinator":
        return how or "timeout or fencing"
    if txn.coord is not None or pt.version != "0/1":
        return None
    aborts = [p for p in txn.parts if p.marker is not None and p.marker.result == "ABORT" and p.data
              and p.marker.epoch == p.data_epoch + 1]
    return "timeout or fencing (no coordinator records)" if aborts else None


@rule("stray-marker", "info", "both", "a COMMIT or ABORT marker with no open transaction of its producer",
      "Informational: usually a marker the coordinator wrote to a registered partition the "
      "producer never wrote to, one whose data retention or compaction removed, or an admin's "
      "abort of a transaction that had already ended there.", clean=txn_clean.no_stray_marker,
      fold="transactions", check=_check_stray)
def stray_marker(part: Part, later=()) -> bool:
    """Invariant: an end marker closes an open transaction of its producer on that partition
    (ProducerStateManager.completeTxn); the coordinator writes one marker per partition of a
    transaction, with its result.
    Stray: a marker no coordinator transaction claims, or one written after its transaction's
    marker on that partition with another result, or by an admin (on the wire: the
    WriteTxnMarkers sender) - `kafka-transactions.sh abort` of a transaction that had already
    ended there: the leader appends it (ProducerAppendInfo.appendEndTxnMarker checks only that
    its producer and coordinator epochs are not older) and it ends nothing (no CompletedTxn: no
    .txnindex entry, the last stable offset unchanged).
    Benign causes (all of it is informational): a registered partition the producer never wrote
    to (an empty transaction: the coordinator still writes its marker: not flagged when the
    coordinator's records list it), data removed by retention or compaction, the same result
    re-sent by the coordinator after a coordinator or leader failover (not flagged when it
    follows the transaction's own marker; a marker matched by its time and result to a
    transaction that began before the previous marker's is not that one's either).
    `later`: the parts after it in the partition's log - when one holds data of the transaction the
    marker was matched to, the marker came before that data, so it is not that transaction's (the
    coordinator writes a marker after all the data): the transaction before's written again, or
    stray."""
    if part.marker is None or part.data:
        return False
    if part.coord is None:
        return True
    prev = part.previous
    if any(q.coord is part.coord and q.data for q in later):
        return not (prev is not None and prev.marker is not None and prev.marker.result == part.marker.result
                    and part.marker.writer != ADMIN)
    if prev is None or prev.coord is None or prev.marker is None:
        return False
    if prev.coord is not part.coord:
        # matched to a transaction that began before the one the previous marker ended: not its
        # marker either (a transaction's markers are written before the next one can register)
        a, b = part.coord.start_ms, prev.coord.start_ms
        return a is not None and b is not None and a < b
    decided = part.coord.result
    return (decided is not None and part.marker.result != decided) or part.marker.writer == ADMIN


@rule("coordinator-epoch-regression", "error", "both", "a marker from an older coordinator epoch than an earlier marker's",
      "A zombie coordinator wrote a marker after a newer one took over the transaction log "
      "partition. Check the coordinator failover around that time; compare the replicas.",
      clean=txn_clean.coordinator_epochs_rise, fold="transactions", check=_check_ce)
def coordinator_epoch_regression(previous: int | None, current: int | None) -> bool:
    """Invariant: for one producer and partition, markers carry non-decreasing coordinator epochs
    in the log's order (the partition leader rejects older ones: ProducerStateManager /
    ProducerAppendInfo.appendEndTxnMarker, TRANSACTION_COORDINATOR_FENCED; KIP-98). On the wire
    the markers are ordered by their offsets where the capture gives them (consumers fetch in any
    order: txn_parts.log_order), not by when they were read.
    Benign causes: none."""
    return previous is not None and current is not None and current < previous


@rule("non-transactional-write-in-transaction", "error", "disk",
      "a producer's plain write on a partition where its transaction is open",
      "The same producer id wrote outside its transaction while one was open: consumers read it "
      "whatever the outcome. Check for a client bug or a re-used producer id.",
      clean=txn_clean.no_plain_writes, fold="transactions", check=_check_plain)
def nontransactional_write(part: Part) -> bool:
    """Invariant: while a producer has an open transaction on a partition, its writes there are
    transactional (ProducerAppendInfo: a non-transactional append with an ongoing transaction is
    rejected with INVALID_TXN_STATE).
    Benign causes: none."""
    return bool(part.nontxn)


@rule("late-transactional-write", "error", "both", "a transaction's data stored after its marker",
      "The data belongs to a transaction already ended on that partition: it opens a transaction "
      "no coordinator knows (hanging: abort it with kafka-transactions.sh) or is committed or "
      "aborted by the producer's next transaction. Use brokers with KIP-890 verification and "
      "clients on transaction version 2.", clean=txn_clean.no_late_write,
      fold="transactions", check=_check_late)
def late_transactional_write(part: Part, pt: ProducerTxns) -> tuple[str, list[dict]] | None:
    """Invariant: a transaction's data reaches a partition before that transaction's marker
    there (pre-KIP-890 brokers do not check it: a delayed or retried Produce can land after the
    marker, KAFKA-14402).
    Detected (1) exactly, at any transaction version, when the data's epoch is below the epoch of
    the marker before it (every end bumps the epoch under version 2, the coordinator's aborts
    under 0/1: data of an older epoch is an ended transaction's); (2) under version 0/1, where
    one epoch spans transactions, when data created after the previous marker either opens a
    transaction no coordinator transaction lists, or is ended by the producer's very next
    transaction while it was created more than LATE_SLACK_MS (on the wire: any time) before that
    transaction registered the partition (a heuristic on client timestamps on disk).
    The marker before the data is the one before it in the log (txn_parts.log_order: on the wire
    by the offsets where the capture gives them, whenever a consumer fetched it).
    In both cases only data the evidence shows stored (on the wire, a Produce answered).
    Case (2) is a heuristic: it needs the producer known as version 0/1, or unknown - not
    "mixed", where the evidence contradicts itself (a capture that lost a version-2 producer's
    answers places its next transaction's first write in the previous marker's part, a COMMIT
    at its data's epoch: read as 0/1 - transaction_version).
    Benign causes: the next transaction's first batches (a version-2 producer's data always
    precedes its registration: its leader registers it); client clocks within the slack."""
    prev = part.previous
    if not part.data or prev is None or prev.marker is None:
        return None
    if prev.marker.epoch is not None and part.first_epoch is not None and part.first_epoch < prev.marker.epoch:
        late = [b for b in part.data if b["producer_epoch"] < prev.marker.epoch and shown_stored(b, pt)]
        if not late:
            return None   # on the wire, Produce requests with no answer: nothing shows them stored
        outcome = ("it opens a transaction no coordinator knows" if part.marker is None else
                   f"the {part.marker.result} at {_at(part.marker)} took it in")
        return f"its epoch {part.first_epoch} is older than the marker's {prev.marker.epoch}: {outcome}", late
    if pt.version in ("2", "mixed") or prev.marker.ts is None:
        return None
    ts = create_ms(part.data[0])
    if ts is None or ts <= prev.marker.ts:
        return None
    if part.marker is None:
        if pt.coordinator_known and part.coord is None and pt.view.last_state is not None \
                and pt.coverage.sees_registration(part.tp, ts):
            return "it opens a transaction no coordinator knows", part.data
        return None
    t = part.coord
    if t is None or prev.coord is None or not _next_on(pt, prev.coord, t, part.tp):
        return None
    reg = t.registered_at.get(part.tp)
    slack = pt.coverage.slack_ms
    if reg is not None and reg - ts > slack:
        stored = [b for b in part.data if shown_stored(b, pt)]
        if not stored:
            return None   # on the wire, Produce requests with no answer: nothing shows them stored
        late = [b for b in stored if b["max_timestamp_ms"] is not None and reg - b["max_timestamp_ms"] > slack]
        return (f"it was {'committed' if part.marker.result == 'COMMIT' else 'aborted'} by the next "
                f"transaction's {part.marker.result} at {_at(part.marker)}", late or stored[:1])
    return None


def _next_on(pt: ProducerTxns, a, b, tp: str) -> bool:
    """`b` is the producer's next transaction after `a` - on the wire, whose registrations are
    the requests' own times, its next on partition `tp`: after transactions that never
    registered `tp` too (KAFKA-17754: the late write waits while the producer's next transaction
    writes elsewhere). On disk only the very next: client create times against a compacted
    coordinator log called the real 3.0.2 corpus's next-but-one transactions late."""
    if pt.view.follows(a, b):
        return True
    if pt.coverage.source != "wire" or a.index < 0 or b.index <= a.index:
        return False
    return all(tp not in t.partitions for t in pt.view.txns[a.index + 1:b.index])


def _at(m) -> str:
    return f"offset {m.offset}" if m.offset is not None else f"frame {m.position}"
