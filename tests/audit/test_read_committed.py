"""A read_committed consumer's filtering of one Fetch response (audit/read_committed.py:
Kafka's CompletedFetch), which the wire's readers and the consumers' served ranges share."""

from __future__ import annotations

from kaudit.audit.read_committed import delivered, parse_aborted


def batch(base: int, last: int, pid: int = 1, txn: bool = True, control: str | None = None, count=None) -> dict:
    return {"base_offset": base, "last_offset": last, "producer_id": pid, "is_transactional": txn,
            "is_control": control is not None, "control_type": control, "record_count": count}


def offsets(batches, listed: str) -> list[int]:
    return [b["base_offset"] for b in delivered(batches, parse_aborted(listed))]


def test_the_list_is_read_in_order_of_first_offset():
    assert parse_aborted("7@20,7@3,8@3,x@1,9@") == [(7, 3), (8, 3), (7, 20)]
    assert parse_aborted(None) == parse_aborted("") == []


def test_a_listed_producer_is_dropped_from_its_first_offset_to_its_abort_marker():
    bs = [batch(0, 1), batch(2, 3), batch(4, 4, control="ABORT"), batch(5, 6), batch(7, 7, control="COMMIT")]
    assert offsets(bs, "1@2") == [0, 5]        # before the first offset, and the next transaction
    assert offsets(bs, "") == [0, 2, 5]        # nothing listed: every data batch
    assert offsets(list(reversed(bs)), "1@0") == [5]   # any order in, offset order out


def test_a_producer_with_two_aborted_transactions_in_one_response():
    bs = [batch(0, 1), batch(2, 2, control="ABORT"), batch(3, 4), batch(5, 6), batch(7, 7, control="ABORT")]
    assert offsets(bs, "1@0,1@5") == [3]


def test_plain_batches_and_other_producers_are_delivered():
    bs = [batch(0, 1, txn=False), batch(2, 3, pid=2), batch(4, 5), batch(6, 6, control="ABORT")]
    assert offsets(bs, "1@4") == [0, 2]


def test_emptied_batches_and_unplaced_ones_deliver_nothing():
    bs = [batch(0, 1, count=0), batch(2, 3, count=2), {**batch(4, 5), "base_offset": None}]
    assert offsets(bs, "") == [2]
