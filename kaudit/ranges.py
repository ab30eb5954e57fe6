"""Inclusive offset ranges ([first, last]), as the log, the coverage and the rules speak of them."""

from __future__ import annotations


def merged(ranges) -> list[list[int]]:
    """The ranges sorted and merged where they overlap or touch (offsets 3-5 and 6-9: 3-9)."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def offsets(first, last=None) -> str:
    """An inclusive range in words: "offset 5", "offsets 5-9" ("?" where a bound is unknown)."""
    a = "?" if first is None else first
    if last is None or last == first:
        return f"offset {a}"
    return f"offsets {a}-{last}"


def verb(first, last, one: str, many: str) -> str:
    """`one` or `many`, as `offsets(first, last)` names one offset or several."""
    return one if last is None or last == first else many
