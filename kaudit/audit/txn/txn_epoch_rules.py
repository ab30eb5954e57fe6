"""Epoch rules over one producer's history (txn_history.epochs, txn_model parts): the data of an
epoch the coordinator has moved past, and transaction parts whose epochs do not agree with
their marker's. Judged with the other transaction rules (txn_findings.judge runs every rule
registered with fold="transactions"); each declares its fast-path predicate beside it."""

from __future__ import annotations

from kaudit.audit.txn import txn_clean
from kaudit.audit.registry import evidence, rule
from kaudit.audit.txn.txn_model import Part, ProducerTxns, shown_stored
from kaudit.timefmt import iso_ms
from kaudit.audit.thresholds import EPOCH_SLACK_MS
from kaudit.audit.txn.txn_history import MOVED



def _at(m) -> str:
    return f"offset {m.offset}" if m.offset is not None else f"frame {m.position}"


def _offsets(batches: list[dict]) -> str:
    lo = next((b["base_offset"] for b in batches if b["base_offset"] is not None), None)
    hi = next((b["last_offset"] for b in reversed(batches) if b["last_offset"] is not None), None)
    if lo is None:
        seqs = [b.get("base_sequence") for b in batches if b.get("base_sequence") is not None]
        return f"sequence {seqs[0]}" if seqs else "unknown offsets"
    return f"offset {lo}" if hi in (None, lo) else f"offsets {lo}-{hi}"


# -- a batch of an ended epoch ----------------------------------------------------------------

def _check_stale(j):
    for part in j.pt.all_parts():
        got = stale_epoch_write(part, j.pt)
        if got is not None:
            yield _stale_finding(j, part, *got)


def _check_mixed(j):
    for part in j.pt.all_parts():
        why = mixed_epoch_part(part, j.pt)
        if why is not None:
            yield j.say.part("mixed-epoch-transaction", part,
                             f"producer {part.producer_id}'s transaction data at {_offsets(part.data)} {why}",
                             {"epochs": part.epochs, "marker_epoch": part.marker.epoch if part.marker else None,
                              "coordinator_epoch_of_prepare": part.coord.prepare_epoch if part.coord else None})


@rule("write-after-epoch-end", "error", "both", "data of an epoch stored after it was fenced or ended",
      "A fenced producer (a zombie) kept writing and a broker stored it: the partition leader had not "
      "learnt of the new epoch (no marker of the fencing reached that partition: it was not "
      "registered) or did not verify the registration. Where a later COMMIT took it in, "
      "read_committed consumers read the zombie's records: find them by the offsets given and "
      "repair downstream. Use brokers with KIP-890 verification (Kafka 3.6+) and transaction "
      "version 2 clients; make sure an old instance stops before its successor starts.",
      clean=txn_clean.no_stale_epoch, fold="transactions", check=_check_stale)
