"""Acceptance: Kafka 4.1.0 captures (../shared/corpus/real-kafka-4.1.0) agree with Kafka's own
Java decode (`*.pcap.requests.jsonl`: RequestHeader / AbstractRequest / AbstractResponse and the
generated JsonConverters of kafka-clients 4.1.0) on every request/response pair (api key, version,
client id, answered or not), every Produce v9-v13 and Fetch v16-v18 batch and partition (topic
names resolved from the capture's own Metadata responses where it names them, topic ids kept),
and the transaction facts of InitProducerId, AddPartitionsToTxn (v0 and the leaders' v5),
EndTxn v1/v5, WriteTxnMarkers, TxnOffsetCommit v5, DescribeProducers, DescribeTransactions and
ListTransactions v2; ConsumerGroupHeartbeat v1 decodes."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from kaudit.sources.pcap import PcapOptions
from kaudit.sources.pcap_stitch import decode_captures

pytestmark = pytest.mark.corpus
SCENARIOS = ("v1-idempotent-clean", "v2-txn-java-tv2", "v3-txn-confluent", "v4-idem-retry-java",
             "v5-fencing-tv2", "v6-codecs", "v7-compacted-eos-changelog")
PORTS = PcapOptions(kafka_ports=frozenset((9092, 9093, 9094)))


def _capture(corpus: Path, scn: str) -> Path:
    d = corpus / "real-kafka-4.1.0" / scn
    return next(p for p in sorted(d.iterdir()) if p.suffix in (".pcap", ".pcapng"))


@pytest.fixture(scope="module", params=SCENARIOS)
def decoded(request, corpus):
    path = _capture(corpus, request.param)
    truth = [json.loads(line) for line in Path(str(path) + ".requests.jsonl").read_text().splitlines()]
    tabs: dict[str, list] = defaultdict(list)
    for kind, t in decode_captures([str(path)], PORTS, {}, []):
        tabs[kind].append(t)
    rows = {k: pa.concat_tables(v).to_pylist() for k, v in tabs.items()}
    return request.param, truth, rows


def _key(conn: str, corr, api_key) -> tuple:
    return conn, corr, api_key


def _conn(t: dict) -> str:
    return f"{t['client']} -> {t['server']}"


def test_every_pair_agrees(decoded):
    scn, truth, rows = decoded
    frames = {_key(f["connection"], f["correlation_id"], f["api_key"]): f for f in rows["frame"]}
    bad = []
    for t in truth:
        f = frames.get(_key(_conn(t), t["correlation_id"], t["api_key"]))
        if f is None:
            bad.append(f"{scn} {t['api']} corr {t['correlation_id']} on {_conn(t)}: missing")
            continue
        got = (f["api_version"], f["client_id"], f["response_frame"] is not None, f["decode_error"])
        want = (t["api_version"], t["client_id"], "response" in t, None)
        if got != want:
            bad.append(f"{scn} {t['api']} corr {t['correlation_id']}: kaudit {got} Kafka {want}")
    assert not bad, bad[:10]
    assert len(truth) == sum(1 for f in rows["frame"] if f["api_key"] is not None and f["request_frame"] is not None)


def _produce_truth(truth):
    for t in truth:
        if t["api"] != "Produce":
            continue
        answers = {(p.get("topic_id") or p.get("topic"), p["partition"]): p for p in t["response"].get("partitions", [])} \
            if "response" in t else {}
        for p in t["request"]["partitions"]:
            a = answers.get((p.get("topic_id") or p.get("topic"), p["partition"]), {})
            for i, b in enumerate(p["batches"]):
                yield t, p, a, i, b


def test_produce_batches_agree(decoded):
    scn, truth, rows = decoded
    ours = defaultdict(list)
    for b in rows.get("batch", []):
        if b["source_kind"] == "produce":
            ours[(b["connection"], b["correlation_id"], b["topic_id"] or b["topic"], b["partition"])].append(b)
    n, bad = 0, []
    for t, p, a, i, want in _produce_truth(truth):
        got = ours[(_conn(t), t["correlation_id"], p.get("topic_id") or p.get("topic"), p["partition"])][i]
        pairs = {"topic": (got["topic"], p.get("topic")), "topic_id": (got["topic_id"], p.get("topic_id")),
                 "producer_id": (got["producer_id"], want["producer_id"]),
                 "producer_epoch": (got["producer_epoch"], want["producer_epoch"]),
                 "base_sequence": (got["base_sequence"], want["base_sequence"]),
                 "last_sequence": (got["last_sequence"], want["last_sequence"]),
                 "record_count": (got["record_count"], want["count"]), "codec": (got["codec"], want["codec"]),
                 "is_transactional": (got["is_transactional"], want["transactional"]),
                 "is_control": (got["is_control"], want["control"]), "crc_ok": (got["crc_ok"], want["crc_valid"]),
                 "max_timestamp_ms": (got["max_timestamp_ms"], want["max_timestamp"]),
                 "batch_size": (got["batch_size"], want["size"]),
                 "response_error": (got["response_error"], a.get("error_code")),
                 "response_base_offset": (got["response_base_offset"] if i == 0 else a.get("base_offset"),
                                          a.get("base_offset"))}
        bad += [f"{scn} corr {t['correlation_id']} {k}: kaudit {g!r} Kafka {w!r}" for k, (g, w) in pairs.items() if g != w]
        n += 1
    assert not bad, bad[:10]
    assert n == sum(1 for b in rows.get("batch", []) if b["source_kind"] == "produce")


def test_fetch_partitions_and_batches_agree(decoded):
    scn, truth, rows = decoded
    parts = defaultdict(list)
    for p in rows.get("fetch_partition", []):
        if p["error_code"] is not None:   # not a partition the request named and the response left out
            parts[(p["connection"], p["correlation_id"])].append(p)
    batches = defaultdict(list)
    for b in rows.get("batch", []):
        if b["source_kind"] == "fetch":
            batches[(b["connection"], b["correlation_id"], b["topic_id"] or b["topic"], b["partition"])].append(b)
    n, bad = 0, []
    for t in truth:
        if t["api"] != "Fetch" or "response" not in t:
            continue
        ours = parts[(_conn(t), t["correlation_id"])]
        want_parts = t["response"]["partitions"]
        asked = {(q.get("topic_id") or q.get("topic"), q["partition"]): q["fetch_offset"]
                 for q in t["request"].get("partitions", [])}
        if len(ours) != len(want_parts):
            bad.append(f"{scn} corr {t['correlation_id']}: {len(ours)} partitions vs {len(want_parts)}")
            continue
        for got, want in zip(ours, want_parts):
            aborted = want["aborted_transactions"]
            pairs = {"topic": (got["topic"], want.get("topic")), "topic_id": (got["topic_id"], want.get("topic_id")),
                     "partition": (got["partition"], want["partition"]), "error_code": (got["error_code"], want["error_code"]),
                     "high_watermark": (got["high_watermark"], want["high_watermark"]),
                     "last_stable_offset": (got["last_stable_offset"], want["last_stable_offset"]),
                     "log_start_offset": (got["log_start_offset"], want["log_start_offset"]),
                     "aborted_transactions": (got["aborted_transactions"], None if aborted is None else ",".join(
                         f"{a['producer_id']}@{a['first_offset']}" for a in aborted)),
                     "isolation_level": (got["isolation_level"],
                                         {0: "read_uncommitted", 1: "read_committed"}[t["request"]["isolation_level"]]),
                     # v15+: a follower's from its tagged ReplicaState, -1 for a consumer (KIP-903)
                     "replica_id": (got["replica_id"], t["request"]["replica_id"])}
            key = (want.get("topic_id") or want.get("topic"), want["partition"])
            if key in asked:   # (a fetch session's partition the request does not name: its position is kaudit's)
                pairs["fetch_offset"] = (got["fetch_offset"], asked[key])
            bad += [f"{scn} corr {t['correlation_id']} {k}: kaudit {g!r} Kafka {w!r}" for k, (g, w) in pairs.items() if g != w]
            ours_b = batches[(_conn(t), t["correlation_id"], want.get("topic_id") or want.get("topic"), want["partition"])]
            if len(ours_b) != len(want["batches"]):
                bad.append(f"{scn} corr {t['correlation_id']}: {len(ours_b)} batches vs {len(want['batches'])}")
                continue
            for gb, wb in zip(ours_b, want["batches"]):
                fields = {"base_offset": "base_offset", "last_offset": "last_offset", "record_count": "count",
                          "producer_id": "producer_id", "producer_epoch": "producer_epoch",
                          "base_sequence": "base_sequence", "codec": "codec", "is_transactional": "transactional",
                          "is_control": "control", "control_type": "control_type",
                          "coordinator_epoch": "coordinator_epoch"}
                bad += [f"{scn} corr {t['correlation_id']} {ours_f}: kaudit {gb[ours_f]!r} Kafka {wb.get(w)!r}"
                        for ours_f, w in fields.items() if gb[ours_f] != wb.get(w)]
                n += 1
    assert not bad, bad[:10]
    assert n == sum(1 for b in rows.get("batch", []) if b["source_kind"] == "fetch")


def _events(rows) -> dict:
    out = defaultdict(list)
    for e in rows.get("txn_event", []):
        out[(e["connection"], e["event"])].append(e)
    return out


def _tps(topics, name="name", parts="partitions") -> str | None:
    items = [f"{x[name]}-{p}" for x in topics or () for p in x[parts]]
    return ",".join(items) if items else None


def test_transaction_requests_agree(decoded):
    """The txn_event rows carry what Kafka's decode shows of every transaction request."""
    scn, truth, rows = decoded
    events = _events(rows)
    frames = {_key(f["connection"], f["correlation_id"], f["api_key"]): f for f in rows["frame"]}
    bad, n = [], 0
    for t in truth:
        req = t["request"].get("data", {})
        resp = t.get("response", {}).get("data", {})
        conn = _conn(t)
        frame = frames[_key(conn, t["correlation_id"], t["api_key"])]
        mine = [e for e in events.get((conn, _EVENT.get(t["api"])), []) if e["position"] == frame["request_frame"]]
        if t["api"] == "InitProducerId":
            (e,) = mine
            want = (req["transactionalId"], req["transactionTimeoutMs"], resp.get("producerId"), resp.get("producerEpoch"))
            got = (e["transactional_id"], e["timeout_ms"], e["producer_id"], e["producer_epoch"])
        elif t["api"] == "AddPartitionsToTxn":
            txns = req.get("transactions") or [{"transactionalId": req.get("v3AndBelowTransactionalId"),
                                                "producerId": req.get("v3AndBelowProducerId"),
                                                "producerEpoch": req.get("v3AndBelowProducerEpoch"),
                                                "verifyOnly": False, "topics": req.get("v3AndBelowTopics")}]
            want = [(x["transactionalId"], x["producerId"], x["producerEpoch"], "VERIFY" if x["verifyOnly"] else None,
                     _tps(x["topics"])) for x in txns]
            got = [(e["transactional_id"], e["producer_id"], e["producer_epoch"], e["result"], e["partitions"]) for e in mine]
        elif t["api"] == "EndTxn":
            (e,) = mine
            want = (req["transactionalId"], req["producerId"], req["producerEpoch"],
                    "COMMIT" if req["committed"] else "ABORT",
                    resp.get("producerId") if t["api_version"] >= 5 else None,
                    resp.get("producerEpoch") if t["api_version"] >= 5 else None)
            got = (e["transactional_id"], e["producer_id"], e["producer_epoch"], e["result"], e["new_producer_id"],
                   e["new_producer_epoch"])
        elif t["api"] == "WriteTxnMarkers":
            want = [(m["producerId"], m["producerEpoch"], "COMMIT" if m["transactionResult"] else "ABORT",
                     m["coordinatorEpoch"], _tps(m["topics"], parts="partitionIndexes")) for m in req["markers"]]
            got = [(e["producer_id"], e["producer_epoch"], e["result"], e["coordinator_epoch"], e["partitions"]) for e in mine]
        elif t["api"] == "TxnOffsetCommit":
            (e,) = mine
            want = (req["transactionalId"], req["groupId"], req["producerId"], req["producerEpoch"],
                    _tps(req["topics"], parts="partitions") and ",".join(
                        f"{x['name']}-{p['partitionIndex']}" for x in req["topics"] for p in x["partitions"]))
            got = (e["transactional_id"], e["group_id"], e["producer_id"], e["producer_epoch"], e["partitions"])
        elif t["api"] in ("DescribeProducers", "DescribeTransactions", "ListTransactions"):
            want, got = _admin(t["api"], resp), _admin_mine(t["api"], frame)
        elif t["api"] == "ConsumerGroupHeartbeat":
            want, got = (t["api_version"], None), (frame["api_version"], frame["decode_error"])
        else:
            continue
        n += 1
        if got != want:
            bad.append(f"{scn} {t['api']} v{t['api_version']} corr {t['correlation_id']}: kaudit {got} Kafka {want}")
    assert not bad, bad[:10]
    assert n or scn in ("v1-idempotent-clean", "v4-idem-retry-java", "v6-codecs")


