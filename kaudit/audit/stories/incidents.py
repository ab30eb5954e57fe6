"""Incidents: the findings that tell one story (docs/architecture.md §4, "Incidents").

One anomaly is often reported many times: a duplicate on three replicas and on the wire, by
`duplicate-batch` and `out-of-order-sequence`, with the retry and the join's verdict beside it; a
zombie by `fenced-epoch` on its data and its EndTxn, `producer-error` and `coordinator-abort`.
`assign` links such findings into one incident and gives every finding its incident's id.

Findings are linked by what they share (`_atoms`):
- a piece of evidence (the same batch bytes, the same request frame);
- one producer epoch's overlapping sequence range on one partition (wire and every replica);
- for producer id -1, overlapping stored copies (`duplicate-records`); one producer's repeats
  on one partition (`repeated-records`, every replica's summary);
- one zombie: a producer id and the epoch that was fenced (`fenced-epoch`, fenced
  `producer-error`s, a `coordinator-abort` by fencing);
- one transaction (the transaction rules' `details["transaction"]`, else producer id,
  transactional id and epoch) and one partition's stuck last stable offset;
- one segment of one replica for the integrity rules;
- the out-of-order sequences the broker refused from one producer epoch on one partition.
Findings that only accompany a story (an error answer, a retry, an unanswered request) and share
nothing with another finding join the incident of their transactional id or producer id when
there is one. Capture and log-dir quality (`is_coverage`) forms one incident per input.

An incident's id hashes the smallest of its linked findings' keys, which name no absolute path,
with the cluster id of its findings (clusters.py: meta.properties, Metadata responses): the same
input gives the same ids whichever engine ran, as finding ids do, and two clusters never share one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict

from kaudit.audit.registry import SEVERITY_RANK
from kaudit.audit.registry import _tail as registry_tail

INT32_MAX = 2**31 - 1
FRAME_KINDS = frozenset({"request", "response", "produce", "packet", "fetch", "end_txn"})
# Capture and log-dir quality: reported together as coverage, not as incidents of their own.
COVERAGE_RULES = frozenset({"stream-gap", "undecodable-frame"})
SEQUENCE_RULES = frozenset({"duplicate-batch", "out-of-order-sequence", "fenced-epoch", "retried-batch",
                            "produce-outcome", "outcome-mismatch"})


def txn_rules() -> frozenset[str]:
    """The transaction rules (registered for the transactions fold: registry.fold_rules)."""
    from kaudit.audit.registry import fold_rules

    return frozenset(r.id for r in fold_rules("transactions"))


INTEGRITY_RULES = frozenset({"crc-mismatch", "corrupt-batch", "truncated-tail", "offset-overlap",
                             "index-mismatch", "missing-offsets"})
# Findings that accompany a story rather than tell one: attached by producer when alone.
SECONDARY_RULES = frozenset({"producer-error", "retried-batch", "produce-outcome", "unanswered-request"})
# What a consumer sees when one of these is at error or above: stored duplicates, lost or torn
# data, a stalled read_committed consumer, bytes that fail their CRC.
CONSUMER_RULES = frozenset({"duplicate-batch", "duplicate-records", "hanging-transaction",
                            "torn-transaction", "late-transactional-write",
                            "non-transactional-write-in-transaction", "lso-stuck", "outcome-mismatch",
                            "fenced-epoch", "out-of-order-sequence", "crc-mismatch", "corrupt-batch",
                            # what readers are given, and the replicas they read from (issue 20)
                            "aborted-read", "read-past-lso", "replica-divergence", "txnindex-mismatch",
                            "snapshot-mismatch", "missing-offsets", "write-after-epoch-end",
                            "mixed-epoch-transaction",
                            # acknowledged data the partition no longer holds (issue 30)
                            "acknowledged-write-lost", "offset-acknowledged-twice", "acknowledged-records-replaced"})
FENCED_CODES = frozenset({"47", "90"})


def is_coverage(f: dict) -> bool:
    """Capture and log-dir quality rather than an anomaly of Kafka: bytes the capture lost or
    kaudit could not decode, the active segment's tail being written, requests whose answer may
    be in a capture gap. A truncated closed segment or an unanswered Produce stay findings."""
    if f["rule"] in COVERAGE_RULES:
        return True
    return f["rule"] in ("truncated-tail", "unanswered-request") and f["severity"] == "info"


SETTLED = frozenset({"deduplicated", "stored once", "stored"})


def settle_unanswered(findings: list[dict]) -> list[dict]:
    """An unanswered Produce (unanswered-request at warning) whose retry was answered as stored
    once (retried-batch: deduplicated or stored once) or that the log shows stored once (the
    join's produce-outcome) lost nothing: a fact of the crash or the reconnect, told at info with
    what resolved it. The log showing its records stored twice resolves it too: nothing was lost,
    and the copy is the duplicate rules' finding (duplicate-batch, duplicate-records, at error),
    not this request's. A consumer's Fetch that served the unanswered batch (wire-acked's
    produce-outcome, stored_unanswered) proves it stored: records a new producer session re-sent
    after it (duplicate-records at warning, outcome unknown) are stored twice - raised to error.
    In place; returns the findings."""
    resolved: dict = {}
    for f in findings:
        if f["rule"] in ("retried-batch", "produce-outcome"):
            d = details_of(f)
            out = d.get("outcome")
            if out in SETTLED or (f["rule"] == "produce-outcome" and out == "stored twice"):
                fetched = d.get("fetched_at") is not None   # stored_unanswered's: a Fetch served it
                how = ("its retry was" if f["rule"] == "retried-batch" else
                       "the log shows its records (re-sent under another batch header)"
                       if d.get("resent_at") and out == "stored once" else
                       ("a consumer's Fetch shows it" if f.get("producer_id") is not None else "a Fetch shows it")
                       if fetched else "the log shows it")
                for e in f.get("evidence") or ():
                    if e.get("position") is not None:
                        resolved.setdefault((_tail(e.get("source")), e["position"]), (how, out, fetched))
    if not resolved:
        return findings
    _settle_by_fetch(findings, resolved)
    for f in findings:
        if f["rule"] != "unanswered-request" or f["severity"] != "warning" or details_of(f).get("api") != "Produce":
            continue
        got = next((resolved[k] for e in f.get("evidence") or ()
                    if (k := (_tail(e.get("source")), e.get("position"))) in resolved), None)
        if got is not None:
            how, out, _ = got
            f["severity"] = "info"
            f["message"] += f"; resolved: {how} {out} - nothing lost" + (
                ", but duplicated (see the duplicate findings)" if out == "stored twice" else "")
    return findings


# the capture's suspicions a Fetch that served an unanswered write settles (stored_unanswered):
# rule -> (the evidence after this many items names the write, the outcomes that settle it or
# None any, its new severity, what its message adds)
_FETCH_SETTLES = {
    # a new producer session's re-send of a first send (evidence [0]: the re-send) shown stored
    "duplicate-records": (1, None, "error", "; resolved: a consumer's Fetch shows the first send stored too (see "
                          "its produce-outcome): consumers process these records twice"),
    # a non-idempotent retry whose attempt without an answer a Fetch shows stored elsewhere too
    "retried-batch": (0, ("stored twice",), "info", "; resolved: a Fetch shows the attempt without an answer "
                      "stored too: stored twice (see duplicate-records)"),
}


def _settle_by_fetch(findings: list[dict], resolved: dict) -> None:
    """settle_unanswered's answer to the suspicions (outcome unknown, at warning) of _FETCH_SETTLES
    whose write a Fetch showed stored: both copies are stored."""
    for f in findings:
        how = _FETCH_SETTLES.get(f["rule"])
        if how is None or f["severity"] != "warning":
            continue
        skip, outcomes, severity, note = how
        d = details_of(f)
        if d.get("outcome") != "unknown":
            continue
        got = (resolved.get((_tail(e.get("source")), e.get("position"))) for e in (f.get("evidence") or ())[skip:])
        if not any(g is not None and g[2] and (outcomes is None or g[1] in outcomes) for g in got):
            continue
        f["severity"] = severity
        f["message"] += note
        d["outcome"] = "stored twice"
        f["details"] = json.dumps(d, sort_keys=True) if isinstance(f.get("details"), str) else d


def _tail(path) -> str:
    return registry_tail(path) or ""


def details_of(f: dict) -> dict:
    """A finding's `details` as a dict (a JSON string in rows, a dict in reports)."""
    d = f.get("details")
    if isinstance(d, dict):
        return d
    try:
        return json.loads(d) if d else {}
    except ValueError:
        return {}


LOG_FILE = re.compile(r"(\.(log|index|timeindex|txnindex|snapshot|checkpoint|deleted|cleaned|swap)|"
                      r"leader-epoch-checkpoint|partition\.metadata|meta\.properties|-offset-checkpoint)$")


def is_wire_evidence(e: dict) -> bool:
    """Evidence in a capture (a frame number) rather than in a log dir (a byte position): by its
    kind, else by its file (a marker may be a WriteTxnMarkers frame or a control batch)."""
    if e.get("kind") in FRAME_KINDS:
        return True
    src = e.get("source")
    return bool(src) and e.get("kind") in ("marker", "txn") and not LOG_FILE.search(str(src))


def _atoms(f: dict, tids: dict) -> list[tuple]:
    """The keys a finding shares with the other findings of its story (intervals apart)."""
    out = []
    rule, d = f["rule"], details_of(f)
    own = d.get("evidence_replicas") or ()   # whose files each piece is, where a finding says it
    for i, e in enumerate(f.get("evidence") or []):
        if e.get("position") is None:
            continue
        if is_wire_evidence(e):
            # one request carries batches of several partitions: a frame links one partition's
            # findings only
            out.append(("ev", "frame", _tail(e["source"]), e["position"], f.get("topic"), f.get("partition")))
        else:
            rep = own[i] if i < len(own) and own[i] is not None else f.get("replica")
            out.append(("ev", "byte", str(rep or ""), _tail(e["source"]), e["position"]))
    pid, epoch = f.get("producer_id"), f.get("producer_epoch")
    if rule == "fenced-epoch" and pid is not None and pid >= 0:
        out.append(("zombie", pid, epoch))
    if rule == "producer-error" and pid is not None and pid >= 0 and \
            FENCED_CODES & set(str(d.get("error_codes") or "").split(",")):
        out.append(("zombie", pid, epoch))
    if rule == "coordinator-abort" and "fencing" in str(d.get("cause") or "") and pid is not None:
        out.append(("zombie", pid, epoch))
    if rule == "write-after-epoch-end" and pid is not None:
        out.append(("zombie", pid, epoch))
    if rule == "out-of-order-sequence" and f["severity"] == "warning" and pid is not None and pid >= 0:
        # refused by the broker: one story per producer epoch and partition (it keeps sending
        # sequences the broker does not expect), however many requests it took
        out.append(("refused", f.get("topic"), f.get("partition"), pid, epoch))
    if rule in _TXN or (rule == "outcome-mismatch" and f.get("topic") is None):
        out.append(transaction_key(f, tids))
        # the client's outcome: also the transactions its wrongly ended batches begin (join.py)
        out.extend(("txn", str(k)) for k in d.get("transactions") or ())
    if rule in ("hanging-transaction", "dangling-transaction", "lso-stuck", "txn-markers-refused",
                "epoch-exhausted-transaction") and f.get("first_offset") is not None:
        out.append(("lso", f.get("topic"), f.get("partition"), f["first_offset"]))
    if rule in INTEGRITY_RULES:
        src = next((e["source"] for e in f.get("evidence") or [] if e.get("source")), "")
        segment = _tail(src).rsplit(".", 1)[0]
        out.append(("segment", str(f.get("replica") or ""), f.get("topic"), f.get("partition"), segment))
    return out


class _Txn:
    """`rule in _TXN`: the registry's transaction rules, read once every rule is registered."""

    ids: frozenset | None = None

    def __contains__(self, rule: str) -> bool:
        if self.ids is None:
            self.ids = txn_rules()
        return rule in self.ids


_TXN = _Txn()


def transaction_key(f: dict, tids: dict | None = None) -> tuple:
    """One transaction: the transaction rules' `details["transaction"]` when they name it, else
    (producer id, transactional id, epoch); a finding without a transactional id takes its
    producer id's only one."""
    d = details_of(f)
    if d.get("transaction") is not None:
        return ("txn", str(d["transaction"]))
    tid = f.get("transactional_id")
    if tid is None and tids is not None:
        known = tids.get(f.get("producer_id"), set())
        tid = next(iter(known)) if len(known) == 1 else None
    return ("txn", f.get("producer_id"), tid, f.get("producer_epoch"))


def _interval(f: dict):
    """(key, lo, hi) of a finding's sequence range (or, without idempotence, its stored copy)."""
    pid = f.get("producer_id")
    if f.get("topic") is None or f.get("partition") is None:
        return None
    if f["rule"] in SEQUENCE_RULES and pid is not None and pid >= 0:
        lo, hi = f.get("base_sequence"), f.get("last_sequence")
        if lo is None or hi is None:
            return None
        return ("seq", f["topic"], f["partition"], pid, f.get("producer_epoch")), lo, hi if hi >= lo else INT32_MAX
    if f["rule"] == "repeated-records" and f.get("first_offset") is not None:
        # one summary per replica: the replicas' summaries of one producer are one incident
        return ("repeated", f["topic"], f["partition"], pid), f["first_offset"], f.get("last_offset") or f["first_offset"]
    if f["rule"] == "duplicate-records" and f.get("first_offset") is not None:
        return ("records", f["topic"], f["partition"]), f["first_offset"], f.get("last_offset") or f["first_offset"]
    return None


class _Union:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


def _key_text(atom) -> str:
    return json.dumps(atom, default=str)


def _link(findings, members, uf, keys, tids, first=None, spans=None):
    """Unions `members` that share an atom or an overlapping interval; -> (atom -> first
    member, interval key -> sorted spans) for later lookups."""
    first = {} if first is None else first
    spans = defaultdict(list) if spans is None else spans
    for i in members:
        f = findings[i]
        for atom in _atoms(f, tids):
            keys[i].append(_key_text(atom))
            j = first.setdefault(atom, i)
            if j != i:
                uf.union(i, j)
        iv = _interval(f)
        if iv is not None:
            key, lo, hi = iv
            spans[key].append((lo, hi, i))
            keys[i].append(_key_text(key + (lo, hi)))
    for key in spans:
        spans[key].sort()
        end, head = None, None
        for lo, hi, i in spans[key]:
            if end is not None and lo <= end:
                uf.union(i, head)
                end = max(end, hi)
            else:
                end, head = hi, i
    return first, spans


def _touches(f, tids, first, spans, uf) -> set:
    """The groups (roots) of the story findings a secondary finding shares a key with."""
    roots = {uf.find(first[a]) for a in _atoms(f, tids) if a in first}
    iv = _interval(f)
    if iv is not None:
        key, lo, hi = iv
        roots.update(uf.find(i) for a, b, i in spans.get(key, ()) if a <= hi and lo <= b)
    return roots


# The metadata's story of a partition (audit/cluster/leadership.py) and its replicas' disagreements.
LEADERSHIP_RULES = frozenset({"unclean-leader-election", "unexplained-divergence"})
REPLICA_RULES = frozenset({"replica-divergence", "leader-epoch-mismatch", "checkpoint-mismatch"})


def _leadership(findings: list[dict], primary: list[int], uf) -> None:
    """A partition's unclean election (or unexplained divergence) and what its replicas then
    disagree on - divergent batches, epoch checkpoints, high watermarks - are one incident."""
    heads: dict[tuple, int] = {}
    for i in primary:
        f = findings[i]
        if f["rule"] in LEADERSHIP_RULES:
            k = (f["topic"], f["partition"])
            if k in heads:
                uf.union(heads[k], i)
            else:
                heads[k] = i
    lost: dict[tuple, int] = {}
    for i in primary:
        f = findings[i]
        head = heads.get((f["topic"], f["partition"]))
        if head is not None and f["rule"] in REPLICA_RULES:
            uf.union(head, i)
        elif head is None and _replicas_lost(f):
            # without the metadata log: the replicas' committed records that disagree (an unclean
            # election's trace on disk) are one incident per partition
            k = (f["topic"], f["partition"])
            if k in lost:
                uf.union(lost[k], i)
            else:
                lost[k] = i


def _replicas_lost(f: dict) -> bool:
    """A replica-divergence finding of committed records lost (critical: replica_epochs.py, or
    different batches below every holder's high watermark)."""
    return f["rule"] == "replica-divergence" and f["severity"] == "critical"


# Acknowledged writes lost (wire and join) and the findings on the same partition's offsets that
# tell how they were lost: one incident per loss.
ACKED_LOSS_RULES = frozenset({"acknowledged-write-lost", "offset-acknowledged-twice", "acknowledged-records-replaced"})
LOSS_CAUSE_RULES = frozenset({"unclean-leader-election", "unexplained-divergence", "missing-offsets",
                              "missing-segments"})


def _acked_losses(findings: list[dict], primary: list[int], uf) -> None:
    """An acknowledged write lost joins every loss finding of its partition whose offsets overlap
    its own (the unclean election that cost it, the segment that lost it, the wire's view)."""
    from kaudit.audit.joint.acked_loss import loss_span

    by_tp: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)
    for i in primary:
        f = findings[i]
        if f["rule"] in ACKED_LOSS_RULES or f["rule"] in LOSS_CAUSE_RULES or _replicas_lost(f):
            span = loss_span(f)
            if span is not None:
                by_tp[(f["topic"], f["partition"])].append((i, *span))
    for members in by_tp.values():
        for i, lo, hi in members:
            if findings[i]["rule"] not in ACKED_LOSS_RULES:
                continue
            for j, lo2, hi2 in members:
                if j != i and lo <= hi2 and lo2 <= hi:
                    uf.union(i, j)