def stale_epoch_write(part: Part, pt: ProducerTxns) -> tuple[list[dict], str, str] | None:
    """Invariant: once the coordinator has moved a producer past an epoch - fenced by a new
    instance's InitProducerId, aborted by it on a timeout, or (transaction version 2) ended by
    the client's EndTxn - no batch of that epoch is stored on any partition, registered or not
    (TransactionCoordinator bumps the epoch; ProducerStateManager / the leader's KIP-890
    verification refuse an older epoch: INVALID_PRODUCER_EPOCH, PRODUCER_FENCED).
    Flagged per transaction part, on the batches of an epoch below the newest of the part (the
    part is another epoch's transaction: its marker exposes or discards them), or of an epoch
    below the marker's by more than the one bump its end allows, or - with the epoch's end in
    the evidence - created (disk: client time, EPOCH_SLACK_MS) or accepted (wire: error 0, the
    capture's clock) after that end, with no marker of its own epoch (a wire Produce accepted
    after the fencing began and aborted by the fencing's marker is the race every fencing
    has: told at info). Batches after a marker of a newer epoch are late-transactional-write's.
    Benign causes: none for stored data; severity says what became of it: critical where a
    COMMIT exposed it to read_committed consumers, error where nothing ends it, info where the
    fencing's ABORT discarded it. On the wire, a part across bytes the capture lost where the
    EndTxn or the marker that would split it or date its epoch's end would be is not judged
    (Coverage.lost_within), nor a Produce no answer shows stored, which makes no epoch of its
    part either (a next transaction's write sent before the markers that end the one before, its
    answer lost: `shown_stored`).
    Idempotent producers (wire only, wire_produce): once a KIP-360 InitProducerId that asked
    with producer id P was answered with another id, a Produce under P sent after the answer
    and stored is data of an ended session - told at info: a broker never fences an idempotent
    id (the old id's state is untouched), so storing it was right; consumers read it twice only
    if the client also re-sent it under the new id."""
    if not part.data or pt.coverage.lost_within(part):
        return None   # (on the wire) what splits the part or dates its epoch's end may be in bytes lost
    m = part.marker
    prev = part.previous.marker if part.previous is not None else None
    floor = prev.epoch if prev is not None and prev.epoch is not None else None
    # (on the wire, a Produce no answer shows stored makes no epoch of the part: mixed_epoch_part's)
    top = max((b["producer_epoch"] for b in part.data if b["producer_epoch"] is not None and shown_stored(b, pt)),
              default=None)
    wire = pt.coverage.source == "wire"
    stale, why = [], None
    for b in part.data:
        e = b["producer_epoch"]
        if e is None or (floor is not None and e < floor) or not shown_stored(b, pt):
            continue
        span = pt.epochs.get(e)
        ended = span.ended_ms if span is not None else None
        if top is not None and e < top:
            stale.append(b)
            why = why or "inside"
        elif (m is not None and m.epoch is not None and m.epoch > e + 1 and not part.borrowed_marker
              and not _own_end(part, e)):
            stale.append(b)
            why = why or "marker"
        elif ended is not None and (m is None or wire) and _after(b, ended, wire):
            stale.append(b)
            why = why or "time"
    if not stale:
        return None
    return stale, why, _outcome(part)


def _own_end(part: Part, e: int) -> bool:
    """Whether the part's marker is the end the coordinator wrote for a transaction begun at
    epoch `e` (its Prepare record's epoch): a KIP-939 prepared transaction a new instance kept
    (KeepPreparedTxn) ends at that instance's epoch - or at its own epoch + 1, the markers KIP-939
    describes (txn_kept)."""
    c, m = part.coord, part.marker
    return (c is not None and c.epoch == e and c.result == m.result and c.prepare_epoch is not None
            and c.prepare_epoch == m.epoch)


def _after(b: dict, ended: int, wire: bool) -> bool:
    if wire:
        return b.get("response_error") == 0 and (b["base_timestamp_ms"] or 0) > ended
    ts = b["max_timestamp_ms"] if b["max_timestamp_ms"] is not None else b["base_timestamp_ms"]
    return ts is not None and ts > ended + EPOCH_SLACK_MS


def _outcome(part: Part) -> str:
    m = part.marker
    return "open" if m is None else ("committed" if m.result == "COMMIT" else "aborted")


def _stale_evidence(pt, part: Part, batches: list[dict], span, e: int) -> tuple:
    """(pick, evidence): the stale batches read in a part - in each replica's own files
    (_Say.replica_evidence) - and the record of the epoch's end."""
    kind = "produce" if pt.coverage.source == "wire" else "batch"
    stale = {b["base_offset"] for b in batches[:4]}

    def stale_data(p: Part) -> list[dict]:
        own = [b for b in p.data if b["base_offset"] in stale] if p is not part else batches[:4]
        return [evidence(b["source"], b["position"], kind, "stale epoch data" if i == 0 else None)
                for i, b in enumerate(own[:4])]
    ev = []
    if span is not None and span.source is not None and span.position is not None:
        ev.append(evidence(span.source, span.position, "txn_log" if pt.coverage.source == "disk" else "request",
                           f"epoch {e} {span.how}"))
    return stale_data, ev


