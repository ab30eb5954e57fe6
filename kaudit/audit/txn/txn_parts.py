"""A producer's transactions on each partition: its parts (`Part`: the data of one transaction
on one partition, up to the COMMIT/ABORT marker that ends it, merged over the replicas that hold
it) and each marker's coordinator transaction (`match_markers`). The first floor of the one
transaction model (txn_model.py builds the producer's facts and groups its transactions on it);
both feeds' rows come in as dicts: on disk the log's batches, on the wire the requests' and
answers' (txn_wire.py).

The invariant every reader relies on: a partition's parts are in the order of the log
(`log_order`), and `Part.previous` is the part right before it in the log - by the offsets
wherever the evidence gives them, by the capture's order only where it gives none.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from operator import itemgetter

from kaudit.audit.txn.coordinator_state import CoordTxn, CoordView
from kaudit.audit.thresholds import MATCH_WINDOW_MS

# Writers of markers (`Marker.writer`)
COORDINATOR, ADMIN = "coordinator", "admin"


def marker_may_end(marker_epoch: int | None, data_epoch: int | None) -> bool:
    """Whether an end marker of `marker_epoch` may end data of `data_epoch`: one of the data's
    epoch (version 0/1, an admin's abort) or the one above (version 2 bumps the epoch at every
    end; a version 0/1 fencing abort too) - never an older one, and one further on ends a later
    transaction (ProducerStateManager / TransactionCoordinator, KIP-98, KIP-890)."""
    return marker_epoch is not None and data_epoch is not None and data_epoch <= marker_epoch <= data_epoch + 1


@dataclass
class Marker:
    offset: int | None
    result: str               # COMMIT | ABORT
    epoch: int
    coordinator_epoch: int | None
    ts: int | None
    source: str
    position: int
    writer: str | None = None       # coordinator | admin | None (unknown: a log holds no writer)
    client_id: str | None = None    # the WriteTxnMarkers sender (wire)
    connection: str | None = None
    # the transaction version WriteTxnMarkers v2 carries (KIP-1228; wire only: a control batch
    # on disk does not hold it), None where the request does not say it
    transaction_version: int | None = None
    fetched: bool = False           # wire: served in a Fetch response (the leader's log), no request seen


_UNMERGED = object()   # Part.own_replica of a part merge_replicas never saw (a replica may be None)


@dataclass
class Part:
    """One producer's transaction on one partition (merged over the replicas that hold it)."""

    topic: str
    partition: int
    producer_id: int
    replicas: list = field(default_factory=list)
    data: list[dict] = field(default_factory=list)          # transactional data batches
    # non-transactional writes inside it: one row per stretch (none of its transactional batches
    # between), `batches` counting them
    nontxn: list[dict] = field(default_factory=list)
    marker: Marker | None = None
    replicas_without_marker: list = field(default_factory=list)
    coord: CoordTxn | None = None                           # matched coordinator transaction
    previous: "Part | None" = None                          # the part before it in the partition's log
    # the other replicas' own Parts of it (their files), replica -> Part, and the replica whose
    # files it reads itself (merge_replicas; _UNMERGED: a part never merged): `copies` joins them
    others: dict = field(default_factory=dict)
    own_replica: object = field(default=_UNMERGED, repr=False)
    key: object = None                                      # its first row's place in the log (log_order)
    # wire: its transaction ended at the coordinator, its marker here not in the capture (the
    # start time of that coordinator transaction: txn_wire_feed._ends_unseen)
    ended_unseen: int | None = None
    # its own transaction's marker is missing here: `marker` is the next one in the log, a later
    # transaction's, which ended this data too (split_lost_markers)
    borrowed_marker: bool = False
    tp: str = field(init=False, default="")                 # "topic-partition"

    def __post_init__(self):
        self.tp = f"{self.topic}-{self.partition}"

    @property
    def copies(self) -> dict:
        """replica -> its own Part (its files), itself included; {} for a part never merged.
        Made when asked: a part kept in a map of its own would be a reference cycle, which only
        the cyclic collector frees (a producer's parts, judged and dropped, are ~15% of the
        wire-txn fold's time on the bench capture when the collector has to find them)."""
        return {} if self.own_replica is _UNMERGED else {self.own_replica: self, **self.others}

    @property
    def start_offset(self) -> int | None:
        return self.data[0]["base_offset"] if self.data else (self.marker.offset if self.marker else None)

    @property
    def last_data_offset(self) -> int | None:
        for b in reversed(self.data):
            if b["last_offset"] is not None:
                return b["last_offset"]
        return None

    @property
    def epochs(self) -> list[int]:
        """The distinct producer epochs of its data, in order of appearance."""
        return list(dict.fromkeys(b["producer_epoch"] for b in self.data if b["producer_epoch"] is not None))

    @property
    def data_epoch(self) -> int | None:
        return self.data[-1]["producer_epoch"] if self.data else None

    @property
    def first_epoch(self) -> int | None:
        return self.data[0]["producer_epoch"] if self.data else None

    @property
    def first_ts(self) -> int | None:
        ts = [t for t in map(create_ms, self.data) if t is not None]
        return min(ts) if ts else (self.marker.ts if self.marker else None)

    @property
    def last_ts(self) -> int | None:
        ts = [b["max_timestamp_ms"] for b in self.data if b["max_timestamp_ms"] is not None]
        if self.marker and self.marker.ts is not None and not self.borrowed_marker:
            ts.append(self.marker.ts)
        return max(ts) if ts else None


