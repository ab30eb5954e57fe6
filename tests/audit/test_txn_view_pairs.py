"""`kaudit txn` given wire and disk lists one row per transaction (txn_view.pair_rows): the
capture's row joins the log's by their key, else by a part at the same place under the same
producer id and epoch, else by the same producer id and epoch begun within moments - where the
log's first data is not the capture's (a TxnOffsetCommit's batch in `__consumer_offsets`, data
the cleaner removed); never across epochs (an unclean election's new data at the same offsets)."""

from __future__ import annotations

from kaudit.audit.txn.txn_view import merge_rows, pair_rows


def _row(pid, epoch, start, parts, outcome="COMMIT"):
    """parts: (partition, first data offset or None, marker offset or None)."""
    first = next(((tp, off) for tp, off, _ in sorted(parts, key=lambda p: p[0]) if off is not None), None)
    key = f"{pid}/{epoch}/" + (f"{first[0]}@{first[1]}" if first else f"t{start}")
    return {"transaction": key, "producer_id": pid, "producer_epoch": epoch, "start_ms": start,
            "outcome": outcome, "ended_by": "client (EndTxn commit)", "coordinator_states": [],
            "transactional_id": "tx",
            "parts": [{"partition": tp, "first_offset": off if off is not None else m,
                       "data_batches": 0 if off is None else 1,
                       "marker": None if m is None else {"offset": m, "result": outcome}} for tp, off, m in parts]}


def test_the_offsets_partitions_batch_on_disk_only():
    # on disk the group's TxnOffsetCommit batch comes first by name; the wire holds o-0's data only
    disk = [_row(7, 0, 1000, [("__consumer_offsets-2", 3, 4), ("o-0", 0, 1)])]
    wire = [_row(7, 0, 1001, [("o-0", 0, None)])]
    assert disk[0]["transaction"] != wire[0]["transaction"]
    assert pair_rows(disk, wire) == {0: 0}
    assert len(merge_rows(disk, wire)) == 1


def test_data_the_cleaner_removed_pairs_by_time_within_the_epoch():
    # the log keeps the markers only (at 5 and 10), the capture the data (at 3 and 8)
    disk = [_row(7, 0, 1000, [("c-0", None, 5)]), _row(7, 0, 71_000, [("c-0", None, 10)], "ABORT")]
    wire = [_row(7, 0, 71_002, [("c-0", 8, None)], "ABORT"), _row(7, 0, 1001, [("c-0", 3, None)])]
    assert pair_rows(disk, wire) == {0: 1, 1: 0}


def test_never_across_epochs_or_producers():
    # an unclean election: epoch 1's data took offset 8, where the capture saw epoch 0's
    disk = [_row(7, 1, 5000, [("e-0", 8, 10)])]
    wire = [_row(7, 0, 4000, [("e-0", 8, None)]), _row(8, 1, 5000, [("e-0", 8, None)]),
            _row(7, 1, 5001, [("e-0", 8, None)])]
    assert pair_rows(disk, wire) == {2: 0}
    assert len(merge_rows(disk, wire)) == 3


def test_one_pair_per_row():
    disk = [_row(7, 0, 1000, [("t-0", 0, 2)])]
    wire = [_row(7, 0, 1000, [("t-0", 0, None)]), _row(7, 0, 1000, [("t-0", 0, 2)])]
    assert pair_rows(disk, wire) == {0: 0}


def test_rows_begun_near_pair_as_the_walk_pairs_them():
    """The last step (the same producer id and epoch, begun within MATCH_WINDOW_MS, the nearest
    first) finds the disk rows near each wire row by bisection: the pairs of the walk over all of
    them, on random starts."""
    import random

    from kaudit.audit.thresholds import MATCH_WINDOW_MS
    from kaudit.audit.txn import txn_view

    def row(tx, start):
        return {"transaction": tx, "start_ms": start, "parts": [], "producer_id": 1}

    def walk(disk, wire):
        near = sorted((abs(w["start_ms"] - d["start_ms"]), j, i) for j, w in enumerate(wire)
                      for i, d in enumerate(disk) if w["start_ms"] is not None and d["start_ms"] is not None
                      and txn_view.data_producer(w) == txn_view.data_producer(d)
                      and abs(w["start_ms"] - d["start_ms"]) <= MATCH_WINDOW_MS)
        pairs, free = {}, set(range(len(disk)))
        for _, j, i in near:
            if i in free and j not in pairs:
                pairs[j] = i
                free.discard(i)
        return pairs

    rnd = random.Random(7)
    for _ in range(200):
        disk = [row(f"1/{rnd.randint(0, 1)}/d{k}", rnd.choice([None, rnd.randint(0, 300_000)])) for k in range(8)]
        wire = [row(f"1/{rnd.randint(0, 1)}/w{k}", rnd.choice([None, rnd.randint(0, 300_000)])) for k in range(8)]
        assert txn_view.pair_rows(disk, wire) == walk(disk, wire)
