"""Human times for messages and reports: ISO-8601 instants with their zone, durations in words.

Every layer may use it (stdlib only). Kafka's units stay in the machine fields (`*_ms` epoch
milliseconds, capture seconds); only the words a person reads are formatted here.
"""

from __future__ import annotations

from datetime import datetime, timezone

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000))


def iso_ms(ms: int | float | None) -> str:
    """Epoch milliseconds as ISO-8601 in UTC with millisecond precision
    ("2026-11-24T22:26:35.123Z"); "unknown time" for None."""
    if ms is None:
        return "unknown time"
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
