"""The rule registry and the finding constructor.

A rule is a small pure function registered with its id, default severity, the row kinds it reads,
a remediation and a docstring stating its invariant, the Kafka class or KIP it mirrors, and its
known benign causes. Folds (audit/folds.py) drive rows past the rules; `kaudit rules` and
`kaudit explain RULE` print this registry. Ids are the public vocabulary of docs/architecture.md §4.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass

SEVERITIES = ("info", "warning", "error", "critical")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    scope: str          # disk | wire | both
    title: str
    remediation: str
    fn: Callable
    # The fast path's predicate, declared beside the rule: given the vectorised facts of many
    # producers, the producer ids this rule might flag (the rest it certainly would not). A rule
    # of a fold with a fast path and no predicate turns that fast path off (txn_clean).
    clean: Callable | None = None
    # Rules judged over one producer's transaction history (txn_findings.judge runs them in
    # registration order): `fold` names that fold, `check(judgement)` yields the findings.
    fold: str | None = None
    check: Callable | None = None

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.fn.__doc__ or "")


RULES: dict[str, Rule] = {}


def rule(id: str, severity: str, scope: str, title: str, remediation: str = "", clean: Callable | None = None,
         fold: str | None = None, check: Callable | None = None):
    """Register the decorated function as rule `id` (`clean`: its fast-path predicate; `fold`
    and `check`: the fold whose judge runs `check`, see Rule)."""
    if severity not in SEVERITY_RANK:
        raise ValueError(severity)

    def register(fn):
        if id in RULES:
            raise ValueError(f"rule {id} registered twice")
        if not (fn.__doc__ or "").strip():
            raise ValueError(f"rule {id} needs a docstring (invariant, Kafka class or KIP, benign causes)")
        RULES[id] = Rule(id, severity, scope, title, remediation, fn, clean, fold, check)
        return fn

    return register


def get(rule_id: str) -> Rule:
    """The rule `rule_id`. A run loads only its own side's rule modules (kaudit.audit): a rule
    not registered yet has every rule module loaded first (KeyError: no such rule)."""
    r = RULES.get(rule_id)
    if r is None:
        from kaudit.audit import load_all

        r = load_all()[rule_id]
    return r


def fold_rules(fold: str) -> list[Rule]:
    """The rules a fold's judge runs, in registration order."""
    return [r for r in RULES.values() if r.fold == fold]


def evidence(source, position, kind: str, note: str | None = None) -> dict:
    return {"source": source, "position": None if position is None else int(position),
            "kind": kind, "note": note}


# Finding fields other than the computed ones (id, rule, severity, message, remediation, ...).
_FIELDS = ("topic", "partition", "replica", "connection", "producer_id", "producer_epoch",
           "transactional_id", "first_offset", "last_offset", "base_sequence", "last_sequence",
           "first_ts_ms", "last_ts_ms", "topic_id", "client_id")


def finding(rule_id: str, message: str, *, severity: str | None = None, evidence: list[dict] = (),
            details: dict | None = None, timeline: list[str] | None = None,
            remediation: str | None = None, **fields) -> dict:
    """A finding row (model.FINDING). Its id hashes the rule, the key fields and the evidence
    positions, so the same anomaly gets the same id whichever engine found it and in which order."""
    r = get(rule_id)
    unknown = set(fields) - set(_FIELDS)
    if unknown:
        raise KeyError(f"finding fields outside the schema: {sorted(unknown)}")
    row = {k: fields.get(k) for k in _FIELDS}
    for k in ("partition", "producer_id", "producer_epoch", "first_offset", "last_offset",
              "base_sequence", "last_sequence", "first_ts_ms", "last_ts_ms"):
        if row[k] is not None:
            row[k] = int(row[k])
    for k in ("first_ts_ms", "last_ts_ms"):
        if row[k] is not None and row[k] < 0:
            row[k] = None   # Kafka's NO_TIMESTAMP (-1): no time, not 1969
    ev = [dict(e) for e in evidence]
    # Evidence enters the id by its last two path parts (partition dir and file, or capture
    # name): the same finding keeps its id when the log dir is copied or mounted elsewhere.
    key = json.dumps([rule_id, [row[k] for k in _FIELDS[:7]], row["first_offset"], row["base_sequence"],
                      [(_tail(e["source"]), e["position"], e["kind"]) for e in ev]], default=str)
    row.update(
        id=hashlib.sha1(key.encode()).hexdigest()[:16],
        rule=rule_id,
        severity=severity or r.severity,
        message=message,
        evidence=ev,
        remediation=r.remediation if remediation is None else remediation,
        details=json.dumps(details, sort_keys=True, default=str) if details else None,
        timeline=list(timeline) if timeline else None,
        incident=None,   # set once every finding of the run is known (incidents.assign)
    )
    return row


def _tail(path) -> str | None:
    if not path:
        return path
    parts = str(path).replace("\\", "/").rstrip("/").split("/")
    return "/".join(parts[-2:])


def at_or_above(severity: str, threshold: str) -> bool:
    return SEVERITY_RANK[severity] >= SEVERITY_RANK[threshold]
