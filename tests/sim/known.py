"""Fault kinds the auditor on main gets wrong today (issue 27 is fixing the rules in parallel):
their tests are xfail(strict=False), so CI stays green and an XPASS shows the day one is fixed.
Each reason says which feed fails and how, measured with the simulator; the shrunk example of
each is under tests/sim/regressions/. Remove an entry once its kind passes."""

KNOWN_FAILING = {
    "idem:retry": "pcap, audit: unanswered-request (warning) on the Produce whose retry on the same "
                  "connection was deduplicated (issue 27: a fact of the crash, not a warning)",
    "idem:retry_new_conn": "pcap, audit: unanswered-request (warning) on the Produce retried on a new "
                           "connection and stored once",
    "idem:leader_failover": "pcap, audit: unanswered-request (warning) on the Produce the old leader never "
                            "answered; the retry to the new leader was deduplicated",
    "idem:kip360": "pcap: unanswered-request (warning); audit: produce-outcome (warning) 'never stored: the "
                   "write was lost' although the producer re-sent it under its bumped epoch (KIP-360)",
    "idem:expiry_dup": "pcap, audit: unanswered-request (warning) beside the true duplicate",
    "idem:restart_dup": "segments, audit: the copy a restarted application re-sent under a new producer id is "
                        "missed (duplicate-records across producer ids); pcap, audit: unanswered-request",
    "txn:fence-unregistered": "TV1 on a 3.0 broker: the zombie's batch stored on a partition its transaction never "
                              "registered is missed on every feed (zombie-write, critical when the new epoch's "
                              "COMMIT exposed it); pcap: the hanging zombie data is missed",
    "txn:fence-race": "pcap, audit: a Produce acknowledged after the coordinator began fencing its epoch is "
                      "not reported (acked-after-fencing)",
    "txn:admin_abort": "segments: the torn transaction (admin ABORT, coordinator COMMIT) is missed; pcap, audit: "
                       "only one of several admin-aborted partitions is named",
    "txn:late_endtxn": "KAFKA-17754 (TV1, 3.0 broker), segments: the write that landed after the delayed EndTxn's "
                       "COMMIT and was ended by the producer's next transaction is missed (late-transactional-write); "
                       "found when nothing ends it (hanging) and on pcap/audit",
    "txn:two_pc": "audit: a KIP-939 prepared transaction is called hanging (critical) although the capture "
                  "shows InitProducerId Enable2Pc",
}
