"""Markers a leader served in Fetch responses, in the wire transaction feed (txn_wire_feed.WireFeed).

A COMMIT/ABORT control batch of producer P on a partition, in a Fetch response, is the leader's
log holding P's marker at that offset: the evidence a marker on disk is. It ends P's data on the
partition below it, as the WriteTxnMarkers that wrote it would (which, in a capture of client
traffic only, went broker to broker outside it). Many consumers fetch the same marker: it counts
once per (partition, offset), and once with a WriteTxnMarkers already replayed when both show.

What one marker proves about the transaction's other partitions (`decides`): the coordinator
writes its decision's marker to every partition the transaction registered
(TransactionCoordinator.endTransaction, TransactionMarkerChannelManager), with one result and
one epoch. Its own abort of a timed-out or fenced transaction bumps the epoch (transaction
version 0/1: the fencing abort's markers carry epoch + 1,
TransactionMetadata.prepareFenceProducerEpoch; version 2, KIP-890: every end's markers carry
epoch + 1), and only the coordinator ever writes COMMIT. An admin's abort (kafka-transactions.sh
abort: WriteTxnMarkers from an admin client to the partitions it names, at the producer's
current epoch - DescribeProducers' - under either version; its coordinator epoch copied from
DescribeProducers too, so that tells nothing) writes ABORT at the data's epoch and decides
nothing for the other partitions. So a fetched COMMIT (at the data's epoch, or + 1) or ABORT at
the data's epoch + 1 is the coordinator's decision for the whole transaction: its other
registered partitions are ended by it, their markers just not in the capture (they are not
hanging). An ABORT at the data's epoch - an admin's, or a version 0/1 client's EndTxn the
capture does not hold - ends its own partition only; a marker the capture shows an admin's
WriteTxnMarkers wrote proves nothing beyond its partition whatever its epoch.

`ends_unseen`: where a transaction the coordinator ended stops on a partition whose marker the
capture does not show (the next transaction's data there is another part)."""

from __future__ import annotations

from bisect import bisect_left

from kaudit.audit.txn import txn_kept, txn_wire_cover
from kaudit.audit.txn.txn_parts import ADMIN, log_order, marker_may_end


def fetched(feed, ts: float, r: dict) -> None:
    """A COMMIT/ABORT control batch of this producer a leader served in a Fetch response: its
    log's marker at that offset, which ends the producer's data on the partition below it -
    the evidence a marker on disk is, whoever wrote it. Counted once per (partition, offset);
    a WriteTxnMarkers already replayed for the same end (same result and epoch, after that
    data) is that marker: it gets the offset. On a registered partition where the capture
    shows no data of the transaction, it is that transaction's marker when no earlier
    transaction of the producer could own it (`_bare_txn`). A marker that proves the
    coordinator's decision (`decides`) ends the whole transaction."""
    if not r["is_control"]:
        return stored_copy(feed, ts, r)
    result, offset = r["control_type"], r["base_offset"]
    if result not in ("COMMIT", "ABORT") or offset is None or r["topic"] is None or r["partition"] is None:
        return
    tp = f"{r['topic']}-{r['partition']}"
    if (tp, offset) in feed._fetched:
        return
    feed._fetched.add((tp, offset))
    mine = _recent(feed, (r["topic"], r["partition"]), offset)
    last, top = None, None   # the first of the rows below the marker with the highest last offset
    for d in mine:
        lo = d["last_offset"]
        if lo is not None and lo < offset and (top is None or lo > top):
            last, top = d, lo
        elif lo is not None and lo == top and d["producer_epoch"] != last["producer_epoch"]:
            # the offsets acknowledged again to another epoch's write (an unclean election lost
            # the first): the log holds the later one, which the marker follows
            last = d
    if last is not None:
        e, me = last["producer_epoch"], r["producer_epoch"]
        t = _txn_of(feed, tp, last)
        if (e is not None and me is not None and me not in (e, e + 1)) or \
                (t is not None and t.prepared not in (None, result) and (me != e or _later_owner(feed, t, tp, r))):
            # not the end of that data: a later transaction's (a later epoch's, or the other
            # result than the one its coordinator chose), that data's own marker in between unseen
            return
        if _already_ended(feed, r, mine, last):
            return
    else:
        t = _bare_txn(feed, tp, r, ts, offset)
        if t is None:
            _written_alone(feed, r, ts)
            return   # an earlier transaction's, a retried duplicate, or a WriteTxnMarkers of none
        if _written(feed, r, ts, t):
            return   # the WriteTxnMarkers replayed
        e = t.epoch
    feed.step(ts, r["position"], f"Fetch from {r['connection']} serves {tp} {result} marker at offset "
                                 f"{offset} epoch {r['producer_epoch']} coordinator epoch {r['coordinator_epoch']}")
    m = {
        "topic": r["topic"], "partition": r["partition"], "replica": None, "producer_id": feed.pid,
        "producer_epoch": r["producer_epoch"], "base_offset": offset, "last_offset": offset,
        "is_transactional": True, "is_control": True, "control_type": result,
        "coordinator_epoch": r["coordinator_epoch"], "base_timestamp_ms": int(ts * 1000),
        "max_timestamp_ms": int(ts * 1000), "source": r["source"], "position": r["position"],
        "writer": None, "client_id": None, "connection": r["connection"], "rank": None, "after": last,
        "sent": ts, "transaction_version": None, "fetched": True}
    if last is None:
        m["rank"] = (ts, r["position"])   # no data of its transaction here: its own place
    feed.markers.append(m)
    if t is None:
        return
    if t.complete:
        _date(m, t)
        return
    t.marked.add(tp)
    if t.prepared is None and (decides(result, r["producer_epoch"], e)
                               or (t.partitions and set(t.partitions) <= t.marked)):
        # the coordinator's decision (or every registered partition's marker shown): the
        # transaction ended at the coordinator; a partition whose marker the capture lacks is
        # ended by that decision, unseen - not open
        feed._coordinator_end(t, ts, dict(r, result=result))
    _date(m, t)
    feed._maybe_complete(t, ts, r)


