"""Acknowledged writes lost, from a capture alone: per topic partition, the offsets the Produce
responses gave (acked_writes.py) against what later took those offsets - another acknowledged
write (`offset-acknowledged-twice`) or a Fetch response's batches
(`acknowledged-records-replaced`).

A loss is told once per partition and run of lost writes (writes next to each other in offset
order, not separated by an acknowledged write that survived), with each lost write's client,
time and acks and what replaced it.
"""

from __future__ import annotations

import bisect

import numpy as np

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.consistency.log_chunks import TablesByKind
from kaudit.audit.folds import Fold, KeyedState, key_runs, np_col, np_indices, np_mask
from kaudit.audit.producers import acked_clean
from kaudit.audit.producers import acked_pairs as P
from kaudit.audit.producers import acked_writes as A
from kaudit.audit.producers import stored_unanswered
from kaudit.audit.producers.acked_settle import AckedSettle
from kaudit.audit.registry import evidence, finding, rule
from kaudit.timefmt import iso_ms
from kaudit.ranges import offsets as offset_span

KEY = ("topic", "partition")
COLUMNAR = True   # _refetched_columns; False: the reference loop alone (tests run both)
CERTIFY = True    # acked_clean.certified first: a partition it certifies clean has no finding
ORDER = ("response_ts", "source", "position")
BATCH_COLUMNS = tuple(dict.fromkeys(
    ("source_kind", "source", "connection", "position", "request_ts", "response_ts", "topic", "topic_id",
     "partition", "correlation_id", "client_id", "acks", "transactional_id", "is_transactional", "is_control",
     "control_type", "crc_ok", "last_sequence", "partition_leader_epoch", "response_error", "response_base_offset")
    + A.CONTENT_COLUMNS))
FETCH_COLUMNS = ("source", "connection", "position", "response_ts", "topic", "partition", "isolation_level",
                 "replica_id", "error_code", "fetch_offset", "high_watermark", "last_stable_offset", "client_id")
# the columns of a fetched batch its row (`Batch.row`) is read for: the comparison, the notes of
# reads and commits, the findings' text and evidence
FETCHED_ROW = frozenset(("source", "connection", "position", "request_ts", "response_ts", "topic_id", "client_id",
                         "is_control", "control_type", "crc", "partition_leader_epoch", "base_offset", "last_offset",
                         "record_count", "producer_id", "producer_epoch", "base_sequence", "codec", "magic"))
# and of an acknowledged write: its placing (acked_writes._placed), severity and findings
ACKED_ROW = FETCHED_ROW | {"acks", "is_transactional", "correlation_id", "topic", "partition", "response_base_offset"}
REMEDIATION = ("Records acknowledged to the client are not what the partition now holds at their offsets: "
               "they are lost unless a deposed leader's log dir still holds them (copy its partition dir "
               "before it rejoins and truncates). Check the leadership history (`kaudit audit` with the "
               "brokers' log dirs and their __cluster_metadata: unclean-leader-election), "
               "unclean.leader.election.enable, min.insync.replicas and the producer's acks; replay the "
               "lost records from their source.")


@rule("offset-acknowledged-twice", "error", "wire",
      "one partition offset acknowledged to two different writes: the first is lost", REMEDIATION)
def offset_acknowledged_twice(first: A.Batch, later: A.Batch) -> bool:
    """Invariant: the leader assigns each offset once (UnifiedLog.append takes the log end
    offset); an offset acknowledged to a write (ProduceResponse base offset + the batch's
    records) holds that write for as long as retention keeps it, so a later acknowledgement at
    the same offset is of the same write (an idempotent retry answered with the original offset,
    ProducerStateManager.findDuplicateBatch) - same producer id, epoch and sequence, or without
    idempotence the same records. Two different writes acknowledged at one offset mean the log
    was truncated below the first one's end and written again: acks=1 data a leader change
    lost, or acks=all data lost to an unclean leader election or a broker that lost its disk.
    Benign causes: the topic was deleted and created again with the same name (offsets restart;
    Produce v13+ rows carry the topic id, and ids that differ are not compared); a capture of
    two clusters with the same topic name."""
    return A.same_write(first, later, stored=False) is False


