"""The sequence rules on the wire (audit/producers/wire_produce.py) on crafted captures: retried-batch with
each outcome, duplicate-records of a non-idempotent retry, out-of-order-sequence and fenced-epoch
with what the broker answered, and the benign cases that must give nothing."""

from __future__ import annotations

import pytest

from tests.audit.wire.wirecraft import (
    TOPIC,
    audit,
    batch,
    by_rule,
    details,
    end_txn,
    init_producer_id,
    produce,
    produce_response,
    rules_of,
    send,
)
from tests.sources.pcap.craft import Conn

PID = 4001
INT32_MAX = 2**31 - 1
# Kafka error codes
NOT_LEADER, NOT_ENOUGH_REPLICAS = 6, 19
OUT_OF_ORDER, DUPLICATE_SEQ, INVALID_EPOCH, PRODUCER_FENCED = 45, 46, 47, 90


def first_two(pid=PID, epoch=0):
    """Sequences 0-4 at offsets 0-4 and 5-9 at 5-9."""
    return send(1, batch(pid, epoch, 0, 5), offset=0) + send(2, batch(pid, epoch, 5, 5), offset=5)


def one(findings, rule):
    (f,) = by_rule(findings, rule)
    return f


def retry_conns(first_attempt, second_attempt, *, second_fin=True):
    """The first attempt of sequences 5-9 on one connection (after 0-4), the retry on a second
    connection from another client port (as clients reconnect to retry)."""
    a = send(1, batch(PID, 0, 0, 5), offset=0) + first_attempt
    return [Conn(a), Conn(second_attempt, client=("10.0.0.1", 40002), fin=second_fin)]


# ---- retried-batch -----------------------------------------------------------------------------


def test_retry_deduplicated_to_the_original_offset(tmp_path):
    m = first_two() + send(3, batch(PID, 0, 5, 5), offset=5)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("retried-batch", "info")]
    f = fs[0]
    assert details(f) == {"outcome": "deduplicated", "attempts": 2}
    assert (f["topic"], f["partition"], f["producer_id"], f["producer_epoch"]) == (TOPIC, 0, PID, 0)
    assert (f["base_sequence"], f["last_sequence"], f["first_offset"], f["last_offset"]) == (5, 9, 5, 9)
    assert [e["kind"] for e in f["evidence"]] == ["produce", "produce"]
    assert "corr 2" in f["evidence"][0]["note"] and "corr 3" in f["evidence"][1]["note"]
    assert len(f["timeline"]) == 3 and "accepted at offset 5" in f["timeline"][-1]


def test_retry_answered_duplicate_sequence_number(tmp_path):
    m = first_two() + send(3, batch(PID, 0, 5, 5), error=DUPLICATE_SEQ)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("producer-error", "info"), ("retried-batch", "info")]
    assert details(one(fs, "retried-batch"))["outcome"] == "deduplicated"
    assert "DUPLICATE_SEQUENCE_NUMBER" in one(fs, "producer-error")["message"]


def test_retry_stored_twice_is_also_a_duplicate_batch(tmp_path):
    """The broker lost the producer's state and appended the resend of 0-4 at offset 10."""
    m = first_two() + send(3, batch(PID, 0, 0, 5), offset=10)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("duplicate-batch", "error"), ("out-of-order-sequence", "error"),
                            ("retried-batch", "info")]
    assert details(one(fs, "retried-batch"))["outcome"] == "stored twice"
    dup = one(fs, "duplicate-batch")
    d = details(dup)
    assert (d["payload"], d["original_first_offset"], d["original_last_offset"]) == ("identical", 0, 4)
    assert (dup["first_offset"], dup["last_offset"], dup["base_sequence"]) == (10, 14, 0)
    ooo = one(fs, "out-of-order-sequence")
    assert details(ooo)["kind"] == "regression" and details(ooo)["expected_sequence"] == 10
    assert "accepted at offset 10" in ooo["message"]


def test_retry_rejected(tmp_path):
    conns = retry_conns(send(2, batch(PID, 0, 5, 5), error=NOT_LEADER),
                        send(7, batch(PID, 0, 5, 5), error=NOT_LEADER))
    fs = audit(tmp_path, conns)
    assert rules_of(fs) == [("producer-error", "info")] * 2 + [("retried-batch", "info")]
    f = one(fs, "retried-batch")
    assert details(f) == {"outcome": "rejected", "attempts": 2}
    assert f["connection"] == "10.0.0.1:40002 -> 10.0.0.2:9092"  # the latest attempt's
    assert f["first_offset"] is None