def stored_copy(feed, ts: float, r: dict) -> None:
    """A transactional data batch of this producer a leader served in a Fetch response: its log
    holds it at that offset. The producer's write the capture holds no answer to with the same
    partition, epoch and first sequence (the broker stores a batch once by them,
    ProducerStateManager; its retries are the same batch) was stored there: it gets the offset
    its answer would have given, and counts as stored (`stored_copies`, once the replay knows
    the producer's version). A copy of an answered write, or of none the capture holds, adds
    nothing."""
    seq, base, key = r["base_sequence"], r["base_offset"], (r["topic"], r["partition"])
    if seq is None or seq < 0 or base is None or None in key:
        return
    n = r["record_count"] or 1
    for d in reversed(feed.data_by_tp.get(key, ())):
        if d["base_offset"] is None and d.get("answered") is None and d["base_sequence"] == seq \
                and d["producer_epoch"] == r["producer_epoch"] and id(d) not in feed.copies:
            if d["last_sequence"] is None or d["last_sequence"] == seq + n - 1:   # (a split batch: fewer)
                feed.copies[id(d)] = (d, base, n, ts, r)
            return


def stored_copies(feed) -> None:
    """The offsets the served copies give (stored_copy), for a producer of transaction version
    0/1 only: its consecutive transactions share an epoch, so only the offset tells on which side
    of a marker such a write landed (a late write, after its transaction's ABORT); under version
    2 every transaction has its own epoch, and the raced write is placed against the markers by
    it (txn_wire_order)."""
    if feed.version == 2:
        return
    for d, base, n, ts, r in feed.copies.values():
        d.update(base_offset=base, last_offset=base + n - 1, fetched=True)
        feed.step(ts, r["position"], f"Fetch from {r['connection']} serves {r['topic']}-{r['partition']} epoch "
                                     f"{r['producer_epoch']} seq {d['base_sequence']}-{d['base_sequence'] + n - 1} "
                                     f"at offset {base}: stored, its Produce's answer not in the capture")


