"""A TxnOffsetCommit's outcome (consumers.timeline.Timelines._outcome): its producer's next
successful EndTxn at its epoch, or the coordinator's next marker to `__consumer_offsets` at its
epoch or the one above (version 2 and a fencing abort bump it) - never a later transaction's,
two epochs on, when the capture lost this one's end."""

from __future__ import annotations

import pytest

from kaudit.audit.consumers.timeline import Timelines


def _markers(ts: float, epoch: int, result: str) -> dict:
    return {"event": "WRITE_MARKERS", "ts": ts, "producer_id": 7, "producer_epoch": epoch, "result": result,
            "partitions": "__consumer_offsets-3", "error_codes": ""}


@pytest.mark.parametrize("marker_epoch, outcome", [(3, "ABORT"), (4, "ABORT"), (5, None), (2, None)])
def test_the_offsets_marker_that_ends_a_commit(marker_epoch, outcome):
    tl = Timelines([], [], [_markers(2.0, marker_epoch, "ABORT")])
    commit = {"ts": 1.0, "producer_id": 7, "producer_epoch": 3}
    assert tl._outcome(commit)[0] == outcome
