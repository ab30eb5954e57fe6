"""Fault kinds the merged auditor still gets wrong: their tests are xfail(strict=False), so CI
stays green and an XPASS shows the day one is fixed. Each reason says which feed fails and how,
measured with the simulator; the shrunk example of each is under tests/sim/regressions/.
Remove an entry once its kind passes (check with KAUDIT_SIM_EXAMPLES=30 first)."""

KNOWN_FAILING: dict[str, str] = {
    # branch h-compact, measured at KAUDIT_SIM_EXAMPLES=10-12 (seeds 51, 61): 2-3 histories in 10
    "log:compacted_coordinator": (
        "__transaction_state compacted too (its cleaner keeps a transactional id's latest records): "
        "segments and audit match the producer's markers to coordinator transactions rebuilt from the "
        "records that are left - false torn-transaction (critical: 'the coordinator decided COMMIT ... "
        "aborted by a marker of epoch 1, not the coordinator's epoch 2') and mixed-epoch-transaction "
        "(error: 'ends with a COMMIT marker at offset 2 of epoch 1, not the coordinator's epoch 5') on "
        "TV2 transactions older than the id's earliest retained record; unregistered-partition there "
        "is fixed (Coverage.since_ms). regressions/log-compacted_coordinator-*.json"),
}