def test_retry_unknown_when_nothing_answered(tmp_path):
    """The first attempt's connection closed before a response (unanswered-request), the retry
    is still in flight when the capture ends (nothing: it may yet be answered)."""
    conns = retry_conns(send(2, batch(PID, 0, 5, 5), error=None),
                        send(7, batch(PID, 0, 5, 5), error=None), second_fin=False)
    fs = audit(tmp_path, conns)
    assert rules_of(fs) == [("retried-batch", "info"), ("unanswered-request", "warning")]
    assert details(one(fs, "retried-batch"))["outcome"] == "unknown"
    un = one(fs, "unanswered-request")
    assert un["connection"] == "10.0.0.1:40001 -> 10.0.0.2:9092" and "corr 2" in un["message"]
    assert "cannot know whether it was stored" in un["message"]


def test_retry_after_an_unanswered_attempt_is_deduplicated_for_an_idempotent_producer(tmp_path):
    """02-retry-idem: the leader stalled, the client gave up on the connection and resent on a
    new one; an idempotent producer's batch is stored once either way."""
    conns = retry_conns(send(2, batch(PID, 0, 5, 5), error=None),
                        send(7, batch(PID, 0, 5, 5), offset=5))
    fs = audit(tmp_path, conns)
    assert details(one(fs, "retried-batch"))["outcome"] == "deduplicated"
    assert one(fs, "retried-batch")["severity"] == "info"
    assert not by_rule(fs, "duplicate-batch") and not by_rule(fs, "out-of-order-sequence")


def test_in_flight_batches_refused_in_the_wake_of_a_retriable_error(tmp_path):
    """5-9 refused NOT_ENOUGH_REPLICAS, 10-14 (in flight behind it) refused 45: the client
    retries both in order. The 45 is the broker's consequence, not a sequence anomaly."""
    m = send(1, batch(PID, 0, 0, 5), offset=0)
    m += [(0, produce(2, [(TOPIC, 0, batch(PID, 0, 5, 5))])),
          (0, produce(3, [(TOPIC, 0, batch(PID, 0, 10, 5))])),
          (1, produce_response(2, [(TOPIC, 0, NOT_ENOUGH_REPLICAS, -1)])),
          (1, produce_response(3, [(TOPIC, 0, OUT_OF_ORDER, -1)]))]
    m += send(4, batch(PID, 0, 5, 5), offset=5) + send(5, batch(PID, 0, 10, 5), offset=10)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("producer-error", "info")] * 2 + [("retried-batch", "info")] * 2
    assert [details(f)["outcome"] for f in by_rule(fs, "retried-batch")] == ["stored once"] * 2


def test_in_flight_batches_refused_by_a_deposed_leader(tmp_path):
    """5-9 and 10-14 wait for the ISR when the leader is deposed: both complete
    NOT_LEADER_OR_FOLLOWER (Partition.checkEnoughReplicasReachOffset without a local leader); the
    client retries them in order at the new leader (another connection). 10-14 refused after a
    refused 5-9 is no sequence jump."""
    fs = _refused_then_retried(tmp_path, epoch=0, first=5)
    assert not by_rule(fs, "out-of-order-sequence")


def test_a_refused_batch_that_skips_sequences_never_sent_is_a_jump(tmp_path):
    """The twin: 10-14 refused NOT_LEADER_OR_FOLLOWER, but 5-9 were never sent (nor refused)."""
    f = _refused_alone(tmp_path, epoch=0, first=10)
    assert (f["severity"], details(f)["kind"], details(f)["expected_sequence"]) == ("warning", "gap", 5)


def test_a_new_epochs_in_flight_batches_refused_by_a_deposed_leader(tmp_path):
    """The same at a new epoch (a version-2 transactional producer's next transaction: every
    EndTxn bumps its epoch): 0-4 and 5-9 of epoch 1 wait for the ISR and are refused
    NOT_LEADER_OR_FOLLOWER; 5-9 refused after a refused 0-4 does not start epoch 1 out of order
    (a false warning before: the simulator's elect:txn_tail, regressions/elect-txn_tail-tv2-deposed.json)."""
    fs = _refused_then_retried(tmp_path, epoch=1, first=0)
    assert not by_rule(fs, "out-of-order-sequence")


