"""What a partition leader serves a consumer from a compacted log (log:compacted_consumers): its
own segments as its cleaner left them, not the batches as written.

Facts (apache/kafka at 1eb7644): a Fetch reads the leader's local log (LocalLog.read): the
cleaned batches - offsets missing between them, batches rebuilt with fewer records (their base
and last offsets kept), empty batches kept for a producer's state, markers removed past their
delete horizon; the read_committed upper bound is the last stable offset, the first offset of
the leader's earliest open transaction (ProducerStateManager, not the markers left in the log);
the aborted transactions a response lists come from the segments' transaction indexes
(UnifiedLog.collectAbortedTransactions: entries whose last offset is at or past the fetch offset
and whose first offset is below the fetched data's end) - the cleaner copies an entry only while
its ABORT marker is kept (LogCleaner.CleanedTransactionMetadata), so a listed transaction's data
may already be gone. The consumer (CompletedFetch) delivers the records a batch holds: a
position moves over the gaps."""

from __future__ import annotations

from tests.sim.compaction import parse


def view(part, stored_type) -> tuple[list, list, dict]:
    """(the leader's batches as `stored_type`, [(pid, first offset, marker offset)] of its aborted
    transactions, {pid: first offset} of the open ones)."""
    pb = part.pbs[part.leader]
    out, aborts = [], []
    for seg in pb.segments:
        if seg.suffix:
            continue
        aborts += [(e[0], e[1], e[2]) for e in seg.txnindex]
        for b in parse(bytes(seg.data)):
            if b.last_offset < part.log_start:
                continue
            kind = {0: "ABORT", 1: "COMMIT"}.get(b.control_type()) if b.is_control else None
            offsets = () if b.is_control else tuple(b.base_offset + r.offset_delta for r in b.records)
            out.append(stored_type(b.base_offset, b.last_offset, b.pid, b.is_txn, kind, b.raw, offsets,
                                   b.is_control))
    open_ = {pid: st.txn_first_offset for pid, st in pb.producers.items() if st.txn_first_offset >= 0}
    return out, aborts, open_
