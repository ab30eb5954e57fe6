"""A consume-transform-produce transaction's `__consumer_offsets` partition on the wire
(txn_wire_order.offsets_listed): AddOffsetsToTxn registers the group's partition with the
coordinator, but only the coordinator's WriteTxnMarkers name it - sent to the group coordinator's
broker apart from the other markers, often after them. Each transaction's offsets marker is its
own, whatever the order: no torn transaction, no stray marker (3.0.2's 04-ctp-java told the
second and third transactions' markers as the first's: `kaudit txn` called it torn, the audit a
stray ABORT)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kaudit.audit import folds
from kaudit.audit.folds import Context
from kaudit.audit.txn import txn_wire
from tests.audit.wire.test_wire_txn_reference import BATCH_SCHEMA, CONNS, EVENT_SCHEMA, FRAME_SCHEMA

OFFSETS = "__consumer_offsets-4"
SENDER = "broker-1-txn-marker-sender"


def _event(pos: int, ts: float, event: str, **kw) -> dict:
    row = {"source": "c.pcap", "connection": CONNS[0], "position": pos, "ts": ts, "event": event,
           "transactional_id": "tx", "producer_id": 7, "producer_epoch": 0, "error_codes": ""}
    return row | kw


def _transaction(at: float, pos: int, result: str, offsets_first: bool) -> tuple[list, list]:
    """One transaction on t-0 with the group's offsets: its requests and the markers' frames."""
    tps = [OFFSETS, "t-0"] if offsets_first else ["t-0", OFFSETS]
    events = [_event(pos, at, "ADD_PARTITIONS", partitions="t-0"),
              _event(pos + 1, at + 0.1, "ADD_OFFSETS", group_id="g"),
              _event(pos + 2, at + 0.2, "TXN_OFFSET_COMMIT", group_id="g", partitions="in-0"),
              _event(pos + 3, at + 0.3, "END_TXN", result=result)]
    frames = []
    for i, tp in enumerate(tps):
        p = pos + 4 + i
        events.append(_event(p, at + 0.4 + i / 10, "WRITE_MARKERS", partitions=tp, result=result,
                             coordinator_epoch=0, connection=CONNS[1]))
        frames.append({"source": "c.pcap", "connection": CONNS[1], "request_frame": p,
                       "response_ts": at + 0.45 + i / 10, "api_key": 27, "client_id": SENDER, "api_version": 0})
    return events, frames


def _items(offsets_first: bool):
    events, frames = [_event(1, 0.5, "INIT_PRODUCER_ID", timeout_ms=60000)], []
    for k, result in enumerate(("COMMIT", "ABORT", "COMMIT")):
        e, f = _transaction(1.0 + k, 10 * (k + 1), result, offsets_first)
        events, frames = events + e, frames + f
    return [("txn_event", pa.Table.from_pylist(events, schema=EVENT_SCHEMA)),
            ("frame", pa.Table.from_pylist(frames, schema=FRAME_SCHEMA)),
            ("batch", pa.Table.from_pylist([], schema=BATCH_SCHEMA))]


@pytest.mark.parametrize("offsets_first", [False, True])
def test_each_transactions_offsets_marker_is_its_own(offsets_first):
    items = _items(offsets_first)
    rows = txn_wire.listed(list(items), Context(reference_time_ms=10_000))
    got = [(r["outcome"], sorted((p["partition"], p["marker"]["result"]) for p in r["parts"])) for r in rows]
    assert got == [(res, sorted([(OFFSETS, res), ("t-0", res)])) for res in ("COMMIT", "ABORT", "COMMIT")]
    found = list(folds.run_selection(txn_wire.FOLD, list(items), Context(reference_time_ms=10_000)))
    assert [f["rule"] for f in found] == []
