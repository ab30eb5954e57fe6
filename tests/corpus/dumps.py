"""Readers for the corpus' ground truth: Kafka DumpLogSegments text (`*.dump.txt`) and the
per-batch `batches.tsv`, as plain dicts for comparison with kaudit's rows."""

from __future__ import annotations

import csv
import re
from pathlib import Path

# log4j lines from the tool's stderr land in the middle of stdout lines: cut them out.
_LOG4J = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] [A-Z]+ .*?\([\w.$]+\)\n")
_FIELD = re.compile(r"(\w+): (\S*)")

TRUTH_TREES = [
    # (tree root relative to the corpus, truth folder relative to the corpus)
    ("real-kafka-3.0.2/logdirs-final", "real-kafka-3.0.2/logdirs-final.truth"),
    ("real-kafka-3.0.2-extra/01-idempotent-state-expiry/logdirs",
     "real-kafka-3.0.2-extra/01-idempotent-state-expiry/logdirs.truth"),
    ("real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes/logdirs",
     "real-kafka-3.0.2-extra/02-hanging-unregistered-and-late-writes/logdirs.truth"),
    ("public/wild-logdirs/DanielMorales9__kafkafun", "public/wild-logdirs/DanielMorales9__kafkafun.truth"),
    ("public/wild-logdirs/JitenPalaparthi__youtube-kafka-golang-rust",
     "public/wild-logdirs/JitenPalaparthi__youtube-kafka-golang-rust.truth"),
    ("public/wild-logdirs/specmatic-demo__shipping-service",
     "public/wild-logdirs/specmatic-demo__shipping-service.truth"),
    ("public/wild-logdirs/tuyen-nnt__kafka_2.13-3.0.0", "public/wild-logdirs/tuyen-nnt__kafka_2.13-3.0.0.truth"),
] + [
    # Kafka 4.1.0 (DumpLogSegments 4.1.0 of node 1; batches.tsv names node1/data/<partition>)
    (f"real-kafka-4.1.0/{scn}/logdirs", f"real-kafka-4.1.0/{scn}/logdirs.truth")
    for scn in ("v1-idempotent-clean", "v2-txn-java-tv2", "v3-txn-confluent", "v4-idem-retry-java",
                "v5-fencing-tv2", "v6-codecs", "v7-compacted-eos-changelog")
]


def read_batches_tsv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def clean(text: str) -> str:
    return _LOG4J.sub("", text)


def read_dump(path: Path) -> dict[str, list[str]]:
    """{dumped file name: its lines} from one partition's dump file."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in clean(path.read_text(encoding="utf-8", errors="replace")).splitlines():
        if line.startswith("Dumping "):
            current = line[len("Dumping "):].strip().rsplit("/", 1)[-1]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


def parse_log_section(lines: list[str]) -> tuple[list[dict], list[dict]]:
    """(batch dicts, record dicts) from the lines of a `.log` section."""
    batches, raw_records = [], []
    for line in lines:
        if line.startswith("baseOffset:"):
            batches.append(dict(_FIELD.findall(line)))
        elif line.startswith("| offset:"):
            raw_records.append(line)
        elif raw_records and not line.startswith("Starting offset:"):
            raw_records[-1] += "\n" + line  # a key or payload holding newlines
    return batches, [parse_record_line(r) for r in raw_records]


def parse_record_line(line: str) -> dict:
    """`| offset: 0 CreateTime: 1 keySize: 2 valueSize: 10 sequence: 0 headerKeys: [] key: A0
    payload: zombie-A-0` -> dict; key and payload keep their text verbatim (may hold spaces)."""
    body = line[2:]
    out = {}
    head, _, rest = body.partition(" headerKeys: ")
    for k, v in _FIELD.findall(head):
        out[k] = v
    hk_end = rest.find("]")
    out["headerKeys"] = rest[: hk_end + 1]
    rest = rest[hk_end + 1 :]
    m = re.match(r" endTxnMarker: (\w+) coordinatorEpoch: (-?\d+)", rest)
    if m:
        out["endTxnMarker"], out["coordinatorEpoch"] = m.group(1), m.group(2)
        return out
    if rest.startswith(" key: "):
        kp = rest[len(" key: "):]
        key, sep, payload = kp.partition(" payload: ")
        out["key"] = key
        out["payload"] = payload if sep else None
    elif rest.startswith(" payload: "):
        out["payload"] = rest[len(" payload: "):]
    return out
