"""Coordinator records (`__transaction_state`, `__consumer_offsets`) of the corpus decode to
exactly the text Kafka 3.0.2's DumpLogSegments printed for them."""

from __future__ import annotations

import re
import struct
from collections import Counter
from pathlib import Path

import pytest

from kaudit.protocol.coordinator import decode_offsets_record, decode_txn_log_record
from kaudit.protocol.coordinator_text import format_offsets_like_dump, format_txn_log_like_dump
from kaudit.protocol.primitives import read_varint, read_varlong

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"

_LOG4J = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] [A-Z]+ [^\n]*\n")
_RECORD = re.compile(r"^\| offset: (\d+) .*? headerKeys: \[[^\]]*\] key: (.*?) payload: (.*)$")


def _segment_records(path: Path):
    """(offset, is_control, key, value) of every record of an uncompressed magic-2 segment.
    A private minimal walker (61-byte batch header, varint records): the real batch decoder
    lives elsewhere; this one only has to read the internal topics of the corpus."""
    data = path.read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if length < 49 or end > len(data):
            break  # preallocated or cut tail
        assert data[pos + 16] == 2, f"{path}@{pos}: magic {data[pos + 16]}"
        attributes = struct.unpack_from(">h", data, pos + 21)[0]
        assert attributes & 0x07 == 0, f"{path}@{pos}: compressed batch"
        (count,) = struct.unpack_from(">i", data, pos + 57)
        p = pos + 61
        for _ in range(count):
            size, p = read_varint(data, p)
            record_end = p + size
            p += 1  # record attributes
            _, p = read_varlong(data, p)  # timestamp delta
            offset_delta, p = read_varint(data, p)
            key_len, p = read_varint(data, p)
            key = None if key_len < 0 else data[p:p + key_len]
            p += max(key_len, 0)
            value_len, p = read_varint(data, p)
            value = None if value_len < 0 else data[p:p + value_len]
            yield base_offset + offset_delta, bool(attributes & 0x20), key, value
            p = record_end
        pos = end


def _dump_records(path: Path) -> dict[int, tuple[str, str]]:
    # DumpLogSegments' stderr (log4j "Loaded member ..." lines) is glued into stdout lines.
    text = _LOG4J.sub("", path.read_text(encoding="utf-8", errors="replace"))
    out = {}
    for line in text.splitlines():
        m = _RECORD.match(line)
        if m:
            out[int(m.group(1))] = (m.group(2), m.group(3))
    return out


def _dump_files(corpus: Path) -> list[Path]:
    files = []
    for pattern in ("__transaction_state-*.dump.txt", "__consumer_offsets-*.dump.txt"):
        files += [p for p in corpus.glob(f"**/*.truth/**/{pattern}")]
    return sorted(files)


def _partition_dir(corpus: Path, dump: Path) -> Path:
    # X.truth/<same relative path>/<topic-partition>.dump.txt <-> X/<...>/<topic-partition>/
    parts = [p.removesuffix(".truth") for p in dump.relative_to(corpus).parts]
    return corpus.joinpath(*parts[:-1], parts[-1].removesuffix(".dump.txt"))


@pytest.mark.corpus
def test_corpus_agrees_with_dump_log_segments():
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS} (needs ../shared/corpus beside the repo)")
    dumps = _dump_files(CORPUS)
    assert dumps, "no coordinator dump files in the corpus"
    compared: Counter = Counter()
    mismatches = []
    for dump in dumps:
        truth = _dump_records(dump)
        txn = dump.name.startswith("__transaction_state")
        source = str(dump.relative_to(CORPUS)).split(".truth")[0]
        source += " __transaction_state" if txn else " __consumer_offsets"
        seen = set()
        for segment in sorted(_partition_dir(CORPUS, dump).glob("*.log")):
            for offset, is_control, key, value in _segment_records(segment):
                if is_control:
                    continue
                seen.add(offset)
                if txn:
                    got = format_txn_log_like_dump(decode_txn_log_record(key, value))
                else:
                    got = format_offsets_like_dump(*decode_offsets_record(key, value))
                compared[source] += 1
                if truth.get(offset) != got:
                    mismatches.append((str(segment), offset, truth.get(offset), got))
        missing = sorted(set(truth) - seen)
        assert not missing, f"{dump}: records in the dump but not in the segments: {missing[:5]}"
    print("\ncoordinator records compared with DumpLogSegments:")
    for source, n in sorted(compared.items()):
        print(f"  {n:6d}  {source}")
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"
    # The corpus must actually exercise both topics and all three sources.
    assert sum(n for s, n in compared.items() if "__transaction_state" in s) >= 200
    assert sum(n for s, n in compared.items() if "wild-logdirs" in s) >= 3000
    assert any("real-kafka-3.0.2-extra" in s for s in compared)