def assign(findings: list[dict], cluster_of=None) -> list[dict]:
    """Sets every finding's `incident` (in place) and returns the findings. The findings that
    tell a story are linked first; a finding that only accompanies one (an error answer, a
    retry) joins the most severe story it shares a key with, and never links two stories.
    `cluster_of(finding)`: its cluster id (clusters.ClusterMap.of) - findings of different
    clusters are never linked, and the cluster id enters the incident id, so two clusters never
    share one; the findings of no known cluster keep the ids they always had."""
    if cluster_of is None:
        return _assign(findings, "")
    groups: dict[str, list[dict]] = defaultdict(list)
    for f in findings:
        groups[cluster_of(f) or ""].append(f)
    for c, fs in groups.items():
        _assign(fs, c)
    return findings


def _incident_id(cluster: str, seed: str) -> str:
    text = ("incident " + seed) if not cluster else f"incident of cluster {cluster} {seed}"
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _assign(findings: list[dict], cluster: str) -> list[dict]:
    n = len(findings)
    if not n:
        return findings
    tids: dict = defaultdict(set)
    for f in findings:
        if f.get("transactional_id") and f.get("producer_id") is not None:
            tids[f["producer_id"]].add(f["transactional_id"])
    uf = _Union(n)
    keys: list[list[str]] = [[] for _ in range(n)]
    story = [i for i, f in enumerate(findings) if not is_coverage(f)]
    primary = [i for i in story if findings[i]["rule"] not in SECONDARY_RULES]
    first, spans = _link(findings, primary, uf, keys, tids)
    _leadership(findings, primary, uf)
    _acked_losses(findings, primary, uf)
    sev = {}
    for i in primary:
        r = uf.find(i)
        sev[r] = max(sev.get(r, -1), SEVERITY_RANK[findings[i]["severity"]])
    loose = []
    for i in story:
        if findings[i]["rule"] not in SECONDARY_RULES:
            continue
        roots = _touches(findings[i], tids, first, spans, uf)
        if roots:
            uf.union(min(roots, key=lambda r: (-sev[r], r)), i)
            keys[i] = []   # an accompanying finding does not name the incident
        else:
            loose.append(i)
    _link(findings, loose, uf, keys, tids)
    groups = defaultdict(list)
    for i in story:
        groups[uf.find(i)].append(i)
    _attach(findings, groups, uf, tids)
    groups = defaultdict(list)
    for i in story:
        groups[uf.find(i)].append(i)
    for members in groups.values():
        core = [k for i in members for k in keys[i]]
        seed = min(core) if core else min(findings[i]["id"] for i in members)
        iid = _incident_id(cluster, seed)
        for i in members:
            findings[i]["incident"] = iid
    for f in findings:
        if is_coverage(f):
            place = next((_tail(e["source"]) for e in f.get("evidence") or [] if e.get("source")), "")
            seed = _key_text(("coverage", place if f.get("connection") else str(f.get("replica") or "") + place))
            f["incident"] = _incident_id(cluster, seed)
    return findings


