"""The crafted cases of the wire rules (tests/audit/wire) run again through the live executor: the
capture fed in small pieces, a checkpoint after each (sequences streamed below the watermark,
connections and producers settled, the readers' selection compacted as it grows). Each case's own
expectations hold, and the findings are the file audit's (id, severity, evidence)."""

from __future__ import annotations

import inspect
import json

import pytest

import tests.audit.wire.test_wire_acked as acked
import tests.audit.wire.test_wire_frame_rules as frame_rules
import tests.audit.wire.test_wire_produce_rules as produce_rules
import tests.audit.wire.test_wire_readers as readers
import tests.audit.wire.test_stored_unanswered as stored_unanswered
import tests.audit.wire.test_wire_txn_crafted as txn_crafted
import tests.audit.wire.test_wire_txn_fetched_markers as fetched_markers
from tests.audit.wire import wirecraft

from kaudit.audit.producers import wire_acked
from kaudit.audit.wire import live_settle
from kaudit.engine import live
from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions

MODULES = (frame_rules, produce_rules, readers, txn_crafted, fetched_markers, acked, stored_unanswered)


def live_audit(tmp_path, conns, *, name: str = "wire.pcap", now_ms=None, select=(), ignore=(),
               timed: dict | None = None, **opts):
    """wirecraft.audit through engine/live.py, checked against the file's audit."""
    path = tmp_path / name
    if timed is not None:
        wirecraft.write_timed(path, conns, **timed, **opts)
    else:
        wirecraft.write_capture(path, conns, **opts)
    data = path.read_bytes()
    pieces = (data[i:i + 1500] for i in range(0, len(data), 1500))
    run = live.audit_live(str(path), pieces, PcapOptions(), now_ms=now_ms, select=select, ignore=ignore)
    want = audit_pcaps([str(path)], PcapOptions(), now_ms=now_ms, select=select, ignore=ignore).findings
    key = lambda f: (f["id"], f["rule"], f["severity"], json.dumps(f["evidence"]))
    assert sorted(map(key, run.findings)) == sorted(map(key, want))
    return run.findings


CASES = [(m, name) for m in MODULES for name, fn in vars(m).items()
         if name.startswith("test_") and callable(fn) and list(inspect.signature(fn).parameters) == ["tmp_path"]]


@pytest.mark.parametrize("module,name", CASES, ids=[f"{m.__name__.rsplit('.', 1)[-1]}::{n}" for m, n in CASES])
def test_crafted_case_live(module, name, tmp_path, monkeypatch):
    monkeypatch.setattr(live, "CHECK_EVERY_S", 0.0)
    monkeypatch.setattr(live_settle, "COMPACT_ROWS", 1)
    monkeypatch.setattr(wire_acked.AckedSettle, "COMPACT_ROWS", 1)
    monkeypatch.setattr(module, "audit", live_audit)
    getattr(module, name)(tmp_path)