@rule("acknowledged-records-replaced", "error", "wire",
      "a Fetch response returned other records at an acknowledged offset", REMEDIATION)
def acknowledged_records_replaced(acked: A.Batch, fetched: A.Batch) -> bool:
    """Invariant: as above, an acknowledged offset holds its write for as long as retention keeps
    it, and every replica serves the batch as the producer sent it (the broker keeps a v2 batch's
    offsets, producer fields and record bytes; the cleaner only drops records). A Fetch
    response - a consumer's or a follower's - requested after the acknowledgement that returns,
    at the acknowledged offsets, a batch of another producer, epoch or sequence, or without
    idempotence other records, shows the partition's log no longer holds the write.
    Benign causes: the topic deleted and created again (as above); a deposed leader still
    answering a consumer that does not send its leader epoch (its own, uncommitted tail). Not
    judged: old message formats, another compression codec than the producer's (the broker
    may recompress), a non-idempotent batch with fewer records (compaction)."""
    return A.same_write(acked, fetched) is False


def _batch_where(t: pa.Table):
    kind = t.column("source_kind")
    ok0 = pc.fill_null(pc.equal(t.column("response_error"), 0), False)
    acked = pc.and_(pc.fill_null(pc.equal(kind, "produce"), False),
                    pc.and_(ok0, pc.fill_null(pc.greater_equal(t.column("response_base_offset"), 0), False)))
    fetched = pc.and_(pc.fill_null(pc.equal(kind, "fetch"), False), pc.fill_null(t.column("crc_ok"), True))
    return pc.or_(pc.or_(acked, fetched), stored_unanswered.where(t))


def certify_clean(items: list[tuple[str, pa.Table]], ctx) -> list[tuple[str, pa.Table]]:
    """The selection less the partitions that give no finding: those acked_clean certifies
    clean (each partition's rows in the fold's order, cut from the whole selection's columns
    converted once), those without a topic name and those without batch rows (AckedPartition
    says nothing of them). Only the rest are sorted, copied and judged; any share of the
    partitions may be prepared alone. The unanswered writes go apart first (stored_unanswered)."""
    items, stored = stored_unanswered.split(items)
    batches = [t for k, t in items if k == "batch" and t.num_rows]
    if not (COLUMNAR and CERTIFY):
        return items + stored
    if not batches:
        return stored
    b = pa.concat_tables(batches)
    runs = key_runs(b, KEY, [c for c in KEY + ORDER if c in b.column_names])
    if runs is None:
        return items + stored
    order, starts = runs
    ends = np.append(starts[1:], order.size)
    keys = list(zip(*(b.column(c).take(np_indices(order[starts])).to_pylist() for c in KEY)))
    whole = acked_clean.Sorted(b, order)
    done = np.zeros(b.num_rows, bool)
    pending = set()
    for k, s, e in zip(keys, starts.tolist(), ends.tolist()):
        if k[0] is None or acked_clean.certified_rows(whole, s, e):
            done[order[s:e]] = True
        else:
            pending.add(k)
    out = []
    if pending:
        out.append(("batch", b if not done.any() else b.filter(np_mask(~done))))
        out.extend((kind, t) for kind, t in _of_keys(items, pending))
    return out + stored


def _of_keys(items: list, keys: set) -> list[tuple[str, pa.Table]]:
    """The non-batch chunks' rows of the partitions `keys`."""
    out = []
    for kind in sorted({k for k, t in items if k != "batch" and t.num_rows}):
        t = pa.concat_tables([x for k, x in items if k == kind and x.num_rows])
        runs = key_runs(t, KEY, list(KEY))
        if runs is None:
            out.append((kind, t))
            continue
        order, starts = runs
        ends = np.append(starts[1:], order.size)
        firsts = list(zip(*(t.column(c).take(np_indices(order[starts])).to_pylist() for c in KEY)))
        keep = np.zeros(t.num_rows, bool)
        for k, s, e in zip(firsts, starts.tolist(), ends.tolist()):
            if k in keys:
                keep[order[s:e]] = True
        if keep.all():
            out.append((kind, t))
        elif keep.any():
            out.append((kind, t.filter(np_mask(keep))))
    return out


