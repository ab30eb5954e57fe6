"""The real corpus's consumers raise no consumer finding at warning or above (issue 31's
acceptance): read_committed and read_uncommitted readers, consume-transform-produce groups (their
re-reads after an aborted transaction are exactly-once, not redelivery), kafka-go's rebalancing
group, KIP-848-era clients."""

from __future__ import annotations

import pytest

from kaudit.audit.registry import fold_rules
from kaudit.engine.local import audit_pcaps
from kaudit.sources.pcap import PcapOptions

CAPTURES = ("real-kafka-3.0.2/pcap/09-readcommitted-mixed.pcap", "real-kafka-3.0.2/pcap/04-ctp-java.pcap",
            "real-kafka-3.0.2/pcap/04-ctp-confluent.pcap",
            "real-kafka-4.1.0/v7-compacted-eos-changelog/v7-compacted-eos-changelog.pcap",
            "public/kafka-go/v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc.pcapng")


@pytest.mark.parametrize("capture", CAPTURES)
def test_no_consumer_alarm_on_the_corpus(corpus, capture):
    run = audit_pcaps([str(corpus / capture)], PcapOptions(), select=[r.id for r in fold_rules("consumers")])
    assert not run.errors
    assert [f["message"] for f in run.findings if f["severity"] != "info"] == []
