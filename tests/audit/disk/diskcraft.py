"""Helpers for the on-disk rule tests: build a crafted broker log dir with the fixture builder,
audit it with the local engine, and look at the findings in a compact form."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from fixtures.builder import LogDirBuilder
from kaudit.engine.local import audit_segments

INT32_MAX = 2**31 - 1
SEQUENCE_RULES = ("duplicate-batch", "out-of-order-sequence", "fenced-epoch", "offset-overlap",
                  "duplicate-records")
INTEGRITY_RULES = ("crc-mismatch", "corrupt-batch", "truncated-tail")
# The rules under test here (index-mismatch has its own tests and owner).
DISK_RULES = SEQUENCE_RULES + INTEGRITY_RULES


def logdir(tmp_path: Path, name: str = "broker", node_id: int = 1, **kw) -> LogDirBuilder:
    return LogDirBuilder(tmp_path / name, node_id=node_id, **kw)


def audit(root, *, rules=DISK_RULES, **kw) -> list[dict]:
    """The findings of the disk rules on `root` (a written log dir or several)."""
    roots = [str(r) for r in root] if isinstance(root, (list, tuple)) else [str(root)]
    return audit_segments(roots, select=rules, **kw).findings


def brief(findings) -> list[tuple]:
    """(rule, severity, topic-partition, first_offset, last_offset) sorted: easy to compare."""
    return sorted((f["rule"], f["severity"], f"{f['topic']}-{f['partition']}", f["first_offset"],
                   f["last_offset"]) for f in findings)


def of(findings, rule: str) -> list[dict]:
    return [f for f in findings if f["rule"] == rule]


def details(f: dict) -> dict:
    import json

    return json.loads(f["details"]) if f.get("details") else {}


def log_file(root, topic: str, partition: int, base_offset: int = 0) -> str:
    return os.path.join(str(root), f"{topic}-{partition}", f"{base_offset:020d}.log")


@contextmanager
def small_chunks(monkeypatch, n: int):
    """Decode segments in chunks of `n` batches, so folds see many chunks (the vectorised fast
    path and the checked path meet at chunk boundaries). CHUNK_BATCHES is bound as decode_log's
    default argument, so the default itself is patched."""
    from kaudit.sources import segment_log

    defaults = segment_log.decode_log.__kwdefaults__
    monkeypatch.setitem(defaults, "chunk_batches", n)
    yield