def decides(result: str, marker_epoch: int | None, data_epoch: int | None) -> bool:
    """Whether a marker proves its transaction's coordinator decided it (see the module): a
    COMMIT (only the coordinator commits; at the data's epoch under version 0/1, + 1 under 2),
    or an ABORT at the data's epoch + 1 (the coordinator's bump: its own abort under 0/1, any
    end under 2). An ABORT at the data's epoch may be an admin's (kafka-transactions.sh abort,
    one partition): it proves nothing about the others."""
    if marker_epoch is None or data_epoch is None:
        return False
    if result == "COMMIT":
        return marker_may_end(marker_epoch, data_epoch)
    return result == "ABORT" and marker_epoch == data_epoch + 1


def _date(m: dict, t) -> None:
    """A marker written once its transaction was prepared, before this answer: dated by the
    PrepareX (the time that matches it to its transaction), not by when it was read."""
    if t.prepared_at is not None:
        m["base_timestamp_ms"] = m["max_timestamp_ms"] = int(t.prepared_at * 1000)


def _bare_txn(feed, tp: str, r: dict, ts: float, offset: int):
    """The transaction a marker fetched on `tp` ends when the capture shows no data of the
    producer below it there: the latest transaction begun by then that registered `tp`, whose
    epoch fits the marker (its epoch, or + 1) and whose data on `tp`, if any, lies below the
    marker - when no earlier transaction that registered `tp` could own the marker too (one
    still undecided at a fitting epoch, or decided with this result at this epoch: a lagging
    consumer reads an old transaction's marker late). None when that is not certain."""
    result, me = r["control_type"], r["producer_epoch"]
    if me is None:
        return None
    cands = [t for t in feed.txns[-64:] if tp in t.partitions and t.start <= ts and _owns(t, result, me, offset, tp)]
    if len(cands) != 1:
        return None
    t = cands[0]
    return t if t.prepared in (None, result) else None


def _later_owner(feed, t, tp: str, r: dict) -> bool:
    """Whether a transaction after `t` that registered `tp` may own a marker fetched there, of
    the other result than `t`'s decision at `t`'s data's epoch: else it ends `t`'s data all the
    same - an admin's abort of that partition (at the data's epoch: the coordinator's own would
    carry + 1), which the torn-transaction rule judges."""
    return any(tp in u.partitions and _owns(u, r["control_type"], r["producer_epoch"], r["base_offset"], tp)
               for u in _later(feed, t))


def _later(feed, t) -> list:
    """The producer's transactions after `t`."""
    return feed.txns[feed.txns.index(t) + 1:] if t in feed.txns else []


def _owns(t, result: str, me: int, offset: int, tp: str) -> bool:
    """Whether transaction `t` may have written a `result` marker of epoch `me` at `offset` on `tp`."""
    if any(d["base_offset"] is not None and d["base_offset"] > offset for d in t.rows.get(tp, ())):
        return False   # a transaction's marker comes after all its data
    if t.prepared is not None:
        return t.prepared == result and t.prepare_epoch == me
    return marker_may_end(me, t.epoch)


def _written_by(feed, r: dict, ts: float) -> list[dict]:
    """The WriteTxnMarkers of the capture that may have written fetched marker `r`: on its
    partition, of its result and epoch, sent by `ts` (when it was served)."""
    return [m for m in _markers_on(feed, r["topic"], r["partition"])
            if not m.get("fetched") and m["control_type"] == r["control_type"]
            and m["producer_epoch"] == r["producer_epoch"] and m["sent"] <= ts]


def _written(feed, r: dict, ts: float, t) -> bool:
    """Whether a WriteTxnMarkers the capture holds wrote this marker of transaction `t` (same
    partition, result and epoch, the latest sent by the time it was served within `t`: from its
    start to the next transaction's - a later transaction's marker of the same result and epoch
    is its own, however late a consumer reads this one): it is that one - it gets the offset."""
    until = min((u.start for u in _later(feed, t)), default=None)
    same = [m for m in _written_by(feed, r, ts) if t.start <= m["sent"] and (until is None or m["sent"] < until)]
    if not same:
        return False
    m = max(same, key=lambda m: m["rank"])
    if m["base_offset"] is None:
        m["base_offset"] = m["last_offset"] = r["base_offset"]
    return True


