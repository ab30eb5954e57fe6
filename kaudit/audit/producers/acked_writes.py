"""Acknowledged writes and what later holds their offsets: the vocabulary shared by the capture's
own check (wire_acked.py) and the join with the log dirs (audit/joint/acked_loss.py).

An acknowledged write is a Produce batch answered with error 0 and a base offset: it holds the
offsets [base, base + records - 1] of its partition. Another batch at those offsets is the same
write when it is the same producer id, epoch and base sequence at the same offsets (idempotent),
or, without idempotence (producer id -1), the same records (record_content.records_crc: the
checksum of the record bytes alone, whatever batch header the broker rewrote) at the same
offsets. A v2 batch keeps its base and last offset, producer fields and record bytes through
replication and compaction (MemoryRecords.filterTo keeps the base and last offset; it only
drops records), so anything else is another write.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.producers.record_content import records_crc
from kaudit.audit.registry import evidence
from kaudit.timefmt import iso_ms

# what a content comparison needs besides the join's columns
CONTENT_COLUMNS = ("magic", "crc", "batch_size", "attributes", "base_offset", "last_offset",
                   "base_timestamp_ms", "max_timestamp_ms", "producer_id", "producer_epoch",
                   "base_sequence", "record_count", "codec")
MAX_LISTED = 20   # writes named in a finding's details and evidence


@dataclass
class Batch:
    """A batch at absolute offsets: an acknowledged Produce batch, a fetched one or a stored one."""

    lo: int
    hi: int
    pid: int
    epoch: int
    seq: int
    count: int
    content: int | None     # records_crc, None where not computable
    codec: str | None
    magic: int
    row: dict               # the row it came from (source, position, connection, client_id, ...)

    @property
    def idempotent(self) -> bool:
        return self.pid >= 0

    def who(self) -> str:
        if self.idempotent:
            return (f"producer {self.pid} epoch {self.epoch} sequences {self.seq}-"
                    f"{self.seq + max(self.count - 1, 0)}")
        return "a non-idempotent batch"


def contents(rows: list[dict]) -> list[int | None]:
    """records_crc of each row (None where the row lacks what it needs)."""
    if not rows:
        return []
    cols = {c: [r.get(c) for r in rows] for c in CONTENT_COLUMNS if c != "codec"}
    t = pa.table(cols)
    ok = np.array([r.get("crc") is not None and r.get("batch_size") is not None and r.get("magic") is not None
                   and r.get("attributes") is not None for r in rows])
    out: list[int | None] = [None] * len(rows)
    if ok.any():
        vals = records_crc(t, ok)
        for i, v in zip(np.flatnonzero(ok).tolist(), vals.tolist()):
            out[i] = int(v)
    return out


def table_contents(t: pa.Table) -> list[int | None]:
    """records_crc of each row of a batch table (None where it lacks a CRC or size)."""
    if not t.num_rows:
        return []
    ok = np.ones(t.num_rows, dtype=bool)
    for c in ("crc", "batch_size", "magic", "attributes"):
        if c not in t.column_names:
            return [None] * t.num_rows
        ok &= ~t.column(c).is_null().to_numpy(zero_copy_only=False)
    out: list[int | None] = [None] * t.num_rows
    if ok.any():
        for i, v in zip(np.flatnonzero(ok).tolist(), records_crc(t, ok).tolist()):
            out[i] = int(v)
    return out


def merged(spans) -> tuple[np.ndarray, np.ndarray]:
    """Offset ranges [(lo, hi)] merged: (starts, ends), sorted and disjoint."""
    lo, hi = [], []
    for a, b in sorted(spans):
        if lo and a <= hi[-1] + 1:
            hi[-1] = max(hi[-1], b)
        else:
            lo.append(a)
            hi.append(b)
    return np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)


def read_committed_at(resp: dict, hi: int, transactional: bool, at: str) -> str | None:
    """Why a Fetch response that returned a write ending at offset `hi` shows it committed (a
    read_committed consumer given it below its last stable offset, or, outside a transaction, a
    high watermark past it), None if it does not. `at`: the response's time, as told."""
    lso, hw = resp.get("last_stable_offset"), resp.get("high_watermark")
    if resp.get("isolation_level") == "read_committed" and _or(resp.get("replica_id"), -1) < 0 and \
            lso is not None and lso > hi:
        return f"committed: read by read_committed consumer {resp.get('client_id') or '?'} at {at}"
    if hw is not None and hw > hi and not transactional:
        return f"committed: a Fetch response at {at} gave the high watermark {hw} past it"
    return None


