"""The join by record content: where the log holds the records of a Produce whose outcome the
client did not learn, whatever batch header they were stored under.

A send that got no answer, or an error, is resolved by its batch key first (join.py: the same
producer id, epoch and base sequence, or the same CRC without idempotence). That misses the
records when they were sent again under another header: an idempotent producer's own epoch bump
and sequence reset after unresolved batches (KIP-360: TransactionManager bumps the epoch with
InitProducerId and re-sends the in-flight batches from sequence 0), or an application that
restarted under a new producer id. The records' own checksum (record_content.records_crc: keys,
values, headers, offset and timestamp deltas, count and size) finds them under any producer id,
epoch or sequence.

Both taps compute fingerprints only where they can matter: the wire's for the sends without a
clean acknowledgement (few), the log's only on the partitions of such sends, vectorised.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa

from kaudit.audit.folds import constant
from kaudit.audit.producers.record_content import np_col
from kaudit.audit.producers.repeated_records import content_fingerprints
from kaudit.audit.producers.wire_resends import RESTART_WINDOW_S

# the batch columns a fingerprint needs besides the join's own (crc, max_timestamp_ms, producer id,
# epoch, base sequence, record count)
CONTENT_INPUTS = ("magic", "attributes", "batch_size", "base_offset", "last_offset", "base_timestamp_ms")


def _fingerprints(t: pa.Table, mask: np.ndarray) -> pa.Array:
    """int64 fingerprints of the records of the rows of `t` selected by `mask`, null elsewhere."""
    out = np.zeros(t.num_rows, dtype=np.int64)
    if mask.any():
        out[mask] = content_fingerprints(t, mask).view(np.int64)
    return pa.array(out, type=pa.int64(), mask=~mask)


def with_content(sel: pa.Table, keep: tuple[str, ...]) -> pa.Table:
    """The wire's Produce selection `sel` as the join reads it (`keep` columns) with `content`:
    the records' fingerprint of each send not acknowledged without error (no answer with acks
    other than 0, or an error), null for the others."""
    err = np_col(sel, "response_error", -2, np.int64)       # -2: no answer
    acks = np_col(sel, "acks", -1, np.int64)
    uncertain = (err != 0) & ~((err == -2) & (acks == 0))
    return sel.select(list(keep)).append_column("content", _fingerprints(sel, uncertain))


def _on(t: pa.Table, tps: set) -> np.ndarray:
    """The rows of `t` in the (topic, partition) pairs `tps` (a log chunk is one file: one pair)."""
    ok_t, topic = constant(t.column("topic"))
    ok_p, part = constant(t.column("partition"))
    if ok_t and ok_p:
        return np.full(t.num_rows, (topic, part) in tps)
    return np.fromiter(((a, b) in tps for a, b in zip(t.column("topic").to_pylist(),
                                                        t.column("partition").to_pylist())),
                       dtype=bool, count=t.num_rows)


def disk_content(t: pa.Table, tps: set, contents: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """(the `content` column, the rows whose records equal an uncertain send's) of a chunk of
    log batches: fingerprints only on the partitions `tps` of the wire's uncertain sends."""
    n = t.num_rows
    if not tps or not len(contents):
        return pa.nulls(n, pa.int64()), np.zeros(n, dtype=bool)
    cand = _on(t, tps) & ~np_col(t, "is_control", False, bool)
    col = _fingerprints(t, cand)
    hit = cand.copy()
    if cand.any():
        hit[cand] = np.isin(col.to_numpy(zero_copy_only=False)[cand], contents)
    return col, hit


def index(disk: list[dict]) -> dict:
    """(topic, partition, fingerprint) -> the log's data batches holding those records."""
    out = defaultdict(list)
    for d in disk:
        if not d["is_control"] and d.get("content") is not None:
            out[(d["topic"], d["partition"], d["content"])].append(d)
    return out


def acknowledged(produce: list[dict], wire_key) -> dict:
    """wire key -> when a send of it was first acknowledged without error (the application's own
    sends: a batch stored by one of them before a failed send was made is not its copy)."""
    out: dict = {}
    for r in produce:
        if r["response_error"] == 0:
            t = r.get("response_ts") or r.get("request_ts")
            if t is not None:
                k = wire_key(r)
                out[k] = min(t, out.get(k, t))
    return out


def copies(attempts: list[dict], key: tuple, by_content: dict, earlier: dict, wire_key) -> list[dict]:
    """The log's batches that hold the records of a send (`attempts`, one batch sent once or
    more) under another batch key - re-sent under a bumped epoch, another producer id, new batch
    timestamps; not under other sequences of its own producer epoch (`_same_session`) -
    written within RESTART_WINDOW_S of it (by the batch's create time). A batch a
    send acknowledged before this one was made is the application's own earlier send of the same
    values, not a copy of this one (`earlier`: wire key -> the time it was acknowledged)."""
    t0 = min((a["request_ts"] for a in attempts if a.get("request_ts") is not None), default=None)
    if t0 is None:
        return []
    out, seen = [], set()
    for a in attempts:
        fp = a.get("content")
        if fp is None:
            continue
        for d in by_content.get((a["topic"], a["partition"], fp), ()):
            k = wire_key(d)
            ts = d.get("max_timestamp_ms")
            if k == key or d["record_count"] != a["record_count"] or ts is None or ts < 0:
                continue
            if _same_session(a, d):
                continue   # other sequences of the same producer epoch: another send, never a re-send
            if abs(ts / 1000 - t0) > RESTART_WINDOW_S:
                continue
            acked = earlier.get(k)
            if acked is not None and acked < t0:
                continue
            if (d["replica"], d["base_offset"]) not in seen:
                seen.add((d["replica"], d["base_offset"]))
                out.append(d)
    return out


def _same_session(a: dict, d: dict) -> bool:
    """Whether log batch `d` is of the same idempotent producer id and epoch as send `a`: its
    sequences then name another batch (a producer retries a batch with the sequences it first
    had - RecordAccumulator; it re-sequences only after an epoch bump, KIP-360)."""
    pid = a.get("producer_id")
    return pid is not None and pid >= 0 and d.get("producer_id") == pid \
        and d.get("producer_epoch") == a.get("producer_epoch") and d.get("base_sequence") != a.get("base_sequence")


def describe(d: dict, pid) -> str:
    """Who stored a copy, said against the send's producer id `pid`."""
    who = d["producer_id"]
    if who is None or who < 0:
        return "a producer without idempotence"
    how = ("a later epoch of the same producer id (a later transaction: transaction version 2 bumps the "
           "epoch at each end, a new instance's InitProducerId at its start)" if who == pid and d.get("is_transactional")
           else "a bumped epoch (KIP-360: the producer reset its sequences)" if who == pid
           else "another producer id (a new producer session)")
    return f"producer {who} epoch {d['producer_epoch']} sequences {d['base_sequence']}-{d['last_sequence']}, {how}"
