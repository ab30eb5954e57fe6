"""What the user named, before decoding: capture files (a folder stands for the captures in
it, found by their magic numbers, rotated files included), and what a file is by its first
bytes - a capture (pcap, pcapng) or log-dir material. Opened read-only, 4 bytes read."""

from __future__ import annotations

import os

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": "pcap", b"\xa1\xb2\xc3\xd4": "pcap", b"\x4d\x3c\xb2\xa1": "pcap",
               b"\xa1\xb2\x3c\x4d": "pcap", b"\x0a\x0d\x0d\x0a": "pcapng"}
MAX_DEPTH = 8


def sniff(path: str) -> str | None:
    """"pcap" or "pcapng" when the file starts with a capture's magic number, else None."""
    try:
        with open(path, "rb") as f:   # read-only
            return PCAP_MAGICS.get(f.read(4))
    except OSError:
        return None


def is_capture(path: str) -> bool:
    """A regular file starting with a pcap or pcapng magic number."""
    return os.path.isfile(path) and sniff(path) is not None


def split_inputs(paths: list[str]) -> tuple[list[str], list[str]]:
    """(captures, the rest) of the paths given, in their order."""
    caps = [p for p in paths if is_capture(p)]
    return caps, [p for p in paths if p not in caps]


def capture_files(paths: list[str]) -> tuple[list[str], list[str]]:
    """(files, errors). Files are kept as named (an unreadable one is the decoder's error to
    report); a folder gives the captures below it, in name order (tcpdump -C/-G names sort in
    rotation order); a folder holding none is an error."""
    files, errors = [], []
    for p in paths:
        if not os.path.isdir(p):
            files.append(p)
            continue
        found = []
        for root, dirs, names in os.walk(p):
            dirs.sort()
            if root[len(p):].count(os.sep) >= MAX_DEPTH:
                dirs[:] = []
            for n in sorted(names):
                full = os.path.join(root, n)
                if os.path.isfile(full) and sniff(full) is not None:
                    found.append(full)
        if found:
            files.extend(found)
        else:
            errors.append(f"{p}: a folder with no pcap or pcapng capture in it")
    return files, errors


def readable_files(paths) -> tuple[list[str], list[str]]:
    """(errors, readable) for input files named on the command line."""
    errors, readable = [], []
    for p in paths:
        if not os.path.isfile(p):
            errors.append(f"{p}: no such file")
        elif not os.access(p, os.R_OK):
            errors.append(f"{p}: permission denied")
        else:
            readable.append(p)
    return errors, readable