_EVENT = {"InitProducerId": "INIT_PRODUCER_ID", "AddPartitionsToTxn": "ADD_PARTITIONS", "EndTxn": "END_TXN",
          "WriteTxnMarkers": "WRITE_MARKERS", "TxnOffsetCommit": "TXN_OFFSET_COMMIT"}


def _admin(api: str, resp: dict):
    if api == "DescribeProducers":
        return [[x["name"], p["partitionIndex"], a["producerId"], a["producerEpoch"], a["lastSequence"],
                 a["lastTimestamp"], a["coordinatorEpoch"], a["currentTxnStartOffset"]]
                for x in resp["topics"] for p in x["partitions"] for a in p["activeProducers"]] or None
    if api == "DescribeTransactions":
        return [[s["transactionalId"], s["producerId"], s["producerEpoch"], s["transactionState"],
                 _tps(s["topics"], name="topic")] for s in resp["transactionStates"]] or None
    return [[s["transactionalId"], s["producerId"], None, s["transactionState"], None]
            for s in resp["transactionStates"]] or None


def _admin_mine(api: str, frame: dict):
    col = frame["producers"] if api == "DescribeProducers" else frame["transactions"]
    return None if col is None else json.loads(col)


def test_topic_ids_named_where_the_capture_names_them(decoded):
    """Every Produce v13 / Fetch v13+ batch whose topic a Metadata response of the capture names
    carries the name (Kafka's decode adds it the same way); the others keep their id."""
    scn, truth, rows = decoded
    named = {}
    for t in truth:
        for p in t.get("request", {}).get("partitions", []) + t.get("response", {}).get("partitions", []) \
                if t["api"] in ("Produce", "Fetch") else ():
            if p.get("topic_id"):
                named[p["topic_id"]] = p.get("topic")
    for b in rows.get("batch", []):
        if b["topic_id"] is not None:
            assert b["topic"] == named.get(b["topic_id"]), (scn, b["topic_id"], b["topic"])