def create_ms(b: dict) -> int | None:
    """A batch's create time (its first record's timestamp, as the producer or the coordinator's
    marker writer set it): its base timestamp - except in a batch the log cleaner rewrote: with
    the delete-horizon attribute the base timestamp holds the horizon (the cleaning's time +
    delete.retention.ms, KIP-534: MemoryRecordsBuilder sets it as the base timestamp), and an
    empty batch kept for its producer's sequence state holds -1 (DefaultRecordBatch.
    writeEmptyHeader); both keep the records' max timestamp, the time then told (a marker's,
    exactly: its one record's)."""
    bts = b.get("base_timestamp_ms")
    if b.get("has_delete_horizon") or bts is None or bts < 0:
        mts = b.get("max_timestamp_ms")
        return mts if mts is not None and mts >= 0 else None
    return bts


def _marker(b: dict) -> Marker:
    return Marker(b["base_offset"], b["control_type"], b["producer_epoch"], b["coordinator_epoch"],
                  create_ms(b), b["source"], b["position"], b.get("writer"),
                  b.get("client_id"), b.get("connection"), b.get("transaction_version"), bool(b.get("fetched")))


def assemble_replica(batches: list[dict], keys: list | None = None) -> list[Part]:
    """The parts of one producer on one replica of one partition, batches in log order (`keys`:
    their places, log_order's; by default their base offsets: a log's rows)."""
    parts: list[Part] = []
    cur: Part | None = None
    plain = False   # the previous batch was a non-transactional write inside `cur`
    for i, b in enumerate(batches):
        was_plain, plain = plain, False
        if b["is_control"]:
            if b.get("boundary"):
                if cur is not None:
                    cur.ended_unseen = b["coord_start_ms"]
                    parts.append(cur)
                    cur = None
                continue
            if b["control_type"] not in ("COMMIT", "ABORT"):
                continue
            if cur is None:
                cur = Part(b["topic"], b["partition"], b["producer_id"], [b["replica"]],
                           key=b["base_offset"] if keys is None else keys[i])
            cur.marker = _marker(b)
            parts.append(cur)
            cur = None
        elif b["is_transactional"]:
            if cur is None:
                cur = Part(b["topic"], b["partition"], b["producer_id"], [b["replica"]],
                           key=b["base_offset"] if keys is None else keys[i])
            cur.data.append(b)
        elif cur is not None and cur.data:
            if was_plain:   # one stretch: its rows may come as runs cut anywhere (txn_rows.runs)
                prev = cur.nontxn[-1]
                cur.nontxn[-1] = dict(prev, last_offset=b["last_offset"],
                                      batches=prev.get("batches", 1) + b.get("batches", 1))
            else:
                cur.nontxn.append(b)
            plain = True
    if cur is not None:
        parts.append(cur)
    return parts


_BASE_OFFSET, _RANK = itemgetter("base_offset"), itemgetter("rank")