def _written_alone(feed, r: dict, ts: float) -> None:
    """A marker fetched where no transaction of the capture can own it (its data and
    registration outside the capture), that a WriteTxnMarkers the capture holds wrote: the one
    WriteTxnMarkers of its partition, result and epoch, sent by then and still without an
    offset, whose place among the partition's data its offset agrees with (the data sent before
    it below, the data after it above) - it gets the offset, so that the data after it is read
    as after it (a late write) and not as the data it ended."""
    offset = r["base_offset"]
    same = [m for m in _written_by(feed, r, ts) if m["base_offset"] is None]
    if not same:
        return
    near = [d for d in _recent(feed, (r["topic"], r["partition"]), offset)   # the rows around its offset
            if d["base_offset"] is not None and d["last_offset"] is not None]
    same = [m for m in same if all(d["last_offset"] < offset if d["rank"] < m["rank"] else d["base_offset"] > offset
                                   for d in near)]
    if len(same) == 1:
        same[0]["base_offset"] = same[0]["last_offset"] = offset


def _already_ended(feed, r: dict, mine: list[dict], last: dict) -> bool:
    """Whether a marker already ends the data up to `last` (the producer's last data below the
    fetched marker's offset on its partition): a lower fetched one (it keeps the lower offset), or
    the coordinator's WriteTxnMarkers answered after that data and before the next (the same
    marker when result and epoch agree: it gets the offset) - the first such in the order the
    markers came (`_index`)."""
    offset, result = r["base_offset"], r["control_type"]
    written, after = _index(feed, r["topic"], r["partition"])
    hit = after.get(id(last))   # the first fetched marker right after `last`: (its order, it)
    if written:
        lo, stop = last["rank"], (hit[0] if hit is not None else None)
        # the next data stored: a write the capture holds no answer to may have landed anywhere later
        nxt = min((d["rank"] for d in mine if d["rank"] > lo and d["base_offset"] is not None), default=None)
        for k, m in written:
            if stop is not None and k > stop:
                break
            if m["rank"] > lo and (nxt is None or m["rank"] < nxt):
                if m["base_offset"] is None and m["control_type"] == result \
                        and m["producer_epoch"] == r["producer_epoch"]:
                    m["base_offset"] = m["last_offset"] = offset
                return True
    if hit is not None:
        m = hit[1]
        if offset < m["base_offset"]:
            m.update(base_offset=offset, last_offset=offset, position=r["position"], source=r["source"])
        return True
    return False


def _recent(feed, key: tuple, offset: int, window: int = 64, reach: int = 4096) -> list[dict]:
    """The partition's data rows around a marker at `offset`: its rows come in about offset
    order, so the last data below it is among the last rows below it - the `window` rows each
    side of the last row whose last offset is below `offset`, looked for among the last `reach`
    rows at most. That row is found by bisection (a consumer lagging behind the producer is
    served the marker after many later rows): it is on the partition's stack of rows whose last
    offset is below every later row's (`below`, kept up to date as rows come)."""
    rows = feed.data_by_tp.get(key, ())
    n = len(rows)
    at, lows, done = feed.below.setdefault(key, ([], [], [0]))
    for j in range(done[0], n):
        lo = rows[j]["last_offset"]
        if lo is not None:
            while lows and lows[-1] >= lo:
                lows.pop()
                at.pop()
            at.append(j)
            lows.append(lo)
    done[0] = n
    i = bisect_left(lows, offset) - 1   # the last row below `offset`: the top of those on the stack
    k = max(at[i] + 1 if i >= 0 else 0, n - reach - 1)
    return rows[max(0, k - window):min(n, k + window)] if n else []


def _markers_on(feed, topic: str, partition: int) -> list[dict]:
    """The producer's markers on one partition (an index kept up to date as markers come)."""
    idx = feed.markers_by_tp
    for m in feed.markers[feed.markers_indexed:]:
        idx.setdefault((m["topic"], m["partition"]), []).append(m)
    feed.markers_indexed = len(feed.markers)
    return idx.get((topic, partition), [])


def _index(feed, topic: str, partition: int) -> tuple[list, dict]:
    """The producer's markers on one partition as `_already_ended` reads them, kept up to date
    as markers come: the written ones (WriteTxnMarkers) as (order, marker), and the first
    fetched one after each data row, by the row's id (a fetched marker's `after` stays until
    `place`), as (order, marker); `order`: its place among the partition's markers."""
    ms = _markers_on(feed, topic, partition)
    written, after, done = feed.fetched_index.setdefault((topic, partition), ([], {}, [0]))
    for k in range(done[0], len(ms)):
        m = ms[k]
        if m.get("fetched"):
            after.setdefault(id(m["after"]), (k, m))
        else:
            written.append((k, m))
    done[0] = len(ms)
    return written, after


