"""An idempotent Produce the capture holds no answer to, shown stored by a consumer's Fetch
(wire-acked's; audit/fetched_copies.py): told as its produce-outcome, which settles the request's
unanswered-request (stories.incidents.settle_unanswered) - a fact of the crash or the reconnect,
not a suspicion - and proves stored a first send that a new producer session re-sent
(duplicate-records, raised by the same settling).

Only a consumer's Fetch counts (replica id -1): a consumer reads below the high watermark, so the
batch it was served was committed; a follower's Fetch reads the leader's uncommitted tail, which a
leader change may still truncate.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.fetched_copies import copy_pairs, unanswered_writes
from kaudit.audit.fold_tables import np_indices, np_mask
from kaudit.audit.registry import evidence, finding
from kaudit.timefmt import iso_ms

KIND = "stored_unanswered"   # wire-acked's prepared rows: an unanswered write with its copy's columns
WRITE = ("source", "connection", "position", "request_ts", "topic", "topic_id", "partition", "correlation_id",
         "client_id", "producer_id", "producer_epoch", "base_sequence", "last_sequence", "record_count")
COPY = ("source", "connection", "position", "response_ts", "client_id", "base_offset", "record_count")
EXCHANGE = ("source", "connection", "position")   # a Fetch response: its request's replica id is for all its rows


def unanswered(t: pa.Table):
    """The Produce rows without an answer: neither its time nor its error."""
    return pc.and_(unanswered_writes(t), pc.is_null(t.column("response_error")))


def where(t: pa.Table):
    """The rows wire-acked selects for this: an idempotent producer's Produce without an answer
    (acks=0 expects none)."""
    return pc.and_(unanswered(t),
                   pc.and_(pc.fill_null(pc.greater_equal(t.column("producer_id"), 0), False),
                           pc.fill_null(pc.not_equal(t.column("acks"), 0), True)))


def split(items: list[tuple[str, pa.Table]]) -> tuple[list, list]:
    """(`items` less their unanswered writes, [(KIND, those a consumer's Fetch served a copy of,
    with the first such copy's columns as copy_*)])."""
    masks = {i: np.asarray(unanswered(t)) for i, (k, t) in enumerate(items)
             if k == "batch" and t is not None and t.num_rows}
    if not any(m.any() for m in masks.values()):
        return items, []
    b = pa.concat_tables([items[i][1] for i in masks])
    rest = [(k, t.filter(np_mask(~masks[i])) if i in masks and masks[i].any() else t) for i, (k, t) in enumerate(items)]
    writes, copies = copy_pairs(b, unanswered=np.concatenate([masks[i] for i in masks]))
    if writes.size:
        # the whole batch served (a copy of fewer records is another batch: a split's re-send)
        count = b.column("record_count")
        keep = np.array(count.take(np_indices(writes)).to_pylist()) == np.array(count.take(np_indices(copies)).to_pylist())
        keep &= _consumers(b, copies, [t for k, t in items if k == "fetch_partition" and t is not None and t.num_rows])
        # served after the write was sent (before it, the leader could not hold it)
        sent = _times(b, "request_ts", writes)
        keep &= ~np.isnan(sent) & (_times(b, "response_ts", copies) >= sent)
        writes, copies = writes[keep], copies[keep]
    if not writes.size:
        return rest, []
    order = np.lexsort((copies, _times(b, "response_ts", copies), writes))   # each write's first copy served
    first = np.r_[True, writes[order][1:] != writes[order][:-1]]
    writes, copies = writes[order][first], copies[order][first]
    w = b.take(np_indices(writes)).select(list(WRITE))
    c = b.take(np_indices(copies)).select(list(COPY))
    for name in COPY:
        w = w.append_column(f"copy_{name}", c.column(name))
    return rest, [(KIND, w)]


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
    """The produce-outcome of each of a partition's unanswered writes a consumer was served."""
    out = []
    for r in t.to_pylist():
        n = r["record_count"] or 0
        lo = r["copy_base_offset"]
        seqs = f"{r['base_sequence']}-{r['last_sequence']}"
        copy = (f"a consumer's Fetch (client {r['copy_client_id'] or '?'}, answered at "
                f"{iso_ms(_ms(r['copy_response_ts']))}) served this batch at offset {lo}")
        out.append(finding(
            "produce-outcome",
            f"{topic}-{partition}: Produce of producer {r['producer_id']} epoch {r['producer_epoch']} sequences "
            f"{seqs} ({n} records) sent once, answered: no response; {copy}: stored once (the broker stores a "
            "producer session's batch once) - nothing lost",
            severity="info",
            evidence=[evidence(r["source"], r["position"], "produce", f"corr {r['correlation_id']} on {r['connection']}"),
                      evidence(r["copy_source"], r["copy_position"], "fetch", f"offset {lo} on {r['copy_connection']}")],
            details={"answers": ["no response"], "outcome": "stored once", "stored_offsets": [lo], "fetched_at": lo},
            topic=topic, partition=partition, topic_id=r["topic_id"], connection=r["connection"],
            client_id=r["client_id"], producer_id=r["producer_id"], producer_epoch=r["producer_epoch"],
            base_sequence=r["base_sequence"], last_sequence=r["last_sequence"],
            first_offset=lo, last_offset=None if lo is None else lo + max(n, 1) - 1,
            first_ts_ms=_ms(r["request_ts"])))
    return out


def _ms(ts):
    return None if ts is None else int(ts * 1000)