def log_order(rows: list[dict]) -> list:
    """Sorts one producer's rows of one replica of one partition into the log's order, in place,
    and returns each row's place (comparable within the partition: a part's `key`).

    A log's rows (no `rank`) by their offsets. A capture's rows carry `rank`, their place in
    the capture (txn_wire_feed: a Produce at its request, a WriteTxnMarkers at its answer, a
    served marker right after the data below it, else when it was fetched), which is the log's
    order only for what was appended while the capture watched: consumers fetch in any order (a
    seek back or a rebalance re-reads old transactions after newer ones, a lagging consumer or
    a follower reads what another read long before), so a marker served late would land after
    later data. So: a row whose offset the evidence gives (a Produce's answer's base offset, a
    served marker's, a WriteTxnMarkers' when a served copy gave it) at that offset; a row with
    none (a Produce unanswered in the capture, a WriteTxnMarkers no consumer fetched, a boundary
    of txn_fetched.ends_unseen) right after the highest offset known before it in the capture -
    the log held that offset by then, so what was appended at that moment lies after it - and
    after the rows of known offsets up to it, in the capture's order among themselves. Where
    the offsets are known and rise with the capture (the common case) the order is the capture's.
    `rank` orders what no offset orders (several writes without answers, a marker without an
    offset): it cannot be dropped."""
    ranks = [b.get("rank") for b in rows]
    if None not in ranks:
        rows.sort(key=_RANK)
    elif ranks.count(None) == len(ranks):
        rows.sort(key=_BASE_OFFSET)
        return [b["base_offset"] for b in rows]
    else:
        rows.sort(key=lambda b: b.get("rank") or ())
    top = -1          # the highest offset known so far in the capture's order
    back = False
    for b in rows:
        bo = b["base_offset"]
        if bo is None:
            continue
        if bo <= top:
            back = True
        lo = b["last_offset"]
        top = max(top, bo if lo is None or lo < bo else lo)
    if not back:
        return list(range(len(rows)))   # the known offsets rise with the capture: its order is the log's
    if _truncated(rows):
        return list(range(len(rows)))
    return _by_offsets(rows)


def _truncated(rows: list[dict]) -> bool:
    """Whether Produce answers in the capture's order give an offset already given to another
    write: the log was truncated between them (a leader elected without those records, KIP-101),
    so offsets no longer name one place - the capture's order is the log's history."""
    top = -1
    for b in rows:
        if b.get("is_control") or b.get("fetched") or b["base_offset"] is None:
            continue
        if b["base_offset"] <= top:
            return True
        top = max(top, b["last_offset"] if b["last_offset"] is not None else b["base_offset"])
    return False


def _by_offsets(rows: list[dict]) -> list:
    """log_order of rows in the capture's order whose known offsets do not rise with it."""
    top, keys = -1, []
    for i, b in enumerate(rows):
        bo = b["base_offset"]
        if bo is None:
            keys.append((top, 1, i))
            continue
        keys.append((bo, 0, i))
        lo = b["last_offset"]
        top = max(top, bo if lo is None else lo)
    at = sorted(range(len(rows)), key=keys.__getitem__)
    rows[:] = [rows[i] for i in at]
    return [keys[i] for i in at]


def merge_replicas(per_replica: dict) -> list[Part]:
    """One list of parts per partition, in the log's order (their keys: log_order's places),
    each one's `previous` the part before it in the log whose marker is its own (a borrowed one,
    split_lost_markers, comes later in the log): parts starting at the same place on several
    replicas are one part; a replica missing a marker another replica holds is noted (a lagging
    replica)."""
    merged: dict = {}
    for rep in sorted(per_replica, key=str):
        for p in per_replica[rep]:
            # the same part starts with the same batch: replicas that diverged (an unclean
            # election, then another epoch written at those offsets) hold different parts there
            k = (p.key, _first_epoch(p))
            m = merged.get(k)
            if m is None:
                merged[k] = p
                p.own_replica, p.others = rep, {}
                if p.marker is None:
                    p.replicas_without_marker = [rep]
                continue
            m.replicas.append(rep)
            m.others[rep] = p
            if p.marker is None:
                m.replicas_without_marker.append(rep)
            elif m.marker is None or (m.borrowed_marker and not p.borrowed_marker):
                # a replica that holds the part's own marker: the others lost it (split_lost_markers)
                m.marker, m.borrowed_marker, m.coord = p.marker, False, None
            if len(p.data) > len(m.data):
                m.data, m.nontxn = p.data, p.nontxn
    out = [merged[k] for k in sorted(merged)]
    prev = None
    for p in out:   # the part before, whose marker is its own (a borrowed one comes later in the log)
        p.previous = prev
        if not p.borrowed_marker:
            prev = p
    for p in out:
        if p.marker is not None and len(p.replicas_without_marker) == len(p.replicas):
            p.replicas_without_marker = []
    return out


