"""What an input path holds, by its first bytes: a capture (pcap, pcapng) or log-dir material
(folders, segments, indexes, checkpoints). Opened read-only, 4 bytes read."""

from __future__ import annotations

import os

from kaudit.capture.pcap import PCAPNG_SHB, _PCAP_MAGIC

_CAPTURE_HEADS = frozenset(_PCAP_MAGIC) | {PCAPNG_SHB.to_bytes(4, "big")}


def is_capture(path: str) -> bool:
    """A regular file starting with a pcap or pcapng magic number."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as f:   # read-only
            return f.read(4) in _CAPTURE_HEADS
    except OSError:
        return False


def split_inputs(paths: list[str]) -> tuple[list[str], list[str]]:
    """(captures, the rest) of the paths given, in their order."""
    caps = [p for p in paths if is_capture(p)]
    return caps, [p for p in paths if p not in caps]
