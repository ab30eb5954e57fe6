"""Real captures cut short, or started late, as an SRE's often are: the clean 3.0.2 and 4.1.0
scenarios keep nothing at warning or above. A capture that ends while a transaction commits
(its markers on their way, a Produce not yet answered) or starts while one did is normal input:
it once gave critical hanging and torn transactions, a false mixed-epoch error and a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap_session import PcapOptions
from tests.audit.wire.pcap_edit import cut

PORTS = frozenset({9092, 9093, 9094})
CASES = [("real-kafka-4.1.0/v2-txn-java-tv2/v2-txn-java-tv2.pcap", (0.2, 0.4, 0.6)),
         ("real-kafka-4.1.0/v7-compacted-eos-changelog/v7-compacted-eos-changelog.pcap", (0.2, 0.4, -0.6)),
         ("real-kafka-3.0.2/pcap/03-txn-confluent.pcap", (0.6,)),
         ("real-kafka-3.0.2/pcap/03-txn-java.pcap", (0.4,))]


@pytest.mark.parametrize("path,fracs", CASES, ids=[Path(p).stem for p, _ in CASES])
def test_a_clean_capture_cut_anywhere_stays_clean(corpus, tmp_path, path, fracs):
    for frac in fracs:
        out = tmp_path / f"cut{frac}.pcap"
        assert cut(corpus / path, out, frac) > 0
        run = audit_pcaps([str(out)], PcapOptions(kafka_ports=PORTS))
        loud = [(f["rule"], f["severity"], f["topic"], f["partition"], f["message"][:160]) for f in run.findings
                if f["severity"] in ("warning", "error", "critical")]
        assert loud == [], (frac, loud)