class AckedPartition(TablesByKind):
    def __init__(self, key: tuple, ctx=None):
        super().__init__()
        self.topic, self.partition = key
        self.ends = (ctx.txn_ends if ctx is not None else None) or {}

    def finish(self) -> list[dict]:
        if self.topic is None:
            return []
        # the unanswered writes prepare did not take apart (a fold run without its prepare)
        b = self.concat("batch")
        rest, stored = stored_unanswered.split([("batch", b), ("fetch_partition", self.concat("fetch_partition"))]
                                               if b is not None else [])
        if rest:
            b = rest[0][1]
        stored = [t for _, t in stored] + self.tables.get(stored_unanswered.KIND, [])
        said = stored_unanswered.findings(self.topic, self.partition, pa.concat_tables(stored)) if stored else []
        return said + self._lost(b)

    def _lost(self, b: pa.Table | None) -> list[dict]:
        if b is None or (COLUMNAR and CERTIFY and acked_clean.certified(b)):
            return []
        kind = b.column("source_kind")
        acked = A.acked_batches_table(_by_answer(b.filter(pc.equal(kind, "produce"))), ACKED_ROW)
        if not acked:
            return []
        lost: dict[int, list] = {}     # id(acked write) -> [(kind, replacing batch)]
        seen: dict[int, str] = {}      # id(acked write) -> why it reached a committed state
        _twice(acked, lost)
        contested = A.merged([(w.lo, w.hi) for w in acked if id(w) in lost])
        near = _near(b.filter(pc.equal(kind, "fetch")), acked, contested)
        responses = _Responses(self.concat("fetch_partition"))
        if not COLUMNAR or not _refetched_columns(acked, near, responses, lost, seen):
            _refetched(acked, _rows(near), responses, lost, seen)
        if not lost:
            return []
        A.note_ends(acked, self.ends, lost, seen)
        return [f for group in _runs(acked, lost) for f in self._findings(group, lost, seen)]

    def _findings(self, group: list[A.Batch], lost: dict, seen: dict) -> list[dict]:
        out = []
        for rule_id, kind in (("offset-acknowledged-twice", "produce"), ("acknowledged-records-replaced", "fetch")):
            ws = [w for w in group if any(k == kind for k, _ in lost[id(w)])]
            if ws:
                out.append(self._finding(rule_id, kind, ws, lost, seen))
        return out

    def _finding(self, rule_id: str, kind: str, ws: list[A.Batch], lost: dict, seen: dict) -> dict:
        states = {id(w): A.committed_state(w.row.get("acks"), bool(w.row.get("is_transactional")), seen.get(id(w)))
                  for w in ws}
        sev = max((A.loss_severity(w.row.get("acks"), bool(w.row.get("is_transactional")), id(w) in seen) for w in ws),
                  key=lambda s: ("warning", "error", "critical").index(s))
        lo, hi = min(w.lo for w in ws), max(w.hi for w in ws)
        reps = [(w, x) for w in ws for k, x in lost[id(w)] if k == kind]
        first_w, first_x = reps[0]
        how = ("acknowledged again to " + _other(first_x) if kind == "produce"
               else "returned by a Fetch as " + _fetched_text(first_x))
        where = f"{self.topic}-{self.partition}"
        n = f"{len(ws)} acknowledged writes" if len(ws) > 1 else "an acknowledged write"
        msg = (f"{where}: {offset_span(lo, hi)} held {n} that the partition's log no longer holds there: "
               f"{A.ack_text(first_w)}; offset {max(first_w.lo, first_x.lo)} was later {how}"
               + (f" (and {len(reps) - 1} more)" if len(reps) > 1 else "")
               + f". Lost ({states[id(first_w)]})")
        ev = []
        for w, x in reps[:A.MAX_LISTED]:
            ev.append(A.ack_evidence(w))
            ev.append(evidence(x.row.get("source"), x.row.get("position"), kind,
                               f"{'acknowledged' if kind == 'produce' else 'fetched'} at {offset_span(x.lo, x.hi)}: "
                               f"{x.who()}"))
        pids = {w.pid for w in ws}
        clients = {w.row.get("client_id") for w in ws}
        return finding(
            rule_id, msg, severity=sev, evidence=list({(e["source"], e["position"], e["kind"]): e for e in ev}.values()),
            topic=self.topic, partition=self.partition, topic_id=first_w.row.get("topic_id"),
            first_offset=lo, last_offset=hi, first_ts_ms=A.ms(first_w.row.get("response_ts")),
            producer_id=pids.pop() if len(pids) == 1 else None,
            client_id=clients.pop() if len(clients) == 1 else None,
            details={"lost": [A.ack_detail(w, states[id(w)]) for w in ws[:A.MAX_LISTED]], "lost_writes": len(ws),
                     "replaced_by": [_replacer(x, kind) for _, x in reps[:A.MAX_LISTED]]})


