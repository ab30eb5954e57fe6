"""Fault kinds the merged auditor still gets wrong: their tests are xfail(strict=False), so CI
stays green and an XPASS shows the day one is fixed. Each reason says which feed fails and how,
measured with the simulator; the shrunk example of each is under tests/sim/regressions/.
Remove an entry once its kind passes (check with KAUDIT_SIM_EXAMPLES=30 first)."""

KNOWN_FAILING: dict[str, str] = {}