def _attach(findings, groups, uf, tids) -> None:
    """A finding that only accompanies a story and shares no key with any finding joins the
    most severe incident of its transactional id, else of its producer id; what is left of one
    producer and rule forms one incident."""
    def accompanying(members):   # a lone one; several together tell a story of their own
        return len(members) == 1 and findings[members[0]]["rule"] in SECONDARY_RULES

    by_tid, by_pid = defaultdict(list), defaultdict(list)
    for root, members in groups.items():
        if accompanying(members):
            continue
        for i in members:
            f = findings[i]
            if f.get("transactional_id"):
                by_tid[f["transactional_id"]].append(root)
            if f.get("producer_id") is not None and f["producer_id"] >= 0:
                by_pid[f["producer_id"]].append(root)
    ranks: dict = {}

    def rank(r):
        if r not in ranks:
            ranks[r] = (-max(SEVERITY_RANK[findings[i]["severity"]] for i in groups[r]), r)
        return ranks[r]

    best_tid = {k: min(set(v), key=rank) for k, v in by_tid.items()}
    best_pid = {k: min(set(v), key=rank) for k, v in by_pid.items()}
    lone = defaultdict(list)
    for root, members in list(groups.items()):
        if not accompanying(members):
            continue
        f = findings[members[0]]
        tid = next((findings[i]["transactional_id"] for i in members if findings[i].get("transactional_id")), None)
        pid = next((findings[i]["producer_id"] for i in members if (findings[i].get("producer_id") or -1) >= 0), None)
        target = best_tid.get(tid) if tid else None
        if target is None and pid is not None:
            target = best_pid.get(pid)
        if target is not None:
            uf.union(target, root)
        else:
            who = tid or pid
            if who is None:
                who = f.get("client_id") or f.get("connection")
            lone[(f["rule"], str(who))].append(root)
    for roots in lone.values():
        for r in roots[1:]:
            uf.union(roots[0], r)


def severity_of(findings: list[dict]) -> str:
    return max((f["severity"] for f in findings), key=lambda s: SEVERITY_RANK[s])
