"""kaudit.audit: pure analysis over rows (docs/architecture.md §1, §4).

Importing a rule module registers its rules. The rule modules load with the folds that need
them: `DISK_FOLDS` loads the disk audit's (a `kaudit segments` run imports no wire rule),
`WIRE_FOLDS` the wire audit's (no log-dir consistency rule), and `RULES` or `load_all()` every one of them - the complete
registry that `kaudit rules`, `kaudit explain`, --select/--ignore, SARIF and docs/rules.md read
(start-up: the rule modules of the other side are ~0.02-0.05 s of imports a run does not need).
"""

from __future__ import annotations

import importlib

from kaudit.audit.folds import Context, Fold
from kaudit.audit.registry import SEVERITIES, SEVERITY_RANK, at_or_above

# Every rule module, in the order the registry has always been filled (rules of one fold are
# judged in registration order: registry.fold_rules).
RULE_MODULES = (
    "kaudit.audit.cluster.leadership",
    "kaudit.audit.consistency.index_check", "kaudit.audit.consistency.integrity",
    "kaudit.audit.consistency.leader_epochs", "kaudit.audit.consistency.replicas",
    "kaudit.audit.consistency.segment_loss", "kaudit.audit.consistency.state_files",
    "kaudit.audit.consumers.fold",
    "kaudit.audit.joint.join",   # the rules of `kaudit audit`
    "kaudit.audit.producers.disk_sequences", "kaudit.audit.producers.duplicate_records",
    "kaudit.audit.producers.wire_acked", "kaudit.audit.producers.wire_produce",
    "kaudit.audit.stories.incidents",
    "kaudit.audit.txn.coordinator_state", "kaudit.audit.txn.transactions", "kaudit.audit.txn.txn_rules",
    "kaudit.audit.txn.txn_wire",
    "kaudit.audit.wire.wire_frames", "kaudit.audit.wire.wire_lso", "kaudit.audit.wire.wire_readers",
)

# An audit plan (engine/plan.py) streams the folds keyed by a log's partition and buffers the
# others (transactions.FOLD is cross-partition, replicas.FOLD cross-replica and bound to the
# inputs' replicated partitions: Fold.bind). Each side's folds as (module, attribute), in order.
_DISK = (("kaudit.audit.producers.disk_sequences", "FOLD"), ("kaudit.audit.consistency.integrity", "FOLD"),
         ("kaudit.audit.consistency.index_check", "FOLD"), ("kaudit.audit.consistency.segment_loss", "FOLD"),
         ("kaudit.audit.consistency.state_files", "FOLD"), ("kaudit.audit.txn.transactions", "FOLD"),
         ("kaudit.audit.consistency.replicas", "FOLD"), ("kaudit.audit.cluster.leadership", "FOLD"))
_WIRE = (("kaudit.audit.producers.wire_produce", "FOLD"), ("kaudit.audit.wire.wire_frames", "FOLD"),
         ("kaudit.audit.txn.txn_wire", "FOLD"), ("kaudit.audit.wire.wire_lso", "FOLD"),
         ("kaudit.audit.wire.wire_readers", "FOLD"), ("kaudit.audit.consumers.fold", "FOLD"),
         ("kaudit.audit.producers.wire_acked", "FOLD"))
# The disk side's rule modules besides its folds', in RULE_MODULES' order (leader-epochs is
# judged by the replicas fold; the incidents' rules tell stories of either side)
_DISK_MODULES = tuple(m for m in RULE_MODULES if m in {
    "kaudit.audit.cluster.leadership", "kaudit.audit.consistency.index_check", "kaudit.audit.consistency.integrity",
    "kaudit.audit.consistency.leader_epochs", "kaudit.audit.consistency.replicas",
    "kaudit.audit.consistency.segment_loss", "kaudit.audit.consistency.state_files",
    "kaudit.audit.producers.disk_sequences", "kaudit.audit.stories.incidents",
    "kaudit.audit.txn.coordinator_state", "kaudit.audit.txn.transactions"})

# The wire side's: all but the log dirs' own (integrity, indexes, state files, replicas,
# leadership: no wire fold tells those)
_WIRE_MODULES = tuple(m for m in RULE_MODULES if m not in {
    "kaudit.audit.cluster.leadership", "kaudit.audit.consistency.index_check", "kaudit.audit.consistency.integrity",
    "kaudit.audit.consistency.leader_epochs", "kaudit.audit.consistency.replicas",
    "kaudit.audit.consistency.segment_loss", "kaudit.audit.consistency.state_files"})

__all__ = ["Context", "Fold", "RULES", "SEVERITIES", "SEVERITY_RANK", "at_or_above",
           "DISK_FOLDS", "WIRE_FOLDS", "RULE_MODULES", "load_all", "sort_findings"]


def load_all() -> dict:
    """Every rule registered (registry.RULES, complete)."""
    for m in RULE_MODULES:
        importlib.import_module(m)
    from kaudit.audit.registry import RULES

    return RULES


def _folds(modules, folds) -> tuple[Fold, ...]:
    for m in modules:
        importlib.import_module(m)
    return tuple(getattr(importlib.import_module(m), name) for m, name in folds)


def __getattr__(name: str):
    """DISK_FOLDS, WIRE_FOLDS and RULES, loaded on first use (see the module's docstring)."""
    if name == "DISK_FOLDS":
        value = _folds(_DISK_MODULES, _DISK)
    elif name == "WIRE_FOLDS":
        value = _folds(_WIRE_MODULES, _WIRE)
    elif name == "RULES":
        value = load_all()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def sort_findings(findings: list[dict], clusters=None) -> list[dict]:
    """Most severe first, then by rule and place: the same order whichever engine ran. Every
    engine's last step: the findings get their incident ids here (incidents.assign), with their
    cluster's identity (`clusters`: a clusters.ClusterMap of the inputs)."""
    from kaudit.audit.stories import incidents

    def key(f):
        return (-SEVERITY_RANK[f["severity"]], f["rule"], f["topic"] or "", f["partition"] or -1,
                f["replica"] or "", f["connection"] or "", f["first_offset"] if f["first_offset"] is not None else -1,
                f["first_ts_ms"] or 0, f["id"])
    return incidents.assign(sorted(incidents.settle_unanswered(findings), key=key),
                            None if clusters is None else clusters.of)
