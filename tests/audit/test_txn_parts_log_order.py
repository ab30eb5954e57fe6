"""txn_parts.log_order: a partition's rows in the log's order - by their offsets where known, a
row without one right after the highest offset known before it in the capture - whatever order
the capture shows them in; the capture's order itself where the known offsets rise with it (its
fast path agrees with the general one)."""

from hypothesis import given, settings, strategies as st

from kaudit.audit.txn import txn_parts


def _rows(spec, control=True):
    """Rows in the capture's order: (offset or None, length) each, ranked by their place
    (markers a consumer was served, by default: their offsets come in any order)."""
    out = []
    for i, (off, n) in enumerate(spec):
        out.append({"rank": (float(i), i), "base_offset": off, "is_control": control,
                    "last_offset": None if off is None else off + n, "i": i})
    return out


_spec = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 40)), st.integers(0, 2)), max_size=12)


@settings(max_examples=200, deadline=None)
@given(_spec)
def test_known_offsets_in_order_unknown_after_what_was_known(spec):
    rows = _rows(spec)
    got = list(rows)
    keys = txn_parts.log_order(got)
    assert sorted(r["i"] for r in got) == list(range(len(rows))) and len(keys) == len(got)
    known = [r["base_offset"] for r in got if r["base_offset"] is not None]
    assert known == sorted(known)
    assert keys == sorted(keys)           # the parts' keys follow the order
    at = {r["i"]: k for k, r in enumerate(got)}
    for r in rows:                        # an unknown row: after every row known before it in the capture
        if r["base_offset"] is None:
            assert all(at[x["i"]] < at[r["i"]] for x in rows[:r["i"]] if x["base_offset"] is not None)
    # the fast path (the capture's order where the offsets rise) agrees with the general one
    again = list(rows)
    txn_parts._by_offsets(again)
    assert [r["i"] for r in again] == [r["i"] for r in got]


def test_a_marker_fetched_late_goes_back_to_its_offset():
    """A COMMIT at offset 13 fetched after data at 14-16 and an unanswered Produce: 13 first, the
    data, then the unanswered Produce (sent after the log held 16)."""
    rows = _rows([(14, 2), (13, 0), (None, 0)])
    txn_parts.log_order(rows)
    assert [r["base_offset"] for r in rows] == [13, 14, None]


def test_a_log_is_ordered_by_offset():
    rows = [{"base_offset": 7, "last_offset": 9}, {"base_offset": 3, "last_offset": 3}]
    assert txn_parts.log_order(rows) == [3, 7] and rows[0]["base_offset"] == 3


def test_offsets_answered_twice_keep_the_capture_s_order():
    """Two Produce answers giving the same offsets: the log was truncated between them (a leader
    elected without the first write), so offsets name two places - the capture's order is the
    log's history (a marker served at 2 then ends the later write, not the lost one)."""
    rows = _rows([(0, 1), (None, 0), (0, 1)], control=False) + _rows([(2, 0)])[:0]
    marker = {"rank": (3.0, 3), "base_offset": 2, "last_offset": 2, "is_control": True, "i": 3}
    rows.append(marker)
    txn_parts.log_order(rows)
    assert [r["i"] for r in rows] == [0, 1, 2, 3]
