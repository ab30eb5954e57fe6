"""Where a write whose Produce was in flight while a coordinator's marker was on its way landed
against that marker, for the wire feed (txn_wire_feed.WireFeed.facts): neither the answers' order
nor a marker's unknown offset says it; the data's offsets and epochs do. And which transaction
such markers end when the next one's data was sent before them (`unended`), and since when a
transaction listed the group partition its offsets marker names (`offsets_listed`)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate

from kaudit.audit.txn.txn_model import ADMIN


def order_races(feed) -> None:
    """Data whose Produce was in flight while a marker was on its way (the marker sent before
    the data was answered: a version-2 leader holds the Produce until the coordinator, busy
    writing the previous transaction's markers, verifies it) landed after that marker when
    its offset leaves a gap after the data before it (a marker takes an offset)."""
    markers: dict[tuple, list[dict]] = {}
    for m in feed.markers:
        if m.get("fetched"):
            continue   # its offset places it (`_place_fetched`)
        markers.setdefault((m["topic"], m["partition"]), []).append(m)
    data = feed.data_by_tp if markers else {}   # (topic, partition) -> its data rows, in order
    for tp, ms in markers.items():
        ms = sorted(ms, key=lambda m: m["sent"])
        sent = [m["sent"] for m in ms]
        top = -1   # the highest last offset of the partition's data sent before
        for d in sorted(data.get(tp, ()), key=lambda d: d["rank"]):
            done = d.get("answered") or d["rank"][0]
            k = bisect_right(sent, max(done, d["rank"][0])) - 1   # the last marker sent by its answer
            m = ms[k] if k >= 0 else None
            if (m is not None and d["rank"][0] < m["rank"][0] and d["base_offset"] is not None
                    and top >= 0 and d["base_offset"] > top + 1):
                d["rank"] = (m["rank"][0], m["position"], d["position"])
            if d["last_offset"] is not None:
                top = max(top, d["last_offset"])
        _after_markers(data.get(tp, ()), ms, feed.version == 2)


def _after_markers(data, markers: list[dict], v2: bool) -> None:
    """Data sent before a coordinator's marker was answered, and answered (if at all) after that
    marker was sent, that is of a later transaction than the marker's lands after it (neither
    the answers' order nor a marker's unknown offset tells): data of a newer epoch than the
    marker's, or of the marker's own epoch where that marker ends an older epoch - under
    transaction version 2, whose every transaction has its own epoch, or where the data the
    marker ends, answered before it was sent, is of an older epoch (a transaction is one epoch:
    a fencing abort's or a version-2 completion's bump) - that transaction registers the
    partition only once the marker is written (the leader holds a version-2 Produce until its
    registration is verified, AddPartitionsToTxn gets CONCURRENT_TRANSACTIONS until then), and a
    fenced producer's successor writes only after the fencing's markers. An admin's marker
    carries the data's own epoch: not judged."""
    coord = [m for m in markers if m.get("writer") != ADMIN and m.get("producer_epoch") is not None]
    if not coord:
        return
    later = _Later(coord, {} if v2 else _ended_epochs(data, coord), v2)
    for d in data:
        e = d.get("producer_epoch")
        if e is None:
            continue
        m = later.last(d["rank"], d.get("answered") or float("inf"), e)   # unanswered: it may land any time after
        if m is not None:
            d["rank"] = (m["rank"][0], m["position"], d["position"])


class _Later:
    """_after_markers' choice for one write - of the markers ranked after it, sent by its answer
    and whose epoch it is newer than (`lands_after`), the last ranked (the first of them in
    `coord`'s order on a tie) - without looking at every marker for every write (a producer's
    long life on one partition: thousands of each). The last ranked of all the markers that
    the write's epoch lands after bounds the answer: none ranked after the write, none; sent by
    its answer, it; else the markers sent by the answer are walked back from the last, while the
    highest rank among those before can still win."""

    def __init__(self, coord: list[dict], ends: dict, v2: bool):
        self.ends, self.v2 = ends, v2
        self.key = {id(m): (m["rank"], -i) for i, m in enumerate(coord)}   # max(): the first on a tie
        self.by_sent = sorted(coord, key=lambda m: m["sent"])
        self.sent = [m["sent"] for m in self.by_sent]
        self.top = list(accumulate((m["rank"] for m in self.by_sent), max))
        by_epoch = sorted(coord, key=lambda m: m["producer_epoch"])
        self.epochs = [m["producer_epoch"] for m in by_epoch]
        self.below = list(accumulate(by_epoch, lambda a, m: max(a, m, key=self._k)))   # of the epochs up to each
        self.own: dict = {}   # epoch -> the last ranked marker of it that data of its epoch lands after
        for m in coord:
            e = m["producer_epoch"]
            if self.lands_after(m, e) and (e not in self.own or self._k(m) > self._k(self.own[e])):
                self.own[e] = m

    def _k(self, m: dict) -> tuple:
        return self.key[id(m)]

    def lands_after(self, m: dict, e) -> bool:
        """Whether data of epoch `e` racing marker `m` lands after it (_after_markers)."""
        return e > m["producer_epoch"] or (e == m["producer_epoch"] and (self.v2 or self.ends[id(m)] < e))

    def _bound(self, e) -> dict | None:
        """The last ranked marker of all that data of epoch `e` lands after."""
        k = bisect_left(self.epochs, e)
        cands = [m for m in (self.below[k - 1] if k else None, self.own.get(e)) if m is not None]
        return max(cands, key=self._k) if cands else None

    def last(self, rank, done: float, e) -> dict | None:
        cap = self._bound(e)
        if cap is None or not rank < cap["rank"]:
            return None
        if cap["sent"] <= done:
            return cap
        best = None
        for k in range(bisect_right(self.sent, done) - 1, -1, -1):
            if not rank < self.top[k] or (best is not None and self.top[k] < best["rank"]):
                break   # no marker sent before it ranks after the write, or as high as the best
            m = self.by_sent[k]
            if rank < m["rank"] and self.lands_after(m, e) and (best is None or self._k(m) > self._k(best)):
                best = m
        return best


