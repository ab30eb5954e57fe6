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
