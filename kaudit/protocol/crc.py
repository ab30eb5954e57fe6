"""CRC-32C of a buffer: the compiled core's (protocol._cbatch.crc32c) where it is in use, else
the crc32c package's. The package is imported on first use only: its import reads its
installed metadata (importlib.metadata, email, argparse: ~0.01 s of every start-up) and a
compiled decode never calls it. Both give the same value (tests/protocol/test_cbatch_fuzz.py)."""

from __future__ import annotations

from kaudit import native

_C = "kaudit.protocol._cbatch"
_package = None


def crc32c(data) -> int:
    c = native.module(_C)
    if c is not None:
        return c.crc32c(data)
    global _package
    if _package is None:
        from crc32c import crc32c as _package
    return _package(data)
