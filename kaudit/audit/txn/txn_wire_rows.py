"""The wire transaction fold's rows made cheaper before its replay (txn_wire.prepare), without
changing what the replay sees.

A COMMIT/ABORT control batch a Fetch response served counts once per producer, partition and
offset (txn_fetched.fetched ignores any copy after the first in the replay's order): consumers
fetch the same marker many times, so the copies that come strictly later in that order - by
(row_ts or 0, position or 0), txn_wire.producer_facts's sort key - are dropped here, with numpy,
for the whole selection at once. Copies tied with the first on that key stay (the replay's own
order decides between them), and nothing is dropped where the times are not plain floats."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.fetched_copies import fetched_data, useful_copies
from kaudit.audit.folds import np_col, np_indices, np_mask
from kaudit.timefmt import iso_s
from kaudit.audit.txn.txn_model import ADMIN, COORDINATOR


def drop_fetched_repeats(batches: pa.Table) -> pa.Table:
    """`batches` (the fold's batch rows) without the fetched markers' later copies."""
    n = batches.num_rows
    kind = np.asarray(pc.fill_null(pc.equal(batches.column("source_kind"), "fetch"), False))
    ctype = batches.column("control_type")
    marker = pc.fill_null(pc.or_(pc.equal(ctype, "COMMIT"), pc.equal(ctype, "ABORT")), False)
    known = [np.asarray(batches.column(c).is_valid()) for c in ("producer_id", "topic", "partition", "base_offset")]
    rows = np.flatnonzero(kind & np.asarray(marker) & np.logical_and.reduce(known))
    if rows.size < 2:
        return batches
    t = batches.take(np_indices(rows))
    ts = _row_ts(t)
    if ts is None:
        return batches
    pos = np_col(t, "position", 0, np.int64)
    tp = pc.binary_join_element_wise(t.column("topic"), pc.cast(t.column("partition"), pa.string()), "-")
    tp = np.asarray(pc.dictionary_encode(_one(tp)).indices, dtype=np.int64)
    pid = np_col(t, "producer_id", 0, np.int64)
    off = np_col(t, "base_offset", 0, np.int64)
    order = np.lexsort((pos, ts, off, tp, pid))
    pid, tp, off, ts, pos = pid[order], tp[order], off[order], ts[order], pos[order]
    first = np.r_[True, (pid[1:] != pid[:-1]) | (tp[1:] != tp[:-1]) | (off[1:] != off[:-1])]
    lead = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))   # each row's group's first
    later = (ts != ts[lead]) | (pos != pos[lead])
    if not later.any():
        return batches
    keep = np.ones(n, dtype=bool)
    keep[rows[order[later]]] = False
    return batches.filter(np_mask(keep))


def copies_of_unanswered(batches: pa.Table) -> pa.Table:
    """`batches` with the fetched data batches kept only where one is a copy of a Produce the
    capture holds no answer to (fetched_copies.useful_copies). Most captures have none: every
    fetched data row goes, at the cost of one mask."""
    data = fetched_data(batches)
    if not pc.any(data).as_py():
        return batches
    keep = ~np.asarray(data) | useful_copies(batches, data)
    return batches if keep.all() else batches.filter(np_mask(keep))


def _one(col):
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _row_ts(t: pa.Table) -> np.ndarray | None:
    """txn_wire.row_ts of fetched rows `or 0.0`: the answer's time, else the request's; None
    when a time is not a plain float (no numpy order then)."""
    resp, req = t.column("response_ts"), t.column("request_ts")
    if not (pa.types.is_floating(resp.type) and pa.types.is_floating(req.type)):
        return None
    ts = pc.coalesce(resp, req)
    v = np.asarray(ts.fill_null(0.0), dtype=np.float64)
    if np.isnan(v).any():
        return None
    return np.where(v == 0.0, 0.0, v)   # `or 0.0`: a null, 0.0 and -0.0 all become 0.0


# -- a Produce row as the replay keeps it ----------------------------------------------------
# (data row, record_count, response_base_offset, transactional_id): the data row the replay
# appends to the producer's data if the batch counts (txn_wire_feed.WireFeed.batch), and what
# else it reads of the request and its answer - made from the row's values directly
# (txn_wire.ProducerWire.feed), without the request's own row dict first.

PRODUCED_COLUMNS = ("topic", "partition", "producer_epoch", "source", "position", "connection", "client_id",
                    "correlation_id", "base_sequence", "last_sequence", "response_error", "response_ts",
                    "response_base_offset", "record_count", "transactional_id")


def produced(pid: int, ts: float, vals: tuple) -> tuple:
    """A Produce row as the replay keeps it: `vals` its PRODUCED_COLUMNS, `ts` txn_wire.row_ts
    or 0.0 (its request's time)."""
    topic, part, epoch, source, pos, conn, client, corr, bseq, lseq, err, answered, rbo, count, tid = vals
    base = rbo if err == 0 and rbo is not None and rbo >= 0 else None
    ms = int(ts * 1000)
    return ({"topic": topic, "partition": part, "replica": None, "producer_id": pid,
             "producer_epoch": epoch, "base_offset": base,
             "last_offset": None if base is None else base + (count or 1) - 1, "is_transactional": True,
             "is_control": False, "control_type": None, "coordinator_epoch": None,
             "base_timestamp_ms": ms, "max_timestamp_ms": ms,
             "source": source, "position": pos, "connection": conn, "client_id": client,
             "correlation_id": corr, "base_sequence": bseq, "last_sequence": lseq, "response_error": err,
             "rank": (ts, pos), "answered": answered},
            count, rbo, tid)


def produced_row(pid: int, ts: float, r: dict) -> tuple:
    """`produced` of a row dict (`kaudit txn`'s rows; the response time and transactional id
    may be absent)."""
    return produced(pid, ts, tuple(r.get(c) if c in ("response_ts", "transactional_id") else r[c]
                                   for c in PRODUCED_COLUMNS))


def rows_of(table: pa.Table) -> list[dict]:
    """table.to_pylist(), column by column (the same dicts, faster)."""
    names = table.column_names
    return [dict(zip(names, vals)) for vals in zip(*(table.column(c).to_pylist() for c in names))]


# -- what a row's own fields say ------------------------------------------------------------

MARKER_SENDER = re.compile(r"^broker-\d+-txn-marker-sender$")   # TransactionMarkerChannelManager
ADMIN_CLIENT = re.compile(r"^adminclient-\d+$")                  # KafkaAdminClient's default client id


def marker_writer(client_id: str | None, admin_clients: frozenset = frozenset()) -> str | None:
    """Who sent a WriteTxnMarkers: the coordinator (its marker sender's fixed client id), an
    admin (Kafka's admin client id, or a client that also sent the admin APIs of KIP-664 -
    kafka-transactions.sh abort asks DescribeProducers first), else unknown."""
    cid = client_id or ""
    if MARKER_SENDER.match(cid):
        return COORDINATOR
    if ADMIN_CLIENT.match(cid) or cid in admin_clients:
        return ADMIN
    return None


def marker_answers(r: dict) -> dict:
    """A WriteTxnMarkers row's per-partition answers for its producer ("topic-partition" ->
    error code), from its frame's `markers` (JSON rows: producer id, ..., topic, partition, code)."""
    out = {}
    if r.get("markers"):
        try:
            for m in json.loads(r["markers"]):
                if m[0] == r["producer_id"] and m[6] is not None:
                    out[f"{m[4]}-{m[5]}"] = m[6]
        except (ValueError, TypeError, IndexError):
            pass
    return out


def nonzero(s) -> list[int]:
    """The non-zero error codes of an `error_codes` cell ("0,47" or "0;47")."""
    if not str(s or "").strip("0,; "):
        return []   # only zeros (every partition answered without error): the common case
    codes = (x.strip() for x in str(s or "").replace(";", ",").split(","))
    return [e for e in (int(x) for x in codes if x.lstrip("-").isdigit()) if e != 0]


# -- a producer's story on the wire -----------------------------------------------------------
FENCED = {47: "INVALID_PRODUCER_EPOCH", 90: "PRODUCER_FENCED"}


def _produce_text(p: tuple) -> str:
    """A Produce step's line (`p`: txn_wire_rows.produced_row's tuple)."""
    r, count, base_offset = p[0], p[1], p[2]
    err = None if r.get("by_retry") else r["response_error"]   # (the retry's answer is the retry's line)
    answer = ("no response" if err is None else f"accepted at offset {base_offset}" if err == 0
              else f"rejected {FENCED.get(err, err)}")
    text = (f"Produce {r['topic']}-{r['partition']} epoch {r['producer_epoch']} seq {r['base_sequence']}-"
            f"{r['last_sequence']} ({count} records) -> {answer}")
    return text + " (a zombie: its epoch was fenced)" if err in FENCED else text


class Story(list):
    """A producer's timeline: (time, frame, text or a Produce row) steps, written out as lines only
    when read (a finding takes its last few; most producers have none)."""

    def __getitem__(self, i):
        got = super().__getitem__(i)
        return [_line(x) for x in got] if isinstance(i, slice) else _line(got)

    def __iter__(self):
        return (_line(x) for x in super().__iter__())


def _line(step: tuple) -> str:
    ts, position, text = step
    return f"{iso_s(ts)} frame {position}: {text if isinstance(text, str) else _produce_text(text)}"


# what a retry whose answer the capture holds tells of the batch as stored (WireFeed.batch)
_STORED = ("base_offset", "last_offset", "answered", "response_error", "rank", "source", "position", "connection",
           "correlation_id", "base_timestamp_ms", "max_timestamp_ms")


def stored_by_retry(first: dict, retry: dict) -> bool:
    """A retry (same partition, epoch and first sequence) of a counted write `first` the capture
    holds no answer to (its answer lost, or rejected before), answered with an offset: the
    broker stored the batch once, where the retry's answer says - `first` takes that answer
    (its line in the story still says it had none). Whether it did."""
    if first["base_offset"] is None and first["answered"] is None and first["response_error"] is None \
            and retry["base_offset"] is not None:
        first.update({k: retry[k] for k in _STORED}, by_retry=True)
        return True
    return False
