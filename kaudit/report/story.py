"""Incidents for people: the findings of one incident (audit/stories/incidents.py) summed up as one
story - who, what, when, the impact on consumers and what to run - ranked by severity and
impact. Every report format reads these dicts (`incidents(findings, reference_ms)`)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

from kaudit.audit import SEVERITY_RANK
from kaudit.audit.registry import get as rule_of
from kaudit.audit.stories.incidents import CONSUMER_RULES, INTEGRITY_RULES, is_coverage, is_wire_evidence
from kaudit.audit.stories.incidents import details_of as details
from kaudit.report.impact import CONSUMED, impact, reused
from kaudit.timefmt import when

KIND_TITLES = {"leadership": "Records lost to the partition's leadership",
               "acknowledged": "Acknowledged writes lost", "zombie": "Zombie producer", "hanging": "Stalled read_committed consumers",
               "torn": "Torn transaction", "transaction": "Transaction anomaly",
               "duplicate": "Records stored twice", "repeated": "Records repeated", "sequence": "Out-of-order sequences",
               "integrity": "Damaged log data", "outcome": "Write outcome", "retry": "Retried batch",
               "errors": "Error responses", "request": "Unanswered request", "coverage": "Coverage",
               "other": "Finding"}


# a transaction incident is titled by its worst finding's rule: what kind of anomaly it is
TXN_TITLES = {"late-transactional-write": "Transaction data after its marker",
              "txn-markers-refused": "Transaction markers refused",
              "epoch-exhausted-transaction": "Transaction at the epoch limit",
              "mixed-epoch-transaction": "Transaction of two epochs",
              "unregistered-partition": "Write to an unregistered partition",
              "non-transactional-write-in-transaction": "Plain write inside a transaction",
              "coordinator-epoch-regression": "Marker from an older coordinator",
              "illegal-state-transition": "Coordinator states out of order",
              "dangling-transaction": "Open transaction",
              "stray-marker": "Marker with no transaction",
              "coordinator-abort": "Transaction aborted by the coordinator"}

# an incident of a log dir's own state (its files against each other, replicas against each
# other) is titled by its worst finding's rule, and names the replicas
STATE_TITLES = {"replica-divergence": "Replicas disagree",
                "checkpoint-mismatch": "Checkpoint past the log's end",
                "txnindex-mismatch": "Transaction index out of step with its log",
                "snapshot-mismatch": "Producer snapshot out of step with its log",
                "leader-epoch-mismatch": "Leader-epoch checkpoint out of step with its log",
                "remote-segment-stuck": "Remote segment stuck"}

# a consumers' incident is titled by its worst finding's rule, and names its group
CONSUMER_TITLES = {"eos-double-commit": "Input committed twice by exactly-once transactions",
                   "aborted-read": "Aborted records given to a read_committed consumer",
                   "read-past-lso": "Records served past the last stable offset",
                   "consumer-reset-skip": "Records skipped by an offset reset",
                   "consumer-commit-beyond-served": "Offsets committed past what was served",
                   "consumer-start-beyond-commit": "Consumer started past its committed offset",
                   "consumer-poll-skip": "Records skipped by a consumer",
                   "consumer-redelivery": "Records served again to the next owner",
                   "consumer-nonmonotonic-poll": "Records served again to the same consumer",
                   "uncommitted-aborted-read": "Aborted records read by a read_uncommitted consumer"}

_KINDS = (("leadership", {"unclean-leader-election", "unexplained-divergence", "missing-segments"}),
          ("acknowledged", {"acknowledged-write-lost", "offset-acknowledged-twice", "acknowledged-records-replaced"}),
          ("zombie", {"fenced-epoch", "write-after-epoch-end"}), ("torn", {"torn-transaction"}),
          ("hanging", {"hanging-transaction", "lso-stuck"}),
          ("duplicate", {"duplicate-batch", "duplicate-records"}), ("repeated", {"repeated-records"}),
          ("transaction", {"dangling-transaction", "unregistered-partition", "late-transactional-write",
                           "non-transactional-write-in-transaction", "coordinator-epoch-regression",
                           "stray-marker", "illegal-state-transition", "coordinator-abort",
                           "mixed-epoch-transaction", "txn-markers-refused", "epoch-exhausted-transaction"}),
          ("sequence", {"out-of-order-sequence"}), ("integrity", set(INTEGRITY_RULES)),
          ("outcome", {"outcome-mismatch", "produce-outcome"}), ("retry", {"retried-batch"}),
          ("errors", {"producer-error"}), ("request", {"unanswered-request"}))


# The consumer rules (audit/consumers): what their offsets were to the group's consumers
def _kind(rules: set[str], all_coverage: bool) -> str:
    """What the incident is, from its rules, the most telling first."""
    if all_coverage:
        return "coverage"
    return next((kind for kind, names in _KINDS if rules & names), "other")


def _sev_rank(f: dict) -> int:
    return SEVERITY_RANK[f["severity"]]


def _places(fs: list[dict]) -> list[dict]:
    """One piece of evidence per place the anomaly was seen: each replica, each capture."""
    places: dict[str, dict] = {}
    # a finding of both sides (the join's) names no replica: its log evidence is placed by the
    # replica the other findings give the same file
    replica_of = {e.get("source"): f["replica"] for f in fs if f.get("replica") and "," not in str(f["replica"])
                  for e in f.get("evidence") or []}
    dirs = _log_dirs(fs)
    for f in fs:
        ev = [e for e in f.get("evidence") or [] if e.get("source")]
        wire = [e for e in ev if is_wire_evidence(e)]
        disk = [e for e in ev if not is_wire_evidence(e)]
        if not ev and (f.get("connection") or not f.get("replica")):
            continue   # a wire finding whose evidence is its timeline: seen where its peers are
        names = []
        for e in wire:
            names.append((f"capture {os.path.basename(e.get('source') or '') or '?'}", e))
        if disk or not wire:
            reps = [r for r in str(f.get("replica") or "").split(",") if r]
            # a finding of several replicas may say whose file each piece of evidence is
            own = details(f).get("evidence_replicas")
            own = dict(zip((id(e) for e in f.get("evidence") or []), own)) if own else {}
            for e in disk or [None]:
                mine = own.get(id(e)) if e is not None else None
                if mine is None and e is not None and len(reps) > 1:
                    # a file of a log dir the incident shows to be one of them: that replica's only
                    mine = dirs.get(_log_dir(e["source"])) if dirs.get(_log_dir(e["source"])) in reps else None
                for r in ([str(mine)] if mine is not None else reps) or [replica_of.get(e and e.get("source"))]:
                    names.append((f"replica {r}" if r else "log", e))
        for name, e in names:
            p = places.setdefault(name, {"place": name, "rules": [], "evidence": []})
            if f["rule"] not in p["rules"]:
                p["rules"].append(f["rule"])
            if e is not None and e not in p["evidence"] and len(p["evidence"]) < 6:
                p["evidence"].append(e)
    return sorted(places.values(), key=lambda p: (not p["place"].startswith("replica"), p["place"]))


def _log_dir(source) -> str:
    """The log dir of a partition's file (`<log dir>/<topic>-<partition>/<file>`)."""
    return os.path.dirname(os.path.dirname(str(source).replace("\\", "/")))


