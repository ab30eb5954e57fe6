"""What every consumer rule's finding shares (rules.py, rules_poll.py): the fold's name, the cap
per rule, and one builder that places a finding on its partition, offsets, times and client."""

from __future__ import annotations

from kaudit.audit.registry import finding

FOLD_NAME = "consumers"
MAX_FINDINGS = 50   # per rule and capture


def ms(ts) -> int | None:
    return None if ts is None else int(ts * 1000)


def tp_name(tp) -> str:
    return f"{tp[0]}-{tp[1]}"


def consumer_finding(rule_id: str, message: str, tp, first: int, last: int, evidence: list, *,
                     start=None, end=None, **fields) -> dict:
    """A consumer rule's finding on partition `tp` over offsets first..last (inclusive), seen
    from capture time `start` to `end` (seconds); other finding fields as keywords."""
    return finding(rule_id, message, evidence=evidence, topic=tp[0], partition=tp[1], first_offset=first,
                   last_offset=last, first_ts_ms=ms(start), last_ts_ms=ms(end), **fields)
