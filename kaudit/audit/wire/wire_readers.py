"""What read_committed consumers were given, on the wire: `read-past-lso` and `aborted-read`, per
topic partition over the whole capture.

A Fetch response's batches are replayed as a consumer in read_committed filters them (Kafka's
CompletedFetch / librdkafka: a transactional batch is skipped while its producer is in the set
built from `aborted_transactions`, an ABORT marker takes the producer out). A delivered
transactional batch is an aborted read when its transaction ended in ABORT. Which transaction a
batch belongs to and how it ended is read, in order of certainty, from:
- the markers seen in any Fetch response of the capture (consumer or replica fetches) at known
  offsets: the first COMMIT/ABORT of the batch's producer after it, when the offsets between
  them were all seen (no unseen marker can lie there);
- the coordinator's WriteTxnMarkers requests to the partition's leader, in time: the first
  successful one for the producer after the Produce that stored the batch was answered (the
  batch is matched to its Produce by producer id, epoch and base sequence), when no marker
  request for it went out while that Produce was in flight, and it is of the batch's epoch or
  the one above and went out before the second EndTxn answered since the batch (past either,
  it ends a later transaction: this one's markers were lost from the capture).
Otherwise the outcome is unknown and nothing is said. The log dirs, in `kaudit audit`, add the
stored markers (reader_join.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Context, Fold, KeyedState, np_col, np_indices, np_mask, unique_ints
from kaudit.audit.wire.live_settle import ReaderSettle
from kaudit.audit.consistency.log_chunks import TablesByKind
from kaudit.audit.read_committed import parse_aborted
from kaudit.audit.wire.reader_replay import Outcomes, delivered_aborted
from kaudit.audit.registry import evidence, finding, rule

KEY = ("topic", "partition")
ORDER = ("response_ts", "position")
FETCH_COLUMNS = ("source", "connection", "position", "response_ts", "topic", "topic_id", "partition",
                 "isolation_level", "replica_id", "error_code", "fetch_offset", "high_watermark",
                 "last_stable_offset", "aborted_transactions", "client_id", "correlation_id")
BATCH_COLUMNS = ("source_kind", "source", "connection", "position", "request_ts", "response_ts", "topic",
                 "topic_id", "partition", "base_offset", "last_offset", "producer_id", "producer_epoch",
                 "base_sequence", "is_transactional", "is_control", "control_type", "response_error",
                 "record_count")
MARKER_COLUMNS = ("source", "connection", "position", "ts", "event", "producer_id", "producer_epoch",
                  "partitions", "result", "error_codes")
MARKER_REQUEST = "marker_request"   # WriteTxnMarkers, one row per partition (prepare)
MAX_FINDINGS = 50   # per rule and partition
FETCHED, PRODUCED = "batch_fetched", "batch_produced"   # the batch rows, split (prepare)
_SUSPECT_COLUMNS = ("is_transactional", "is_control", "producer_id", "last_offset", "position")


@rule("read-past-lso", "error", "wire",
      "a read_committed Fetch response returned batches at or past its own last stable offset",
      "The broker gave a read_committed consumer records of transactions that may still abort. "
      "Check the broker version for a known bug (and the proxy or mock in between, if any); the "
      "consumer may have delivered uncommitted records: reprocess from the last stable offset.")
def read_past_lso(last_offset: int, lso: int) -> bool:
    """Invariant: for isolation_level read_committed the broker reads the log only up to the last
    stable offset (FetchIsolation.TXN_COMMITTED: UnifiedLog.read with maxOffset = the LSO) and
    reports that LSO in the same response, which can only have grown since: every batch returned
    ends below it (KIP-98).
    Benign causes: none (read_uncommitted responses are not judged; responses without an LSO,
    Fetch v0-v3, neither)."""
    return lso >= 0 and last_offset >= lso


@rule("aborted-read", "error", "both",
      "a read_committed consumer was given an aborted transaction's records without the means to drop them",
      "The consumer delivered records of a transaction that aborted (Jepsen's G1a, aborted read): "
      "whatever it produced from them is wrong. Find why the broker's aborted_transactions list "
      "missed it (its .txnindex: txnindex-mismatch; a broker bug; a proxy or mock broker) and "
      "reprocess the affected range.")
def aborted_read(outcome: str | None) -> bool:
    """Invariant: a read_committed Fetch response lists in `aborted_transactions` every aborted
    transaction (producer id, first offset) overlapping the records it returns
    (UnifiedLog.collectAbortedTransactions from the .txnindex), so that the consumer drops their
    batches (CompletedFetch: producers enter the aborted set at their first offset, leave it at
    their ABORT marker). A transactional batch that this filtering lets through belongs to a
    committed transaction.
    Benign causes: none once the transaction's ABORT is certain (read_uncommitted consumers are
    not judged; an outcome kaudit cannot establish is not reported)."""
    return outcome == "ABORT"


def prepare(items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
    """The fold needs the whole selection: WriteTxnMarkers requests name several partitions each.
    The batches are split into the fetched and the produced ones here, once, not per partition."""
    out = [(k, t) for k, t in items if k not in ("txn_event", "batch")]
    events = [t for k, t in items if k == "txn_event" and t.num_rows]
    if events:
        rows = _explode(pa.concat_tables(events))
        if rows.num_rows:
            out.append((MARKER_REQUEST, rows))
    batches = [t for k, t in items if k == "batch" and t.num_rows]
    if batches:
        b = pa.concat_tables(batches)
        for kind, source_kind in ((FETCHED, "fetch"), (PRODUCED, "produce")):
            part = b.filter(pc.equal(b.column("source_kind"), source_kind))
            if part.num_rows:
                out.append((kind, part))
    return out


def _explode(t: pa.Table) -> pa.Table:
    """One row per (WriteTxnMarkers marker, partition) it names."""
    cols: dict[str, list] = {c: [] for c in ("topic", "partition", "response_ts", "position", "source",
                                             "connection", "producer_id", "producer_epoch", "result", "ok")}
    for r in t.to_pylist():
        for tp in (r["partitions"] or "").split(","):
            topic, _, p = tp.rpartition("-")
            if not topic or not p.lstrip("-").isdigit():
                continue
            for name, v in (("topic", topic), ("partition", int(p)), ("response_ts", r["ts"]),
                            ("position", r["position"]), ("source", r["source"]), ("connection", r["connection"]),
                            ("producer_id", r["producer_id"]), ("producer_epoch", r["producer_epoch"]),
                            ("result", r["result"]), ("ok", r["error_codes"] == "" if r["error_codes"] is not None
                                                      else None)):
                cols[name].append(v)
    return pa.table({k: pa.array(v, type=pa.int32() if k == "partition" else None) for k, v in cols.items()})


class ReaderPartition(TablesByKind):
    def __init__(self, key: tuple, ctx: Context | None = None):
        super().__init__()
        self.topic, self.partition = key
        self.ends = ctx.txn_ends if ctx is not None else None

    def finish(self) -> list[dict]:
        fetch = self.concat("fetch_partition")
        if fetch is None:
            return []
        fetched, produced = self.concat(FETCHED), self.concat(PRODUCED)
        out = self._past_lso(fetch, fetched)
        if fetched is not None and fetched.num_rows:
            out += self._aborted(fetch, fetched, lambda: Outcomes(
                fetched, produced, self.concat(MARKER_REQUEST), self.ends))
        return out

    def _where(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _past_lso(self, fetch: pa.Table, fetched: pa.Table | None) -> list[dict]:
        if fetched is None or not fetched.num_rows or not _may_pass_lso(fetch, fetched):
            return []
        top = fetched.group_by(["source", "connection", "position"]).aggregate(
            [("last_offset", "max"), ("base_offset", "min")])
        joined = fetch.join(top, ["source", "connection", "position"], join_type="inner")
        lso = pc.fill_null(joined.column("last_stable_offset"), -1)
        bad = pc.and_(pc.greater_equal(lso, 0), pc.greater_equal(joined.column("last_offset_max"), lso))
        out = []
        for r in joined.filter(bad).sort_by([("response_ts", "ascending"), ("position", "ascending")]).to_pylist():
            if not read_past_lso(r["last_offset_max"], r["last_stable_offset"]):
                continue
            rows = fetched.filter(pc.and_(pc.and_(pc.equal(fetched.column("source"), r["source"]),
                                                  pc.equal(fetched.column("position"), r["position"])),
                                          pc.greater_equal(fetched.column("last_offset"), r["last_stable_offset"])))
            first = int(pc.min(rows.column("base_offset")).as_py())
            out.append(finding(
                "read-past-lso", f"{self._where()}: read_committed Fetch response (frame {r['position']}, "
                f"{r['connection']}, client {r['client_id']}) returned {rows.num_rows} batch(es) at offsets "
                f"{first}-{r['last_offset_max']}, at or past its own last stable offset {r['last_stable_offset']} "
                f"(high watermark {r['high_watermark']}): the consumer may deliver records of transactions that "
                "have not committed", evidence=[evidence(r["source"], r["position"], "fetch")],
                topic=self.topic, partition=self.partition, connection=r["connection"], first_offset=first,
                last_offset=r["last_offset_max"], first_ts_ms=_ms(r["response_ts"]),
                details={"last_stable_offset": r["last_stable_offset"], "high_watermark": r["high_watermark"],
                         "batches": rows.num_rows}))
        return out[:MAX_FINDINGS]

    def _aborted(self, fetch: pa.Table, fetched: pa.Table, outcomes) -> list[dict]:
        rows_txn = np.flatnonzero(np_col(fetched, "is_transactional", False, bool)
                                  | np_col(fetched, "is_control", False, bool))
        if not rows_txn.size:
            return []
        outcomes = outcomes()
        # only the responses that returned a batch whose transaction may have aborted can give a
        # finding (Outcomes.suspects); their batches are replayed in full
        txn = fetched.select(list(_SUSPECT_COLUMNS)).take(np_indices(rows_txn))
        suspect = outcomes.suspects(txn)
        if not suspect.any():
            return []
        positions = np_col(txn, "position", -1, np.int64)
        frames = unique_ints(positions[suspect])
        framed = np.isin(positions, frames)
        txn, suspect = fetched.take(np_indices(rows_txn[framed])), suspect[framed]
        by_response: dict[tuple, list[dict]] = {}
        judged = set()
        for b, s in zip(txn.to_pylist(), suspect.tolist()):
            key = (b["source"], b["connection"], b["position"])
            by_response.setdefault(key, []).append(b)
            if s:
                judged.add(key)
        out = []
        # only the responses that returned some of those batches (by frame; the key decides below)
        fetch = fetch.filter(np_mask(np.isin(np_col(fetch, "position", -1, np.int64), frames)))
        rows = _by_time(fetch).to_pylist()
        for r in rows:
            key = (r["source"], r["connection"], r["position"])
            got = by_response.get(key)
            if not got or key not in judged:
                continue
            aborted = parse_aborted(r["aborted_transactions"])
            for txn_end, group in delivered_aborted(got, aborted, outcomes):
                out.append(self._aborted_finding(r, txn_end, group))
        return out[:MAX_FINDINGS]

    def _aborted_finding(self, r: dict, end: dict, group: list[dict]) -> dict:
        pid = group[0]["producer_id"]
        first, last = group[0]["base_offset"], group[-1]["last_offset"]
        listed = [f"{p}@{o}" for p, o in parse_aborted(r["aborted_transactions"])]
        return finding(
            "aborted-read", f"{self._where()}: read_committed Fetch response (frame {r['position']}, "
            f"{r['connection']}, client {r['client_id']}) returned producer {pid}'s batch(es) at offsets "
            f"{first}-{last} of a transaction that ended in ABORT ({end['how']}), and its aborted_transactions "
            f"({', '.join(listed) or 'empty'}) does not cover them: the consumer delivers aborted records "
            "(G1a, aborted read)",
            evidence=[evidence(r["source"], r["position"], "fetch")] + end["evidence"],
            topic=self.topic, partition=self.partition, connection=r["connection"], producer_id=pid,
            producer_epoch=group[0]["producer_epoch"], first_offset=first, last_offset=last,
            first_ts_ms=_ms(r["response_ts"]),
            details={"aborted_transactions": listed, "abort": end["how"], "batches": len(group)})


def _by_time(t: pa.Table) -> pa.Table:
    """t sorted by (response_ts, position), stably: as it is where it is so already (the fold's
    order), which numpy tells without Arrow's sort."""
    if t.num_rows < 2:
        return t
    ts, pos = t.column("response_ts"), t.column("position")
    if not ts.null_count and not pos.null_count:
        a, p = ts.to_numpy(), pos.to_numpy()
        if ((a[1:] > a[:-1]) | ((a[1:] == a[:-1]) & (p[1:] >= p[:-1]))).all():
            return t
    return t.sort_by([("response_ts", "ascending"), ("position", "ascending")])