def _log_dirs(fs: list[dict]) -> dict[str, str]:
    """Log dir -> the replica the findings show it is: a one-replica finding's evidence in its own
    partition's folder, and the pieces a finding of several replicas says are whose."""
    out: dict[str, str] = {}
    for f in fs:
        ev = f.get("evidence") or []
        own = details(f).get("evidence_replicas") or []
        rep = str(f.get("replica") or "")
        folder = f"{f.get('topic')}-{f.get('partition')}"
        for i, e in enumerate(ev):
            src = e.get("source")
            if not src or is_wire_evidence(e):
                continue
            if i < len(own) and own[i] is not None:
                out.setdefault(_log_dir(src), str(own[i]))
            elif rep and "," not in rep and os.path.basename(os.path.dirname(str(src).replace("\\", "/"))) == folder:
                out.setdefault(_log_dir(src), rep)
    return out


def _distinct(fs, key) -> list:
    """The distinct values of a field; -1 (none) for producer ids and epochs only when nothing
    else names one (a new instance's InitProducerId beside the zombie it fenced)."""
    out = [v for v in dict.fromkeys(f.get(key) for f in fs) if v is not None]
    if key in ("producer_id", "producer_epoch") and any(v >= 0 for v in out):
        out = [v for v in out if v >= 0]
    return out


