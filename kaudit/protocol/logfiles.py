"""Per-partition broker files other than `.log`, sans-IO.

Binary files (`.index`, `.timeindex`, `.txnindex`, producer-state `.snapshot`) and the small text
files (`leader-epoch-checkpoint`, `partition.metadata`, `meta.properties`, KRaft `quorum-state`).
Every decoder takes the whole file's bytes (bytes, memoryview or mmap) and returns rows shaped like
the model's INDEX_ENTRY / TXNINDEX_ENTRY / SNAPSHOT_ENTRY / LEADER_EPOCH_ENTRY / PARTITION_METADATA
/ LOG_DIR schemas, with `position` = byte offset in the file; the caller adds the place fields.

Index files are lenient at the tail (preallocated zeros, a cut last entry are reported in
`IndexTail`, not raised) because an active segment legitimately looks like that; everything else
is strict and raises `DecodeError` / `Truncated` with the absolute byte position.

Stop rules mirror Kafka 3.0's DumpLogSegments (kafka.tools.DumpLogSegments.dumpIndex /
dumpTimeIndex / dumpTxnIndex / dumpProducerIdSnapshot) and the readers it calls.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from dataclasses import dataclass

from kaudit.protocol.crc import crc32c
from kaudit.protocol.errors import DecodeError, Truncated
from kaudit.protocol.primitives import read_int16, read_int32, read_uint32

# Entry layouts (big-endian), as in OffsetIndex / TimeIndex / AbortedTxn / ProducerStateManager.
_OFFSET_ENTRY = struct.Struct(">ii")     # relative_offset, position
_TIME_ENTRY = struct.Struct(">qi")       # timestamp, relative_offset
_TXN_ENTRY = struct.Struct(">hqqqq")     # version, producer_id, first, last, last_stable offsets
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")  # pid, epoch, last_seq, last_offset, offset_delta,
#                                           timestamp, coordinator_epoch, current_txn_first_offset

OFFSET_INDEX_ENTRY_SIZE = _OFFSET_ENTRY.size   # 8
TIME_INDEX_ENTRY_SIZE = _TIME_ENTRY.size       # 12
TXN_INDEX_ENTRY_SIZE = _TXN_ENTRY.size         # 34
SNAPSHOT_ENTRY_SIZE = _SNAP_ENTRY.size         # 46

TXN_INDEX_CURRENT_VERSION = 0      # AbortedTxn.CurrentVersion
PRODUCER_SNAPSHOT_VERSION = 1      # ProducerStateManager.ProducerSnapshotVersion
_SNAPSHOT_ENTRIES_OFFSET = 6       # the CRC covers everything after version + crc
_ZERO_SCAN_CHUNK = 1 << 20         # preallocated indexes are 10 MiB: scan without one big copy


@dataclass(frozen=True, slots=True)
class IndexTail:
    """What an index file holds beyond its decoded entries, for the caller to report.

    Regions, in file order: entries `[0, end_position)`, then `zero_fill_bytes` of whole all-zero
    entries (preallocated space), then `unexpected_bytes` of whole entries that are neither valid
    nor zero, then `partial_bytes` that do not make a whole entry (a cut write).
    """

    entry_size: int
    entries: int
    end_position: int
    zero_fill_bytes: int
    unexpected_bytes: int
    partial_bytes: int
    error: DecodeError | None = None   # why decoding stopped before the zero fill, if it did

    @property
    def unexpected_position(self) -> int:
        return self.end_position + self.zero_fill_bytes

    @property
    def partial_position(self) -> int:
        return self.end_position + self.zero_fill_bytes + self.unexpected_bytes


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """File-level facts of a producer-state snapshot (also when it holds no producers)."""

    version: int
    crc: int
    computed_crc: int
    crc_ok: bool
    count: int
    end_position: int       # end of the last entry
    trailing_bytes: int     # bytes after the entries (Kafka ignores them, but the CRC covers them)


# ---------------------------------------------------------------- single entries: (buf, off) form


def _entry(st: struct.Struct, what: str):
    size = st.size

    def read(buf, offset: int):
        if offset + size > len(buf):
            raise Truncated(f"{what}: need {size} bytes at {offset}", offset, size)
        return st.unpack_from(buf, offset), offset + size

    read.__name__ = f"read_{what}"
    return read


read_offset_index_entry = _entry(_OFFSET_ENTRY, "offset_index_entry")  # (relative_offset, position)
read_time_index_entry = _entry(_TIME_ENTRY, "time_index_entry")  # (timestamp, relative_offset)
_read_txn_raw = _entry(_TXN_ENTRY, "txn_index_entry")
_read_snapshot_raw = _entry(_SNAP_ENTRY, "snapshot_entry")


def read_txn_index_entry(buf, offset: int):
    """One AbortedTxn as a TXNINDEX_ENTRY dict; versions above 0 are rejected as Kafka does."""
    (version, pid, first, last, lso), new_offset = _read_txn_raw(buf, offset)
    if version > TXN_INDEX_CURRENT_VERSION:
        raise DecodeError(f"unexpected aborted transaction version {version}", offset)
    row = {"position": offset, "version": version, "producer_id": pid, "first_offset": first,
           "last_offset": last, "last_stable_offset": lso}
    return row, new_offset


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def decrement_sequence(sequence: int, decrement: int) -> int:
    """DefaultRecordBatch.decrementSequence: sequences wrap from 2^31-1 to 0 (Java int arithmetic)."""
    if sequence < decrement:
        return _int32(sequence - decrement + (1 << 31))
    return _int32(sequence - decrement)


# ---------------------------------------------------------------- offset and time indexes


def decode_offset_index(buf, base_offset: int) -> tuple[list[dict], IndexTail]:
    """`.index` entries as INDEX_ENTRY dicts (see `_decode_index` for where the entries end)."""
    return _decode_index(buf, base_offset, _OFFSET_ENTRY, "offset")


def decode_time_index(buf, base_offset: int) -> tuple[list[dict], IndexTail]:
    """`.timeindex` entries as INDEX_ENTRY dicts (see `_decode_index` for where the entries end)."""
    return _decode_index(buf, base_offset, _TIME_ENTRY, "time")


def _decode_index(buf, base_offset: int, st: struct.Struct, index_type: str):
    """Entries up to the first relative offset 0 after the first entry, as DumpLogSegments 3.0 does.

    That rule is what ends a preallocated (zeroed) active index; it is Kafka's, not "stop at the
    first non-increasing entry": other non-increasing entries are returned as they are, and judging
    them is the auditor's job (index-mismatch). The first entry is always taken, even (0, 0).
    """
    rows = []
    size = st.size
    whole_end = len(buf) - len(buf) % size
    is_offset = index_type == "offset"
    pos = 0
    while pos < whole_end:
        a, b = st.unpack_from(buf, pos)
        rel, file_pos, ts = (a, b, None) if is_offset else (b, None, a)
        if rel == 0 and pos > 0:
            break
        rows.append({
            "position": pos, "index_type": index_type, "segment_base_offset": base_offset,
            "relative_offset": rel, "offset": base_offset + rel, "file_position": file_pos,
            "timestamp_ms": ts,
        })
        pos += size
    zero_run = _zero_run(buf, pos, whole_end)
    zero_fill = zero_run - zero_run % size
    tail = IndexTail(
        entry_size=size, entries=len(rows), end_position=pos, zero_fill_bytes=zero_fill,
        unexpected_bytes=whole_end - pos - zero_fill, partial_bytes=len(buf) - whole_end,
    )
    return rows, tail


def decode_txn_index(buf) -> tuple[list[dict], IndexTail]:
    """`.txnindex` AbortedTxn entries as TXNINDEX_ENTRY dicts.

    The file is appended to, never preallocated, so zeros are not special here. Kafka's iterator
    ignores a trailing partial entry and fails on an entry version above 0: decoding stops there,
    and the entries before it are kept (`IndexTail.error`).
    """
    rows = []
    size = TXN_INDEX_ENTRY_SIZE
    whole_end = len(buf) - len(buf) % size
    pos = 0
    error = None
    while pos < whole_end:
        try:
            row, pos = read_txn_index_entry(buf, pos)
        except DecodeError as e:
            error = e
            break
        rows.append(row)
    return rows, IndexTail(
        entry_size=size, entries=len(rows), end_position=pos, zero_fill_bytes=0,
        unexpected_bytes=whole_end - pos, partial_bytes=len(buf) - whole_end, error=error,
    )


def _zero_run(buf, start: int, end: int) -> int:
    """Length of the run of zero bytes in buf[start:end] starting at `start`."""
    pos = start
    while pos < end:
        chunk = bytes(buf[pos : min(end, pos + _ZERO_SCAN_CHUNK)])
        rest = chunk.lstrip(b"\x00")
        if rest:
            return pos + len(chunk) - len(rest) - start
        pos += len(chunk)
    return end - start


# ---------------------------------------------------------------- producer-state snapshot


def decode_producer_snapshot(buf, snapshot_offset: int) -> tuple[list[dict], SnapshotInfo]:
    """`<offset>.snapshot` producer entries as SNAPSHOT_ENTRY dicts (ProducerStateManager.readSnapshot).

    A CRC mismatch is data (`crc_ok` False on every row and in the info); an unknown version, a
    negative count or a cut file raise, as Kafka rejects the whole snapshot then.
    `first_sequence` is null when `last_offset` < 0: Kafka then keeps no batch metadata for the
    producer (DumpLogSegments prints no sequences).
    """
    version, pos = read_int16(buf, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise DecodeError(f"unknown producer snapshot version {version}", 0)
    crc, pos = read_uint32(buf, pos)
    computed = crc32c(bytes(buf[_SNAPSHOT_ENTRIES_OFFSET:]))
    crc_ok = crc == computed
    count, pos = read_int32(buf, pos)
    if count < 0:
        raise DecodeError(f"producer entry count {count} is negative", _SNAPSHOT_ENTRIES_OFFSET)
    # Bound the count by the bytes present before building anything from it.
    if count * SNAPSHOT_ENTRY_SIZE > len(buf) - pos:
        missing = count * SNAPSHOT_ENTRY_SIZE - (len(buf) - pos)
        raise Truncated(f"{count} producer entries: {missing} bytes missing",
                        _SNAPSHOT_ENTRIES_OFFSET, missing)
    rows = []
    for _ in range(count):
        start = pos
        (pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first), pos = (
            _read_snapshot_raw(buf, pos)
        )
        rows.append({
            "position": start, "snapshot_offset": snapshot_offset, "version": version,
            "crc": crc, "crc_ok": crc_ok, "producer_id": pid, "producer_epoch": epoch,
            "first_sequence": decrement_sequence(last_seq, delta) if last_offset >= 0 else None,
            "last_sequence": last_seq, "last_offset": last_offset, "offset_delta": delta,
            "timestamp_ms": ts, "coordinator_epoch": coord_epoch,
            "current_txn_first_offset": txn_first,   # -1 = no open transaction
        })
    info = SnapshotInfo(
        version=version, crc=crc, computed_crc=computed, crc_ok=crc_ok, count=count,
        end_position=pos, trailing_bytes=len(buf) - pos,
    )
    return rows, info


# ---------------------------------------------------------------- text files

# Java's readLine: a line ends at \n, \r or \r\n; a final unterminated line still counts.
_LINE = re.compile(rb"([^\r\n]*)(\r\n|\r|\n|$)")
_JAVA_INT = re.compile(r"[+-]?[0-9]+")   # Integer.parseInt / Long.parseLong (ASCII digits)
_JAVA_WS = re.compile(r"[ \t\n\x0b\f\r]+")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _lines(data: bytes) -> list[tuple[int, bytes]]:
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        m = _LINE.match(data, pos)
        out.append((pos, m.group(1)))
        pos = m.end()
    return out


def _text(raw: bytes, position: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"invalid UTF-8: {e}", position + e.start) from None


def _java_int(s: str, position: int, what: str, bounds=_INT32) -> int:
    if not _JAVA_INT.fullmatch(s):
        raise DecodeError(f"{what}: not a number: {s[:40]!r}", position)
    if len(s) > 21:   # longer than any int64; also keeps int() clear of its digit-count limit
        raise DecodeError(f"{what}: {s[:40]}... out of range", position)
    v = int(s)
    if not bounds[0] <= v <= bounds[1]:
        raise DecodeError(f"{what}: {v} out of range", position)
    return v


def _java_split(pattern: re.Pattern, line: str) -> list[str]:
    """String.split: like re.split, but trailing empty strings are dropped."""
    parts = pattern.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _checkpoint_lines(data, what: str, fields: int):
    """Kafka's CheckpointFile: version line (0), count line, then entry lines of `fields` words.

    Same acceptance as Kafka's reader: an empty file (or one with only a version) holds no
    entries; a wrong version, a malformed line or a count that differs from the lines raise
    DecodeError at the offending line. -> [(position, version, words)]
    """
    data = bytes(data)
    lines = _lines(data)
    if not lines:
        return []
    pos, raw = lines[0]
    version = _java_int(_text(raw, pos), pos, "checkpoint version")
    if version != 0:
        raise DecodeError(f"unrecognized {what} version {version}", pos)
    if len(lines) < 2:
        return []
    pos, raw = lines[1]
    expected = _java_int(_text(raw, pos), pos, "checkpoint entry count")
    out = []
    for pos, raw in lines[2:]:
        parts = _java_split(_JAVA_WS, _text(raw, pos))
        if len(parts) != fields:
            raise DecodeError(f"malformed {what} line {raw[:60]!r}", pos)
        out.append((pos, version, parts))
    if len(out) != expected:
        raise DecodeError(f"expected {expected} {what} entries, found {len(out)}", lines[1][0])
    return out


def decode_leader_epoch_checkpoint(data) -> list[dict]:
    """`leader-epoch-checkpoint`: `epoch start_offset` lines (LeaderEpochCheckpointFile)."""
    return [
        {
            "position": pos,
            "version": version,
            "leader_epoch": _java_int(parts[0], pos, "leader epoch"),
            "start_offset": _java_int(parts[1], pos, "start offset", _INT64),
        }
        for pos, version, parts in _checkpoint_lines(data, "leader-epoch-checkpoint", 2)
    ]


def decode_offset_checkpoint(data) -> list[dict]:
    """A log dir's `recovery-point-`, `replication-` (high watermarks), `log-start-` and
    `cleaner-offset-checkpoint`: `topic partition offset` lines (OffsetCheckpointFile)."""
    return [
        {
            "position": pos,
            "version": version,
            "topic": parts[0],
            "partition": _java_int(parts[1], pos, "partition"),
            "offset": _java_int(parts[2], pos, "offset", _INT64),
        }
        for pos, version, parts in _checkpoint_lines(data, "offset checkpoint", 3)
    ]


_COLON_WS = re.compile(r":[ \t\n\x0b\f\r]+")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+={0,2}")


def decode_partition_metadata(data) -> dict:
    """`partition.metadata` (`version: 0` / `topic_id: <base64url uuid>`) as a PARTITION_METADATA dict.

    Like Kafka's PartitionMetadataFile reader, the key names are not checked, only the
    `<key>: <value>` shape, version 0 and a topic id that decodes to 16 bytes.
    """
    data = bytes(data)
    lines = _lines(data)
    if len(lines) < 2:
        raise DecodeError("partition.metadata needs a version and a topic_id line", len(data))
    pos, raw = lines[0]
    parts = _java_split(_COLON_WS, _text(raw, pos))
    if len(parts) != 2:
        raise DecodeError(f"malformed partition.metadata line {raw[:60]!r}", pos)
    version = _java_int(parts[1], pos, "partition.metadata version")
    if version != 0:
        raise DecodeError(f"unrecognized partition.metadata version {version}", pos)
    pos, raw = lines[1]
    parts = _java_split(_COLON_WS, _text(raw, pos))
    if len(parts) != 2:
        raise DecodeError(f"malformed partition.metadata line {raw[:60]!r}", pos)
    topic_id = parts[1]
    _check_uuid(topic_id, pos)
    return {"position": 0, "version": version, "topic_id": topic_id}


def _check_uuid(s: str, position: int) -> None:
    """Kafka's Uuid.fromString: base64url (padding optional) of exactly 16 bytes."""
    if not _BASE64URL.fullmatch(s):
        raise DecodeError(f"topic id {s[:40]!r} is not base64url", position)
    unpadded = s.rstrip("=")
    try:
        raw = base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))
    except ValueError:
        raise DecodeError(f"topic id {s[:40]!r} is not base64url", position) from None
    if len(raw) != 16:
        raise DecodeError(f"topic id {s[:40]!r} decodes to {len(raw)} bytes, not 16", position)


