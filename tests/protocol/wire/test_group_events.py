"""protocol/wire/group_events.py: the consumer protocol's assignment bytes, read bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kaudit.protocol.wire.group_events import MAX_ASSIGNED, consumer_assignment
from tests.audit.wire.wirecraft_group import assignment
from tests.protocol.wire.wirebytes import array, i16

TOPICS = st.lists(st.tuples(st.text("abc-_.", min_size=1, max_size=8),
                            st.lists(st.integers(0, 1000), max_size=5)), max_size=4)


@settings(max_examples=60, deadline=None)
@given(TOPICS)
def test_assignment_round_trip(parts):
    assert consumer_assignment(assignment(parts)) == [(t, p) for t, ps in parts for p in ps]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_give_a_list_or_none(raw):
    out = consumer_assignment(raw)
    assert out is None or isinstance(out, list)


def test_truncated_and_lying_lengths():
    good = assignment([("orders", [0, 1, 2])])
    assert all(consumer_assignment(good[:n]) is None for n in range(1, len(good) - 4))
    assert consumer_assignment(i16(0) + array(2_000_000_000)) is None
    assert consumer_assignment(None) is None and MAX_ASSIGNED > 1000
    assert consumer_assignment(b"") == []   # no assignment for this member