def _first_epoch(p: Part) -> int:
    e = p.data[0]["producer_epoch"] if p.data else (p.marker.epoch if p.marker else None)
    return -1 if e is None else e


def match_markers(parts: list[Part], view: CoordView, since_ms: int | None = None) -> None:
    """Each part with a marker gets the coordinator transaction that wrote it: one listing its
    partition, with the marker's result, whose [PrepareX, CompleteX] window is nearest the
    marker's time (the first such in the coordinator's order on a tie; a transaction with
    another result only when none has the marker's; none further than MATCH_WINDOW_MS). A part
    without marker gets the coordinator's open transaction if it lists the partition.
    `since_ms`: the producer's earliest coordinator record - a marker written before it ended a
    transaction whose records are gone (`__transaction_state` is compacted: its cleaner keeps a
    transactional id's latest records), so it gets none."""
    by_tp: dict[str, list[CoordTxn]] = {}   # the coordinator transactions listing each partition, in order
    for t in view.txns:
        for tp in t.partitions:
            by_tp.setdefault(tp, []).append(t)
    matchers: dict[tuple, _Nearest] = {}
    insides: dict[str, _Inside] = {}
    started: dict | None = None
    for p in parts:
        tp = p.tp
        if p.borrowed_marker:   # its transaction is known (split_lost_markers), its marker another's
            continue
        if p.marker is None:
            t = view.open_txn
            if p.ended_unseen is not None:
                # wire: its transaction's end is known, its marker here not seen
                if started is None:   # the first coordinator transaction listing a partition, by start
                    started = {}
                    for k, ts in by_tp.items():
                        for c in ts:
                            started.setdefault((k, c.start_ms), c)
                p.coord = started.get((tp, p.ended_unseen)) or _ended_with(by_tp.get(tp), p.first_ts)
            elif t is not None and tp in t.partitions:
                p.coord = t
            else:
                p.coord = _ended_with(by_tp.get(tp), p.first_ts)
            continue
        cands = by_tp.get(tp)
        if not cands or (since_ms is not None and p.marker.ts is not None and p.marker.ts < since_ms):
            continue
        early = insides.get(tp)
        if early is None:
            early = insides[tp] = _Inside(cands)
        inside = early.first(p)
        if inside is not None:
            p.coord = inside
            continue
        key = (tp, p.marker.result)
        m = matchers.get(key)
        if m is None:
            m = matchers[key] = _Nearest.of_result(cands, p.marker.result)
        best, d = m.nearest(p.marker.ts)
        if d <= MATCH_WINDOW_MS:
            p.coord = best


def _ended_early(cands: list[CoordTxn], p: Part) -> CoordTxn | None:
    """The coordinator transaction a part's data belongs to when its marker came while that
    transaction was still running - after it registered the partition, before its PrepareX:
    not the coordinator's marker of it (an admin's abort, kafka-transactions.sh) but the end of
    its data there all the same, whatever the result (torn-transaction judges it). The next
    transaction cannot register the partition before the previous one's markers are written
    (CONCURRENT_TRANSACTIONS), so a marker inside that window is no earlier transaction's - on
    disk, where the window is the coordinator's records'; on the wire, whose registrations are
    the requests' times (a version-2 leader's is held until the previous markers are written),
    only for a marker whose sender shows it is an admin's."""
    ts, first = p.marker.ts, p.first_ts
    if ts is None or first is None or not p.data or p.marker.writer not in (None, ADMIN):
        return None
    for t in cands:
        if (t.start_ms is not None and t.prepare_ts is not None and t.start_ms <= ts < t.prepare_ts
                and t.start_ms - MATCH_WINDOW_MS <= first <= ts):
            return t
    return None