def _other(x: A.Batch) -> str:
    r = x.row
    return (f"{x.who()} (client {r.get('client_id') or '?'}, at {iso_ms(A.ms(r.get('response_ts')))}, "
            f"{offset_span(x.lo, x.hi)})")


def _fetched_text(x: A.Batch) -> str:
    r = x.row
    epoch = r.get("partition_leader_epoch")
    return (f"{x.who()} at {offset_span(x.lo, x.hi)}" + (f" of leader epoch {epoch}" if epoch is not None and epoch >= 0 else "")
            + f" (client {r.get('client_id') or '?'}, at {iso_ms(A.ms(r.get('response_ts')))})")


def _replacer(x: A.Batch, kind: str) -> dict:
    r = x.row
    return {"kind": kind, "offsets": [x.lo, x.hi], "ts_ms": A.ms(r.get("response_ts")), "client_id": r.get("client_id"),
            "connection": r.get("connection"), "producer_id": x.pid if x.idempotent else None,
            "producer_epoch": x.epoch if x.idempotent else None, "base_sequence": x.seq if x.idempotent else None,
            "partition_leader_epoch": r.get("partition_leader_epoch")}


def _near(t: pa.Table, acked: list[A.Batch], contested: tuple) -> pa.Table:
    """The fetched batches overlapping an acknowledged write, and the COMMIT markers: most of a
    capture's fetches are not compared, nor exact copies of writes already known committed -
    unless at offsets acknowledged twice (`contested`: there a copy of the later write is other
    records for the earlier one)."""

    if not t.num_rows:
        return t
    starts, ends = A.merged([(w.lo, w.hi) for w in acked])
    base = np_col(t, "base_offset", -1, np.int64)
    last = np_col(t, "last_offset", -1, np.int64)
    commit = pc.fill_null(pc.equal(t.column("control_type"), "COMMIT"), False).to_numpy(zero_copy_only=False)
    t = t.filter(np_mask(A.overlap_mask(base, last, starts, ends) | commit))
    # an exact copy of a write already known committed (acks=all, no transaction) tells nothing more
    settled = {A.identity(w.lo, w.hi, w.pid, w.epoch, w.seq, w.row.get("crc")) for w in acked
               if w.row.get("acks") == -1 and not w.row.get("is_transactional")}
    if settled and t.num_rows:
        ids = zip(*(t.column(c).to_pylist() for c in ("base_offset", "last_offset", "producer_id", "producer_epoch",
                                                       "base_sequence", "crc")))
        keep = np.array([A.identity(*x) not in settled for x in ids], dtype=bool)
        keep |= A.overlap_mask(np_col(t, "base_offset", -1, np.int64), np_col(t, "last_offset", -1, np.int64),
                               *contested)
        if not keep.all():
            t = t.filter(np_mask(keep))
    return t