def _tps(fs) -> list[str]:
    """Every partition the findings name: their own, and those a finding says it involves
    (a torn transaction's every partition)."""
    out = {f"{f['topic']}-{f['partition']}" for f in fs if f.get("topic") is not None
           and f.get("partition") is not None}
    for f in fs:
        out.update(details(f).get("topic_partitions") or ())
    return sorted(out)


def _damaged(fs) -> list[str]:
    """The partitions whose outcome differs from the coordinator's decision (torn findings)."""
    return list(dict.fromkeys(d[0] for f in fs if f["rule"] == "torn-transaction"
                              for d in details(f).get("damaged") or ()))


def shown_sources(inc: dict) -> dict[str, str]:
    """How a report names each evidence file of an incident: its path below the files' common
    folder, with at least the partition folder (`node2/torn-1/00000000000000000000.log`)."""
    from kaudit.audit.stories.incidents import LOG_FILE

    srcs = sorted({e["source"] for p in inc.get("places") or () for e in p["evidence"]
                   if e.get("source") and not is_wire_evidence(e) and LOG_FILE.search(str(e["source"]))})
    split = [str(s).replace("\\", "/").split("/") for s in srcs]
    common = 0
    if len(split) > 1:
        while all(len(x) > common + 1 and x[common] == split[0][common] for x in split):
            common += 1
    return {s: "/".join(x[min(common, max(len(x) - 2, 0)):]) for s, x in zip(srcs, split)}


def summarise(iid: str, fs: list[dict], reference_ms: int | None) -> dict:
    fs = sorted(fs, key=lambda f: (-_sev_rank(f), f["rule"], f.get("first_ts_ms") or 0))
    rules = Counter(f["rule"] for f in fs)
    cov = all(is_coverage(f) for f in fs)
    lead = fs[0]
    ts = [t for f in fs for t in (f.get("first_ts_ms"), f.get("last_ts_ms")) if t is not None]
    consumer = [f for f in fs if (f["rule"] in CONSUMER_RULES or f["rule"] in CONSUMED)
                and _sev_rank(f) >= SEVERITY_RANK["error"]]
    records = max(((f["last_offset"] - f["first_offset"] + 1) for f in consumer
                   if f.get("first_offset") is not None and f.get("last_offset") is not None), default=0)
    inc = {
        "id": iid, "severity": lead["severity"], "kind": _kind(set(rules), cov),
        "rules": dict(sorted(rules.items())), "findings": [f["id"] for f in fs],
        "consumer_visible": bool(consumer), "records_affected": records,
        "topic_partitions": _tps(fs), "replicas": sorted({r for f in fs for r in str(f.get("replica") or "").split(",") if r}),
        "producer_ids": _distinct(fs, "producer_id"), "producer_epochs": _distinct(fs, "producer_epoch"),
        "transactional_ids": _distinct(fs, "transactional_id"), "client_ids": _distinct(fs, "client_id"),
        "connections": _distinct(fs, "connection"),
        "first_ts_ms": min(ts) if ts else None, "last_ts_ms": max(ts) if ts else None,
        "places": _places(fs),
        "remediation": next((f["remediation"] for f in fs if f.get("remediation")), None),
    }
    inc["title"] = _title(inc, fs)
    inc["narrative"] = narrative(inc, fs, reference_ms)
    return inc