def _stale_finding(j, part: Part, batches: list[dict], why: str, outcome: str) -> dict:
    pt = j.pt
    e = batches[0]["producer_epoch"]
    span = pt.epochs.get(e)
    m = part.marker
    ended = ""
    if span is not None and span.ended_ms is not None:
        ended = f"epoch {e} was {span.how} at {iso_ms(span.ended_ms)}"
        move = getattr(pt.epochs, "move", None)
        if move is not None and not span.how.startswith(MOVED):
            # its own end came first; the id has since left the producer id (txn_lineage)
            ended += f" - and {move.text}" + (f" at {iso_ms(move.ts_ms)}" if move.ts_ms is not None else "")
    wire = pt.coverage.source == "wire"
    after = span is not None and span.ended_ms is not None and any(_after(b, span.ended_ms, wire) for b in batches)
    # "after" only where the batches' own times show it; else the end, and that the order is not shown
    when = (f", {'accepted' if wire else 'created'} after {ended}" if after else
            f"; {ended} (whether before or after, the evidence does not show)" if ended else "")
    if why == "inside":
        text = f"stored inside a transaction of epoch {max(part.epochs)}{when}"
    elif why == "marker":
        text = f"ended by a marker of epoch {m.epoch}, not of its own{when}"
    else:
        verb = "accepted (error 0)" if pt.coverage.source == "wire" else "created"
        text = f"{verb} after {ended}"
    severity = None
    # its own transaction: begun and ended at its epoch (TV0/1: e, or e + 1 for an abort; TV2: e + 1)
    own = [t for t in pt.view.txns if t.epoch == e and part.tp in t.partitions and t.prepare_epoch in (e, e + 1)]
    if outcome == "committed" and any(t.result == "COMMIT" for t in own):
        # its own transaction listed the partition and committed: read as decided, its own marker
        # is what is missing there
        said = (f"the COMMIT at {_at(m)} (epoch {m.epoch}) took it in; its own transaction (epoch {e}) "
                f"had committed it, so consumers read it as decided, but its own marker there is missing")
    elif outcome == "committed":
        severity = "critical"
        said = f"the COMMIT at {_at(m)} (epoch {m.epoch}) exposed it to read_committed consumers"
    elif outcome == "aborted":
        said = f"the ABORT at {_at(m)} (epoch {m.epoch}) discarded it: read_committed consumers never read it"
        if why == "time":
            severity = "info"   # accepted while the fencing's markers were on their way: aborted by them
    else:
        start = part.start_offset
        said = ("no marker ends it" + (f": read_committed consumers stop at offset {start}" if start is not None else ""))
    stale_data, ev = _stale_evidence(pt, part, batches, span, e)
    details = j.say.details(part, None, {
        "epoch": e, "current_epoch": max(part.epochs),
        "epoch_ended_ms": span.ended_ms if span else None, "epoch_end": span.how if span else None,
        "how_known": why, "after_end_shown": after, "outcome": outcome, "exposed": outcome == "committed",
        "stale_offsets": [[b["base_offset"], b["last_offset"]] for b in batches],
        "accepted": all(b.get("response_error", 0) == 0 for b in batches)})
    lo = next((b["base_offset"] for b in batches if b["base_offset"] is not None), None)
    hi = next((b["last_offset"] for b in reversed(batches) if b["last_offset"] is not None), None)
    fields = j.say.fields(part, producer_epoch=e, first_offset=lo, last_offset=hi)
    if pt.coverage.source == "wire":
        fields.update(base_sequence=batches[0].get("base_sequence"), last_sequence=batches[-1].get("last_sequence"))
    from kaudit.audit.registry import finding

    return finding("write-after-epoch-end",
                   f"{j.say.where(part)}: producer {part.producer_id} epoch {e}'s data at {_offsets(batches)} was "
                   f"{text}: {said}", severity=severity, **j.say.said(part, stale_data, ev, details),
                   timeline=j.say.timeline(), **fields)


# -- a part's epochs against its marker's ------------------------------------------------------

@rule("mixed-epoch-transaction", "error", "both", "txn part with mixed or mismatched epochs",
      "One transaction's data on a partition came from two producer epochs, or its marker carries "
      "an epoch its data's epoch does not allow: a fenced instance's data was taken into another "
      "epoch's transaction, or a marker was not the coordinator's. Compare with write-after-epoch-end "
      "and torn-transaction findings of the same producer.",
      clean=txn_clean.one_epoch_per_part, fold="transactions", check=_check_mixed)
