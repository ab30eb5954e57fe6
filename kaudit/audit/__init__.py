"""kaudit.audit: pure analysis over rows (docs/architecture.md §1, §4). Importing it registers every rule."""

# Importing a room's modules registers their rules.
from kaudit.audit.cluster import leadership
from kaudit.audit.consistency import index_check, integrity, leader_epochs, replicas, segment_loss, state_files
from kaudit.audit.consumers import fold as consumers_fold
from kaudit.audit.joint import join  # noqa: F401  (the rules of `kaudit audit`)
from kaudit.audit.producers import disk_sequences, duplicate_records, wire_acked, wire_produce
from kaudit.audit.stories import incidents
from kaudit.audit.txn import coordinator_state, transactions, txn_rules, txn_wire  # noqa: F401
from kaudit.audit.wire import wire_frames, wire_lso, wire_readers
from kaudit.audit.folds import Context, Fold
from kaudit.audit.registry import RULES, SEVERITIES, SEVERITY_RANK, at_or_above

# An audit plan (engine/plan.py) streams the folds keyed by a log's partition and buffers the
# others (transactions.FOLD is cross-partition, replicas.FOLD cross-replica and bound to the
# inputs' replicated partitions: Fold.bind).
DISK_FOLDS: tuple[Fold, ...] = (disk_sequences.FOLD, integrity.FOLD, index_check.FOLD, segment_loss.FOLD,
                                state_files.FOLD, transactions.FOLD, replicas.FOLD, leadership.FOLD)
WIRE_FOLDS: tuple[Fold, ...] = (wire_produce.FOLD, wire_frames.FOLD, txn_wire.FOLD, wire_lso.FOLD, wire_readers.FOLD,
                                consumers_fold.FOLD, wire_acked.FOLD)

__all__ = ["Context", "Fold", "RULES", "SEVERITIES", "SEVERITY_RANK", "at_or_above",
           "DISK_FOLDS", "WIRE_FOLDS", "sort_findings"]


def sort_findings(findings: list[dict], clusters=None) -> list[dict]:
    """Most severe first, then by rule and place: the same order whichever engine ran. Every
    engine's last step: the findings get their incident ids here (incidents.assign), with their
    cluster's identity (`clusters`: a clusters.ClusterMap of the inputs)."""
    def key(f):
        return (-SEVERITY_RANK[f["severity"]], f["rule"], f["topic"] or "", f["partition"] or -1,
                f["replica"] or "", f["connection"] or "", f["first_offset"] if f["first_offset"] is not None else -1,
                f["first_ts_ms"] or 0, f["id"])
    return incidents.assign(sorted(incidents.settle_unanswered(findings), key=key),
                            None if clusters is None else clusters.of)
