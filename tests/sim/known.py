"""Fault kinds the merged auditor still gets wrong: their tests are xfail(strict=False), so CI
stays green and an XPASS shows the day one is fixed. Each reason says which feed fails and how,
measured with the simulator; the shrunk example of each is under tests/sim/regressions/.
Remove an entry once its kind passes (check with KAUDIT_SIM_EXAMPLES=30 first)."""

KNOWN_FAILING = {
    "idem:kip360": "audit only (the capture alone is exact): the log dirs hold one copy - the first send, "
                   "unanswered, was never stored and the bumped epoch's re-send was - yet the joint audit keeps "
                   "the capture's duplicate-records (warning) and unanswered-request (warning), and produce-outcome "
                   "(join.py) says 'never stored: the write was lost' (warning) without looking for its records "
                   "under the bumped epoch",
    "txn:two_pc": "audit only: the log dirs' hanging-transaction (critical, by the 10 s timeout in "
                  "__transaction_state) is kept although the capture's InitProducerId Enable2Pc (KIP-939) shows "
                  "a prepared transaction the coordinator never times out; audit_both does not reconcile the "
                  "disk's age verdict with the wire's (segments alone cannot know: allowed there)",
}