def mixed_epoch_part(part: Part, pt: ProducerTxns) -> str | None:
    """Invariant: a transaction's data on a partition is of one producer epoch, and its marker
    carries the epoch of the coordinator's PrepareCommit/PrepareAbort (TransactionMetadata:
    transaction version 0/1 - the data's epoch, or epoch + 1 for the coordinator's own abort of
    a fenced or timed-out transaction; version 2 - epoch + 1 for every end, KIP-890); the
    partition leader checks it (ProducerAppendInfo.appendEndTxnMarker).
    Without the coordinator's records (on the wire: its replay from the client's or the
    leaders' requests to it) the data's epoch and the transaction version decide: the
    marker's own when its WriteTxnMarkers v2 carries it (KIP-1228: version 2 - exactly epoch + 1,
    the leader refuses any marker at or below the data's epoch), else the producer's.
    A part cut where its transaction's own marker is missing (txn_lost.split_lost_markers: data of
    a registered transaction, then a later epoch's, then one marker) breaks the second clause: the
    marker that ended it is a later transaction's.
    Benign causes: an admin's abort (kafka-transactions.sh writes the data's epoch: allowed for
    an ABORT), a marker whose result differs from its transaction's (torn-transaction's); on the
    wire, bytes the capture lost where the EndTxn or the marker between two transactions would
    be (Coverage.lost_within: not judged); a write no answer shows stored (not counted)."""
    if not part.data:
        return None
    # on the wire, a Produce no answer shows stored is not the log's (the fenced zombie's
    # write whose rejection the capture lost, placed by its request in the next epoch's part)
    epochs = [e for e in part.epochs if any(b["producer_epoch"] == e and shown_stored(b, pt) for b in part.data)]
    if pt.coverage.lost_within(part):
        return None   # the EndTxn or the marker that splits or ends it may be in bytes the capture lost
    if len(epochs) > 1:
        return f"holds batches of {len(epochs)} epochs ({', '.join(map(str, epochs))}): one transaction is one epoch's"
    m = part.marker
    if part.borrowed_marker and m is not None:
        c = part.coord
        return (f"(epoch {epochs[0]}) has no marker of its own: its transaction ({c.result} decided"
                + (f" at {iso_ms(c.prepare_ts)}" if c.prepare_ts is not None else "") + f") registered {part.tp}, "
                f"but the next marker there, the {m.result} at {_at(m)} (epoch {m.epoch}), is a later "
                "transaction's: its own marker is missing (lost), and that one ended this data too")
    if m is None or m.epoch is None or not epochs:
        return None
    e = epochs[0]
    c = part.coord
    if m.writer == "admin":
        return None if m.epoch in (e, e + 1) else f"has an admin's {m.result} marker at {_at(m)} of epoch {m.epoch}"
    said = m.transaction_version is not None
    # the coordinator's epoch only where its view is in the evidence: on the wire, a transaction
    # replayed from its markers alone (a capture without the client's coordinator traffic nor
    # the leaders' adds) has the epoch of whichever marker the replay gave it, no fact of its own
    if c is not None and c.prepare_epoch is not None and c.result == m.result and not said and pt.coverage.coordinator:
        if m.epoch != c.prepare_epoch and not (m.result == "ABORT" and m.epoch == e):
            return (f"(epoch {e}) ends with a {m.result} marker at {_at(m)} of epoch {m.epoch}, not the "
                    f"coordinator's epoch {c.prepare_epoch} for this transaction")
        return None
    # the coordinator said the transaction's version in its WriteTxnMarkers v2 (KIP-1228): the
    # leader checks a version-2 marker strictly above the data's epoch (ProducerAppendInfo)
    tv = ("2" if m.transaction_version >= 2 else "0/1") if said else pt.version
    allowed = {"0/1": {e} | ({e + 1} if m.result == "ABORT" else set()),
               "2": {e + 1} | ({e} if m.result == "ABORT" and not said else set())}.get(tv, {e, e + 1})
    if m.epoch not in allowed:
        return (f"(epoch {e}) ends with a {m.result} marker at {_at(m)} of epoch {m.epoch}; transaction version "
                f"{tv or 'unknown'}{' (its WriteTxnMarkers v2 says so)' if said else ''} allows "
                f"{' or '.join(map(str, sorted(allowed)))}")
    return None