def _refused_then_retried(tmp_path, epoch: int, first: int) -> list[dict]:
    """Epoch 0's 0-4 stored at offset 0; then two batches of `epoch` (sequences `first`.. and
    `first` + 5..) in flight together, both refused NOT_LEADER_OR_FOLLOWER, retried in order on
    another connection (stored at 5 and 10): the findings."""
    m = send(1, batch(PID, 0, 0, 5), offset=0)
    m += [(0, produce(2, [(TOPIC, 0, batch(PID, epoch, first, 5))])),
          (0, produce(3, [(TOPIC, 0, batch(PID, epoch, first + 5, 5))])),
          (1, produce_response(2, [(TOPIC, 0, NOT_LEADER, -1)])),
          (1, produce_response(3, [(TOPIC, 0, NOT_LEADER, -1)]))]
    retry = send(1, batch(PID, epoch, first, 5), offset=5) + send(2, batch(PID, epoch, first + 5, 5), offset=10)
    return audit(tmp_path, [Conn(m), Conn(retry, client=("10.0.0.1", 40002))])


def test_a_refused_batch_starting_a_new_epoch_past_0_is_out_of_order(tmp_path):
    """The twin: epoch 1's 5-9 refused NOT_LEADER_OR_FOLLOWER, but its 0-4 were never sent."""
    f = _refused_alone(tmp_path, epoch=1, first=5)
    assert (f["severity"], details(f)["kind"], details(f)["expected_sequence"]) == ("warning", "new-epoch", 0)


def _refused_alone(tmp_path, epoch: int, first: int) -> dict:
    """Epoch 0's 0-4 stored at offset 0; then one batch of `epoch` from sequence `first` refused
    NOT_LEADER_OR_FOLLOWER, nothing before it in flight: the out-of-order-sequence finding."""
    m = send(1, batch(PID, 0, 0, 5), offset=0)
    m += [(0, produce(3, [(TOPIC, 0, batch(PID, epoch, first, 5))])),
          (1, produce_response(3, [(TOPIC, 0, NOT_LEADER, -1)]))]
    return one(audit(tmp_path, Conn(m)), "out-of-order-sequence")


def test_retry_accepted_out_of_order_after_a_rejection_is_an_error(tmp_path):
    """10-14 refused 45 (gap after 0-4), then the same batch accepted: the broker lost its state."""
    m = (send(1, batch(PID, 0, 0, 5), offset=0) + send(2, batch(PID, 0, 10, 5), error=OUT_OF_ORDER)
         + send(3, batch(PID, 0, 10, 5), offset=5))
    fs = audit(tmp_path, Conn(m))
    ooo = by_rule(fs, "out-of-order-sequence")
    assert [(f["severity"], details(f)["kind"]) for f in ooo] == [("error", "gap"), ("warning", "gap")]
    assert details(one(fs, "retried-batch"))["outcome"] == "stored once"


# ---- duplicate-records (producer id -1) --------------------------------------------------------


def test_non_idempotent_retry_acknowledged_twice(tmp_path):
    m = send(1, batch(-1, -1, -1, 5), offset=5) + send(2, batch(-1, -1, -1, 5), offset=10)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("duplicate-records", "error"), ("retried-batch", "info")]
    d = one(fs, "duplicate-records")
    assert (d["producer_id"], d["first_offset"], d["last_offset"]) == (-1, 10, 14)
    assert details(d) == {"original_first_offset": 5}
    assert d["producer_epoch"] is None and d["base_sequence"] is None
    assert details(one(fs, "retried-batch"))["outcome"] == "stored twice"


def test_non_idempotent_retry_after_an_unanswered_attempt_is_unknown(tmp_path):
    conns = [Conn(send(1, batch(-1, -1, -1, 5), error=None)),
             Conn(send(1, batch(-1, -1, -1, 5), offset=5), client=("10.0.0.1", 40002))]
    fs = audit(tmp_path, conns)
    r = one(fs, "retried-batch")
    assert (r["severity"], details(r)["outcome"]) == ("warning", "unknown")
    assert "may have been stored too" in r["message"]
    assert not by_rule(fs, "duplicate-records")


def test_non_idempotent_retry_after_a_refusal_is_stored_once(tmp_path):
    m = send(1, batch(-1, -1, -1, 5), error=NOT_LEADER) + send(2, batch(-1, -1, -1, 5), offset=5)
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("producer-error", "info"), ("retried-batch", "info")]
    assert details(one(fs, "retried-batch"))["outcome"] == "stored once"