class _Inside:
    """_ended_early over one partition's coordinator transactions, by bisection where their
    windows [start, PrepareX) follow each other (each ends no later than the next starts: a
    time is in one at most), else by its scan - the same transaction (a producer's long life
    on one partition: thousands of parts, each against every transaction, before)."""

    def __init__(self, cands: list[CoordTxn]):
        self.cands = cands
        self.w = [t for t in cands if t.start_ms is not None and t.prepare_ts is not None]   # (none other is one)
        self.starts = [t.start_ms for t in self.w]
        self.chained = all(t.start_ms <= t.prepare_ts for t in self.w) and all(
            a.prepare_ts <= b.start_ms for a, b in zip(self.w, self.w[1:]))

    def first(self, p: Part) -> CoordTxn | None:
        if not self.chained:
            return _ended_early(self.cands, p)
        ts = p.marker.ts
        i = bisect_right(self.starts, ts) - 1 if ts is not None else -1
        return _ended_early(self.w[i:i + 1], p) if i >= 0 else None


def _ended_with(cands: list[CoordTxn] | None, ts: int | None) -> CoordTxn | None:
    """The ended coordinator transaction (in Prepare or Complete) listing a partition whose data,
    created at `ts`, has no marker: the last one open at that time (its data may be created up
    to MATCH_WINDOW_MS before the coordinator registered the partition, never after its end)."""
    if not cands or ts is None:
        return None
    for t in reversed(cands):
        if t.prepare_ts is None or t.start_ms is None:
            continue
        if t.start_ms - MATCH_WINDOW_MS <= ts <= t.prepare_ts:
            return t
    return None


def _window(t: CoordTxn) -> tuple[int | None, int | None]:
    return (t.prepare_ts if t.prepare_ts is not None else t.start_ms), t.complete_ts


def _distance(t: CoordTxn, ts: int | None) -> int:
    lo, hi = _window(t)
    if ts is None or lo is None:
        return 0
    if ts < lo:
        return lo - ts
    if hi is not None and ts > hi:
        return ts - hi
    return 0


class _Nearest:
    """The first transaction (in the coordinator's order) whose window is nearest a time. When
    the windows follow each other (each ends no later than the next starts, only the last may be
    open) the nearest is found by bisection (`_chained`); else a scan."""

    def __init__(self, txns: list[CoordTxn]):
        self.txns = txns
        w = [_window(t) for t in txns]
        self.los = [lo for lo, _ in w]
        # a window may end where the next begins (a CompleteX and the next PrepareX in one ms)
        self.sorted = all(lo is not None for lo in self.los) and all(
            (hi is not None or i == len(w) - 1) and (hi is None or lo <= hi)
            and (i == len(w) - 1 or (hi is not None and hi <= w[i + 1][0]))
            for i, (lo, hi) in enumerate(w))
        if self.sorted:
            self.his = [float("inf") if hi is None else hi for _, hi in w]   # only the last may be open

    @classmethod
    def of_result(cls, txns: list[CoordTxn], result: str | None) -> "_Nearest":
        """The matcher of a marker of `result`: over the transactions with that result (or none
        yet), else over all - a marker whose result differs from its transaction's is still its
        (torn)."""
        return cls([t for t in txns if t.result is None or t.result == result] or txns)

    def nearest(self, ts: int | None) -> tuple[CoordTxn, int]:
        if ts is None:
            return self.txns[0], 0
        if self.sorted:
            best = self.txns[self._chained(ts)]
            return best, _distance(best, ts)
        best, dist = None, None
        for t in self.txns:
            d = _distance(t, ts)
            if dist is None or d < dist:
                best, dist = t, d
        return best, dist

    def _chained(self, ts: int) -> int:
        """The first index of the least distance, for windows in a chain: their starts and ends
        never go down, so the windows ending before `ts` come first (farther the earlier), then
        those holding it (distance 0), then those starting after it (farther the later)."""
        his, los = self.his, self.los
        i = bisect_left(his, ts)   # the first window not ending before ts
        if i < len(los) and los[i] <= ts:
            return i               # it holds ts: the first that does
        if i == 0:
            return 0               # every window starts after ts: the first is nearest
        left = i - 1               # the last window ending before ts; the first with its end:
        first = bisect_left(his, his[left])
        return first if i == len(los) or ts - his[left] <= los[i] - ts else i
