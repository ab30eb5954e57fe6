"""A read_committed consumer's filtering of one Fetch response, replayed: what the wire's readers
(wire/reader_replay, joint/reader_join) and the consumers' served ranges (consumers/fold) both
read. Kafka's CompletedFetch, as librdkafka does it too: the response's `aborted_transactions`
(producer id, first offset) in order of first offset; a batch at or past one's first offset
puts that producer among the aborting ones, its ABORT marker takes it out again, and its
transactional batches in between are dropped (a producer may have several aborted transactions
in one response); control batches and batches the cleaner emptied (record count 0, kept for
their producer's state) deliver no record; any other batch is delivered."""

from __future__ import annotations

from collections.abc import Iterator


def parse_aborted(text: str | None) -> list[tuple[int, int]]:
    """`aborted_transactions` ("pid@first,...") as (producer id, first offset), by first offset."""
    out = []
    for item in (text or "").split(","):
        pid, _, first = item.partition("@")
        try:
            out.append((int(pid), int(first)))
        except ValueError:
            continue
    return sorted(out, key=lambda x: (x[1], x[0]))


def delivered(batches: list[dict], aborted: list[tuple[int, int]]) -> Iterator[dict]:
    """The data batches of one response's partition (any order; dicts with base_offset,
    last_offset, producer_id, is_transactional, is_control, control_type and, where known,
    record_count) that the consumer delivers, in offset order; `aborted`: parse_aborted's. A
    batch whose offsets were not read (a truncated header) cannot be placed: not delivered."""
    i, aborting = 0, set()
    for b in sorted((b for b in batches if b["base_offset"] is not None and b["last_offset"] is not None),
                    key=lambda b: b["base_offset"]):
        while i < len(aborted) and aborted[i][1] <= b["last_offset"]:
            aborting.add(aborted[i][0])
            i += 1
        if b["is_control"]:
            if b["control_type"] == "ABORT":
                aborting.discard(b["producer_id"])
            continue
        if b.get("record_count") == 0 or (b["is_transactional"] and b["producer_id"] in aborting):
            continue
        yield b