def identity(lo, hi, pid, epoch, seq, crc) -> tuple:
    """A batch at offsets [lo, hi]: by its producer id, epoch and sequence, else by its CRC."""
    return (lo, hi, pid, epoch, seq) if pid is not None and pid >= 0 else (lo, hi, "crc", crc)


def overlap_mask(base: np.ndarray, last: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Rows [base, last] overlapping one of the disjoint sorted ranges [starts, ends]."""
    if not starts.size:
        return np.zeros(base.size, dtype=bool)
    i = np.searchsorted(starts, last, side="right") - 1
    return (i >= 0) & (ends[np.maximum(i, 0)] >= base)


def batch_of(r: dict, lo: int, content: int | None) -> Batch:
    """The batch of row `r` placed at absolute offset `lo` (its own last offset delta kept)."""
    span = r["last_offset"] - r["base_offset"] if r.get("last_offset") is not None and r.get("base_offset") is not None \
        else max((r.get("record_count") or 1) - 1, 0)
    pid = r.get("producer_id")
    return Batch(lo, lo + max(span, 0), -1 if pid is None else pid, _or(r.get("producer_epoch"), -1),
                 -1 if r.get("base_sequence") is None else r["base_sequence"], r.get("record_count") or 0,
                 content, r.get("codec"), 2 if r.get("magic") is None else r["magic"], r)


def same_write(a: Batch, b: Batch, stored: bool = True) -> bool | None:
    """Whether `b` (at offsets overlapping `a`'s) is the write `a`: True, False, or None when the
    batches cannot tell (an old message format; without idempotence, another compression codec
    - the broker may recompress - or, for a `stored` copy, fewer records: the log cleaner drops
    records but keeps the batch's offsets)."""
    if a.magic < 2 or b.magic < 2:
        return None
    if a.idempotent or b.idempotent:
        return (a.lo, a.hi, a.pid, a.epoch, a.seq) == (b.lo, b.hi, b.pid, b.epoch, b.seq)
    if (a.lo, a.hi) != (b.lo, b.hi):
        return False
    if a.count != b.count:
        return None if stored and b.count < a.count else False
    if a.row.get("crc") is not None and a.row.get("crc") == b.row.get("crc"):
        return True    # the batch's bytes from attributes on: the very batch
    if (a.codec and b.codec and a.codec != b.codec) or None in (a.content, b.content):
        return None
    return a.content == b.content


def overlaps(a: Batch, b: Batch) -> bool:
    return a.lo <= b.hi and b.lo <= a.hi


def acks_words(acks) -> str:
    return {-1: "acks=all", 1: "acks=1", 0: "acks=0"}.get(acks, f"acks={acks}")


def ack_text(w: Batch) -> str:
    r = w.row
    return (f"{w.who()} (client {r.get('client_id') or '?'}, {acks_words(r.get('acks'))}, acknowledged at offset "
            f"{w.lo} at {iso_ms(_ms(r.get('response_ts')))})")


def ack_detail(w: Batch, state: str | None = None) -> dict:
    r = w.row
    d = {"offsets": [w.lo, w.hi], "acknowledged_ts_ms": _ms(r.get("response_ts")), "client_id": r.get("client_id"),
         "connection": r.get("connection"), "acks": r.get("acks"), "producer_id": w.pid if w.idempotent else None,
         "producer_epoch": w.epoch if w.idempotent else None, "base_sequence": w.seq if w.idempotent else None,
         "transactional": bool(r.get("is_transactional")), "records": w.count}
    if state is not None:
        d["state"] = state
    return d


def ack_evidence(w: Batch, note: str | None = None) -> dict:
    r = w.row
    return evidence(r.get("source"), r.get("position"), "produce",
                    note or f"acknowledged at offset {w.lo} (corr {r.get('correlation_id')} on {r.get('connection')})")


def loss_severity(acks, transactional: bool, committed: bool) -> str:
    """critical once the write reached a committed state (acks=all without a transaction: the
    leader answers only once the high watermark passed it; a transaction seen committed; a
    read_committed consumer given it), error for an acks=all write of a transaction whose
    outcome is not known, warning for a write only the leader had acknowledged (acks=1: Kafka
    documents that a leader change may lose it)."""
    if committed or (acks == -1 and not transactional):
        return "critical"
    return "error" if acks == -1 else "warning"


def committed_state(acks, transactional: bool, seen: str | None) -> str:
    if seen:
        return seen
    if acks == -1 and not transactional:
        return "committed: acknowledged with acks=all, so the high watermark had passed it"
    if acks == -1:
        return "acknowledged with acks=all, its transaction's outcome not seen"
    return f"acknowledged by the leader alone ({acks_words(acks)})"


def _or(v, default):
    return default if v is None else v


def _ms(ts) -> int | None:
    return None if ts is None else int(ts * 1000)


def ms(ts) -> int | None:
    return _ms(ts)


def acked_batches(rows: list[dict]) -> list[Batch]:
    """The acknowledged writes among Produce batch rows, at their absolute offsets: the k-th batch
    of one partition in one request starts where the previous ones' records end."""
    rows = [r for r in rows if r.get("response_error") == 0 and _or(r.get("response_base_offset"), -1) >= 0
            and not r.get("is_control")]
    return _placed(rows, contents(rows))


def acked_batches_table(t: pa.Table, columns=None) -> list[Batch]:
    """acked_batches of a Produce batch table's rows in its order: the same writes, filtered and
    checksummed in Arrow (only the acknowledged rows become dicts, of `columns` where given:
    those their readers read)."""
    if not t.num_rows:
        return []
    ok = pc.and_(pc.fill_null(pc.equal(t.column("response_error"), 0), False),
                 pc.greater_equal(pc.fill_null(t.column("response_base_offset"), -1), 0))
    ok = pc.and_(ok, pc.invert(pc.fill_null(t.column("is_control"), False)))
    t = t.filter(ok)
    rows = (t if columns is None else t.select([c for c in t.column_names if c in columns])).to_pylist()
    return _placed(rows, table_contents(t))


def _placed(rows: list[dict], sums: list) -> list[Batch]:
    out, nxt = [], {}
    for r, c in zip(rows, sums):
        k = (r.get("source"), r.get("connection"), r.get("position"), r.get("correlation_id"), r.get("topic"),
             r.get("partition"), r["response_base_offset"])
        lo = nxt.get(k, r["response_base_offset"])
        b = batch_of(r, lo, c)
        nxt[k] = b.hi + 1
        out.append(b)
    return out


def note_ends(acked: list[Batch], ends: dict, lost: dict, seen: dict) -> None:
    """A lost transactional write whose transaction the client was told committed: the next
    EndTxn of its producer id and epoch the capture shows answered without error, after the write
    was sent, is a COMMIT - the coordinator had decided it (PrepareCommit written) and it is as
    committed as acks=all data (as the joint audit's acknowledged-write-lost judges it)."""
    for w in acked:
        if id(w) not in lost or id(w) in seen or not w.row.get("is_transactional"):
            continue
        sent = w.row.get("request_ts") or 0
        end = next(((ts, res) for ts, res in ends.get((w.pid, w.epoch), ()) if ts > sent), None)
        if end is not None and end[1] == "COMMIT":
            seen[id(w)] = f"committed: the client was told its transaction committed (EndTxn) at {iso_ms(ms(end[0]))}"