@pytest.mark.parametrize("case", ["other-payload", "acks0"])
def test_non_idempotent_negatives(case, tmp_path):
    if case == "other-payload":  # same shape, other records: not a retry
        m = send(1, batch(-1, -1, -1, 5), offset=5) + send(2, batch(-1, -1, -1, 5, tag="x"), offset=10)
    else:  # acks=0: no response, no tracking (07-acks0)
        m = send(1, batch(-1, -1, -1, 5), acks=0, error=None) + send(2, batch(-1, -1, -1, 5), acks=0, error=None)
    assert audit(tmp_path, Conn(m)) == []


# ---- out-of-order-sequence ---------------------------------------------------------------------


@pytest.mark.parametrize("error,severity", [(OUT_OF_ORDER, "warning"), (0, "error")])
@pytest.mark.parametrize("kind,seq,epoch,expected", [
    ("gap", 12, 0, 10),
    ("regression", 3, 0, 10),
    ("new-epoch", 4, 1, 0),
])
def test_out_of_order_sequence(kind, seq, epoch, expected, error, severity, tmp_path):
    m = first_two() + send(3, batch(PID, epoch, seq, 2, tag="new"), error=error, offset=10)
    fs = audit(tmp_path, Conn(m))
    f = one(fs, "out-of-order-sequence")
    assert f["severity"] == severity
    d = details(f)
    assert (d["kind"], d["expected_sequence"], d["previous_last_sequence"]) == (kind, expected, 9)
    assert (f["producer_epoch"], f["base_sequence"], f["last_sequence"]) == (epoch, seq, seq + 1)
    if error:
        assert "rejected with OUT_OF_ORDER_SEQUENCE_NUMBER (45)" in f["message"]
        assert rules_of(fs) == [("out-of-order-sequence", "warning"), ("producer-error", "info")]
        assert f["first_offset"] is None
    else:
        assert "accepted at offset 10" in f["message"] and f["first_offset"] == 10
        # a regression re-used sequences 3-4 already stored at offsets 3-4
        assert [x["rule"] for x in fs if x["rule"] != "out-of-order-sequence"] == \
            (["duplicate-batch"] if kind == "regression" else [])


def test_rejected_45_the_capture_cannot_explain(tmp_path):
    """In sequence as far as the capture shows, yet refused: the broker's state differs."""
    m = first_two() + send(3, batch(PID, 0, 10, 2), error=OUT_OF_ORDER)
    f = one(audit(tmp_path, Conn(m)), "out-of-order-sequence")
    assert (f["severity"], details(f)["kind"]) == ("warning", "broker")
    assert "the broker's state differs" in f["message"]


# ---- fenced-epoch ------------------------------------------------------------------------------


def _zombie(error):
    """Epoch 1 (after a bump) writes 0-4; the old epoch 0 instance then sends seq 10."""
    return (send(1, batch(PID, 0, 0, 5), offset=0) + send(2, batch(PID, 1, 0, 5), offset=5)
            + send(3, batch(PID, 0, 5, 2), error=error, offset=10))


@pytest.mark.parametrize("error,severity", [(INVALID_EPOCH, "warning"), (PRODUCER_FENCED, "warning"),
                                            (0, "error"), (None, "warning")])
def test_fenced_epoch_produce(error, severity, tmp_path):
    conn = Conn(_zombie(error), fin=error is not None)
    fs = audit(tmp_path, conn)
    f = one(fs, "fenced-epoch")
    assert f["severity"] == severity
    d = details(f)
    assert (d["stale_epoch"], d["current_epoch"]) == (0, 1)
    assert (f["producer_id"], f["producer_epoch"], f["base_sequence"]) == (PID, 0, 5)
    assert "after epoch 1 was used" in f["message"]
    assert not by_rule(fs, "out-of-order-sequence")
    if error == 0:
        assert "accepted at offset 10" in f["message"]
    elif error is not None:
        assert f"({error})" in f["message"]
        assert len(by_rule(fs, "producer-error")) == 1


def test_produce_rejected_as_fenced_without_a_newer_epoch_in_the_capture(tmp_path):
    m = send(1, batch(PID, 3, 0, 2), error=INVALID_EPOCH)
    f = one(audit(tmp_path, Conn(m)), "fenced-epoch")
    assert f["severity"] == "warning" and "which the broker knows to be fenced" in f["message"]