def _ended_epochs(data, markers: list[dict], most: int = 64) -> dict[int, int]:
    """id(marker) -> the epoch of the last data before it that was answered before it was sent
    (the data it ends, whatever raced it), looked for among the `most` rows before it; the
    marker's own epoch where none is."""
    rows = sorted((d for d in data if d.get("producer_epoch") is not None), key=lambda d: d["rank"])
    ranks = [d["rank"] for d in rows]
    out = {}
    for m in markers:
        out[id(m)] = m["producer_epoch"]
        i = bisect_left(ranks, m["rank"])
        for d in rows[max(0, i - most):i][::-1]:
            if d.get("answered") is not None and d["answered"] <= m["sent"]:
                out[id(m)] = d["producer_epoch"]
                break
    return out


def unended(feed, t, ts: float, r: dict, tps: set[str]):
    """The transaction before the open one `t` that markers sent at `ts` end, where `t` began
    with data of the markers' epoch E + 1 on their partitions, none of it answered before they
    were sent: the one before it, with data of epoch E and no end the capture shows - or, for a
    producer whose every end bumps the epoch (version 2: `_bumps`), one the capture shows
    nothing of (its data and registrations lost, or before the capture began). The coordinator
    ends a producer's transactions in order, and a marker carries the epoch of the end that
    wrote it: E + 1 for a version-2 end and for a fencing's abort. The next transaction's data
    begins with the end's epoch bump and is stored after the end's markers (a version-2 leader
    holds it until the coordinator verifies it, AddPartitionsToTxn gets CONCURRENT_TRANSACTIONS
    until then, a fenced producer's successor writes after them): sent before them, it landed
    after them (`order_races`) - unless answered before they were sent, then stored before them
    (a mixed-epoch part). Its records then move after them (`registered_after`)."""
    if t is None or t.epoch is None or r["producer_epoch"] != t.epoch or feed.txns[-1] is not t:
        return None
    rows = [d for tp in tps for d in t.rows.get(tp, ())]
    if any(d.get("answered") is not None and d["answered"] <= ts for d in rows):
        return None
    p = feed.txns[-2] if len(feed.txns) >= 2 else None
    if p is not None and p.prepared is None and not p.complete and p.epoch == t.epoch - 1 and tps & set(p.partitions):
        feed.held = t
        return p
    if not rows or not _bumps(feed):
        return None
    u = type(t)(feed.tid, t.epoch - 1, ts, feed.timeout_ms)   # (txn_wire_feed._Txn: begun unseen)
    u.partitions.extend(sorted(tps))
    feed.txns.insert(len(feed.txns) - 1, u)
    feed.held = t
    return u


def _bumps(feed) -> bool:
    """Whether every end of the producer's transactions bumps its epoch: version 2 shown, or a
    COMMIT of the data's epoch + 1 (under version 0/1 a COMMIT carries the data's own epoch;
    only a fencing's ABORT bumps it)."""
    return feed.version == 2 or any(x.prepared == "COMMIT" and x.epoch is not None and x.prepare_epoch == x.epoch + 1
                                    for x in feed.txns[-16:])


def registered_after(feed, t, ts: float) -> None:
    """Transaction `t`'s records, which the replay dated at its data's requests, moved after
    the markers (answered at `ts`) that end the one before it (`unended`): the coordinator
    registers no partition of a producer while its last transaction's markers are out."""
    feed.held = None
    moved = {id(rec) for rec in t.records}
    feed.records[:] = [rec for rec in feed.records if id(rec) not in moved] + t.records
    at = int(ts * 1000)
    for k, rec in enumerate(feed.records):
        rec["offset"] = k
    for rec in t.records:
        rec["timestamp_ms"], rec["start_ms"] = max(rec["timestamp_ms"], at), max(rec["start_ms"], at)
    t.start = max(t.start, ts)


def offsets_listed(t, tp: str) -> None:
    """The group's `__consumer_offsets` partition joined the transaction at its AddOffsetsToTxn
    (the coordinator lists it from then on: TransactionCoordinator.handleAddPartitionsToTransaction)
    though only its marker names it - often after the other markers completed the transaction:
    its records since then list it."""
    if t.offsets_at is None or not tp.startswith("__consumer_offsets-"):
        return
    since = int(t.offsets_at * 1000)
    for rec in t.records:
        if rec["timestamp_ms"] >= since and tp not in (rec["partitions"] or "").split(","):
            rec["partitions"] = f"{rec['partitions']},{tp}" if rec["partitions"] else tp
