"""The transaction coordinator's states (kafka.coordinator.transaction.TransactionState, KIP-98)
and the transitions it allows (docs/architecture.md §2): shared by the exact path (coordinator_state.py) and
the fast path (txn_clean.py)."""

from __future__ import annotations

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
          "Dead", "PrepareEpochFence")
# TransactionState.validPreviousStates (Kafka 3.x), docs/architecture.md §2.
VALID_PREVIOUS: dict[str, frozenset[str]] = {
    "Empty": frozenset({"Empty", "CompleteCommit", "CompleteAbort"}),
    "Ongoing": frozenset({"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"}),
    "PrepareCommit": frozenset({"Ongoing"}),
    "PrepareAbort": frozenset({"Ongoing", "PrepareEpochFence"}),
    "CompleteCommit": frozenset({"PrepareCommit"}),
    "CompleteAbort": frozenset({"PrepareAbort"}),
    "Dead": frozenset({"Empty", "CompleteAbort", "CompleteCommit"}),
    "PrepareEpochFence": frozenset({"Ongoing"}),
}
# Kafka 4.x (TransactionState.java): a transaction version 2 EndTxn(abort) with nothing sent
# writes PrepareAbort from these too (the fast path leaves them to the exact path)
EMPTY_ABORT_PREVIOUS = frozenset({"Empty", "CompleteCommit", "CompleteAbort"})
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
MAX_EPOCH = 32767   # Short.MaxValue: a producer id's last marker epoch (KIP-890 rotation)
