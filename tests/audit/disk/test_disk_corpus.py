"""`kaudit segments` on the real corpus (../shared/corpus; skipped when absent): what the real
Kafka 3.0.2 broker stored is reported exactly by the on-disk producer and integrity rules, and
nothing else at warning or above. (The transaction and index rules have their own tests.)"""

from __future__ import annotations

import json
import re

import pytest
from diskcraft import DISK_RULES, details

from kaudit.audit import at_or_above
from kaudit.engine.local import audit_segments

EXPIRY = "real-kafka-3.0.2-extra/01-idempotent-state-expiry"


def _audit(path):
    run = audit_segments([str(path)], select=DISK_RULES)
    assert run.errors == []
    return run.findings


def _serious(findings):
    return [f for f in findings if at_or_above(f["severity"], "warning")]


def _key(f):
    return (f["rule"], f["topic"], f["partition"], f["replica"], f["first_offset"], f["last_offset"])


def test_idempotent_state_expiry(corpus):
    """The broker lost producer 0's state (transactional.id.expiration.ms) and stored what it
    should have refused (GROUND_TRUTH.json of the scenario)."""
    truth = json.loads((corpus / EXPIRY / "GROUND_TRUTH.json").read_text())
    assert truth["producer_id"] == 0
    fs = _audit(corpus / EXPIRY / "logdirs")
    assert sorted(_key(f) for f in _serious(fs)) == sorted([
        ("duplicate-batch", "dup-expire", 0, "1", 10, 14),
        ("duplicate-batch", "dup-expire", 0, "1", 15, 17),
        ("out-of-order-sequence", "dup-expire", 0, "1", 10, 14),
        ("out-of-order-sequence", "dup-expire", 1, "1", 5, 9),
        ("fenced-epoch", "dup-expire", 2, "1", 6, 7),
    ])
    by = {(f["rule"], f["partition"], f["first_offset"]): f for f in fs}
    ident = by[("duplicate-batch", 0, 10)]
    [anomaly] = [a for a in truth["anomalies"] if a["type"] == "duplicate_records_on_disk_idempotent"]
    assert details(ident)["payload"] == "identical" and anomaly["byte_identical_batch"]
    assert [details(ident)["original_first_offset"], details(ident)["original_last_offset"]] == \
        anomaly["original_offsets"] == [0, 4]
    assert [ident["base_sequence"], ident["last_sequence"]] == anomaly["sequences"]
    assert f"crc {anomaly['crc']}" in ident["timeline"][-1]
    assert [e["note"] for e in ident["evidence"]] == [None, "original"]
    reuse = by[("duplicate-batch", 0, 15)]
    assert details(reuse)["payload"] == "different"
    assert details(reuse)["original_sequences"] == [5, 7]
    assert (details(reuse)["original_first_offset"], details(reuse)["original_last_offset"]) == (5, 7)
    assert [e["note"] for e in reuse["evidence"]] == [None, "original"]
    assert reuse["evidence"][1]["position"] == 176   # the batch of seq 5-9 (DumpLogSegments: position 176)
    regression = by[("out-of-order-sequence", 0, 10)]
    assert (details(regression)["kind"], details(regression)["previous_last_sequence"]) == ("regression", 9)
    gap = by[("out-of-order-sequence", 1, 5)]
    assert (details(gap)["kind"], details(gap)["previous_last_sequence"], gap["base_sequence"]) == ("gap", 4, 50)
    zombie = by[("fenced-epoch", 2, 6)]
    assert (zombie["producer_epoch"], details(zombie)["current_epoch"]) == (0, 1)
    assert all(f["producer_id"] == 0 for f in fs)


def _dump_batches(path):
    """{base offset: (crc, create time, payloads)} from a DumpLogSegments --print-data-log dump."""
    out, cur = {}, None
    for line in path.read_text().splitlines():
        m = re.match(r"baseOffset: (\d+) .* CreateTime: (\d+) .* crc: (\d+)", line)
        if m:
            cur = out[int(m[1])] = (int(m[3]), int(m[2]), [])
        elif line.startswith("| offset:") and cur is not None:
            cur[2].append(line.split("payload: ", 1)[1])
    return out


def test_logdirs_final_non_idempotent_retries(corpus):
    """librdkafka (ck-) and kafka-python (kp-) with idempotence off retried a batch while the
    leader was stopped: stored twice on every replica. The kp- one is not in GROUND_TRUTH.json;
    DumpLogSegments shows it is real: same CRC, create time and payloads at 5-9 and 10-14."""
    base = corpus / "real-kafka-3.0.2"
    truth = json.loads((base / "GROUND_TRUTH.json").read_text())["scenarios"]["02-retry-noidem-confluent"]
    assert truth["anomalies"][0]["offsets"] == [[5, 9], [10, 14]]
    for topic in ("ck-retry-noidem", "kp-retry-noidem"):
        dump = _dump_batches(base / "logdirs-final.truth" / "node1" / "data" / f"{topic}-0.dump.txt")
        assert dump[5] == dump[10] and len(dump[5][2]) == 5, topic
    fs = _audit(base / "logdirs-final")
    assert sorted(_key(f) for f in _serious(fs)) == sorted(
        ("duplicate-records", topic, 0, node, 10, 14)
        for topic in ("ck-retry-noidem", "kp-retry-noidem") for node in ("1", "2", "3"))
    for f in fs:
        assert f["severity"] == "error" and f["producer_id"] == -1   # consumers read them twice
        assert details(f) == {"original_first_offset": 5, "original_last_offset": 9, "batches": 1}


def _wild(corpus):
    root = corpus / "public" / "wild-logdirs"
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.endswith(".truth"))


def test_wild_logdirs_have_no_false_alarm(corpus):
    """Real brokers' data dirs committed to git (Kafka 3.0 ZK, KRaft metadata of a newer broker,
    offset commits): nothing there is an anomaly of these rules."""
    dirs = _wild(corpus)
    assert len(dirs) >= 4
    for d in dirs:
        run = audit_segments([str(d)], select=DISK_RULES)
        assert run.coverage["batches"] > 0, d.name
        assert _serious(run.findings) == [], (d.name, [f["message"] for f in _serious(run.findings)])


@pytest.mark.parametrize("scenario", ["real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes/logdirs"])
def test_transaction_scenarios_give_no_disk_sequence_finding(corpus, scenario):
    """Unregistered partitions and late transactional writes are transaction anomalies, not
    sequence ones: producer 0's sequences and epochs there are in order."""
    run = audit_segments([str(corpus / scenario)], select=DISK_RULES)
    assert run.findings == []
