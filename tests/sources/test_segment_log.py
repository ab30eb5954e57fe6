"""Bad input is normal input: cut, corrupt, zero-filled and shifted segments decode into rows
and issue rows with byte positions, never exceptions."""

from __future__ import annotations

import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kaudit.sources.logdir import plan
from kaudit.sources.segments import Options, decode_target

FENCE = "real-kafka-3.0.2/logdirs-final/node1/data/j-fence-0/00000000000000000000.log"
COMPRESSED = [f"real-kafka-3.0.2/logdirs-final/node1/data/comp-{c}-{p}/00000000000000000000.log"
              for c in ("gzip", "snappy", "lz4", "zstd") for p in (0, 1, 2)]
FENCE_POSITIONS = [0, 80, 160, 240, 318, 395, 472]


def decode_bytes(tmp_path, data: bytes, deep: bool = False, name="t-0") -> dict[str, list[dict]]:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    f = d / "00000000000000000000.log"
    f.write_bytes(data)
    out: dict[str, list[dict]] = {}
    for t in plan([str(f)]).targets:
        for kind, table in decode_target(t, Options(deep=deep)):
            out.setdefault(kind, []).extend(table.to_pylist())
    return out


@pytest.fixture(scope="module")
def fence(corpus):
    return (corpus / FENCE).read_bytes()


def test_whole_segment(tmp_path, fence):
    rows = decode_bytes(tmp_path, fence)
    assert [r["position"] for r in rows["batch"]] == FENCE_POSITIONS
    assert "decode_issue" not in rows


def test_truncated_at_every_position(tmp_path, fence):
    for cut in range(1, len(fence)):
        rows = decode_bytes(tmp_path, fence[:cut])
        whole = [p for p, q in zip(FENCE_POSITIONS, FENCE_POSITIONS[1:] + [len(fence)]) if q <= cut]
        assert [r["position"] for r in rows.get("batch", [])] == whole, cut
        issues = rows.get("decode_issue", [])
        if cut in FENCE_POSITIONS:
            assert not issues
        else:
            [issue] = issues
            assert issue["issue"] == "truncated-tail"
            assert issue["position"] == max(p for p in FENCE_POSITIONS if p < cut)
            assert issue["position"] + issue["length"] == cut


def test_payload_flip_is_a_crc_mismatch(tmp_path, fence):
    bad = bytearray(fence)
    bad[100] ^= 0xFF  # inside the second batch's records
    rows = decode_bytes(tmp_path, bytes(bad))
    assert [r["crc_ok"] for r in rows["batch"]] == [True, False, True, True, True, True, True]
    assert "decode_issue" not in rows


def test_corrupt_length_resyncs_at_next_batch(tmp_path, fence):
    bad = bytearray(fence)
    struct.pack_into(">i", bad, 160 + 8, 0x00FFFFFF)  # third batch claims 16 MiB
    rows = decode_bytes(tmp_path, bytes(bad))
    assert [r["position"] for r in rows["batch"]] == [0, 80, 240, 318, 395, 472]
    [issue] = rows["decode_issue"]
    assert (issue["issue"], issue["position"], issue["length"], issue["resync_position"]) == ("corrupt", 160, 80, 240)


def test_garbage_prefix_mid_stream(tmp_path, fence):
    rows = decode_bytes(tmp_path, b"\x13" * 37 + fence[80:])
    assert [r["base_offset"] for r in rows["batch"]] == [1, 2, 3, 4, 5, 6]
    [issue] = rows["decode_issue"]
    assert (issue["issue"], issue["position"], issue["length"]) == ("corrupt", 0, 37)


def test_zero_filled_tail(tmp_path, fence):
    rows = decode_bytes(tmp_path, fence + b"\x00" * 4096)
    assert len(rows["batch"]) == 7
    [issue] = rows["decode_issue"]
    assert (issue["issue"], issue["position"], issue["length"]) == ("zero-fill", len(fence), 4096)


def test_empty_segment(tmp_path):
    assert decode_bytes(tmp_path, b"") == {}


