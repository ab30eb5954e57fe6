"""The transactions fold's fast path: the producer ids whose transactions certainly give no
finding, decided for all of them at once with numpy over the fold's buffered rows, so that
`CrossPartitionFold.prepare` (transactions.py) leaves their rows out and the exact path (the
facts of txn_model, judged by txn_findings, per producer id, in Python) only sees the others.

The certification is made of the rules' own predicates: each transaction rule declares, beside
its code (`@rule(..., clean=...)` in txn_rules.py and coordinator_state.py), the function below
that returns the producer ids it might flag; a producer is certified when no predicate names it
and the vectorised facts (txn_facts.py) describe it (`Facts.shape`). A rule of the fold without a predicate
turns the fast path off (`clean_producers` certifies nobody). tests/audit/disk/test_disk_txn_clean.py
checks soundness - the certified producers' exact findings are none - on mutated transaction
logs, and the transaction tests run the reference path (no certification) too.

The facts (`Facts`), and the shape they can describe (what each rules out in brackets):

Batches (per replica, topic, partition, in offset order; the fold's batch rows): transactional
data (D) and COMMIT/ABORT markers (M), no other control types, strictly increasing offsets,
identical replicas (offsets, kinds, epochs, coordinator epochs, timestamps: merging changes
nothing), epochs present, markers with a coordinator epoch and a timestamp. Parts are a marker
and the data before it. Plain writes [non-transactional-write-in-transaction] and a stream not
ending with a marker [dangling/hanging] are outside the shape too (the parts need (D* M)+).

The coordinator's records (txn_log rows): known states, timestamps, offsets increasing per
replica, no tombstones, identical replicas, one topic per producer; transactions (as
coordinator_state.build makes them) with at most one Prepare and one Complete of one result,
windows [prepare (else start), complete] following each other without overlap, every one but the
last complete, none starting with its Complete record (a producer id rotation) nor prepared at
the last epoch (completed under the next producer id).

Markers against the coordinator: each marker's nearest window (the first on a tie, within
MATCH_WINDOW_MS) - the transaction match_markers picks when it lists the partition with the
marker's result.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.txn.txn_facts import _NONE, Facts


BUCKET_ROWS = 1 << 16   # rows per kind certified at once (bounds the numpy temporaries)
_BATCH_NEEDS = ["producer_id", "topic", "partition", "replica", "base_offset", "last_offset", "is_control",
                "is_transactional", "control_type", "producer_epoch", "coordinator_epoch",
                "base_timestamp_ms", "max_timestamp_ms"]
_TXN_LOG_NEEDS = ["producer_id", "topic", "partition", "replica", "offset", "timestamp_ms", "transactional_id",
                  "tombstone", "state", "partitions", "start_ms", "producer_epoch"]


def clean_producers(batches: pa.Table | None, txn_log: pa.Table | None, rules=None) -> np.ndarray:
    """Sorted producer ids of the rows (the fold's selection, every chunk, after prefilter) that
    none of `rules` (registry.Rule, default: every rule with a predicate here) might flag and the
    facts describe; nobody when a rule has no predicate. Every condition is about one producer
    id, so large selections are certified in buckets of producer ids (pid mod a power of two) of
    about BUCKET_ROWS rows: same answer, bounded memory."""
    predicates = [r.clean for r in rules] if rules is not None else list(PREDICATES)
    if any(p is None for p in predicates):
        return _NONE
    batches = None if batches is None else batches.select(
        _BATCH_NEEDS + [c for c in ("has_delete_horizon",) if c in batches.column_names])
    txn_log = None if txn_log is None else txn_log.select(_TXN_LOG_NEEDS)
    n = max(t.num_rows if t is not None else 0 for t in (batches, txn_log))
    k = 1
    while n > k * BUCKET_ROWS:
        k *= 2
    if k == 1:
        return _clean(Facts(batches, txn_log), predicates)
    ids = [None if t is None else pc.bit_wise_and(t.column("producer_id").cast(pa.int64()), k - 1)
           for t in (batches, txn_log)]
    return np.sort(np.concatenate([_clean(Facts(*(None if t is None else t.filter(pc.equal(b, i))
                                                  for t, b in zip((batches, txn_log), ids))), predicates)
                                   for i in range(k)]))


def _clean(facts: "Facts", predicates) -> np.ndarray:
    flagged = [facts.shape] + [p(facts) for p in predicates]
    return np.setdiff1d(facts.all_pids, np.concatenate(flagged), assume_unique=False)


# -- the rules' predicates (each declared beside its rule: `@rule(..., clean=...)`) -------------
# Each returns the producer ids its rule might flag; more is safe (they go to the exact path).

def every_part_ends(facts: Facts) -> np.ndarray:
    """dangling-transaction, hanging-transaction: a part with no marker."""
    return facts.of("unended")


def one_result_per_transaction(facts: Facts) -> np.ndarray:
    """torn-transaction: a marker its transaction would not claim with the same result, loose
    markers of both results close together, or a registration with no marker."""
    return facts.of("unmatched", "unlisted", "loose_mixed", "unmarked")


def every_partition_registered(facts: Facts) -> np.ndarray:
    """unregistered-partition: a part whose transaction does not list its partition."""
    return facts.of("unlisted", "unmatched")


def no_coordinator_abort(facts: Facts) -> np.ndarray:
    """coordinator-abort: an ABORT that bumped the epoch (markers at the data's epoch + 1, an
    empty part's at its transaction's + 1, or a PrepareAbort above the transaction's first
    epoch) - the coordinator's own, or a version-2 end the exact path tells apart."""
    return facts.of("abort_bumped", "empty_abort_bumped", "unmatched")


def no_stray_marker(facts: Facts) -> np.ndarray:
    """stray-marker: a marker with no data no transaction claims, or one after its transaction's
    marker on the partition."""
    return facts.of("loose_empty", "unmatched", "unlisted", "marker_again")


def coordinator_epochs_rise(facts: Facts) -> np.ndarray:
    """coordinator-epoch-regression: a marker's coordinator epoch below an earlier one's."""
    return facts.of("ce_regress")


def no_plain_writes(facts: Facts) -> np.ndarray:
    """non-transactional-write-in-transaction: a plain batch of a transactional producer."""
    return facts.of("plain")


def no_late_write(facts: Facts) -> np.ndarray:
    """late-transactional-write: data after a marker of a higher epoch, or created after the
    previous marker and before its transaction registered the partition."""
    return facts.of("late")


def valid_transitions(facts: Facts) -> np.ndarray:
    """illegal-state-transition: two consecutive records of an id the state machine forbids."""
    return facts.of("transitions")


def one_epoch_per_part(facts: Facts) -> np.ndarray:
    """mixed-epoch-transaction: data of several epochs in a part, a marker epoch other than
    its data's (+1) or its transaction's Prepare record's, or a registration with no marker (a
    later transaction's marker may end its data)."""
    return facts.of("mixed_epoch", "marker_epoch", "prep_epoch", "unmatched", "unlisted", "unmarked")


def no_stale_epoch(facts: Facts) -> np.ndarray:
    """write-after-epoch-end: data of an epoch below its part's newest or its marker's - 1,
    data with no marker (its epoch may have ended before it), or a registration with no marker."""
    return facts.of("mixed_epoch", "marker_epoch", "unended", "unmarked")


def no_prepare_left(facts: Facts) -> np.ndarray:
    """txn-markers-refused (disk): a transaction prepared with no Complete record, or a part
    with no marker."""
    return facts.of("prepared_open", "unended")


def below_epoch_limit(facts: Facts) -> np.ndarray:
    """epoch-exhausted-transaction: a coordinator record at epoch 32766 or 32767, or a part with
    no marker."""
    return facts.of("epoch_limit", "unended")


PREDICATES = (every_part_ends, one_result_per_transaction, every_partition_registered, no_coordinator_abort,
              no_stray_marker, coordinator_epochs_rise, no_plain_writes, no_late_write, valid_transitions,
              one_epoch_per_part, no_stale_epoch, no_prepare_left, below_epoch_limit)
