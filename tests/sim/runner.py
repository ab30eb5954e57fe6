"""Run a history: simulate it, write its log dirs and capture, audit them on each feed."""

from __future__ import annotations

from pathlib import Path

from tests.sim.cluster import Sim
from tests.sim.episodes import run_history

FEEDS = ("segments", "pcap", "audit")
# a capture fault (capture_faults.py) changes the capture only: the log dirs' feed is the clean
# history's, judged by its own kinds already
CAPTURE_FEEDS = ("pcap", "audit")


def feeds_of(history: dict) -> tuple:
    return CAPTURE_FEEDS if history.get("capture_fault") else FEEDS


def simulate(history: dict, root) -> tuple[Sim, list[Path], Path, int]:
    sim = Sim(root, broker=history.get("broker", "3.0"), kraft=history.get("kraft", False))
    sim.cap.retransmit_every = history.get("retransmit_every", 0)
    sim.replicate_on_wire = history.get("replicate_on_wire", False)   # followers' Fetches in the capture
    if history.get("capture") == "no_produce":
        from tests.sim import wire
        sim.cap.hidden = wire.hidden_producers(sim.coord.node)
    run_history(sim, history)
    dirs, pcap, end = sim.write()
    # a capture point that lost packets or saw one broker only (capture:lossy, capture:one_broker)
    from tests.sim import capture_faults
    capture_faults.apply(pcap, history.get("capture_fault"))
    return sim, dirs, pcap, end


def audit(feed: str, dirs, pcap, now_ms: int, *, spark: bool = False) -> list[dict]:
    """The findings of `kaudit segments` / `pcap` / `audit` (local engine, or Spark) at `now_ms`."""
    from kaudit.sources.pcap import PcapOptions

    if spark:
        from kaudit.engine import spark as engine
        kw = {"spark_options": engine.SparkOptions(master="local[2]")}
    else:
        from kaudit.engine import local as engine
        kw = {}
    if feed == "segments":
        run = engine.audit_segments([str(d) for d in dirs], now_ms=now_ms, **kw)
    elif feed == "pcap":
        run = engine.audit_pcaps([str(pcap)], PcapOptions(), now_ms=now_ms, **kw)
    else:
        from kaudit.engine.joint import audit_both
        run = audit_both([str(pcap)], [str(d) for d in dirs], PcapOptions(), now_ms=now_ms,
                         **({"spark_options": kw["spark_options"]} if spark else {}))
    assert not run.errors, run.errors
    return run.findings