def test_end_txn_answered_producer_fenced(tmp_path):
    m = (init_producer_id(1, PID, 2) + end_txn(2, PID, 1, error=PRODUCER_FENCED))
    fs = audit(tmp_path, Conn(m))
    assert rules_of(fs) == [("fenced-epoch", "warning"), ("producer-error", "info")]
    f = one(fs, "fenced-epoch")
    assert (f["producer_id"], f["producer_epoch"], f["transactional_id"]) == (PID, 1, "tx-wire")
    assert "EndTxn" in f["message"] and "PRODUCER_FENCED" in f["message"]
    assert [e["kind"] for e in f["evidence"]] == ["request", "response"]


# ---- benign: nothing at all --------------------------------------------------------------------


def test_five_in_flight_in_order(tmp_path):
    reqs = [(0, produce(c, [(TOPIC, 0, batch(PID, 0, 5 * c, 5))])) for c in range(5)]
    resps = [(1, produce_response(c, [(TOPIC, 0, 0, 5 * c)])) for c in range(5)]
    assert audit(tmp_path, Conn(reqs + resps)) == []


def test_kip360_epoch_bump_restarts_at_zero(tmp_path):
    m = (init_producer_id(1, PID, 0, txn_id=None) + first_two()
         + init_producer_id(3, PID, 1, txn_id=None)
         + send(4, batch(PID, 1, 0, 5), offset=10) + send(5, batch(PID, 1, 5, 5), offset=15))
    assert audit(tmp_path, Conn(m)) == []


def test_new_producer_id_after_init(tmp_path):
    m = (first_two() + init_producer_id(3, PID + 1, 0, txn_id=None)
         + send(4, batch(PID + 1, 0, 0, 5), offset=10) + send(5, batch(PID + 1, 0, 5, 5), offset=15))
    assert audit(tmp_path, Conn(m)) == []


def test_first_batch_of_a_producer_mid_sequence(tmp_path):
    """The capture started after the producer's first batches: no state, no verdict."""
    m = send(1, batch(PID, 0, 57, 5), offset=100) + send(2, batch(PID, 0, 62, 5), offset=105)
    assert audit(tmp_path, Conn(m)) == []


def test_sequence_wraps_at_int_max(tmp_path):
    m = (send(1, batch(PID, 0, INT32_MAX - 4, 5), offset=0) + send(2, batch(PID, 0, 0, 5), offset=5)
         # a batch spanning the wrap: last sequence 0, the next starts at 1
         + send(3, batch(PID + 1, 0, INT32_MAX - 1, 3), offset=10)
         + send(4, batch(PID + 1, 0, 1, 3), offset=13))
    assert audit(tmp_path, Conn(m)) == []


def test_transactional_producer_clean_timeline(tmp_path):
    m = (init_producer_id(1, PID, 0) + send(2, batch(PID, 0, 0, 3, transactional=True), offset=0,
                                            txn_id="tx-wire")
         + end_txn(3, PID, 0) + send(4, batch(PID, 0, 3, 3, transactional=True), offset=4, txn_id="tx-wire")
         + end_txn(5, PID, 0, committed=False))
    assert audit(tmp_path, Conn(m)) == []


# ---- ids -----------------------------------------------------------------------------------------


def test_finding_ids_are_stable_across_runs(tmp_path):
    from kaudit.engine.local import audit_pcaps
    from kaudit.sources.pcap import PcapOptions

    m = first_two() + send(3, batch(PID, 0, 0, 5), offset=10) + send(4, batch(PID, 0, 20, 1), error=45)
    fs = audit(tmp_path, Conn(m))
    again = audit_pcaps([str(tmp_path / "wire.pcap")], PcapOptions()).findings
    assert len(fs) == 5 and [f["id"] for f in fs] == [f["id"] for f in again]
    assert len({f["id"] for f in fs}) == len(fs)


