"""`kaudit audit`: acknowledged writes against what every replica now stores at their offsets.

For each write a Produce response acknowledged (acked_writes.py), each replica whose log covers
its offset is looked at there: it holds the write (same producer id, epoch, sequence, or the same
records), other records, or nothing (a hole, or a log that ends before it). The write is lost
when no replica holds it, or when the replicas that hold it hold it in an earlier leader epoch
than the other records a replica holds there (the partition's later leader wrote over it: a
deposed leader's copy, truncated when it rejoins). Then the leadership and loss findings of the
same partition (unclean-leader-election, unexplained-divergence, missing-offsets,
missing-segments) are told which of their offsets were acknowledged to clients (`annotate`).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict

from kaudit.audit.producers import acked_writes as A
from kaudit.audit.registry import SEVERITY_RANK, evidence, finding, rule
from kaudit.ranges import merged
from kaudit.timefmt import iso_ms
from kaudit.ranges import offsets as offset_span

# the stored batches at acknowledged offsets the engine keeps (join_rows.DiskTap "acked")
AT_COLUMNS = tuple(dict.fromkeys(
    ("source", "position", "replica", "topic", "partition", "base_offset", "last_offset", "producer_id",
     "producer_epoch", "base_sequence", "last_sequence", "record_count", "crc", "is_control", "control_type",
     "partition_leader_epoch", "is_transactional") + A.CONTENT_COLUMNS))
ANNOTATED = ("unclean-leader-election", "unexplained-divergence", "missing-offsets", "missing-segments")


@rule("acknowledged-write-lost", "error", "both",
      "an acknowledged write whose offsets now hold other records, or nothing, in every replica",
      "The write is lost unless a replica named in the finding still holds it (a deposed leader: "
      "copy its partition dir before it rejoins and truncates). Find the cause in the same "
      "incident (unclean-leader-election, missing-offsets, replica-divergence), keep "
      "unclean.leader.election.enable=false and min.insync.replicas >= 2 with acks=all, and "
      "replay the lost records from their source.")
def acknowledged_write_lost(holders: dict, others: dict, absent: list, reached: dict) -> bool:
    """Invariant: with acks=all an acknowledged offset holds that write forever in every in-sync
    replica (Partition.appendRecordsToLeader waits for the ISR, min.insync.replicas), unless
    retention, compaction or DeleteRecords removed it; replicas copy the leader's batches as
    they are (UnifiedLog.appendAsFollower) and truncate only what lies above the high watermark
    (KIP-101, KIP-279). So a replica whose log covers the acknowledged offset holds the same
    batch there - same producer id, epoch and base sequence, or without idempotence the same
    records. Flagged: no covering replica holds it (other records, or none, at its offsets),
    or every replica that holds it holds it in an earlier leader epoch than another replica's
    log reached at or before those offsets (the partition's later leader wrote over it or
    truncated it: the holder truncates to that epoch's boundary when it follows again). The
    epoch a log reached is its batches' and its leader-epoch-checkpoint's: a new leader records
    (epoch, its log end) before it appends anything (Partition.makeLeader), so a leader elected
    over a deposed one's acks=1 tail shows the loss before it writes over it.
    Severity: critical once the write reached a committed state (acks=all without a
    transaction, a transaction the client was told committed or whose COMMIT marker a replica
    still holding the write holds), error for acks=all data of a
    transaction whose outcome is unknown, warning for acks=1 (a leader change may lose it: the
    producer's documented risk).
    Benign causes: retention or compaction removed it (offsets below a replica's log start and
    below any replica's cleaner-offset-checkpoint are not judged); the log dirs given are not the cluster
    the capture saw, or not its current replicas; the topic deleted and created again."""
    if not holders:
        return bool(others or absent)
    return max(reached.values(), default=-1) > max(holders.values())


class _Log:
    """One replica's stored batches of a partition near the acknowledged offsets, by offset: the
    batches overlapping a range, and the latest leader epoch reached by an offset."""

    def __init__(self, batches: list[A.Batch]):
        self.batches = sorted(batches, key=lambda b: b.lo)
        self.los = [b.lo for b in self.batches]
        self.span = max((b.hi - b.lo for b in self.batches), default=0)
        self.reach, top = [], -1
        for b in self.batches:
            top = max(top, _epoch(b))
            self.reach.append(top)

    def overlapping(self, w: A.Batch) -> list[A.Batch]:
        i, j = bisect.bisect_left(self.los, w.lo - self.span), bisect.bisect_right(self.los, w.hi)
        return [b for b in self.batches[i:j] if A.overlaps(w, b)]

    def epoch_by(self, offset: int) -> int:
        """The latest leader epoch of a batch starting at or before `offset`."""
        i = bisect.bisect_right(self.los, offset)
        return self.reach[i - 1] if i else -1


def _exact(r: dict, replica) -> tuple:
    """A batch's identity at its offsets: what an exact copy of an acknowledged write shares."""
    pid = r.get("producer_id")
    if pid is not None and pid >= 0:
        return (replica, r["base_offset"], r["last_offset"], pid, r.get("producer_epoch"), r.get("base_sequence"))
    return (replica, r["base_offset"], r["last_offset"], "crc", r.get("crc"))


class _Stored:
    """The stored rows of one partition: exact copies by identity (the common case: every
    replica holds the write as acknowledged), each replica's _Log built when a write needs it."""

    def __init__(self, rows: list[dict]):
        self.rows = rows
        self.exact = {_exact(r, r["replica"]) for r in rows if not r.get("is_control")}
        self._logs: dict | None = None

    def logs(self) -> dict:
        if self._logs is None:
            by_rep = defaultdict(list)
            for r, c in zip(self.rows, A.contents(self.rows)):
                by_rep[r["replica"]].append(A.batch_of(r, r["base_offset"], c))
            self._logs = {rep: _Log(v) for rep, v in by_rep.items()}
        return self._logs


def stored_rows(disk: list[dict], at_acked: list[dict]) -> dict:
    """(topic, partition) -> its _Stored (data and control batches); a row of `at_acked` (with
    record content and leader epoch) wins over the same batch in `disk`."""
    seen, out = set(), defaultdict(list)
    for rows in (at_acked, disk):
        for r in rows:
            k = (r["replica"], r["source"], r["position"])
            if k not in seen:
                seen.add(k)
                out[(r["topic"], r["partition"])].append(r)
    return {tp: _Stored(v) for tp, v in out.items()}


def judge(produce: list[dict], disk: list[dict], at_acked: list[dict], ranges: dict, cleaned: dict,
          end_txn: list[dict], cov: dict, epoch_starts: dict | None = None) -> tuple[list[dict], list[dict]]:
    """(findings, the verdict of every acknowledged write the logs cover)."""
    acked = A.acked_batches(sorted(produce, key=lambda r: (r.get("response_ts") or 0, r["source"], r["position"])))
    stored = stored_rows(disk, at_acked)
    keys = {(d["topic"], d["partition"], d["producer_id"], d["producer_epoch"], d["base_sequence"])
            for d in disk if d["producer_id"] is not None and d["producer_id"] >= 0 and not d["is_control"]}
    commits, markers = _commits(end_txn), _markers(disk)
    by_tp: dict = defaultdict(list)
    for w in acked:
        by_tp[(w.row["topic"], w.row["partition"])].append(w)
    rng_of: dict = defaultdict(dict)
    for (rep, t, p), rng in ranges.items():
        rng_of[(t, p)][rep] = rng
    for (rep, t, p), starts in (epoch_starts or {}).items():
        if starts and (rep, t, p) not in ranges:
            # a replica holding no batch: an empty log whose leader-epoch-checkpoint says where it
            # stands (a leader elected with an empty log: (epoch, its log end), log start = end)
            top = max(starts.values())
            rng_of[(t, p)][rep] = (top, top - 1)
    out, verdicts = [], []
    empty = _Stored([])
    for (topic, part), ws in sorted(by_tp.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        holders_rng = rng_of.get((topic, part), {})
        st = stored.get((topic, part), empty)
        judged = []
        for w in ws:
            v = _verdict(w, holders_rng, st, cleaned, topic, part, epoch_starts or {})
            if v is None:
                cov["acknowledged_not_covered"] = cov.get("acknowledged_not_covered", 0) + 1
                continue
            if v["lost"] is None:
                cov["acknowledged_not_comparable"] = cov.get("acknowledged_not_comparable", 0) + 1
                continue
            if v["lost"] and w.idempotent and not v["holders"] and \
                    (topic, part, w.pid, w.epoch, w.seq) in keys:
                v["lost"] = False   # stored, at another offset than acknowledged
            v["committed"] = _committed(w, commits, v, markers)
            judged.append((w, v))
            verdicts.append(dict(v, write=w))
        for run in _runs(judged):
            out.append(_finding(topic, part, run))
    cov["acknowledged_lost"] = sum(1 for v in verdicts if v["lost"])
    cov["acknowledged_held"] = sum(1 for v in verdicts if not v["lost"])
    return out, verdicts


def _verdict(w: A.Batch, rngs: dict, st: _Stored, cleaned: dict, topic, part, epoch_starts: dict) -> dict | None:
    covering = {rep: rng for rep, rng in rngs.items() if rng[0] <= w.lo}
    # any replica's cleaner past it (even one whose first batch left is later: it removed the
    # ones before) may have removed it - each cleaner decides from the same records
    if not covering or any(w.lo < cleaned.get((rep, topic, part), -1) for rep in rngs):
        return None    # below a log start (retention) or the cleaner's reach (compaction): not judged
    me = _exact(dict(w.row, base_offset=w.lo, last_offset=w.hi), None)[1:]
    if all((rep, *me) in st.exact for rep in covering):
        # every covering replica holds it as acknowledged: held (the fast, common case)
        return {"lost": False, "holders": dict.fromkeys(covering, -1), "reached": {}, "others": {}, "absent": [],
                "other_rows": {}, "ranges": {rep: list(rng) for rep, rng in covering.items()}}
    reps = st.logs()
    holders, others, absent, unknown = {}, {}, [], False
    other_rows = defaultdict(list)
    for rep in sorted(covering, key=str):
        at = reps[rep].overlapping(w) if rep in reps else []
        if not at:
            absent.append(rep)
            continue
        for b in at:
            same = A.same_write(w, b) if not b.row.get("is_control") else False
            epoch = _epoch(b)
            if same is True:
                holders[rep] = max(holders.get(rep, -1), epoch)
            elif same is False:
                others[rep] = max(others.get(rep, -1), epoch)
                other_rows[rep].append(b)
            else:
                unknown = True
    # the latest leader epoch each other replica's log reached at or before the write's offsets
    reached = {rep: max([reps[rep].epoch_by(w.hi) if rep in reps else -1]
                        + [e for e, lo in epoch_starts.get((rep, topic, part), {}).items() if lo <= w.hi])
               for rep in covering if rep not in holders}
    lost = None if unknown and not holders else acknowledged_write_lost(holders, others, absent, reached)
    return {"lost": lost, "holders": holders, "reached": reached, "others": others, "absent": absent, "other_rows": other_rows,
            "ranges": {rep: list(rng) for rep, rng in covering.items()}}


def _epoch(b: A.Batch) -> int:
    e = b.row.get("partition_leader_epoch")
    return -1 if e is None else e


def _commits(end_txn: list[dict]) -> dict:
    """(producer id, epoch) -> [(time, result)] of the EndTxn calls answered without error."""
    out = defaultdict(list)
    for e in end_txn:
        if e.get("error_codes") == "" and e.get("producer_id") is not None:
            out[(e["producer_id"], e["producer_epoch"])].append((e.get("ts") or 0, e.get("result")))
    for v in out.values():
        v.sort()
    return out


def _markers(disk: list[dict]) -> dict:
    """(replica, producer id) -> [(offset, COMMIT|ABORT)] by offset: the stored markers of the
    wire's transactional producers (the join's disk rows)."""
    out = defaultdict(list)
    for d in disk:
        if d.get("is_control") and d.get("control_type") in ("COMMIT", "ABORT"):
            out[(d["replica"], d["producer_id"])].append((d["base_offset"], d["control_type"]))
    for v in out.values():
        v.sort()
    return out


def _committed(w: A.Batch, commits: dict, v: dict, markers: dict) -> str | None:
    """Why a transactional write reached a committed state: the client was told its transaction
    committed (EndTxn), or a replica that still holds it holds its producer's next marker after
    it, a COMMIT (the transaction's outcome on that log)."""
    if not w.row.get("is_transactional"):
        return None
    sent = w.row.get("request_ts") or 0
    end = next(((ts, res) for ts, res in commits.get((w.pid, w.epoch), ()) if ts > sent), None)
    if end is not None and end[1] == "COMMIT":
        return f"committed: the client was told its transaction committed (EndTxn) at {iso_ms(int(end[0] * 1000))}"
    for rep in sorted(v["holders"], key=str):
        m = next((m for m in markers.get((rep, w.pid), ()) if m[0] > w.hi), None)
        if m is not None and m[1] == "COMMIT":
            return f"committed: replica {rep} holds its transaction's COMMIT marker at offset {m[0]}"
    return None


def _runs(judged: list) -> list[list]:
    """Lost writes in offset order, cut where an acknowledged write that survived lies between."""
    runs: list[list] = [[]]
    for w, v in sorted(judged, key=lambda x: (x[0].lo, x[0].row.get("response_ts") or 0)):
        if v["lost"]:
            runs[-1].append((w, v))
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if r]


def _finding(topic, part, run: list) -> dict:
    ws = [w for w, _ in run]
    lo, hi = min(w.lo for w in ws), max(w.hi for w in ws)
    states = [A.committed_state(w.row.get("acks"), bool(w.row.get("is_transactional")), v["committed"]) for w, v in run]
    sev = max((A.loss_severity(w.row.get("acks"), bool(w.row.get("is_transactional")), v["committed"] is not None)
               for w, v in run), key=["warning", "error", "critical"].index)
    holders = sorted({rep for _, v in run for rep in v["holders"]}, key=str)
    others: dict = defaultdict(list)
    for _, v in run:
        for rep, bs in v["other_rows"].items():
            others[rep].extend(bs)
    absent = sorted({rep for _, v in run for rep in v["absent"]}, key=str)
    n = f"{len(ws)} acknowledged writes" if len(ws) > 1 else "an acknowledged write"
    parts = [_replica_text(rep, run, others.get(rep, ())) for rep in sorted(set(others) | set(absent), key=str)]
    if holders:
        held = max(e for _, v in run for e in v["holders"].values())
        reached = max((e for _, v in run for e in v["reached"].values()), default=-1)
        parts.append(f"replica{'s' if len(holders) > 1 else ''} {', '.join(map(str, holders))} still "
                     f"hold{'s' if len(holders) == 1 else ''} {'them' if len(ws) > 1 else 'it'} in leader epoch {held}, "
                     f"older than the epoch {reached} the other replicas' logs reached there (a deposed leader's "
                     "copy: truncated when it follows again)")
    short = not others and not holders and all(v["ranges"][rep][1] < w.lo for w, v in run for rep in v["absent"])
    if short:
        parts.append("every log given ends before them (lost, unless these log dirs were copied before the "
                     "acknowledgement: compare the copy's time)")
    msg = (f"{topic}-{part}: {n} at {offset_span(lo, hi)} {'are' if len(ws) > 1 else 'is'} lost: {A.ack_text(ws[0])}"
           + (f" and {len(ws) - 1} more" if len(ws) > 1 else "") + "; " + "; ".join(parts) + f" ({states[0]})")
    ev = [(A.ack_evidence(w), None) for w in ws[:A.MAX_LISTED]]
    for rep, bs in sorted(others.items(), key=lambda kv: str(kv[0])):
        for b in bs[:A.MAX_LISTED]:
            ev.append((evidence(b.row["source"], b.row["position"], "batch", f"replica {rep}: {b.who()} at {b.lo}-{b.hi}"),
                       rep))
    # each piece once; the replica whose file it is (the finding names the holders, not them)
    ev = list({(e["source"], e["position"], e["kind"]): (e, rep) for e, rep in ev}.values())
    pids = {w.pid for w in ws}
    clients = {w.row.get("client_id") for w in ws}
    return finding(
        "acknowledged-write-lost", msg, severity=sev,
        evidence=[e for e, _ in ev],
        topic=topic, partition=part, topic_id=ws[0].row.get("topic_id"), first_offset=lo, last_offset=hi,
        replica=",".join(map(str, holders)) or None, first_ts_ms=A.ms(ws[0].row.get("response_ts")),
        producer_id=pids.pop() if len(pids) == 1 else None, client_id=clients.pop() if len(clients) == 1 else None,
        details={"lost": [A.ack_detail(w, s) for w, s in zip(ws[:A.MAX_LISTED], states)], "lost_writes": len(ws),
                 "still_on": holders, "other_records_on": sorted(map(str, others)), "nothing_on": absent,
                 "evidence_replicas": [None if rep is None else str(rep) for _, rep in ev],
                 "log_ranges": {str(rep): rng for _, v in run for rep, rng in v["ranges"].items()}})


def _replica_text(rep, run: list, bs) -> str:
    """What one replica holds at the lost writes' offsets: other records, and where nothing."""
    out = []
    if bs:
        lo, hi = min(b.lo for b in bs), max(b.hi for b in bs)
        out.append(f"other records at {lo}-{hi} ({_others(list(bs))})")
    empty = [w for w, v in run if rep in v["absent"]]
    if empty:
        out.append(f"nothing at {_spans([(w.lo, w.hi) for w in empty])}")
    return f"replica {rep} holds " + " and ".join(out)


def _spans(iv: list) -> str:
    return ", ".join(f"{a}-{b}" for a, b in merged(iv))


def _others(bs: list[A.Batch]) -> str:
    b = bs[0]
    epoch = b.row.get("partition_leader_epoch")
    text = "a control batch" if b.row.get("is_control") else b.who()
    if epoch is not None and epoch >= 0:
        text += f" of leader epoch {epoch}"
    return text + (f", and {len(bs) - 1} more batches" if len(bs) > 1 else "")


OPEN_END = 2**63 - 1


def loss_span(f: dict) -> tuple[int, int] | None:
    """The offsets a leadership or loss finding says were lost: its own range, or for an unclean
    election whose lost records no replica of the inputs still holds, everything from the new
    leader's start offset on."""
    if f.get("first_offset") is not None:
        return f["first_offset"], f["last_offset"] if f.get("last_offset") is not None else f["first_offset"]
    if f["rule"] == "unclean-leader-election":
        start = (json.loads(f["details"]) if f.get("details") else {}).get("new_leader_start_offset")
        if start is not None:
            return start, OPEN_END
    return None


def annotate(findings: list[dict], verdicts: list[dict], produce: list[dict]) -> None:
    """Tells each leadership or loss finding of a partition which of its offsets were
    acknowledged to clients in the captures (and when, to which client, whether lost); in place."""
    by_tp = defaultdict(list)
    for v in verdicts:
        w = v["write"]
        by_tp[(w.row["topic"], w.row["partition"])].append(v)
    produced = {(r.get("topic"), r.get("partition")) for r in produce if r.get("response_error") == 0}
    for f in findings:
        span = loss_span(f) if f["rule"] in ANNOTATED else None
        tp = (f["topic"], f["partition"])
        if span is None or tp not in produced:
            continue   # the captures hold no acknowledged write of the partition: nothing to say
        lo, hi = span
        hit = [v for v in by_tp.get(tp, ()) if v["write"].lo <= hi and lo <= v["write"].hi]
        if hi == OPEN_END:
            hit = [v for v in hit if v["lost"]]   # past the new leader's start: its own writes are held
        d = json.loads(f["details"]) if f.get("details") else {}
        d["acknowledged"] = [dict(A.ack_detail(v["write"]), lost=bool(v["lost"]), still_on=sorted(map(str, v["holders"])))
                             for v in hit[:A.MAX_LISTED]]
        f["details"] = json.dumps(d, sort_keys=True, default=str)
        f["message"] += _told(hit, lo, hi)
        if f["rule"] == "unclean-leader-election":
            # the capture proves what the logs alone could not count: the election cost these writes
            sev = [A.loss_severity(v["write"].row.get("acks"), bool(v["write"].row.get("is_transactional")),
                                   v.get("committed") is not None) for v in hit if v["lost"]]
            worst = max(sev + [f["severity"]], key=SEVERITY_RANK.get)
            f["severity"] = worst


def _told(hit: list[dict], lo: int, hi: int) -> str:
    where = f"{offset_span(lo, hi)}" if hi != OPEN_END else f"the offsets from {lo} on that the new leader lacks"
    if not hit:
        return (f". The captures acknowledged none of {where} to a client (they may not hold "
                "every producer's traffic)")
    lost = [v for v in hit if v["lost"]]
    w = (lost or hit)[0]["write"]
    first, last = min(v["write"].lo for v in hit), max(v["write"].hi for v in hit)
    text = (f". Acknowledged to clients: {len(hit)} write{'s' if len(hit) > 1 else ''} at {offset_span(first, last)}, "
            f"e.g. {A.ack_text(w)}")
    if lost:
        text += f"; {len(lost)} of them lost (acknowledged-write-lost)"
    else:
        text += "; every one still held by a replica at its offset"
    return text
