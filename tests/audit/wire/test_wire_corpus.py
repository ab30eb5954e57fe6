"""`kaudit pcap` on the real captures of the shared corpus against their GROUND_TRUTH.json
(real-kafka-3.0.2, real-kafka-3.0.2-extra/01-idempotent-state-expiry), and precision on every
other capture there (librdkafka's mock cluster, public captures). Skipped without the corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kaudit.audit import at_or_above
from tests.audit.wire.corpus_audit import PORTS, findings, pcap  # noqa: F401

pytestmark = pytest.mark.corpus

# the rules of the wire folds (audit/producers/wire_produce.py, audit/wire/wire_frames.py)
WIRE_RULES = {"retried-batch", "duplicate-batch", "duplicate-records", "out-of-order-sequence",
              "fenced-epoch", "unanswered-request", "producer-error", "stream-gap", "undecodable-frame"}


def serious(fs) -> list[dict]:
    return [f for f in fs if at_or_above(f["severity"], "warning")]


def details(f) -> dict:
    return json.loads(f["details"]) if f["details"] else {}


def truth(corpus: Path) -> dict:
    return json.loads((corpus / "real-kafka-3.0.2" / "GROUND_TRUTH.json").read_text())["scenarios"]


def seq_key(f) -> tuple:
    return (f["topic"], f["partition"], f["producer_id"], f["producer_epoch"], f["base_sequence"])


# ---- real-kafka-3.0.2 --------------------------------------------------------------------------


@pytest.mark.parametrize("name,pid", [("02-retry-idem-confluent", 2007), ("02-retry-idem-java", 2008)])
def test_idempotent_retry_deduplicated(name, pid, corpus):
    t = truth(corpus)[name]
    fs = pcap(corpus, name)
    (a,) = t["anomalies"]
    assert a["pid"] == pid and a["benign"]
    retried = [f for f in fs if f["rule"] == "retried-batch"]
    assert [(f["topic"] + f"-{f['partition']}", f["producer_id"], f["base_sequence"], f["last_sequence"],
             f["severity"], details(f)["outcome"]) for f in retried] == [
        (a["partition"], pid, 5, 9, "info", "deduplicated")]
    assert retried[0]["first_offset"] == 5  # the original offset (disk: offsets 0-14, no duplicate)
    assert serious(fs) == []


def test_non_idempotent_retry_stored_twice(corpus):
    (a,) = truth(corpus)["02-retry-noidem-confluent"]["anomalies"]
    fs = pcap(corpus, "02-retry-noidem-confluent")
    assert a["offsets"] == [[5, 9], [10, 14]]
    (dup,) = serious(fs)
    assert (dup["rule"], dup["severity"], f"{dup['topic']}-{dup['partition']}") == (
        "duplicate-records", "error", a["partition"])
    assert (dup["producer_id"], dup["first_offset"], dup["last_offset"]) == (-1, 10, 14)
    assert details(dup)["original_first_offset"] == 5
    (r,) = [f for f in fs if f["rule"] == "retried-batch"]
    assert details(r) == {"outcome": "stored twice", "attempts": 2}
    assert {e["note"].split(" on ")[0] for e in r["evidence"]} == {"corr 3", "corr 6"}


def test_fenced_zombie(corpus):
    (a,) = truth(corpus)["05-fence-java"]["anomalies"]
    fs = pcap(corpus, "05-fence-java")
    produce, end_txn = sorted(serious(fs), key=lambda f: f["topic"] is None)
    assert {f["rule"] for f in (produce, end_txn)} == {"fenced-epoch"}
    assert (produce["severity"], f"{produce['topic']}-{produce['partition']}", produce["producer_id"],
            produce["producer_epoch"], produce["base_sequence"]) == (
        "warning", a["partition"], a["pid"], a["stale_epoch"], 3)
    d = details(produce)
    assert (d["stale_epoch"], d["current_epoch"]) == (a["stale_epoch"], a["current_epoch"])
    assert d["broker"] == "rejected with INVALID_PRODUCER_EPOCH (47)"
    assert (end_txn["severity"], details(end_txn)["api"], end_txn["producer_id"], end_txn["transactional_id"]) == (
        "warning", "EndTxn", 2003, "java-fence")
    assert "PRODUCER_FENCED" in end_txn["message"]


def _ooo(fs):
    return sorted((f["producer_id"], f["producer_epoch"], f["base_sequence"], details(f)["expected_sequence"],
                   details(f)["kind"], f["severity"], details(f)["broker"])
                  for f in fs if f["rule"] == "out-of-order-sequence")


R45 = "rejected with OUT_OF_ORDER_SEQUENCE_NUMBER (45)"


def test_crafted_sequence_anomalies(corpus):
    t = truth(corpus)["11-crafted-sequence-anomalies"]
    fs = pcap(corpus, "11-crafted-sequence-anomalies")
    rejected = [r for r in t["requests"] if r.get("error") == 45]
    assert [(r["pid"], r["base_seq"]) for r in rejected] == [(3002, 10), (3002, 1), (3002, 5), (3003, 2)]
    assert _ooo(fs) == sorted([
        (3002, 0, 10, 6, "gap", "warning", R45),          # C-gap: expected 6
        (3002, 0, 1, 8, "regression", "warning", R45),    # E-old-seq
        (3002, 0, 5, 10, "regression", "warning", R45),   # H-old-pid-gap: expected 10
        (3003, 5, 2, 0, "new-epoch", "warning", R45),     # I-new-pid-epoch-5
    ])
    # B-dup: the exact resend answered with the original offset
    (r,) = [f for f in fs if f["rule"] == "retried-batch"]
    assert (r["producer_id"], r["base_sequence"], r["first_offset"], details(r)["outcome"]) == (3002, 3, 3, "deduplicated")
    # F-new-pid (3003 from 0) and G-old-pid-continues (3002 seq 8) are in order: nothing else
    assert {f["rule"] for f in serious(fs)} == {"out-of-order-sequence"}
    assert len([f for f in fs if f["rule"] == "producer-error"]) == len(rejected)
    # G was sent under 3002 after the InitProducerId that asked with (3002, 0) got 3003 (KIP-360):
    # told at info - a broker never fences an idempotent id, so storing it was right
    (g,) = [f for f in fs if f["rule"] == "write-after-epoch-end"]
    assert (g["producer_id"], g["base_sequence"], g["first_offset"], g["severity"]) == (3002, 8, 10, "info")
    assert details(g)["next_producer_id"] == 3003


def test_crafted_first_run(corpus):
    """11a: pid 3000 throughout (see GROUND_TRUTH.json's note): seq 10, 1, 0 (two records) and 5
    refused with 45; the seq 3 resend deduplicated; seq 8 is a valid continuation."""
    fs = pcap(corpus, "11a-crafted-first-run")
    assert _ooo(fs) == sorted([
        (3000, 0, 10, 6, "gap", "warning", R45),
        (3000, 0, 1, 8, "regression", "warning", R45),
        (3000, 0, 0, 8, "regression", "warning", R45),
        (3000, 0, 5, 10, "regression", "warning", R45),
    ])
    (r,) = [f for f in fs if f["rule"] == "retried-batch"]
    assert (r["producer_id"], r["base_sequence"], r["first_offset"], details(r)["outcome"]) == (3000, 3, 3, "deduplicated")
    assert {f["rule"] for f in serious(fs)} == {"out-of-order-sequence"}
    # the script's bug: it kept writing under 3000 after asking to replace it and getting 3001
    assert [(f["producer_id"], f["severity"], details(f)["next_producer_id"])
            for f in fs if f["rule"] == "write-after-epoch-end"] == [(3000, "info", 3001)]


CLEAN = ["01-idem-confluent", "01-idem-java", "01-idem-kafkapython", "01-idem-aiokafka",
         "03-txn-java", "03-txn-confluent", "03-txn-kafkapython", "03-txn-aiokafka",
         "04-ctp-java", "04-ctp-confluent", "07-acks0-confluent", "07-acks0-kafkapython",
         "08-compression-confluent", "08-compression-kafkapython", "08-compression-aiokafka",
         "09-readcommitted-mixed"]


@pytest.mark.parametrize("name", CLEAN)
def test_no_warning_where_the_truth_lists_no_anomaly(name, corpus):
    t = truth(corpus)
    key = "08-compression-*" if name.startswith("08-") else name
    assert t[key]["anomalies"] == []
    assert serious(pcap(corpus, name)) == []


def test_dangling_scenario_gives_no_wire_warning(corpus):
    """06's anomaly is a transaction left open (the transaction rules' business); nothing of the
    wire rules reaches warning (replica fetches cut by the shutdown are info)."""
    fs = [f for f in pcap(corpus, "06-dangling-open-txn-then-restart") if f["rule"] in WIRE_RULES]
    assert serious(fs) == []
    assert {f["severity"] for f in fs if f["rule"] == "unanswered-request"} == {"info"}


@pytest.mark.parametrize("name", ["07-acks0-confluent", "07-acks0-kafkapython"])
def test_acks0_requests_are_never_unanswered(name, corpus):
    from tests.sources.pcap.craft import decode_rows

    path = corpus / "real-kafka-3.0.2" / "pcap" / f"{name}.pcap"
    frames = decode_rows(path, kafka_ports=PORTS)["frame"]
    acks0 = [f for f in frames if f["api_name"] == "Produce" and f["acks"] == 0]
    assert len(acks0) >= 3 and all(f["response_frame"] is None for f in acks0)
    assert [f for f in pcap(corpus, name) if f["rule"] == "unanswered-request"] == []


# ---- real-kafka-3.0.2-extra/01-idempotent-state-expiry -----------------------------------------

EXTRA = "real-kafka-3.0.2-extra/01-idempotent-state-expiry"


def test_idempotent_state_expiry_from_the_wire(corpus):
    t = json.loads((corpus / EXTRA / "GROUND_TRUTH.json").read_text())
    a = {x["type"]: x for x in t["anomalies"]}
    fs = findings(corpus, f"{EXTRA}/01-idempotent-state-expiry.pcap")
    got = {(f["rule"], f["severity"], f["partition"], f["first_offset"], f["base_sequence"]): f for f in serious(fs)}

    dup = a["duplicate_records_on_disk_idempotent"]  # 0-4 acknowledged at 0, then at 10
    f = got.pop(("duplicate-batch", "error", 0, dup["duplicate_offsets"][0], dup["sequences"][0]))
    d = details(f)
    assert (d["payload"], d["original_first_offset"], d["original_last_offset"]) == ("identical", *dup["original_offsets"])
    assert f["last_offset"] == dup["duplicate_offsets"][1]

    reg = a["sequence_regression_on_disk"]  # the same batch, as a sequence: 9 -> 0, accepted
    f = got.pop(("out-of-order-sequence", "error", 0, reg["at_offset"], reg["new_base_sequence"]))
    assert (details(f)["kind"], details(f)["previous_last_sequence"]) == ("regression", reg["previous_last_sequence"])

    reuse = a["sequence_reuse_different_payload"]  # 5-7 re-used with a new payload at 15-17
    f = got.pop(("duplicate-batch", "error", 0, reuse["reuse_offsets"][0], reuse["sequences"][0]))
    assert (details(f)["payload"], details(f)["original_first_offset"]) == ("different", reuse["first_use_offsets"][0])
    assert (f["last_sequence"], f["last_offset"]) == (reuse["sequences"][1], reuse["reuse_offsets"][1])

    gap = a["sequence_gap_on_disk"]  # 4 -> 50 on dup-expire-1, accepted at 5
    f = got.pop(("out-of-order-sequence", "error", 1, gap["at_offset"], gap["new_base_sequence"]))
    assert (details(f)["kind"], details(f)["previous_last_sequence"]) == ("gap", gap["previous_last_sequence"])

    ep = a["epoch_regression_on_disk"]  # epoch 0 after epoch 1 on dup-expire-2, accepted at 6-7
    f = got.pop(("fenced-epoch", "error", 2, ep["at_offsets"][0], ep["sequences"][0]))
    assert (f["producer_epoch"], details(f)["current_epoch"], f["last_offset"]) == (ep["epoch"], ep["after_epoch"], ep["at_offsets"][1])

    # the three requests the broker refused with 45: B resend, seq 70, epoch 1 seq 3
    refused = sorted((k[2], f["producer_epoch"], k[4], details(f)["broker"]) for k, f in got.items())
    wire = [w for w in t["wire_only_not_anomalies_on_disk"] if w["type"] == "rejected_out_of_order"]
    assert refused == sorted((int(w["partition"].rsplit("-", 1)[1]), w.get("producer_epoch", 0),
                              w["base_sequence"], R45) for w in wire)
    assert all(k[:2] == ("out-of-order-sequence", "warning") for k in got)

    # the immediate resend of 0-4: a benign retry answered with offset 0; the resend after the
    # expiry: the same batch stored twice; the B resend: refused
    retried = sorted((f["base_sequence"], details(f)["attempts"], details(f)["outcome"], f["first_offset"],
                      f["severity"]) for f in fs if f["rule"] == "retried-batch")
    assert retried == [(0, 2, "deduplicated", 0, "info"), (0, 3, "stored twice", 10, "info"),
                       (5, 2, "rejected", None, "info")]


# ---- librdkafka's mock cluster and public captures ---------------------------------------------


def _others(corpus: Path) -> list[str]:
    if not corpus.is_dir():
        return []
    out = []
    for sub in ("librdkafka-mock", "public"):
        for p in sorted((corpus / sub).rglob("*")):
            if p.suffix in (".pcap", ".pcapng"):
                out.append(str(p.relative_to(corpus)))
    return out


MOCK = "librdkafka-mock/pcap/mock-idem-txn-readcommitted.pcap"


def test_mock_and_public_captures_have_no_warning(corpus):
    """Nothing at warning or above, except what the corpus README records of the mock: its
    read_committed Fetch responses returned the aborted transaction's records with an empty
    aborted_transactions list (the mock does not filter), an aborted read on each partition."""
    names = _others(corpus)
    assert len(names) >= 14  # mock, nDPI, go-sniffer, deepflow's eleven
    for rel in names:
        serious_ = serious(findings(corpus, rel))
        if rel == MOCK:
            assert sorted((f["rule"], f["topic"], f["partition"], f["first_offset"], f["last_offset"])
                          for f in serious_) == [("aborted-read", "mock-txn", 0, 3, 4),
                                                 ("aborted-read", "mock-txn", 1, 2, 2)]
            continue
        assert serious_ == [], rel


def test_ndpi_sample_lone_requests_are_not_unanswered(corpus):
    """nDPI's capture is a sample: three connections hold a single request packet each (no
    handshake, no answer, nothing after it) while the capture goes on for hours. That is no
    evidence of a broker that did not answer: no unanswered-request (it was a false warning)."""
    fs = findings(corpus, "public/nDPI/kafka.pcapng")
    assert [f for f in fs if f["rule"] == "unanswered-request"] == []
    # what it does report: responses whose requests the sample left out, and the 44 client bytes
    # the broker acknowledged (frame 5) that the sample does not hold
    assert {(f["rule"], f["severity"]) for f in fs} == {("undecodable-frame", "info"), ("stream-gap", "info")}
    (gap,) = [f for f in fs if f["rule"] == "stream-gap"]
    assert "44 bytes missing" in gap["message"] and "acknowledged, not captured" in gap["message"]


def test_mock_fetch_abandoned_at_close_is_info(corpus):
    fs = [f for f in findings(corpus, MOCK) if f["rule"] != "aborted-read"]
    (f,) = fs
    assert (f["rule"], f["severity"], details(f)["api"]) == ("unanswered-request", "info", "Fetch")
