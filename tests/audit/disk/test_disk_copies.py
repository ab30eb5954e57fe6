"""Copies judged by their records, not the batch CRC (issue 27): the same records stored again
under a new batch header are a copy consumers read twice; other records under reused sequences
are not. Positive and negative twins, on crafted log dirs."""

from __future__ import annotations

from diskcraft import audit, brief, details, logdir, of

from kaudit.report.story import incidents


def _expired_state_resend(tmp_path, values_again):
    """Producer 7 stores seq 0-4 and 5-9; after its state expired the broker stores seq 0-4
    again, re-batched by the client at another time (only the batch timestamp differs)."""
    ld = logdir(tmp_path)
    pb = ld.partition("dup-expire", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b", b"c", b"d", b"e"], keys=[b"k"] * 5, timestamp=1_000)
    p.send([b"f", b"g", b"h", b"i", b"j"], timestamp=1_001)
    p.send(values_again, keys=[b"k"] * 5, base_sequence=0, timestamp=700_000)
    return audit(ld.write())


def test_same_records_under_a_new_batch_timestamp_are_a_copy(tmp_path):
    fs = _expired_state_resend(tmp_path, [b"a", b"b", b"c", b"d", b"e"])
    [d] = of(fs, "duplicate-batch")
    dd = details(d)
    assert dd["payload"] == "identical" and dd["copy"] == "same-records"
    assert (dd["original_first_offset"], dd["original_last_offset"]) == (0, 4)
    assert "different payload" not in d["message"] and "copy of the same records" in d["message"]
    assert "batch timestamp" in d["message"]
    [inc] = [i for i in incidents(fs, None) if i["kind"] == "duplicate"]
    assert not inc["title"].startswith("Sequence numbers reused")
    assert "records may be missing" not in inc["narrative"]["impact"]
    assert "10-14 repeat offsets 0-4" in inc["narrative"]["impact"]


def test_other_records_under_reused_sequences_stay_new_data(tmp_path):
    """The twin: one value differs, so the sequences were reused for other records."""
    fs = _expired_state_resend(tmp_path, [b"a", b"b", b"X", b"d", b"e"])
    [d] = of(fs, "duplicate-batch")
    assert details(d)["payload"] == "different" and "copy" not in details(d)
    [inc] = [i for i in incidents(fs, None) if i["kind"] == "duplicate"]
    assert inc["title"].startswith("Sequence numbers reused")


def test_a_byte_identical_resend_keeps_its_words(tmp_path):
    ld = logdir(tmp_path)
    pb = ld.partition("dup-expire", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b"], timestamp=1_000)
    p.send([b"a", b"b"], base_sequence=0, timestamp=1_000)
    [d] = of(audit(ld.write()), "duplicate-batch")
    assert "byte-identical" in d["message"] and "copy" not in details(d)


# -- copies across producer sessions ---------------------------------------------------------------

def _restart(tmp_path, *, same=True, overlap=False, later_ms=30_000, epoch_bump=False, transactional=False):
    """Producer 7 writes three batches and stops; producer 8 (or 7 with a bumped epoch) starts and
    its first batch holds the records of 7's last batch (`same`) or others."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    old = pb.producer(7, 0, transactional=transactional)
    for i in range(3):
        old.send([b"order-%d" % i, b"line-%d" % i], keys=[b"c1", b"c1"], timestamp=10_000 + i)
    new = pb.producer(7, 1) if epoch_bump else pb.producer(8, 0)
    if overlap:
        old.send([b"order-3"], keys=[b"c1"], timestamp=10_003)
    vals = [b"order-2", b"line-2"] if same else [b"order-9", b"line-9"]
    new.send(vals, keys=[b"c1", b"c1"], timestamp=10_002 + later_ms)
    new.send([b"order-10"], keys=[b"c1"], timestamp=10_003 + later_ms)
    if overlap:
        old.send([b"order-4"], keys=[b"c1"], timestamp=10_004 + later_ms)
    return audit(ld.write(), rules=("duplicate-records", "duplicate-batch", "out-of-order-sequence"))


def test_records_resent_by_a_new_producer_id_are_duplicates(tmp_path):
    fs = _restart(tmp_path)
    assert brief(fs) == [("duplicate-records", "error", "orders-0", 6, 7)]
    [f] = fs
    d = details(f)
    assert (d["original_first_offset"], d["original_last_offset"], d["original_producer_id"]) == (4, 5, 7)
    assert f["producer_id"] == 8 and "new producer id 8" in f["message"]
    assert [e["note"] for e in f["evidence"]] == [None, "original"]


def test_records_resent_under_a_bumped_epoch_are_duplicates(tmp_path):
    fs = _restart(tmp_path, epoch_bump=True)
    assert [(f["rule"], f["producer_epoch"]) for f in fs] == [("duplicate-records", 1)]
    assert "KIP-360" in fs[0]["message"]


def test_a_new_session_with_other_records_is_no_copy(tmp_path):
    assert _restart(tmp_path, same=False) == []


def test_concurrent_sessions_writing_the_same_records_are_no_restart(tmp_path):
    """The old producer keeps writing after the new one began: two instances, not a re-send."""
    assert _restart(tmp_path, overlap=True) == []


def _alike_later(tmp_path, *, first_new: bool, epoch_bump: bool = False):
    """Producer 7's last batch holds constant padding records; producer 8 (or 7's bumped epoch)
    then writes its own record and (or, `first_new` False: first) a batch of the same padding."""
    ld = logdir(tmp_path)
    pb = ld.partition("shared", 0)
    old = pb.producer(7, 0)
    old.send([b"e0-b0-r0"], timestamp=10_000)
    old.send([b"x" * 200, b"x" * 200], timestamp=10_000)
    new = pb.producer(7, 1) if epoch_bump else pb.producer(8, 0)
    if first_new:
        new.send([b"e1-b0-r0"], timestamp=10_050)
    new.send([b"x" * 200, b"x" * 200], timestamp=10_050)
    return audit(ld.write(), rules=("duplicate-records", "duplicate-batch", "out-of-order-sequence"))


def test_a_new_session_meeting_alike_records_after_its_own_first_batch_is_no_resend(tmp_path):
    """Two producers of one shared partition both ending on the same constant records: the second
    began with a record of its own, so it re-sent nothing of the first (a restarted application
    re-sends its unacknowledged records first). The simulator's mix of two `split` faults."""
    assert _alike_later(tmp_path, first_new=True) == []
    assert _alike_later(tmp_path / "bump", first_new=True, epoch_bump=True) == []


def test_the_same_alike_records_as_the_new_sessions_first_batch_are_a_resend(tmp_path):
    """The twin: the new session begins with the old one's last records."""
    fs = _alike_later(tmp_path, first_new=False)
    assert brief(fs) == [("duplicate-records", "error", "shared-0", 3, 4)]
    fs = _alike_later(tmp_path / "bump", first_new=False, epoch_bump=True)
    assert [(f["rule"], f["first_offset"], f["producer_epoch"]) for f in fs] == [("duplicate-records", 3, 1)]


def test_a_copy_long_after_the_restart_window_is_no_resend(tmp_path):
    assert _restart(tmp_path, later_ms=3_600_000) == []


def test_transactional_sessions_are_left_to_the_transaction_rules(tmp_path):
    assert of(_restart(tmp_path, transactional=True), "duplicate-records") == []


def test_a_producer_that_bumped_its_epoch_and_wrote_on_did_not_stop(tmp_path):
    """Producer 7 bumps its epoch (KIP-360) and keeps writing; producer 8 starts meanwhile with
    the records of 7's old epoch: 7 never stopped, so no re-send (the benign golden's history)."""
    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    p = pb.producer(7, 2)
    p.send([b"a", b"b"], timestamp=1_000)
    p.bump_epoch()
    p.send([b"d"], timestamp=1_001)
    pb.producer(8, 0).send([b"a", b"b"], timestamp=1_002)
    p.send([b"e"], timestamp=1_003)
    assert audit(ld.write(), rules=("duplicate-records",)) == []


def test_session_copies_whatever_the_chunking(tmp_path, monkeypatch):
    """Many sessions, some re-sending their predecessor's last records: the same findings in
    chunks of 3 batches as in one chunk."""
    from diskcraft import small_chunks

    ld = logdir(tmp_path)
    pb = ld.partition("orders", 0)
    for s in range(12):
        p = pb.producer(100 + s, 0)
        if s % 3 == 2:   # re-sends the previous session's last batch first
            p.send([b"s%d-last" % (s - 1)], timestamp=1_000 * s)
        for i in range(4):
            p.send([b"s%d-%d" % (s, i)] if i < 3 else [b"s%d-last" % s], timestamp=1_000 * s + i)
    root = ld.write()
    whole = audit(root, rules=("duplicate-records",))
    with small_chunks(monkeypatch, 3):
        chunked = audit(root, rules=("duplicate-records",))
    assert len(whole) == 4 and [f["id"] for f in whole] == [f["id"] for f in chunked]
    assert all(details(f)["original_producer_id"] == f["producer_id"] - 1 for f in whole)


def _resend_of_batch(tmp_path, k: int, batches: int, values_again=None):
    """Producer 7 stores `batches` batches of 3 records; after its state was lost the broker
    stores batch `k`'s sequences again (its records, or `values_again`) under a new timestamp."""
    ld = logdir(tmp_path)
    pb = ld.partition("dup-old", 0)
    p = pb.producer(7, 0)
    for i in range(batches):
        p.send([b"v%d-%d" % (i, j) for j in range(3)], timestamp=1_000 + i)
    again = values_again or [b"v%d-%d" % (k, j) for j in range(3)]
    p.send(again, base_sequence=3 * k, timestamp=900_000)
    return audit(ld.write())


def test_a_copy_of_a_batch_inside_a_run_is_compared_with_that_batch(tmp_path):
    """The batch that first held the sequences is the one compared, not the run's first (the
    copy of the 3rd-last batch was once called other records: a copy called new data)."""
    fs = _resend_of_batch(tmp_path, 7, 10)
    [d] = of(fs, "duplicate-batch")
    assert details(d)["payload"] == "identical" and details(d)["copy"] == "same-records"
    assert (details(d)["original_first_offset"], details(d)["original_last_offset"]) == (21, 23)
    [inc] = [i for i in incidents(fs, None) if i["kind"] == "duplicate"]
    assert "30-32 repeat offsets 21-23" in inc["narrative"]["impact"]


def test_a_copy_far_back_says_its_records_were_not_compared(tmp_path):
    """Beyond the batches a producer's state keeps at hand (producer_state.NOTED), the first
    copy's records are not compared: neither 'other records' nor 'delivered twice' is told."""
    fs = _resend_of_batch(tmp_path, 5, 60)
    [d] = of(fs, "duplicate-batch")
    assert details(d)["payload"] == "unknown" and "were not compared" in d["message"]
    assert "different payload" not in d["message"] and "Compare both offset ranges" in d["remediation"]
    [inc] = [i for i in incidents(fs, None) if i["kind"] == "duplicate"]
    assert not inc["title"].startswith("Sequence numbers reused")
    impact = inc["narrative"]["impact"]
    assert "whose records were not compared" in impact and "delivered twice" not in impact
    assert "records may be missing" not in impact


def test_sequences_reused_by_a_batch_of_other_bounds(tmp_path):
    """Sequences 3-4 stored again in a batch of two while the first copy's batch held 3-5: no
    resend (a client resends a batch whole), so reused sequences whatever the records."""
    ld = logdir(tmp_path)
    pb = ld.partition("dup-bounds", 0)
    p = pb.producer(7, 0)
    p.send([b"a", b"b", b"c"]); p.send([b"d", b"e", b"f"])
    p.send([b"d", b"e"], base_sequence=3)
    fs = audit(ld.write())
    [d] = of(fs, "duplicate-batch")
    assert details(d)["payload"] == "different" and details(d)["original_batch_sequences"] == [3, 5]
    assert "a batch of other bounds" in d["message"]
    [inc] = [i for i in incidents(fs, None) if i["kind"] == "duplicate"]
    assert inc["title"].startswith("Sequence numbers reused")