def _segments(corpus):
    return [(corpus / p).read_bytes() for p in [FENCE] + COMPRESSED]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_mutated_real_segments(tmp_path, corpus, data):
    """Only rows come out of mutated real segments (flips, cuts, insertions), never exceptions."""
    segs = _segments(corpus)
    blob = bytearray(data.draw(st.sampled_from(segs)))
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete", "int"]))
        i = data.draw(st.integers(0, max(len(blob) - 1, 0)))
        if op == "flip" and blob:
            blob[i] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del blob[i:]
        elif op == "insert":
            blob[i:i] = data.draw(st.binary(min_size=1, max_size=64))
        elif op == "delete":
            del blob[i : i + data.draw(st.integers(1, 64))]
        elif op == "int" and i + 4 <= len(blob):
            struct.pack_into(">i", blob, i, data.draw(st.sampled_from([-1, 0, 49, 2**31 - 1, 1 << 24])))
    rows = decode_bytes(tmp_path, bytes(blob), deep=True)
    assert set(rows) <= {"batch", "record", "decode_issue"}
    covered = sum(r["batch_size"] for r in rows.get("batch", [])) + sum(
        r["length"] or 0 for r in rows.get("decode_issue", []) if r["issue"] != "records")
    assert covered == len(blob)  # every byte is accounted for: decoded or reported


def test_inputs_are_never_modified(tmp_path, corpus):
    import hashlib
    import os
    import subprocess
    import sys

    src = corpus / "real-kafka-3.0.2/logdirs-final/node1"
    tree = tmp_path / "node1"
    shutil.copytree(src, tree)
    for dirpath, dirs, files in os.walk(tree):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o444)

    def snapshot():
        state = {}
        for dirpath, _, files in os.walk(tree):
            for f in files:
                p = os.path.join(dirpath, f)
                st_ = os.stat(p)
                state[p] = (hashlib.sha256(open(p, "rb").read()).hexdigest(), st_.st_mtime_ns, st_.st_mode)
        return state

    before = snapshot()
    for fmt in ("ndjson", "json", "table", "parquet"):
        out = tmp_path / f"out-{fmt}"
        r = subprocess.run([sys.executable, "-m", "kaudit", "decode", "segments", str(tree), "--deep",
                            "--format", fmt, "--output", str(out)], capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr.decode()
    assert snapshot() == before


def test_mixed_magic_segment_with_corruption(tmp_path):
    """An upgraded broker's log: magic 0 and 1 messages, a compressed wrapper, then v2 batches;
    a corrupt legacy message in the middle is reported and skipped."""
    from fixtures import kafka_encoder as enc

    parts = [
        enc.encode_legacy_message(0, b"k", b"m0", magic=0),
        enc.encode_legacy_wrapper([{"value": b"a"}, {"value": b"b"}], magic=1, codec="snappy", wrapper_offset=2),
        enc.encode_legacy_message(3, None, b"m1", magic=1, timestamp=5),
        enc.encode_record_batch_v2(4, [{"value": b"v2"}]),
        enc.encode_legacy_message(5, b"k", b"late", magic=1, timestamp=6),
    ]
    bad = bytearray(parts[2])
    struct.pack_into(">i", bad, 8, 1 << 20)  # the magic 1 message claims 1 MiB
    blob = parts[0] + parts[1] + bytes(bad) + parts[3] + parts[4]
    rows = decode_bytes(tmp_path, blob, deep=True)
    got = [(r["magic"], r["base_offset"], r["last_offset"], r["record_count"], r["codec"]) for r in rows["batch"]]
    assert got == [(0, 0, 0, 1, "none"), (1, 1, 2, 2, "snappy"), (2, 4, 4, 1, "none"), (1, 5, 5, 1, "none")]
    [issue] = rows["decode_issue"]
    assert (issue["issue"], issue["position"], issue["length"]) == ("corrupt", len(parts[0]) + len(parts[1]), len(parts[2]))
    assert [r["value"] for r in rows["record"]] == [b"m0", b"a", b"b", b"v2", b"late"]


def test_batch_over_max_batch_bytes_is_skipped_not_allocated(tmp_path, fence):
    d = tmp_path / "t-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(fence)
    rows = {}
    for t in plan([str(d)]).targets:
        for kind, table in decode_target(t, Options(max_batch_bytes=66)):
            rows.setdefault(kind, []).extend(table.to_pylist())
    # batch_length is 68 for the three zombie batches, 66 for markers, 65 for the B batches
    sizes = {r["position"]: r["batch_size"] for r in rows["batch"]}
    assert sorted(sizes) == [240, 318, 395, 472]
    limits = [i for i in rows["decode_issue"] if i["issue"] == "limit"]
    assert [(i["position"], i["length"]) for i in limits] == [(0, 80), (80, 80), (160, 80)]
    assert sum(sizes.values()) + sum(i["length"] for i in limits) == len(fence)