def incidents(findings: list[dict], reference_ms: int | None) -> list[dict]:
    """Every incident of the findings, most severe and most harmful first."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for f in findings:
        groups[f.get("incident") or f["id"]].append(f)
    out = [summarise(iid, fs, reference_ms) for iid, fs in groups.items()]
    out.sort(key=lambda i: (i["kind"] == "coverage", -SEVERITY_RANK[i["severity"]], not i["consumer_visible"],
                            -i["records_affected"], -len(i["places"]), i["first_ts_ms"] or 0, i["id"]))
    return out


def _who_short(inc: dict) -> str:
    pids = [p for p in inc["producer_ids"] if p >= 0]
    parts = []
    if pids:
        ep = inc["producer_epochs"]
        parts.append(f"producer {', '.join(map(str, pids[:3]))}" + (f" epoch {', '.join(map(str, ep[:3]))}" if ep else ""))
    elif -1 in inc["producer_ids"]:
        parts.append("a non-idempotent producer")
    if inc["transactional_ids"]:
        parts.append(f"({', '.join(map(repr, inc['transactional_ids'][:2]))})")
    elif inc["client_ids"]:
        parts.append(f"(client {', '.join(inc['client_ids'][:2])})")
    return " ".join(parts)


def _where(inc: dict) -> str:
    tps = inc["topic_partitions"]
    if not tps:
        return ""
    return " on " + ", ".join(tps[:3]) + (f" and {len(tps) - 3} more" if len(tps) > 3 else "")


def _title(inc: dict, fs: list[dict]) -> str:
    kind, who, where = inc["kind"], _who_short(inc), _where(inc)
    if kind == "hanging":
        lso = next((f for f in fs if f["rule"] in ("hanging-transaction", "lso-stuck")), fs[0])
        return (f"{KIND_TITLES[kind]}: an open transaction of {who or 'a producer'} holds "
                f"{lso.get('topic')}-{lso.get('partition')} at offset {lso.get('first_offset')}")
    if kind == "duplicate":
        d = next(f for f in fs if f["rule"] in ("duplicate-batch", "duplicate-records"))
        seq = (f" sequences {d['base_sequence']}-{d['last_sequence']}" if d.get("base_sequence") is not None else "")
        title = "Sequence numbers reused" if reused(d) else KIND_TITLES[kind]
        return f"{title}{where}: {who}{seq}".rstrip(": ")
    if kind == "torn":
        damaged = _damaged(fs)
        if damaged:
            where = " on " + ", ".join(damaged[:3]) + (f" and {len(damaged) - 3} more" if len(damaged) > 3 else "")
        return f"{KIND_TITLES[kind]}{where}: {who or rule_of(fs[0]['rule']).title}"
    if kind == "zombie":
        cur = [details(f).get("current_epoch") for f in fs if details(f).get("current_epoch") is not None]
        stale = min((f["producer_epoch"] for f in fs if f["rule"] in ("fenced-epoch", "write-after-epoch-end")
                     and f.get("producer_epoch") is not None), default=None)
        newer = f", fenced by epoch {max(cur)}" if cur and (stale is None or max(cur) > stale) else ""
        moved = next((details(f)["next_producer_id"] for f in fs if f["rule"] == "write-after-epoch-end"
                      and details(f).get("next_producer_id") is not None), None)
        if moved is not None and not newer:   # its producer id left behind (txn_lineage)
            idem = all(f.get("transactional_id") is None for f in fs if f["rule"] == "write-after-epoch-end")
            newer = (f", after its client moved to producer id {moved} (KIP-360)" if idem
                     else f", after its transactional id moved to producer id {moved}")
        if stale is not None:   # the zombie's epoch, not its successor's
            who = _who_short({**inc, "producer_epochs": [stale]})
        # where its data was stored after its end, the worst first (a COMMIT exposed it); else all
        stored = sorted((f for f in fs if f["rule"] == "write-after-epoch-end" and f.get("topic") is not None),
                        key=lambda f: -_sev_rank(f))
        if stored:
            tps = list(dict.fromkeys(f"{f['topic']}-{f['partition']}" for f in stored))
            where = " on " + ", ".join(tps[:3]) + (f" and {len(tps) - 3} more" if len(tps) > 3 else "")
        return f"{KIND_TITLES[kind]}: {who}{newer}{where}"
    if kind == "integrity":
        reps = ", ".join(inc["replicas"][:3])
        return f"{KIND_TITLES[kind]}{where}" + (f" (replica {reps})" if reps else "") + ": " + \
            ", ".join(rule_of(r).title for r in inc["rules"])
    if kind == "transaction":
        lead = max((f for f in fs if f["rule"] in TXN_TITLES), key=_sev_rank, default=None)
        if lead is not None:
            return f"{TXN_TITLES[lead['rule']]}{where}: {who or rule_of(lead['rule']).title}"
    if kind == "other":
        lead = max((f for f in fs if f["rule"] in CONSUMER_TITLES), key=_sev_rank, default=None)
        if lead is not None:
            groups = list(dict.fromkeys(str(details(f)["group"]) for f in fs if details(f).get("group")))
            return f"{CONSUMER_TITLES[lead['rule']]}{where}" + (f": group {', '.join(groups[:2])}" if groups else "")
    if kind in ("coverage", "other"):
        lead = max((f for f in fs if f["rule"] in STATE_TITLES), key=_sev_rank, default=None)
        if lead is not None:
            reps = ", ".join(inc["replicas"][:3])
            return f"{STATE_TITLES[lead['rule']]}{where}" + (f" (replica {reps})" if reps else "")
        return f"{rule_of(fs[0]['rule']).title}{where}"
    if kind == "errors":
        names = sorted({str(details(f).get("errors") or "") for f in fs} - {""})
        return f"{KIND_TITLES[kind]} to {who or 'a client'}: {', '.join(names[:3])}"
    return f"{KIND_TITLES[kind]}{where}: {who or rule_of(fs[0]['rule']).title}"


def narrative(inc: dict, fs: list[dict], reference_ms: int | None) -> dict:
    """who, what, when, impact and remediation, in words."""
    who = _who(inc)
    # the client that wrote markers itself (kafka-transactions.sh abort), when a rule names it
    admins = list(dict.fromkeys(str(details(f).get("admin_client")) for f in fs if details(f).get("admin_client")))
    if admins:
        who += "; markers written by admin client " + ", ".join(admins[:3])
    untimed = inc["first_ts_ms"] is None and any(details(f).get("timestamps") == "none" for f in fs)
    return {"who": who, "what": _what(inc, fs),
            "when": "no timestamp" if untimed else when(inc["first_ts_ms"], inc["last_ts_ms"], reference_ms),
            "impact": impact(inc, fs, reference_ms), "remediation": _remedy(fs)}


def _who(inc: dict) -> str:
    parts = []
    pids = [p for p in inc["producer_ids"] if p >= 0]
    if pids:
        parts.append(f"producer id {', '.join(map(str, pids[:4]))}"
                     + (f", epoch {', '.join(map(str, inc['producer_epochs'][:4]))}" if inc["producer_epochs"] else ""))
    elif -1 in inc["producer_ids"]:
        parts.append("a producer without idempotence (producer id -1)")
    if inc["transactional_ids"]:
        parts.append("transactional id " + ", ".join(inc["transactional_ids"][:3]))
    if inc["client_ids"]:
        parts.append("client " + ", ".join(inc["client_ids"][:4]))
    if inc["connections"]:
        parts.append("connection " + ", ".join(inc["connections"][:2])
                     + (f" (+{len(inc['connections']) - 2})" if len(inc["connections"]) > 2 else ""))
    if inc["replicas"]:
        parts.append("replica " + ", ".join(inc["replicas"][:6]))
    return "; ".join(parts) or "not named by the evidence"


def _what(inc: dict, fs: list[dict]) -> str:
    seen = " and ".join(p["place"] for p in inc["places"][:6])
    others = Counter(f["rule"] for f in fs[1:])
    also = (f" Also: {', '.join(f'{r} ×{n}' if n > 1 else r for r, n in sorted(others.items()))}." if others else "")
    return f"{fs[0]['message']}.{also} Seen in {len(inc['places'])} place(s): {seen}."


def _remedy(fs: list[dict]) -> str:
    """The most severe findings' remediation; every distinct one of them when they name
    commands of their own (one `kafka-transactions.sh abort` per hanging partition)."""
    top = [f for f in fs if f["severity"] == fs[0]["severity"] and f.get("remediation")]
    own = list(dict.fromkeys(f["remediation"] for f in top if f["remediation"] != rule_of(f["rule"]).remediation))
    if len(own) > 1:
        return "; then ".join(own[:6]) + (f" (and {len(own) - 6} more)" if len(own) > 6 else "")
    for f in fs:
        if f.get("remediation"):
            return f["remediation"]
    return rule_of(fs[0]["rule"]).remediation