def _rows(t: pa.Table) -> list[dict]:
    """The fetched batches as rows (the columns read) with their record content (`content`)."""
    rows = t.select([c for c in t.column_names if c in FETCHED_ROW]).to_pylist()
    for r, c in zip(rows, A.table_contents(t)):
        r["content"] = c
    return rows


def _refetched_columns(acked: list[A.Batch], near: pa.Table, responses, lost: dict, seen: dict) -> bool:
    """_refetched column-wise (acked_pairs.py): the same losses and reads, in the same order;
    False where one fetched batch meets too many writes (the caller then runs _refetched)."""
    data, markers = P.data_and_markers(near)
    if data.num_rows:
        order = sorted(acked, key=lambda w: w.lo)
        codecs, topics = P.Codes(True), P.Codes(False)
        a = P.acked_columns(order, codecs, topics)
        sums = A.table_contents(data)
        x = P.fetched_columns(data, sums, codecs, topics)
        i, n = P.spans(a, x)
        runs = P.blocks(n)
        if runs is None:
            return False
        rows = P.FetchedRows(data, sums, FETCHED_ROW)
        made: dict[int, P.Fetched] = {}
        keys = None
        for run in runs:
            fi, wi = P.pairs(a, x, i, n, run)
            same = P.compared(a, x, fi, wi)
            for f, w in zip(fi[same == 0].tolist(), wi[same == 0].tolist()):   # the rule's verdict, column-wise
                x_f = made.get(f)
                if x_f is None:
                    x_f = made[f] = P.Fetched(rows, f)
                lost.setdefault(id(order[w]), []).append(("fetch", x_f))
            for f, w in zip(fi[same == 1].tolist(), wi[same == 1].tolist()):
                if id(order[w]) in seen:
                    continue
                if keys is None:
                    keys = list(zip(*(data.column(c).to_pylist() for c in ("source", "connection", "position"))))
                _note_read(order[w], rows.row(f), responses.get(keys[f]), seen)
    _note_commits(acked, markers, seen)
    return True


def _by_answer(t: pa.Table) -> pa.Table:
    """Produce rows in the order the answers came: (response_ts, 0 where unknown; source;
    position), a stable sort as Python's."""
    if t.num_rows < 2:
        return t
    keys = pa.table({"ts": pc.fill_null(t.column("response_ts"), 0), "source": t.column("source"),
                     "position": t.column("position")})
    return t.take(pc.sort_indices(keys, sort_keys=[("ts", "ascending"), ("source", "ascending"),
                                                   ("position", "ascending")]))


class _Responses:
    """The fetch_partition rows by (source, connection, position), made dicts only when asked:
    most fetched batches are never found the write they overlap."""

    def __init__(self, t: pa.Table | None):
        self.t, self.index, self.rows = t, None, {}

    def get(self, key: tuple) -> dict | None:
        if self.t is None:
            return None
        if self.index is None:
            cols = [self.t.column(c).to_pylist() for c in ("source", "connection", "position")]
            self.index = {k: i for i, k in enumerate(zip(*cols))}   # the last row of a key, as a dict would
        i = self.index.get(key)
        if i is None:
            return None
        if i not in self.rows:
            self.rows[i] = self.t.slice(i, 1).to_pylist()[0]
        return self.rows[i]


def _same_topic(a: A.Batch, b: A.Batch) -> bool:
    """Not two incarnations of a topic (deleted and created again): topic ids, where both have one."""
    x, y = a.row.get("topic_id"), b.row.get("topic_id")
    return x is None or y is None or x == y


def _twice(acked: list[A.Batch], lost: dict) -> None:
    """Pairs of different writes acknowledged at overlapping offsets: the earlier one is lost."""
    order = sorted(acked, key=lambda w: (w.lo, w.hi))
    active: list[A.Batch] = []
    for w in order:
        active = [a for a in active if a.hi >= w.lo]
        for a in active:
            if not _same_topic(a, w):
                continue
            first, later = (a, w) if (a.row.get("response_ts") or 0) <= (w.row.get("response_ts") or 0) else (w, a)
            if offset_acknowledged_twice(first, later):
                lost.setdefault(id(first), []).append(("produce", later))
        active.append(w)


