"""A partition dir as Kafka's start-up recovers it from an interrupted cleaning (or segment split):
which files it reads, which it deletes, which `.swap` files it renames into place - without
touching the inputs (the plan reads a swap file where Kafka would read it renamed, and lists the
files Kafka deletes as skipped, saying why).

Kafka's rules (apache/kafka storage/.../log/LogLoader.java `load`, `removeTempFilesAndCollectSwapFiles`;
the order of the renames in LocalLog.replaceSegments):
- a `.deleted` file is deleted (an old segment or producer snapshot whose asynchronous deletion
  had not run);
- a `.cleaned` file is deleted (a cleaned segment not yet renamed `.swap`: the swap never began,
  the old segments are still the log), and so is every `.swap` file whose offset is at or past
  the lowest `.cleaned` file's (the cleaner renames `.cleaned` to `.swap` from the highest offset
  down: such a swap is part of an incomplete one);
- the other `.swap` log files replace the log: every other file whose name's offset lies in
  [the lowest swap base, the highest swap's next offset) - segments and producer snapshots - is
  deleted, and the swap files lose their suffix.
"""

from __future__ import annotations

import os
import struct

from kaudit.sources.targets import Target

DELETED, CLEANED, SWAP = ".deleted", ".cleaned", ".swap"
_HEADER = struct.Struct(">qiib")      # base offset, length, partition leader epoch, magic
_MAX_BATCHES = 10_000_000            # a bound on the header walk of one swap file


def _offset(name: str) -> int | None:
    """LogFileUtils.offsetFromFile: the number before the name's first dot."""
    head = name.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def next_offset(path: str, base: int) -> int:
    """LogSegment.readNextOffset of a swap segment: the offset after its last whole batch (its
    base offset when it holds none). Walks the batch headers only; stops at the first one that
    is cut or implausible."""
    nxt = base
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:   # read-only
            pos = 0
            for _ in range(_MAX_BATCHES):
                f.seek(pos)
                head = f.read(27)
                if len(head) < 17:
                    break
                first, length, _ple, magic = _HEADER.unpack_from(head)
                end = pos + 12 + length
                if length < 14 or end > size:
                    break
                if magic >= 2:
                    if len(head) < 27:
                        break
                    last = first + struct.unpack_from(">i", head, 23)[0]
                else:
                    last = first    # a legacy wrapper's offset is its last inner offset
                nxt = max(nxt, last + 1)
                pos = end
    except OSError:
        return nxt
    return nxt


def recovered(targets: list[Target], renamed) -> list[Target]:
    """One partition dir's targets as LogLoader leaves the dir (see the module); `renamed(t)`:
    the target of a swap file read as the file it becomes."""
    names = {t.path: os.path.basename(t.path) for t in targets}
    cleaned = [_offset(names[t.path]) for t in targets if names[t.path].endswith(CLEANED)]
    min_cleaned = min((o for o in cleaned if o is not None), default=None)
    swaps = [t for t in targets if names[t.path].endswith(SWAP)]
    valid = [t for t in swaps if (o := _offset(names[t.path])) is not None and (min_cleaned is None or o < min_cleaned)]
    logs = [t for t in valid if names[t.path].endswith(".log" + SWAP)]
    lo = min((_offset(names[t.path]) for t in logs), default=None)
    hi = max((next_offset(t.path, _offset(names[t.path])) for t in logs), default=None)
    out = []
    for t in targets:
        name = names[t.path]
        off = _offset(name)
        if name.endswith(DELETED):
            out.append(_skip(t, ".deleted file: Kafka deletes it at start-up (LogLoader), not read"))
        elif name.endswith(CLEANED):
            out.append(_skip(t, ".cleaned file (an interrupted cleaning's): Kafka deletes it at start-up (LogLoader) "
                                "and keeps the segments it was to replace - those are read"))
        elif name.endswith(SWAP) and t not in valid:
            out.append(_skip(t, f".swap file of an incomplete swap (at or past the .cleaned file of offset {min_cleaned}): "
                                "Kafka deletes it at start-up (LogLoader), not read"))
        elif name.endswith(SWAP):
            out.append(renamed(t))
        elif lo is not None and off is not None and lo <= off < hi:
            out.append(_skip(t, f"replaced by an interrupted cleaning's .swap segment (offsets {lo}-{hi - 1}): Kafka "
                                "deletes it at start-up and renames the swap into place (LogLoader) - the .swap "
                                "is read instead"))
        else:
            out.append(t)
    return out


def _skip(t: Target, reason: str) -> Target:
    return Target(t.path, "skipped", t.log_dir, t.topic, t.partition, reason=reason, size=t.size,
                  topic_id=t.topic_id)
