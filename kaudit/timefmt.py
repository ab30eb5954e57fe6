"""Human times for messages and reports: ISO-8601 instants with their zone, durations in words.

Every layer may use it (stdlib only). Kafka's units stay in the machine fields (`*_ms` epoch
milliseconds, capture seconds); only the words a person reads are formatted here.
"""

from __future__ import annotations

from datetime import datetime, timezone

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))
NO_TIMESTAMP = "no timestamp"   # Kafka's -1 (RecordBatch.NO_TIMESTAMP): never shown as 1969


def known(ms: int | float | None) -> int | float | None:
    """`ms`, or None for Kafka's "no timestamp" (-1; no instant before 1970 is a Kafka time)."""
    return None if ms is None or ms < 0 else ms


def iso_ms(ms: int | float | None) -> str:
    """Epoch milliseconds as ISO-8601 in UTC with millisecond precision
    ("2026-11-24T22:26:35.123Z"); "unknown time" for None; "no timestamp" for a negative value
    (Kafka's NO_TIMESTAMP, -1: a magic 0 message or a batch converted from one - never 1969)."""
    if ms is None:
        return "unknown time"
    if ms < 0:
        return NO_TIMESTAMP
    try:
        t = datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{int(ms)} ms since the epoch"
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def iso_s(seconds: float | None) -> str:
    """Capture time (epoch seconds, microseconds kept) as ISO-8601 in UTC
    ("2026-11-24T22:26:35.123456Z")."""
    if seconds is None:
        return "unknown time"
    if seconds < 0:
        return NO_TIMESTAMP
    try:
        t = datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{seconds} s since the epoch"
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def duration(ms: int | float | None) -> str:
    """A duration in words, two units at most ("1 d 2 h", "3 min 5 s", "450 ms");
    negative durations keep their sign."""
    if ms is None:
        return "an unknown time"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms:.0f} ms" if isinstance(ms, float) else f"{sign}{ms} ms"
    values, rest = [], int(ms)
    for name, size in _UNITS:
        values.append((rest // size, name))
        rest %= size
    first = next(i for i, (v, _) in enumerate(values) if v)
    shown = [f"{v} {name}" for v, name in values[first:first + 2] if v]
    return sign + " ".join(shown)


def relative(ms: int | float | None, reference_ms: int | float | None,
             reference: str = "the end of the evidence") -> str:
    """Where `ms` lies from the reference time, in words ("3 min 2 s before the end of the
    evidence"); "" when either is unknown."""
    ms, reference_ms = known(ms), known(reference_ms)
    if ms is None or reference_ms is None:
        return ""
    delta = reference_ms - ms
    if abs(delta) < 1:
        return f"at {reference}"
    return f"{duration(abs(delta))} {'before' if delta > 0 else 'after'} {reference}"


def when(first_ms: int | float | None, last_ms: int | float | None = None,
         reference_ms: int | float | None = None) -> str:
    """An instant or a span for people: "2026-11-24T22:26:35.123Z (3 min before the end of the
    evidence)", or "from A to B (12 s; 3 min before the end of the evidence)"; "no timestamp"
    when the evidence has only Kafka's -1."""
    untimed = any(t is not None and t < 0 for t in (first_ms, last_ms))   # NO_TIMESTAMP (-1)
    first_ms, last_ms = known(first_ms), known(last_ms)
    if first_ms is None and last_ms is None:
        return NO_TIMESTAMP if untimed else "unknown time"
    if first_ms is None or last_ms is None or abs(last_ms - first_ms) < 1:
        t = first_ms if first_ms is not None else last_ms
        rel = relative(t, reference_ms)
        return iso_ms(t) + (f" ({rel})" if rel else "")
    lo, hi = min(first_ms, last_ms), max(first_ms, last_ms)
    rel = relative(lo, reference_ms)
    return f"from {iso_ms(lo)} to {iso_ms(hi)} ({duration(hi - lo)}" + (f"; began {rel})" if rel else ")")