def _refetched(acked: list[A.Batch], fetched: list[dict], responses, lost: dict, seen: dict) -> None:
    """Fetched batches at acknowledged offsets, requested after the acknowledgement."""
    order = sorted(acked, key=lambda w: w.lo)
    los = [w.lo for w in order]
    span = max((w.hi - w.lo for w in order), default=0)
    data = [r for r in fetched if not r.get("is_control")]
    markers = [r for r in fetched if r.get("is_control") and r.get("control_type") == "COMMIT"]
    for r in data:
        x = A.batch_of(r, r["base_offset"], r.get("content"))
        i = bisect.bisect_left(los, x.lo - span)
        j = bisect.bisect_right(los, x.hi)
        for w in order[i:j]:
            if not A.overlaps(w, x) or not _same_topic(w, x):
                continue
            asked = r.get("request_ts")
            if asked is None or w.row.get("response_ts") is None or asked <= w.row["response_ts"]:
                continue
            same = A.same_write(w, x)
            if same is False and acknowledged_records_replaced(w, x):
                lost.setdefault(id(w), []).append(("fetch", x))
            elif same is True and id(w) not in seen:
                _note_read(w, r, responses.get((r["source"], r["connection"], r["position"])), seen)
    _note_commits(acked, markers, seen)


def _note_read(w: A.Batch, r: dict, resp: dict | None, seen: dict) -> None:
    """The write itself, fetched: committed once a response's high watermark passed it, or a
    read_committed consumer was given it (below its last stable offset)."""
    if resp is None or id(w) in seen:
        return
    why = A.read_committed_at(resp, w.hi, bool(w.row.get("is_transactional")), iso_ms(A.ms(r.get("response_ts"))))
    if why is not None:
        seen[id(w)] = why


def _note_commits(acked: list[A.Batch], markers: list[dict], seen: dict) -> None:
    by_pid: dict = {}
    for m in markers:
        by_pid.setdefault((m.get("producer_id"), m.get("producer_epoch")), []).append(m)
    for w in acked:
        if not w.row.get("is_transactional") or id(w) in seen:
            continue
        after = [m for m in by_pid.get((w.pid, w.epoch), ()) if m["base_offset"] > w.hi]
        if after:
            m = min(after, key=lambda m: m["base_offset"])
            seen[id(w)] = f"committed: its transaction's COMMIT marker at offset {m['base_offset']} was fetched"


def _runs(acked: list[A.Batch], lost: dict) -> list[list[A.Batch]]:
    """The lost writes in offset order, cut where an acknowledged write that survived lies between
    two of them (the writes that replaced them do not cut)."""
    replacers = {id(x) for v in lost.values() for _, x in v}
    runs: list[list[A.Batch]] = [[]]
    for w in sorted(acked, key=lambda w: (w.lo, w.row.get("response_ts") or 0)):
        if id(w) in lost:
            runs[-1].append(w)
        elif id(w) not in replacers and runs[-1]:
            runs.append([])
    return [r for r in runs if r]


FOLD = Fold("wire-acked", {"batch": BATCH_COLUMNS, "fetch_partition": FETCH_COLUMNS}, KEY, ORDER,
            lambda ctx: KeyedState(KEY, lambda k: AckedPartition(k, ctx)),
            prepare=certify_clean, prepare_by_key=True,
            where={"batch": _batch_where,
                   "fetch_partition": lambda t: pc.fill_null(pc.equal(t.column("error_code"), 0), False)},
            # not cut in key ranges (per_key): a process that takes a range prepares the whole
            # selection (engine/shared_folds._cut), and the certificate there is most of the work
            live=AckedSettle, per_key=False, cost=0.3)