def decode_meta_properties(data) -> dict:
    """`meta.properties` at a log dir's root as a LOG_DIR dict.

    `node_id` is `node.id` (KRaft) or else `broker.id` (ZooKeeper mode), so it always names the
    node; `broker_id` is `broker.id` only. A missing `version` is 0, as in Kafka's
    RawMetaProperties. `properties` keeps every key as JSON.
    """
    props = parse_java_properties(data)
    node = _prop_int(props, "node.id")
    broker = _prop_int(props, "broker.id")
    version = _prop_int(props, "version")
    return {
        "position": 0,
        "node_id": node if node is not None else broker,
        "broker_id": broker,
        "cluster_id": props.get("cluster.id"),
        "version": 0 if version is None else version,
        "directory_id": props.get("directory.id"),
        "properties": json.dumps(props, sort_keys=True),
    }


def _prop_int(props: dict, key: str) -> int | None:
    v = props.get(key)
    if v is None:
        return None
    return _java_int(v.strip(), 0, key)


_PROP_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_java_properties(data) -> dict[str, str]:
    """java.util.Properties.load(InputStream): ISO-8859-1, `#`/`!` comments, `\\` continuations,
    key/value split at the first unescaped `=`, `:` or whitespace, backslash escapes."""
    props: dict[str, str] = {}
    pending = None       # logical line being continued, and where it started
    start = 0
    for pos, raw in _lines(bytes(data)):
        line = raw.decode("latin-1").lstrip(_PROP_WS)   # latin-1: one char per byte, never fails
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = pos
            pending = ""
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:     # an odd run of backslashes escapes the line break
            pending += line[:-1]
            continue
        pending += line
        key, value = _split_property(pending, start)
        props[key] = value
        pending = None
    if pending:          # a continuation at the end of the file ends the logical line
        key, value = _split_property(pending, start)
        props[key] = value
    return props


