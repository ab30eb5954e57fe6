"""Topic ids to topic names (KIP-516), for every row and finding.

Produce v13 and Fetch v13+ name their topics by a 16-byte id only (rows: `topic_id`, `topic`
null). The names come from wherever the evidence maps ids to names: the topics of Metadata
(v10+), CreateTopics (v7+) and DescribeTopicPartitions responses anywhere in the captures
(`topic_name` rows: a response later in the capture counts too), and each partition dir's
`partition.metadata` in log dirs (disk batch rows carry both; `partition_metadata` rows); and,
for an id none of those names, a batch seen under a name too (`BatchNames`).

`TopicNames` learns them from row chunks and resolves chunks (`resolve`), a stream with its
unnamed chunks held back until a name arrives or the stream ends (`resolve_stream`), the topic
of a fold's rows (`label`: an id no evidence names stands for its topic, so keys stay apart),
and findings (`name_findings`: the name where known, else the id and a sentence saying so).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# kinds whose rows carry topic + topic_id columns
ID_KINDS = ("batch", "fetch_partition")
PRODUCE, FETCH = 0, 1
MAX_HELD_BYTES = 64 << 20
UNNAMED = ("no Metadata, CreateTopics or DescribeTopicPartitions response in the captures and no "
           "partition.metadata in the log dirs names it")


class TopicNames:
    def __init__(self, names: dict[str, str] | None = None):
        self.names: dict[str, str] = dict(names or {})
        self.seen_ids: set[str] = set()      # ids met in rows (named or not)

    # -- learning ------------------------------------------------------------------------------
    def learn(self, kind: str, table: pa.Table) -> bool:
        """Take the id -> name facts of a chunk (`topic_name`, `partition_metadata` rows); True
        when a new name was learned."""
        if kind in ("topic_name", "partition_metadata"):
            if table.num_rows == 0 or table.column("topic_id").null_count == table.num_rows:
                return False
            n = len(self.names)
            # distinct pairs in order of appearance (a chunk repeats a few pairs many times)
            pairs = dict.fromkeys(zip(table.column("topic_id").to_pylist(), table.column("topic").to_pylist()))
            for tid, name in pairs:
                if tid and name:
                    self.names.setdefault(tid, name)
            return len(self.names) > n
        return False

    def add(self, names: dict[str, str]) -> None:
        for tid, name in names.items():
            if tid and name:
                self.names.setdefault(tid, name)

    # -- resolving rows --------------------------------------------------------------------------
    def unnamed(self, kind: str, table: pa.Table) -> bool:
        """Whether a chunk has rows whose topic only an id no known name matches gives."""
        if kind in ID_KINDS and "topic_id" in table.schema.names:
            mask = pc.and_(pc.is_null(table.column("topic")), pc.is_valid(table.column("topic_id")))
            if not pc.any(mask).as_py():
                return False
            ids = pc.unique(table.column("topic_id").filter(mask)).to_pylist()
            self.seen_ids.update(ids)
            return any(i not in self.names for i in ids)
        if kind == "frame":
            return any(i not in self.names for i in _frame_ids(table))
        return False

    def resolve(self, kind: str, table: pa.Table) -> pa.Table:
        """The chunk with `topic` filled where its `topic_id` has a known name (and, in frames,
        the partition lists of Produce/Fetch v13+ named)."""
        if not self.names or table.num_rows == 0:
            return table
        if kind in ID_KINDS and "topic_id" in table.schema.names:
            topic = table.column("topic")
            if topic.null_count == 0:
                return table
            looked = self._lookup(table.column("topic_id"))
            i = table.schema.get_field_index("topic")
            return table.set_column(i, table.schema.field(i), pc.coalesce(topic, looked))
        if kind == "frame":
            return self._resolve_frames(table)
        return table

    def _lookup(self, ids) -> pa.ChunkedArray:
        keys = pa.array(list(self.names), pa.string())
        values = pa.array(list(self.names.values()), pa.string())
        return pc.take(values, pc.index_in(ids.cast(pa.string()), value_set=keys))

    def _resolve_frames(self, table: pa.Table) -> pa.Table:
        rows = _id_frames(table)
        if not len(rows):
            return table
        out = {}
        for name in ("partitions", "partition_errors"):
            if name not in table.schema.names:
                continue
            col = table.column(name).to_pylist()
            for r in rows:
                if col[r] is not None:
                    col[r] = _rename(col[r], self.names, name == "partition_errors")
            out[name] = pa.array(col, pa.string())
        for name, arr in out.items():
            i = table.schema.get_field_index(name)
            table = table.set_column(i, table.schema.field(i), arr)
        return table

    def resolve_stream(self, chunks: Iterable[tuple[str, pa.Table]],
                       max_held_bytes: int = MAX_HELD_BYTES) -> Iterator[tuple[str, pa.Table]]:
        """The chunks resolved in order; a kind's chunk with an id no name matches yet is held
        back, with that kind's later chunks (their order kept), until a name for each of its
        ids arrives or the stream ends. Memory is bounded: past `max_held_bytes` held, the
        held chunks go out as they are (an id that stays unnamed - an internal topic no client
        asks about - would otherwise hold every later chunk)."""
        held: dict[str, list[pa.Table]] = {}
        size = 0
        for kind, table in chunks:
            learned = self.learn(kind, table)
            if kind in held or self.unnamed(kind, table):
                held.setdefault(kind, []).append(table)
                size += table.nbytes
            else:
                yield kind, self.resolve(kind, table)
            if learned or size > max_held_bytes:
                for k in list(held):
                    if size > max_held_bytes or not any(self.unnamed(k, t) for t in held[k]):
                        for t in held.pop(k):
                            yield k, self.resolve(k, t)
                size = sum(t.nbytes for ts in held.values() for t in ts)
        for k, ts in held.items():
            for t in ts:
                yield k, self.resolve(k, t)

    # -- folds and findings ----------------------------------------------------------------------
    def label(self, table: pa.Table) -> pa.Table:
        """A fold's rows with `topic` resolved and, where no name is known, the topic id in its
        place: rows of two unnamed topics never share a key. `name_findings` undoes it. Frames
        (with their api key and version) get their partition lists named."""
        if {"partitions", "api_key", "api_version"} <= set(table.schema.names):
            return self._resolve_frames(table) if self.names and table.num_rows else table
        if "topic" not in table.schema.names or "topic_id" not in table.schema.names:
            return table
        topic = table.column("topic")
        if topic.null_count == 0:
            return table
        tid = table.column("topic_id")
        self.seen_ids.update(x for x in pc.unique(tid.filter(pc.is_null(topic))).to_pylist() if x)
        filled = pc.coalesce(topic, self._lookup(tid), tid.cast(pa.string())) if self.names \
            else pc.coalesce(topic, tid.cast(pa.string()))
        i = table.schema.get_field_index("topic")
        return table.set_column(i, table.schema.field(i), filled)

    def name_findings(self, findings: list[dict]) -> list[dict]:
        """Findings with `topic_id` set where the topic's id is known, and those whose topic is
        an id no evidence names with `topic` null and a sentence saying so."""
        by_name: dict[str, set] = {}
        for tid, name in self.names.items():
            by_name.setdefault(name, set()).add(tid)
        for f in findings:
            t = f.get("topic")
            if t is None:
                continue
            if t in self.seen_ids and t not in self.names and t not in by_name:
                f["topic_id"], f["topic"] = t, None
                note = f" (topic id {t}: {UNNAMED})"
                f["message"] = f["message"] + note
                if f.get("remediation") and f"--topic {t}" in f["remediation"]:
                    f["remediation"] = f["remediation"].replace(
                        f"--topic {t}", f"--topic <the name of topic id {t}>")
            elif f.get("topic_id") is None and len(by_name.get(t, ())) == 1:
                f["topic_id"] = next(iter(by_name[t]))
        return findings


class BatchNames:
    """Topic ids the batches themselves name. A batch the captures show under a topic name and
    again under a topic id - the same partition, producer id, epoch, base sequence and CRC (a
    checksum of its bytes from the attributes on): the same batch, a Produce v12 by name and a
    follower's or consumer's Fetch v13+ by id - names the id, where every such batch says the
    same name. Only a name the protocol gave votes: a row whose name came from its own topic id
    is of another topic than every other id. Batches without a producer id are left out (a CRC
    alone may meet another's).
    Each chunk keeps a 64-bit key per batch and its topic's code: no row of Python objects; at
    most MAX_KEYS a side, the oldest chunks let go first (a live capture runs for days; a
    follower fetches what was just written)."""

    COLUMNS = ("topic", "topic_id", "partition", "producer_id", "producer_epoch", "base_sequence", "crc", "crc_ok")
    MAX_KEYS = 1 << 21
    GATHER = 64   # this many chunks' keys gathered into one part (a live capture's thousands of small arrays)

    def __init__(self):
        self.named: deque[tuple[np.ndarray, np.ndarray, list]] = deque()   # (keys, codes, names)
        self.ids: deque[tuple[np.ndarray, np.ndarray, list]] = deque()     # (keys, codes, topic ids)
        self.kept = {"named": 0, "ids": 0}   # keys held a side
        self.loose = {"named": 0, "ids": 0}  # parts at the end of a side not gathered yet

    def note(self, table: pa.Table) -> None:
        if table.num_rows == 0 or not set(self.COLUMNS) <= set(table.schema.names):
            return
        cols = {c: table.column(c) for c in ("partition", "producer_id", "producer_epoch", "base_sequence", "crc")}
        ok = np.asarray(pc.fill_null(table.column("crc_ok"), False), bool)
        for c in cols.values():
            ok &= ~np.asarray(c.is_null(), bool)
        v = {c: np.asarray(pc.fill_null(col, 0), np.int64) for c, col in cols.items()}
        ok &= v["producer_id"] >= 0
        if not ok.any():
            return
        v = {c: a.astype(np.uint64) for c, a in v.items()}
        key = ((v["producer_id"] * np.uint64(0x9E3779B97F4A7C15)) ^ (v["base_sequence"] * np.uint64(0xBF58476D1CE4E5B9))
               ^ (v["crc"] * np.uint64(0x94D049BB133111EB)) ^ (v["partition"] << np.uint64(40))
               ^ (v["producer_epoch"] << np.uint64(20)))
        topic, tid = table.column("topic"), table.column("topic_id")
        no_name, no_id = np.asarray(topic.is_null(), bool), np.asarray(tid.is_null(), bool)
        # a name votes only where the protocol gave it (no id): a row named through its own id
        # is another topic than any other id (a transactional producer's identical batch to
        # a-0 and b-0 would name a's id after b)
        named = ok & ~no_name & no_id
        unnamed = ok & no_name & ~no_id
        for mask, col, side in ((named, topic, "named"), (unnamed, tid, "ids")):
            if mask.any():
                enc = pc.dictionary_encode(col.filter(pa.array(mask))).combine_chunks()
                self._keep(side, (key[mask], np.asarray(enc.indices, np.int32), enc.dictionary.to_pylist()))

    def _keep(self, side: str, part: tuple) -> None:
        into = getattr(self, side)
        into.append(part)
        self.kept[side] += len(part[0])
        self.loose[side] = min(self.loose[side] + 1, len(into))
        if self.loose[side] >= self.GATHER:
            into.append(_gathered([into.pop() for _ in range(self.loose[side])][::-1]))
            self.loose[side] = 0
        while len(into) > 1 and self.kept[side] > self.MAX_KEYS:
            self.kept[side] -= len(into.popleft()[0])
            self.loose[side] = min(self.loose[side], len(into))

    def merge(self, other: "BatchNames") -> None:
        for side in ("named", "ids"):
            for part in getattr(other, side):
                self._keep(side, part)

    def names(self, known: dict[str, str]) -> dict[str, str]:
        """id -> name for the ids no name in `known` has that the batches name, one name each."""
        if not self.ids or not self.named:
            return {}
        ukey, uid = _flat(self.ids)
        nkey, nname = _flat(self.named)
        order = np.argsort(nkey, kind="stable")
        nkey, nname = nkey[order], nname[order]
        lo, hi = np.searchsorted(nkey, ukey, "left"), np.searchsorted(nkey, ukey, "right")
        hit = hi > lo
        votes: dict[str, set] = {}
        for i, a, b in zip(np.flatnonzero(hit).tolist(), lo[hit].tolist(), hi[hit].tolist()):
            votes.setdefault(uid[i], set()).update(nname[a:b].tolist())
        return {t: next(iter(ns)) for t, ns in votes.items() if len(ns) == 1 and t not in known}


def _gathered(parts) -> tuple[np.ndarray, np.ndarray, list]:
    """BatchNames' parts as one: the keys in order, the codes of one list of names."""
    index: dict = {}
    codes = [np.array([index.setdefault(v, len(index)) for v in vals], np.int32)[c] if len(c) else c
             for _, c, vals in parts]
    return np.concatenate([k for k, _, _ in parts]), np.concatenate(codes).astype(np.int32), list(index)


def _flat(parts) -> tuple[np.ndarray, np.ndarray]:
    """BatchNames' chunks as (keys, the topic or id of each, as an object array)."""
    keys = np.concatenate([k for k, _, _ in parts])
    values = np.concatenate([np.asarray(vals, dtype=object)[codes] for _, codes, vals in parts])
    return keys, values


def _id_frames(table: pa.Table):
    """Row numbers of the Produce and Fetch frames of v13+ (their partitions are named by id)."""
    key, ver = table.column("api_key"), table.column("api_version")
    mask = pc.and_(pc.is_in(key, pa.array([PRODUCE, FETCH], key.type)),
                   pc.greater_equal(ver, pa.scalar(13, ver.type)))
    mask = pc.fill_null(mask, False)
    return np.flatnonzero(mask.to_numpy(zero_copy_only=False))


TOPIC_PARTITION = re.compile(r"^(?P<topic>.+)-(?P<partition>-?\d+)$")


def _frame_ids(table: pa.Table) -> set[str]:
    ids: set[str] = set()
    rows = _id_frames(table)
    if len(rows):
        col = table.column("partitions")
        for r in rows:
            s = col[int(r)].as_py()
            for tp in (s or "").split(","):
                m = TOPIC_PARTITION.match(tp)
                if m:
                    ids.add(m["topic"])
    return ids


def _rename(s: str, names: dict[str, str], is_json: bool) -> str:
    if is_json:
        try:
            rows = json.loads(s)
        except ValueError:
            return s
        return json.dumps([[r[0], names.get(r[1], r[1]), *r[2:]] if isinstance(r, list) and len(r) > 1
                           and isinstance(r[1], str) else r for r in rows], default=str)
    out = []
    for tp in s.split(","):
        m = TOPIC_PARTITION.match(tp)
        out.append(f"{names.get(m['topic'], m['topic'])}-{m['partition']}" if m else tp)
    return ",".join(out)


def from_plan(plan) -> dict[str, str]:
    """The id -> name facts of a log-dir plan: each partition dir's partition.metadata, then
    the KRaft metadata log's TopicRecords (topics no partition dir of the inputs holds too)."""
    from kaudit.sources.cluster_metadata import names

    out: dict[str, str] = {}
    for t in plan.targets:
        if getattr(t, "topic_id", None) and t.topic and t.topic != "__cluster_metadata":
            out.setdefault(t.topic_id, t.topic)
    for tid, name in names(plan).items():
        out.setdefault(tid, name)
    return out
