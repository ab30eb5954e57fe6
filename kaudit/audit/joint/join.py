"""Wire and disk together (`kaudit audit --pcap ... --segments ...`): what the clients were told,
joined with what the brokers stored.

Pure: it gets the decoded rows it needs (a few columns of the Produce batches and EndTxn events
of the captures, the idempotent batches and transaction markers of the log dirs, each
partition's offset range per replica), never files. The join key of a batch is (topic,
partition, producer id, epoch, base sequence); batches of producer id -1 (no idempotence) are
matched by their CRC (which the broker keeps when it does not recompress: it covers neither the
base offset nor the leader epoch) and, for an acknowledged one, by the offset it was given.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field

from kaudit.audit.joint import acked_loss
from kaudit.audit.joint import join_content as JC
from kaudit.audit.registry import evidence, finding, rule

# columns the engine collects
PRODUCE_COLUMNS = ("source", "position", "connection", "correlation_id", "request_ts", "topic", "topic_id",
                   "partition", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
                   "record_count", "crc", "acks", "is_transactional", "transactional_id",
                   "response_error", "response_base_offset", "client_id", "max_timestamp_ms", "response_ts",
                   "magic", "batch_size", "attributes", "base_offset", "last_offset", "base_timestamp_ms", "codec")
DISK_COLUMNS = ("source", "position", "replica", "topic", "partition", "base_offset",
                "last_offset", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
                "record_count", "crc", "is_control", "control_type", "max_timestamp_ms", "is_transactional")
END_TXN_COLUMNS = ("source", "connection", "position", "ts", "event", "transactional_id",
                   "producer_id", "producer_epoch", "result", "error_codes")


@rule("produce-outcome", "info", "both", "an unanswered, retried or refused Produce resolved against the log",
      "Stored once: nothing to do. Stored twice: the retry duplicated the write (see "
      "duplicate-batch / duplicate-records; enable idempotence). Never stored: the write was lost "
      "unless the client retried it successfully; check the application's delivery callbacks.")
def produce_outcome(stored_offsets: list[int]) -> str:
    """Invariant: a Produce the client sent but got no answer to (timeout, dropped connection,
    acks=0, or a capture that ended), or an error, has an outcome the client cannot know; the
    log can tell. Its records are stored once, twice, or never, counted over its batch (same
    producer id, epoch and sequence, or the same bytes without idempotence) and over the same
    records under another batch header (join_content.py: keys, values, headers, offset and
    timestamp deltas), written within minutes of the send - an idempotent producer's own epoch
    bump and sequence reset after unresolved batches (KIP-360, TransactionManager), or an
    application restarted under a new producer id. Twice: a retry or a re-send appended them
    again (an idempotent broker deduplicates only within one producer session,
    ProducerStateManager.findDuplicateBatch, KIP-98). Once, by the re-send: nothing lost,
    nothing duplicated (info: a fact of the crash). Never: said only when the log covers the
    send - it starts at offset 0 and holds writes made after the send.
    On a capture alone (wire-acked, stored_unanswered): an idempotent producer's Produce without
    an answer whose batch a consumer's Fetch answered after the send served - same producer id,
    partition, epoch, first sequence and record count - is stored once (the broker stores a
    producer session's batch once; a consumer reads only committed offsets); a Produce without a
    producer id whose bytes (CRC, size, record count) any Fetch served at an offset no write of
    those bytes was acknowledged at is stored there - twice where a retry of those bytes was
    acknowledged elsewhere (duplicate-records).
    Benign causes: 'never stored' when the request never reached the leader (the client
    retries), when retention or compaction removed it, or when the log dirs given are not all the
    partition's replicas; the same values sent again by the application within minutes of a
    failed send count as a copy."""
    n = len(stored_offsets)
    return "never stored" if n == 0 else "stored once" if n == 1 else "stored twice"


@rule("outcome-mismatch", "error", "both",
      "what the client was told differs from what the brokers stored",
      "Find which broker's log lost the write (compare the replicas, `kaudit segments` on every "
      "log dir), check unclean.leader.election.enable, min.insync.replicas and the producer's "
      "acks; for a transaction, read the coordinator's __transaction_state (`kaudit txn`).")
def outcome_mismatch(told: str, stored: str) -> bool:
    """Invariant: a Produce acknowledged with acks=all (error 0 and a base offset) is in the log
    of every in-sync replica for as long as retention keeps it (acks=all durability: Kafka's
    ReplicaManager.appendRecords / Partition.appendRecordsToLeader with min.insync.replicas), and
    a transaction the client committed (EndTxn committed=true answered without error) has COMMIT
    markers on all its partitions, an aborted one ABORT markers (TransactionCoordinator.endTransaction,
    KIP-98). A batch acknowledged but missing from every replica of a log that covers its offset,
    or a marker whose result differs from what the client was told, breaks the contract.
    Benign causes: retention or compaction removed the batch (the log start is checked, and a
    batch below the offset the log cleaner has compacted up to - its cleaner-offset-checkpoint -
    is not judged); the log dirs given are not the leader's or not all the
    brokers'; acks=1 writes lost in a leader change (reported as a warning); a capture and log
    dirs that are not of the same cluster or time."""
    return told != stored


@dataclass
class JoinInput:
    produce: list[dict] = field(default_factory=list)    # wire Produce batches (source_kind produce)
    end_txn: list[dict] = field(default_factory=list)    # wire END_TXN events
    disk: list[dict] = field(default_factory=list)       # disk batches (idempotent, markers, matched pid -1)
    # (replica, topic, partition) -> [log start offset, log end offset] over every batch read
    ranges: dict = field(default_factory=dict)
    # (replica, topic, partition) -> the offset the log cleaner has compacted up to
    # (cleaner-offset-checkpoint): below it, a batch the log lacks may have been compacted away
    cleaned: dict = field(default_factory=dict)
    # the stored batches (any producer) at the offsets the captures acknowledged, with their
    # record content and leader epoch (acked_loss.AT_COLUMNS)
    at_acked: list[dict] = field(default_factory=list)
    # (replica, topic, partition) -> {leader epoch: first offset}: the epoch a log reached by an offset
    epoch_starts: dict = field(default_factory=dict)
    verdicts: list[dict] = field(default_factory=list)   # set by join: each acknowledged write judged
    # (replica, topic, partition) -> the latest batch timestamp (ms) the log holds: a log that
    # holds nothing written after a send cannot prove it was never stored
    latest: dict = field(default_factory=dict)
    holes: object = None   # where the captures lost bytes (capture_holes.CaptureHoles; None: nowhere)


def wire_key(r: dict):
    if r["producer_id"] is not None and r["producer_id"] >= 0:
        return ("idem", r["topic"], r["partition"], r["producer_id"], r["producer_epoch"], r["base_sequence"])
    return ("crc", r["topic"], r["partition"], r["crc"])


def _stored(disk: list[dict]) -> dict:
    """key -> {replica: sorted distinct base offsets}"""
    out: dict = defaultdict(lambda: defaultdict(set))
    for d in disk:
        if d["is_control"]:
            continue
        out[wire_key(d)][d["replica"]].add(d["base_offset"])
    return out


def _txn_key(pid: int, epoch, batches: list[dict], wrong: list[dict]) -> dict:
    """The names the transaction rules may give the transaction of `batches` (its first data by
    partition and offset: txn_model.Transaction.key) - "transaction" - and the parts of it whose
    outcome differs, where the rules may tell one apart (a late write: its own first data) -
    "transactions": so that incidents join the client's outcome to those findings."""
    first = min(((_where(b), b["response_base_offset"]) for b in batches
                 if b.get("response_base_offset") is not None and b["response_base_offset"] >= 0), default=None)
    out: dict = {} if first is None else {"transaction": f"{pid}/{epoch}/{first[0]}@{first[1]}"}
    parts = sorted({(w["partition"], w["batch_offset"]) for w in wrong})
    if parts:
        out["transactions"] = [f"{pid}/{epoch}/{tp}@{o}" for tp, o in parts]
    return out


def _where(r: dict) -> str:
    return f"{r['topic']}-{r['partition']}"


def _wire_ev(r: dict, note: str | None = None):
    return evidence(r["source"], r["position"], "produce",
                    note or f"corr {r.get('correlation_id')} on {r.get('connection')}")


def _fields(r: dict) -> dict:
    pid = r["producer_id"]
    return dict(topic=r["topic"], partition=r["partition"], connection=r.get("connection"),
                client_id=r.get("client_id"), producer_id=pid, producer_epoch=r["producer_epoch"] if pid is not None and pid >= 0 else None,
                transactional_id=r.get("transactional_id"),
                base_sequence=r["base_sequence"] if pid is not None and pid >= 0 else None,
                last_sequence=r["last_sequence"] if pid is not None and pid >= 0 else None,
                first_ts_ms=int(r["request_ts"] * 1000) if r.get("request_ts") is not None else None)


def _holders(ranges: dict, topic: str, partition: int) -> dict:
    return {rep: rng for (rep, t, p), rng in ranges.items() if t == topic and p == partition}


def join(inp: JoinInput) -> tuple[list[dict], dict]:
    """(findings, coverage counts) of the join."""
    stored = _stored(inp.disk)
    where_of = {}                         # key -> a disk row, for evidence
    for d in inp.disk:
        if not d["is_control"]:
            where_of.setdefault((wire_key(d), d["replica"], d["base_offset"]), d)
    out: list[dict] = []
    cov = {"produce_batches": len(inp.produce), "resolved": 0, "acknowledged_checked": 0,
           "acknowledged_not_covered": 0, "acknowledged_compacted": 0, "end_txn_checked": 0}
    groups: dict = defaultdict(list)
    for r in inp.produce:
        key = wire_key(r)
        if key[0] == "crc" and r["crc"] is None:
            continue
        groups[key].append(r)
    by_content, earlier = JC.index(inp.disk), JC.acknowledged(inp.produce, wire_key)
    markers = _markers(inp.disk)
    chains = []
    for key, attempts in groups.items():
        attempts.sort(key=lambda r: (r["request_ts"] or 0, r["position"] or 0))
        chains.extend((key, c) for c in (_sends(attempts) if key[0] == "crc" else [attempts]))
    for key, attempts in chains:
        r0 = attempts[0]
        reps = stored.get(key, {})
        holders = _holders(inp.ranges, r0["topic"], r0["partition"])
        for r in attempts:
            if r["response_error"] == 0 and r["response_base_offset"] is not None and r["response_base_offset"] >= 0:
                off = r["response_base_offset"]
                covering = {rep: rng for rep, rng in holders.items() if rng[0] <= off}
                compacted = {rep for rep in holders if off < inp.cleaned.get((rep, r0["topic"], r0["partition"]), -1)}
                if compacted:
                    cov["acknowledged_compacted"] += 1   # the cleaner may have removed it: not judged
                    covering = {}
                if not covering:
                    cov["acknowledged_not_covered"] += 1
                    continue
                cov["acknowledged_checked"] += 1   # judged by acked_loss.judge
        errs = [r["response_error"] for r in attempts]
        if holders and (None in errs or len(attempts) > 1 or any(e not in (None, 0) for e in errs)):
            copies = JC.copies(attempts, key, by_content, earlier, wire_key)
            aborted = []
            if r0["is_transactional"]:   # an aborted copy is no copy for the readers of committed data
                kept, kept_copies, gone = _committed(reps, copies, markers, r0)
                if gone and (kept or kept_copies):   # all aborted: stored once, as its transaction ended
                    reps, copies, aborted = kept, kept_copies, gone
            f = _resolve(attempts, key, reps, holders, where_of, copies, inp.latest, aborted)
            if f is not None:
                out.append(f)
                cov["resolved"] += 1
    out.extend(_end_txn(inp, stored, cov, markers))
    acov: dict = {}
    lost, verdicts = acked_loss.judge(inp.produce, inp.disk, inp.at_acked, inp.ranges, inp.cleaned, inp.end_txn, acov,
                                      inp.epoch_starts)
    cov.update({k: acov.get(k, 0) for k in ("acknowledged_lost", "acknowledged_held", "acknowledged_not_comparable")})
    out.extend(lost)
    inp.verdicts = verdicts
    return out, cov


def _committed(reps: dict, copies: list[dict], markers: dict, r: dict) -> tuple[dict, list[dict], list[int]]:
    """A transactional send's stored copies less those their transactions aborted, and the
    offsets of those (an exactly-once application re-sends an aborted transaction's records in
    the next one: stored once for read_committed readers; the aborted copy is no duplicate)."""
    t, p, pid = r["topic"], r["partition"], r["producer_id"]
    gone = {(rep, o) for rep, offs in reps.items() for o in offs if _aborted(markers, rep, t, p, pid, o)}
    gone |= {(d["replica"], d["base_offset"]) for d in copies
             if d.get("is_transactional") and _aborted(markers, d["replica"], t, p, d["producer_id"], d["base_offset"])}
    kept = {rep: {o for o in offs if (rep, o) not in gone} for rep, offs in reps.items()}
    return ({rep: offs for rep, offs in kept.items() if offs},
            [d for d in copies if (d["replica"], d["base_offset"]) not in gone], sorted({o for _, o in gone}))


def _sends(attempts: list[dict]) -> list[list[dict]]:
    """The attempts of one non-idempotent batch's bytes split into the application's separate
    sends: a batch without a timestamp (-1) sent again after every earlier copy was acknowledged
    is a new send of the same values (a client retries only a failed or unanswered send), not
    another attempt of the first (repeated-records; issue 27)."""
    out = [[attempts[0]]]
    for r in attempts[1:]:
        untimed = r.get("max_timestamp_ms") in (-1, None)
        answered = all(a["response_error"] == 0 and a.get("response_ts") is not None and r["request_ts"] is not None
                       and a["response_ts"] <= r["request_ts"] for a in out[-1])
        if untimed and answered:
            out.append([r])
        else:
            out[-1].append(r)
    return out


# errors after which the broker has not appended the batch (the others, e.g. REQUEST_TIMED_OUT or
# NOT_ENOUGH_REPLICAS_AFTER_APPEND, may come after the append)
NOT_APPENDED = {2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 6: "NOT_LEADER_OR_FOLLOWER",
                10: "MESSAGE_TOO_LARGE", 45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH",
                87: "INVALID_RECORD", 90: "PRODUCER_FENCED"}


def _answer(r) -> str:
    e = r["response_error"]
    if e is None:
        return "no response (acks=0)" if r.get("acks") == 0 else "no response"
    if e == 0:
        return f"offset {r['response_base_offset']}"
    return f"error {e}" + (f" {NOT_APPENDED[e]}" if e in NOT_APPENDED else "")


def _resolve(attempts, key, reps, holders, where_of, copies=(), latest=None, aborted=()):
    """The produce-outcome (or outcome-mismatch) finding of one batch sent with an uncertain
    answer: no response, several attempts, or an error. Its copies are the log's batches of its
    key (`reps`) and those holding its records under another key (`copies`, join_content);
    `aborted`: the offsets of its copies whose transactions aborted (left out of both)."""
    r = attempts[-1]
    errs = [a["response_error"] for a in attempts]
    held: dict = defaultdict(set)          # replica -> offsets holding the records
    for rep, offs in reps.items():
        held[rep] |= set(offs)
    for d in copies:
        held[d["replica"]].add(d["base_offset"])
    offsets = sorted({o for offs in held.values() for o in offs})
    twice_on = sorted((rep for rep, offs in held.items() if len(offs) > 1), key=str)
    ev = [_wire_ev(a) for a in attempts]
    for rep, offs in sorted(reps.items(), key=lambda kv: str(kv[0])):
        for o in sorted(offs):
            d = where_of.get((key, rep, o))
            if d is not None:
                ev.append(evidence(d["source"], d["position"], "batch", f"replica {rep} offset {o}"))
    resent = {}                            # offset -> a copy stored there under another key
    for d in sorted(copies, key=lambda d: (str(d["replica"]), d["base_offset"])):
        resent.setdefault(d["base_offset"], d)
        ev.append(evidence(d["source"], d["position"], "batch",
                           f"replica {d['replica']} offset {d['base_offset']}: the same records re-sent"))
    answers = [_answer(a) for a in attempts]
    details = {"answers": answers, "stored_offsets": offsets, "replicas": sorted(map(str, held)),
               "log_ranges": {str(rep): list(rng) for rep, rng in holders.items()}}
    if resent:
        details["resent_at"] = sorted(resent)
    if aborted:
        details["aborted_offsets"] = list(aborted)
    pid = r["producer_id"]
    rule_id, outcome, sev, text = _verdict(r, errs, reps, offsets, twice_on, resent, holders, latest, aborted)
    if outcome is None:
        return None
    details["outcome"] = outcome
    who = f"producer {pid} epoch {r['producer_epoch']} sequences {r['base_sequence']}-{r['last_sequence']}" \
        if pid is not None and pid >= 0 else f"non-idempotent batch crc {r['crc']}"
    sent = "sent once" if len(attempts) == 1 else f"sent {len(attempts)} times"
    return finding(
        rule_id, f"{_where(r)}: Produce of {who} ({r['record_count']} records) {sent}, "
        f"answered {'; '.join(answers)}: {text}",
        severity=sev, evidence=ev, details=details,
        first_offset=offsets[0] if offsets else None, last_offset=offsets[-1] if offsets else None,
        **_fields(r))


def _verdict(r, errs, reps, offsets, twice_on, resent, holders, latest, aborted=()):
    """(rule, outcome, severity, text) of an uncertain send from its copies in the log (less the
    `aborted` ones: their offsets are said); outcome None: nothing to report (acknowledged and
    missing: acked_loss.judge tells it)."""
    pid = r["producer_id"]
    gone = (f"stored at offset{'s' if len(aborted) > 1 else ''} {', '.join(map(str, aborted))} in a transaction "
            "that aborted (read_committed readers skip it)") if aborted else ""
    also = f"; {gone}" if gone else ""   # the aborted copies, after what the others say
    if twice_on:
        how = "".join(f"; offset {o} re-sent by {JC.describe(d, pid)}" for o, d in sorted(resent.items()))
        return ("produce-outcome", "stored twice", "warning",
                f"stored twice at offsets {', '.join(map(str, offsets))} (already a duplicate on disk, "
                f"replica {', '.join(map(str, twice_on))}{how}){also}")
    if offsets and not reps:
        d = resent[offsets[0]]
        return ("produce-outcome", "stored once", "info",
                f"{gone or 'not stored as sent'}; its records are stored once, at offset {d['base_offset']}, "
                f"re-sent by {JC.describe(d, pid)}: nothing lost, nothing duplicated"
                + (" for read_committed readers (read_uncommitted ones read both copies)" if gone else ""))
    if offsets:
        text = f"stored once at offset {offsets[0]}"
        if all(e in NOT_APPENDED for e in errs):
            return ("outcome-mismatch", "stored once", "error",
                    f"{text}, though every attempt was refused with an error after which the broker does not append{also}")
        return "produce-outcome", "stored once", "info", text + also
    if 0 in errs:
        return None, None, None, None   # acknowledged and missing: acked_loss.judge tells it
    if all(e in NOT_APPENDED for e in errs):
        return "produce-outcome", "never stored", "info", "never stored, as the broker's answer said"
    start = min(rng[0] for rng in holders.values())
    if start > 0:
        return ("produce-outcome", "never stored", "info",
                f"not in the log, which starts at offset {start}: lost, or removed by retention "
                f"(the client may have retried)")
    ends = [latest.get((rep, r["topic"], r["partition"])) for rep in holders] if latest else []
    sent_ms = None if r.get("request_ts") is None else r["request_ts"] * 1000
    if sent_ms is not None and ends and all(e is None or e < sent_ms for e in ends):
        return ("produce-outcome", "unknown", "info",
                "not in the log dirs given, which hold nothing written after this send: whether it was "
                "stored later they cannot tell")
    if None not in errs:     # an error after which the broker may have appended: the log says it did not
        return ("produce-outcome", "never stored", "info",
                "never stored: the log holds neither this batch nor its records (the client was told an error)")
    return ("produce-outcome", "never stored", "warning",
            "never stored: neither this batch nor its records under any producer id or epoch are in the log: "
            "the write was lost (unless the client re-sent the records in other batches)")


def _after_lost_end(holes, batches: list[dict], e: dict, ends: list[dict]) -> list[dict]:
    """The batches of EndTxn `e`'s own transaction among those sent since the producer's previous
    EndTxn: where the capture lost bytes of its coordinator connections between them (an earlier
    EndTxn may be there, as an earlier transaction's data before it), those sent after the
    last loss (audit.capture_holes)."""
    if holes is None or not batches:
        return batches
    conns = {x["connection"] for x in ends}
    by = holes.lost_until(conns, (batches[0]["source"], batches[0]["position"]), (e["source"], e["position"]))
    if by is None:
        return batches
    return [b for b in batches if holes.place(b["source"], b["position"]) > by]


def _last_ends(batches: list[dict], stored: dict, markers: dict, pid: int) -> dict:
    """(replica, topic, partition) -> the marker after the highest stored offset of `batches`
    there: the end of the transaction an EndTxn ended. A batch of the window before an earlier
    marker is an earlier transaction's (one epoch spans transactions under version 0/1, and the
    capture may have lost the EndTxn between)."""
    top: dict = {}
    for b in batches:
        for rep, offs in stored.get(wire_key(b), {}).items():
            k = (rep, b["topic"], b["partition"])
            top[k] = max(top.get(k, -1), max(offs))
    return {k: _next_marker(markers, *k, pid, o) for k, o in top.items()}


def _markers(disk: list[dict]) -> dict:
    """(replica, topic, partition, pid) -> [(offset, type, epoch, row)] of the log's COMMIT and
    ABORT markers, in offset order."""
    markers = defaultdict(list)
    for d in disk:
        if d["is_control"] and d["control_type"] in ("COMMIT", "ABORT"):
            markers[(d["replica"], d["topic"], d["partition"], d["producer_id"])].append(
                (d["base_offset"], d["control_type"], d["producer_epoch"], d))
    for v in markers.values():
        v.sort(key=lambda m: m[0])
    return markers


def _next_marker(markers: dict, rep, topic: str, partition: int, pid, offset: int):
    """The producer's first marker after `offset` on that replica's partition (None: none)."""
    ms = markers.get((rep, topic, partition, pid), ())
    i = bisect_right(ms, offset, key=lambda m: m[0])
    return ms[i] if i < len(ms) else None


def _aborted(markers: dict, rep, topic: str, partition: int, pid, offset: int) -> bool:
    """Whether the transactional batch of `pid` at `offset` was aborted: the producer's next
    marker there is an ABORT (read_committed readers never see it)."""
    m = _next_marker(markers, rep, topic, partition, pid, offset)
    return m is not None and m[1] == "ABORT"


def _end_txn(inp: JoinInput, stored: dict, cov: dict, markers: dict) -> list[dict]:
    """EndTxn (answered without error) vs the markers after the transaction's batches."""
    txn_batches = defaultdict(list)   # pid -> wire transactional batches in send order
    for r in inp.produce:
        if r["is_transactional"] and r["producer_id"] is not None and r["producer_id"] >= 0:
            txn_batches[r["producer_id"]].append(r)
    for v in txn_batches.values():
        v.sort(key=lambda r: (r["request_ts"] or 0, r["position"] or 0))
    ends = defaultdict(list)
    for e in inp.end_txn:
        if e["producer_id"] is not None and e["producer_id"] >= 0:
            ends[e["producer_id"]].append(e)
    out = []
    for pid, es in ends.items():
        es.sort(key=lambda e: (e["ts"] or 0, e["position"] or 0))
        prev = float("-inf")
        for e in es:
            ts = e["ts"] or 0
            batches = [b for b in txn_batches.get(pid, ()) if prev < (b["request_ts"] or 0) < ts
                       and b["producer_epoch"] == e["producer_epoch"]]
            prev = ts
            if e["error_codes"] != "":
                continue    # unanswered or refused: the client was not told an outcome
            batches = _after_lost_end(inp.holes, batches, e, es)
            cov["end_txn_checked"] += 1
            wrong, ev, reps = [], [], []
            last = _last_ends(batches, stored, markers, pid)
            for b in batches:
                for rep, offs in stored.get(wire_key(b), {}).items():
                    for o in offs:
                        m = _next_marker(markers, rep, b["topic"], b["partition"], pid, o)
                        if m is not last.get((rep, b["topic"], b["partition"])):
                            continue   # an earlier transaction's data: its EndTxn is not in the capture
                        if m is not None and m[1] != e["result"]:
                            wrong.append({"partition": _where(b), "replica": rep, "batch_offset": o,
                                          "marker": m[1], "marker_offset": m[0], "marker_epoch": m[2]})
                            ev.append(evidence(m[3]["source"], m[3]["position"], "batch",
                                               f"{m[1]} marker at offset {m[0]} on replica {rep}"))
                            reps.append(rep)
            if not wrong:
                continue
            parts = sorted({w["partition"] for w in wrong})
            told = "committed" if e["result"] == "COMMIT" else "aborted"
            out.append(finding(
                "outcome-mismatch", f"producer {pid} epoch {e['producer_epoch']} "
                f"({e['transactional_id']}): the client was told the transaction {told} (EndTxn), "
                f"the log holds {', '.join(sorted({w['marker'] for w in wrong}))} markers on {', '.join(parts)}",
                evidence=[evidence(e["source"], e["position"], "end_txn", f"EndTxn {e['result']}")] + ev,
                details={"told": e["result"], "stored": wrong, "evidence_replicas": [None] + reps,
                         **_txn_key(pid, e["producer_epoch"], batches, wrong)},
                producer_id=pid, producer_epoch=e["producer_epoch"], transactional_id=e["transactional_id"],
                connection=e["connection"], first_ts_ms=int(ts * 1000) if ts else None))
    return out
