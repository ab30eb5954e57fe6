"""Fault kinds the merged auditor still gets wrong: their tests are xfail(strict=False), so CI
stays green and an XPASS shows the day one is fixed. Each reason says which feed fails and how,
measured with the simulator; the shrunk example of each is under tests/sim/regressions/.
Remove an entry once its kind passes (check with KAUDIT_SIM_EXAMPLES=30 first)."""

KNOWN_FAILING = {
    "group:reset_range_session": "pcap and audit: a reset to the log end under a KIP-227 fetch session (Fetch "
                                 "v7+ with a session: every Java consumer) is missed. After OFFSET_OUT_OF_RANGE "
                                 "and ListOffsets -1 the incremental Fetch asks the partition at the log end and "
                                 "the broker leaves it out of the response (no records, no watermark change: "
                                 "FetchSession's mustRespond); fetch_partition rows exist only for answered "
                                 "partitions (summary_batches.fetch_partitions), so consumer-reset-skip never sees "
                                 "the Fetch that starts at the log end ('the next Fetch starts there') and says "
                                 "nothing. The fix is in the rows (the request's partitions the response left "
                                 "out), not in the rule's invariant",
}