def _may_pass_lso(fetch: pa.Table, fetched: pa.Table) -> bool:
    """Whether some fetched batch ends at or past the last stable offset of a response of the same
    frame (a superset of the join on source, connection and frame that decides): most partitions
    have none, and the join is the fold's dearest step."""
    lso = np_col(fetch, "last_stable_offset", -1, np.int64)
    keep = lso >= 0
    if not keep.any():
        return False
    pos, lso = np_col(fetch, "position", -1, np.int64)[keep], lso[keep]
    order = np.argsort(pos, kind="stable")
    pos, lso = pos[order], lso[order]
    # the lowest LSO of the responses of each frame (several captures may share a frame number)
    first = np.r_[True, pos[1:] != pos[:-1]]
    low = np.minimum.reduceat(lso, np.flatnonzero(first))
    pos = pos[first]
    bpos = np_col(fetched, "position", -1, np.int64)
    last = np_col(fetched, "last_offset", -1, np.int64)
    i = np.clip(np.searchsorted(pos, bpos), 0, pos.size - 1)
    return bool(((pos[i] == bpos) & (last >= low[i])).any())


def _ms(ts) -> int | None:
    return None if ts is None else int(ts * 1000)


def _fetch_where(t: pa.Table):
    rc = pc.fill_null(pc.equal(t.column("isolation_level"), "read_committed"), False)
    consumer = pc.fill_null(pc.less(t.column("replica_id"), 0), True)   # a follower's fetch is no read
    ok = pc.fill_null(pc.equal(t.column("error_code"), 0), False)
    return pc.and_(pc.and_(rc, consumer), ok)


def _batch_where(t: pa.Table):
    kind = t.column("source_kind")
    fetch = pc.fill_null(pc.equal(kind, "fetch"), False)
    produce = pc.and_(pc.fill_null(pc.equal(kind, "produce"), False),
                      pc.and_(pc.fill_null(t.column("is_transactional"), False),
                              pc.invert(pc.fill_null(t.column("is_control"), False))))
    return pc.or_(fetch, produce)


FOLD = Fold("wire-readers", {"fetch_partition": FETCH_COLUMNS, "batch": BATCH_COLUMNS, "txn_event": MARKER_COLUMNS},
            KEY, ORDER, lambda ctx: KeyedState(KEY, lambda k: ReaderPartition(k, ctx)),
            where={"fetch_partition": _fetch_where, "batch": _batch_where,
                   "txn_event": lambda t: pc.fill_null(pc.equal(t.column("event"), "WRITE_MARKERS"), False)},
            prepare=prepare, live=ReaderSettle, per_key=True, cost=0.7)
