"""Kaudit's times for people (kaudit/timefmt.py): Kaudit's NO_TIMESTAMP (-1, a magic 0 message or
a batch converted from one) reads "no timestamp", never a date of 1969 (issue 27)."""

from kaudit.timefmt import iso_ms, relative, when


def test_no_timestamp_is_never_1969():
    assert iso_ms(-1) == "no timestamp"
    assert when(-1, -1, 1_700_000_000_000) == "no timestamp"
    assert when(-1) == "no timestamp"
    assert relative(-1, 1_700_000_000_000) == ""
    assert when(None) == "unknown time"
    assert "2023" in when(1_700_000_000_000, -1) and "1969" not in when(1_700_000_000_000, -1)