def test_values_without_timestamp_sent_again_after_an_answer_are_no_retry(tmp_path):
    """Issue 27: a batch without a timestamp acknowledged, then the same bytes sent again - the
    application's repetition (no failed send to retry); the twin with a lost answer stays a retry."""
    from fixtures import kafka_encoder as ke

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old = ke.encode_record_batch_v2(0, [{"key": None, "value": b"hello", "timestamp_delta": 0}] * 3,
                                    producer_id=-1, producer_epoch=-1, base_sequence=-1, base_timestamp=-1)
    m = send(1, old, offset=5) + send(2, old, offset=8)
    assert audit(tmp_path / "a", Conn(m)) == []
    conns = [Conn(send(1, old, error=None)), Conn(send(1, old, offset=5), client=("10.0.0.1", 40002))]
    r = one(audit(tmp_path / "b", conns), "retried-batch")
    assert details(r)["outcome"] == "unknown"


def _metadata_v2(corr: int, cluster: str | None):
    """Metadata v2 (cluster_id) of TOPIC."""
    from tests.audit.wire.wirecraft import array, boolean, frame, i16, i32, request_header, response_header, string

    req = request_header(3, 2, corr, "wire-producer", False) + array(1) + string(TOPIC)
    resp = (response_header(corr, False)
            + array(1) + i32(1) + string("broker-1") + i32(9092) + string(None)
            + string(cluster) + i32(1)
            + array(1) + i16(0) + string(TOPIC) + boolean(False)
            + array(1) + i16(0) + i32(0) + i32(1) + array(1) + i32(1) + array(1) + i32(1))
    return [(0, frame(req)), (1, frame(resp))]


def test_incident_ids_carry_the_capture_cluster_id(tmp_path):
    """Issue 27: the same exchanges under two clusters' Metadata answers give other incident ids;
    the same capture keeps its ids."""
    runs = {}
    d = tmp_path / "cap"   # one path for the three captures: only the cluster id differs
    d.mkdir()
    for name in ("Q2x1c3Rlci1BLUFBQUFBQQ", "Q2x1c3Rlci1CLUJCQkJCQg", None):
        m = _metadata_v2(7, name) + send(1, batch(-1, -1, -1, 5), offset=5) + send(2, batch(-1, -1, -1, 5), offset=10)
        fs = audit(d, Conn(m))
        assert {f["rule"] for f in fs} >= {"duplicate-records"}
        runs[name] = {f["id"]: f["incident"] for f in fs}
        assert runs[name] == {f["id"]: f["incident"] for f in audit(d, Conn(m))}
    a, b, none = runs.values()
    assert a.keys() == b.keys() == none.keys()
    assert not set(a.values()) & set(b.values()) and not set(a.values()) & set(none.values())


def _records(pid, epoch, seq, values, ts=1_700_000_000_000):
    from fixtures import kafka_encoder as ke

    return ke.encode_record_batch_v2(0, [{"key": b"k", "value": v, "timestamp_delta": i} for i, v in enumerate(values)],
                                     producer_id=pid, producer_epoch=epoch, base_sequence=seq, base_timestamp=ts)


def test_records_resent_by_a_new_producer_after_an_unanswered_send(tmp_path):
    """Issue 27: producer 4001's send gets no answer; producer 4002 (a restarted application)
    sends the same records, acknowledged: a warning that they may be stored twice. Twins: other
    records; the same producer's retry (the sequence rules' case)."""
    vals = [b"order-1", b"order-2"]
    conns = [Conn(send(1, _records(PID, 0, 0, vals), error=None)),
             Conn(send(1, _records(PID + 1, 0, 0, vals, ts=1_700_000_030_000), offset=7), client=("10.0.0.1", 40002))]
    (tmp_path / "a").mkdir()
    f = one(audit(tmp_path / "a", conns), "duplicate-records")
    assert (f["severity"], f["producer_id"], f["first_offset"], f["last_offset"]) == ("warning", PID + 1, 7, 8)
    assert details(f)["original_producer_id"] == PID and "got no answer" in f["message"]
    other = [Conn(send(1, _records(PID, 0, 0, vals), error=None)),
             Conn(send(1, _records(PID + 1, 0, 0, [b"order-1", b"order-3"]), offset=7), client=("10.0.0.1", 40002))]
    (tmp_path / "b").mkdir()
    assert not by_rule(audit(tmp_path / "b", other), "duplicate-records")
    same = [Conn(send(1, _records(PID, 0, 0, vals), error=None)),
            Conn(send(1, _records(PID, 0, 0, vals), offset=7), client=("10.0.0.1", 40002))]
    (tmp_path / "c").mkdir()
    assert not by_rule(audit(tmp_path / "c", same), "duplicate-records")
