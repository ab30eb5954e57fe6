"""A Produce the capture holds no answer to, shown stored by a Fetch that served its batch
(wire-acked's; audit/fetched_copies.py): told as its produce-outcome, which settles the request's
unanswered-request (stories.incidents.settle_unanswered) - a fact of the crash or the reconnect,
not a suspicion - and proves stored a first send that a new producer session re-sent
(duplicate-records, raised by the same settling).

An idempotent producer's batch is known by its identity (producer id, partition, epoch, first
sequence: stored once), and only a consumer's Fetch counts (replica id -1): a consumer reads
below the high watermark, so the batch it was served was committed; a follower's Fetch reads the
leader's uncommitted tail, which a leader change may still truncate. A batch without a producer
id is known by its bytes (fetched_copies.anonymous_pairs), and any Fetch counts: the broker
stores every attempt anew, so a copy at an offset no write of those bytes was acknowledged at,
beside the retry acknowledged elsewhere, is the duplicate consumers process twice
(duplicate-records, error).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.fetched_copies import anonymous_pairs, copy_pairs, unanswered_writes
from kaudit.audit.fold_tables import np_indices, np_mask
from kaudit.audit.registry import evidence, finding
from kaudit.timefmt import iso_ms

KIND = "stored_unanswered"   # wire-acked's prepared rows: an unanswered write with its copy's columns
WRITE = ("source", "connection", "position", "request_ts", "topic", "topic_id", "partition", "correlation_id",
         "client_id", "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count", "crc")
COPY = ("source", "connection", "position", "response_ts", "client_id", "base_offset")
EXCHANGE = ("source", "connection", "position")   # a Fetch response: its request's replica id is for all its rows


def unanswered(t: pa.Table):
    """The Produce rows without an answer: neither its time nor its error."""
    return pc.and_(unanswered_writes(t), pc.is_null(t.column("response_error")))


def where(t: pa.Table):
    """The rows wire-acked selects for this: a Produce without an answer (acks=0 expects none)."""
    return pc.and_(unanswered(t), pc.fill_null(pc.not_equal(t.column("acks"), 0), True))


def split(items: list[tuple[str, pa.Table]]) -> tuple[list, list]:
    """(`items` less their unanswered writes, [(KIND, those a Fetch served a copy of - a
    consumer's for an idempotent producer - with the first such copy's columns as copy_*, and
    acked_at: the offset an acknowledged write of the same bytes was given, -1 none)])."""
    masks = {i: np.asarray(unanswered(t)) for i, (k, t) in enumerate(items)
             if k == "batch" and t is not None and t.num_rows}
    if not any(m.any() for m in masks.values()):
        return items, []
    b = pa.concat_tables([items[i][1] for i in masks])
    rest = [(k, t.filter(np_mask(~masks[i])) if i in masks and masks[i].any() else t) for i, (k, t) in enumerate(items)]
    unans = np.concatenate([masks[i] for i in masks])
    writes, copies = copy_pairs(b, unanswered=unans)
    if writes.size:
        # the whole batch served (a copy of fewer records is another batch: a split's re-send)
        count = b.column("record_count")
        keep = np.array(count.take(np_indices(writes)).to_pylist()) == np.array(count.take(np_indices(copies)).to_pylist())
        keep &= _consumers(b, copies, [t for k, t in items if k == "fetch_partition" and t is not None and t.num_rows])
        writes, copies = writes[keep], copies[keep]
    acked = np.full(writes.size, -1, np.int64)
    aw, ac, aa = anonymous_pairs(b, unans)
    writes, copies, acked = np.concatenate([writes, aw]), np.concatenate([copies, ac]), np.concatenate([acked, aa])
    # served after the write was sent (before it, the leader could not hold it)
    sent = _times(b, "request_ts", writes)
    keep = ~np.isnan(sent) & (_times(b, "response_ts", copies) >= sent)
    writes, copies, acked = writes[keep], copies[keep], acked[keep]
    if not writes.size:
        return rest, []
    # each write's first copy served, in the fold's order (its answer's time, capture, frame): the
    # same whatever the rows' order in the table
    pos = np.asarray(b.column("position").take(np_indices(copies)).fill_null(-1), dtype=np.int64)
    src = np.array([x or "" for x in b.column("source").take(np_indices(copies)).to_pylist()], dtype=str)
    order = np.lexsort((copies, pos, src, _times(b, "response_ts", copies), writes))
    first = np.r_[True, writes[order][1:] != writes[order][:-1]]
    writes, copies, acked = writes[order][first], copies[order][first], acked[order][first]
    w = b.take(np_indices(writes)).select(list(WRITE))
    c = b.take(np_indices(copies)).select(list(COPY))
    for name in COPY:
        w = w.append_column(f"copy_{name}", c.column(name))
    return rest, [(KIND, w.append_column("acked_at", pa.array(acked, pa.int64())))]


def _times(b: pa.Table, col: str, rows: np.ndarray) -> np.ndarray:
    return np.asarray(b.column(col).take(np_indices(rows)).to_numpy(zero_copy_only=False), dtype=np.float64)


def _consumers(b: pa.Table, copies: np.ndarray, responses: list[pa.Table]) -> np.ndarray:
    """Which of the copies a consumer's Fetch served (its response's partition rows: replica id -1)."""
    ours = set()
    for t in responses:
        ids = t.column("replica_id").to_pylist()
        for k, rid in zip(zip(*(t.column(c).to_pylist() for c in EXCHANGE)), ids):
            if rid is not None and rid < 0:
                ours.add(k)
    got = zip(*(b.column(c).take(np_indices(copies)).to_pylist() for c in EXCHANGE))
    return np.array([k in ours for k in got], dtype=bool)


def findings(topic: str, partition: int, t: pa.Table) -> list[dict]:
    """The produce-outcome of each of a partition's unanswered writes a Fetch served; and where
    a write without a producer id was also acknowledged at another offset (a retry), the
    duplicate-records of the two copies."""
    out = []
    for r in t.to_pylist():
        n, lo = r["record_count"] or 0, r["copy_base_offset"]
        hi = None if lo is None else lo + max(n, 1) - 1
        served = (f"served this batch at offset {lo}" if r["producer_id"] is not None and r["producer_id"] >= 0
                  else f"served the same bytes at offset {lo}")
        copy = (f"{_whose(r)} Fetch (client {r['copy_client_id'] or '?'}, answered at "
                f"{iso_ms(_ms(r['copy_response_ts']))}) {served}")
        ev = [evidence(r["source"], r["position"], "produce", f"corr {r['correlation_id']} on {r['connection']}"),
              evidence(r["copy_source"], r["copy_position"], "fetch", f"offset {lo} on {r['copy_connection']}")]
        fields = dict(topic=topic, partition=partition, topic_id=r["topic_id"], connection=r["connection"],
                      client_id=r["client_id"], first_ts_ms=_ms(r["request_ts"]))
        if r["producer_id"] is not None and r["producer_id"] >= 0:
            who = f"producer {r['producer_id']} epoch {r['producer_epoch']} sequences {r['base_sequence']}-{r['last_sequence']}"
            verdict, outcome, sev = ("stored once (the broker stores a producer session's batch once) - nothing lost",
                                     "stored once", "info")
            fields.update(producer_id=r["producer_id"], producer_epoch=r["producer_epoch"],
                          base_sequence=r["base_sequence"], last_sequence=r["last_sequence"])
        elif r["acked_at"] >= 0:
            who = f"non-idempotent batch crc {r['crc']}"
            verdict, outcome, sev = (f"stored twice - the same bytes were acknowledged at offset {r['acked_at']} too "
                                     "(producer id -1: the broker cannot deduplicate)", "stored twice", "warning")
        else:
            who = f"non-idempotent batch crc {r['crc']}"
            verdict, outcome, sev = "stored - nothing lost", "stored", "info"
        out.append(finding(
            "produce-outcome", f"{topic}-{partition}: Produce of {who} ({n} records) sent once, answered: no "
            f"response; {copy}: {verdict}", severity=sev, evidence=ev,
            details={"answers": ["no response"], "outcome": outcome, "stored_offsets": sorted(
                {lo} | ({r["acked_at"]} if r["acked_at"] >= 0 else set())), "fetched_at": lo},
            first_offset=lo, last_offset=hi, **fields))
        if outcome == "stored twice":
            out.append(finding(
                "duplicate-records", f"{topic}-{partition}: the same {n} records were stored at offset {lo} (a send "
                f"the capture holds no answer to: {copy}) and acknowledged again at {r['acked_at']} (producer id -1: "
                "the broker cannot deduplicate)", evidence=ev, details={"original_first_offset": lo},
                first_offset=r["acked_at"], last_offset=r["acked_at"] + max(n, 1) - 1, **fields))
    return out


def _whose(r: dict) -> str:
    return "a consumer's" if r["producer_id"] is not None and r["producer_id"] >= 0 else "a"


def _ms(ts):
    return None if ts is None else int(ts * 1000)
