"""`kaudit pcap`'s findings on the corpus captures, computed once per capture for every test
module that reads them."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions

PORTS = frozenset({9092, 9093, 9094})


@lru_cache(maxsize=None)
def _audit(path: str) -> tuple:
    run = audit_pcaps([path], PcapOptions(kafka_ports=PORTS))
    assert not run.errors, run.errors
    return tuple(run.findings)


def findings(corpus: Path, rel: str) -> list[dict]:
    return list(_audit(str(corpus / rel)))


def pcap(corpus: Path, name: str) -> list[dict]:
    p = corpus / "real-kafka-3.0.2" / "pcap"
    (path,) = [q for q in p.iterdir() if q.name in (f"{name}.pcap", f"{name}.pcapng")]
    return findings(corpus, str(path.relative_to(corpus)))