def _split_property(line: str, position: int) -> tuple[str, str]:
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _PROP_WS:
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in _PROP_WS:
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in _PROP_WS:
            j += 1
    return _unescape(key, position), _unescape(line[j:], position)


def _unescape(s: str, position: int) -> str:
    if "\\" not in s:
        return s
    out = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= n:
            break                   # a lone trailing backslash is dropped, as Java does
        c = s[i + 1]
        if c == "u":
            hexits = s[i + 2 : i + 6]
            if len(hexits) != 4 or not all(h in "0123456789abcdefABCDEF" for h in hexits):
                raise DecodeError("malformed \\uxxxx escape in properties", position)
            out.append(chr(int(hexits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(c, c))
            i += 2
    return "".join(out)


def decode_quorum_state(data) -> dict:
    """KRaft `quorum-state` (JSON written by the raft layer), returned as is."""
    text = _text(bytes(data), 0)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        position = len(text[: e.pos].encode("utf-8"))   # JSON reports characters, we report bytes
        raise DecodeError(f"quorum-state is not JSON: {e.msg}", position) from None
    except ValueError as e:     # e.g. an integer past Python's digit-count limit
        raise DecodeError(f"quorum-state is not usable JSON: {e}", 0) from None
    except RecursionError:
        raise DecodeError("quorum-state JSON nests too deeply", 0) from None
    if not isinstance(value, dict):
        raise DecodeError("quorum-state is not a JSON object", 0)
    return value


# ---------------------------------------------------------------- file names


def offset_from_file_name(name: str) -> int:
    """Base offset from `<20 digits>.<suffix>` (Kafka: the name up to the first dot, as a long)."""
    head = name.rsplit("/", 1)[-1].split(".", 1)[0]
    return _java_int(head, 0, f"file name {name!r}", _INT64)