def _txn_of(feed, tp: str, last: dict):
    """The transaction of the data `last` a fetched marker follows: the latest one listing its
    partition begun by that data's time."""
    by = last["base_timestamp_ms"] + 1
    for t in reversed(feed.txns[-64:]):
        if t.start * 1000 <= by and tp in t.partitions:   # the time first: the cheaper test
            return t
    return None


def place(feed) -> None:
    """A fetched marker's place in its partition: right after the last data below its offset
    (its own place, when it follows no data of the capture)."""
    for m in feed.markers:
        if m.get("fetched"):
            after = m.pop("after")
            if after is not None:
                m["rank"] = tuple(after["rank"]) + (1,)


def ends_unseen(feed) -> list[dict]:
    """Where a transaction the coordinator ended stops on a partition whose marker the capture
    does not show: a boundary row right after its last data there (txn_parts: it closes the
    part, without a marker, as that transaction's). A transaction begins at the coordinator only
    once the previous one completed - its markers written to every registered partition
    (TransactionCoordinator: CONCURRENT_TRANSACTIONS until then) - so the data of two
    transactions on one partition is two parts, whether or not the capture shows the marker
    between; lumped, the later one's open part would start at the earlier one's offsets. Read
    in the log's order (txn_parts.log_order, the parts' own): a marker a consumer fetched late
    still ends the data below it."""
    owner = {id(d): t for t in feed.txns for rows in t.rows.values() for d in rows}
    marks: dict[tuple, list] = {}
    for m in feed.markers:
        if m["rank"] is not None:
            marks.setdefault((m["topic"], m["partition"]), []).append(m)
    out = []
    get = owner.get
    for key, rows in feed.data_by_tp.items():
        seq = rows + marks.get(key, [])
        log_order(seq)
        own = [_MARK if x["is_control"] else get(id(x)) for x in seq]   # each row's transaction
        last, t, ended = 0, None, False   # the last data row, its transaction, a marker after it
        for k, u in enumerate(own):
            if u is _MARK:
                if not ended and t is not None and t.prepared is not None and _lost_own(feed, t, seq[k], seq[last]):
                    out.append(_boundary(feed, seq[last], t))   # its own marker in bytes the capture lost
                ended = True
                continue
            # a boundary after `last` unless it is not its transaction's last data here, data no
            # transaction claims follows (a write racing the marker may have landed before it),
            # or a marker the capture shows ends it
            if u is not t and not ended and t is not None and u is not None and t.prepared is not None:
                out.append(_boundary(feed, seq[last], t))
            last, t, ended = k, u, False
        if t is not None and not ended and t.prepared is not None:
            out.append(_boundary(feed, seq[last], t))
    return out


_MARK = object()   # ends_unseen: a marker's place


def _lost_own(feed, t, m: dict, last: dict) -> bool:
    """Whether marker `m`, the first after transaction `t`'s last data `last` on its partition,
    is a later transaction's (an epoch `t`'s markers do not carry; not an admin's) while `t`'s
    own may be in bytes the capture lost (txn_wire_cover.marker_lost): `t` ended there unseen,
    and `m` ends the data after it only."""
    e = m.get("producer_epoch")
    if not txn_wire_cover.holes_of(feed) or e is None or m.get("writer") == ADMIN or e in txn_kept.marker_epochs(t):
        return False    # (no hole in the capture: every marker after data asks, the cheap test first)
    return txn_wire_cover.marker_lost(feed, f"{m['topic']}-{m['partition']}", since=last) is not None


def _boundary(feed, d: dict, t) -> dict:
    return {"topic": d["topic"], "partition": d["partition"], "replica": None, "producer_id": feed.pid,
            "is_control": True, "is_transactional": True, "control_type": None, "boundary": True,
            "rank": tuple(d["rank"]) + (2,), "coord_start_ms": int(t.start * 1000), "base_offset": None}
