"""Markers a leader served in Fetch responses, in the wire transaction feed (txn_wire_feed.WireFeed).

A COMMIT/ABORT control batch of producer P on a partition, in a Fetch response, is the leader's
log holding P's marker at that offset: the evidence a marker on disk is. It ends P's data on the
partition below it, as the WriteTxnMarkers that wrote it would (which, in a capture of client
traffic only, went broker to broker outside it). Many consumers fetch the same marker: it counts
once per (partition, offset), and once with the coordinator's WriteTxnMarkers when both show."""

from __future__ import annotations


def fetched(feed, ts: float, r: dict) -> None:
    """A COMMIT/ABORT control batch of this producer a leader served in a Fetch response: its
    log's marker at that offset, which ends the producer's data on the partition below it -
    the evidence a marker on disk is, whoever wrote it (the coordinator's WriteTxnMarkers may
    have gone broker to broker, outside the capture). Counted once per (partition, offset);
    a WriteTxnMarkers already replayed for the same end (same result and epoch, after that
    data) is that marker: it gets the offset. A marker ending no data the capture shows
    (an earlier transaction's, a retried duplicate) adds nothing."""
    result, offset = r["control_type"], r["base_offset"]
    if result not in ("COMMIT", "ABORT") or offset is None or r["topic"] is None or r["partition"] is None:
        return
    tp = f"{r['topic']}-{r['partition']}"
    if (tp, offset) in feed._fetched:
        return
    feed._fetched.add((tp, offset))
    mine = _recent(feed.data_by_tp.get((r["topic"], r["partition"]), ()), offset)
    below = [d for d in mine if d["last_offset"] is not None and d["last_offset"] < offset]
    if not below:
        return
    last = max(below, key=lambda d: d["last_offset"])
    e, me = last["producer_epoch"], r["producer_epoch"]
    t = _txn_of(feed, tp, last)
    if (e is not None and me is not None and me not in (e, e + 1)) or \
            (t is not None and t.prepared not in (None, result)):
        # not the end of that data: a later transaction's (a later epoch's, or the other
        # result than the one its coordinator chose), that data's own marker in between unseen
        return
    if _already_ended(feed, r, mine, last):
        return
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
    feed.markers.append(m)
    if t is None:
        return
    if t.prepared_at is not None:
        # written once its transaction was prepared, before this answer: dated by the
        # PrepareX (the time that matches it to its transaction), not by when it was read
        m["base_timestamp_ms"] = m["max_timestamp_ms"] = int(t.prepared_at * 1000)
    if t.complete:
        return
    t.marked.add(tp)
    # a marker fetched on one partition ends that partition's part; the transaction ended at
    # the coordinator (its PrepareX, by whom) only once every registered partition's shows -
    # a partition never served its marker stays open (hanging past its timeout)
    if t.prepared is None and not t.complete and set(t.partitions) <= t.marked:
        feed._coordinator_end(t, ts, dict(r, result=result))
    feed._maybe_complete(t, ts, r)



def _already_ended(feed, r: dict, mine: list[dict], last: dict) -> bool:
    """Whether a marker already ends the data up to `last` (the producer's last data below the
    fetched marker's offset on its partition): a lower fetched one (it keeps the lower offset), or
    the coordinator's WriteTxnMarkers answered after that data and before the next (the same
    marker when result and epoch agree: it gets the offset)."""
    offset, result = r["base_offset"], r["control_type"]
    after = [d["rank"] for d in mine if d["rank"] > last["rank"]]
    nxt = min(after) if after else None
    for m in _markers_on(feed, r["topic"], r["partition"]):
        if m.get("fetched"):
            if m["after"] is last:
                if offset < m["base_offset"]:
                    m.update(base_offset=offset, last_offset=offset, position=r["position"], source=r["source"])
                return True
            continue
        if m["rank"] > last["rank"] and (nxt is None or m["rank"] < nxt):
            if m["base_offset"] is None and m["control_type"] == result \
                    and m["producer_epoch"] == r["producer_epoch"]:
                m["base_offset"] = m["last_offset"] = offset
            return True
    return False


def _recent(rows, offset: int, window: int = 64) -> list[dict]:
    """The partition's data rows around a marker at `offset`: its rows come in about offset
    order, so the last data below it is among the last rows below it (a bounded look back)."""
    k = len(rows)
    while k > 0 and (rows[k - 1]["last_offset"] is None or rows[k - 1]["last_offset"] >= offset):
        k -= 1   # rows above the marker (a later transaction's), newest first
        if len(rows) - k > 4096:
            break
    return list(rows[max(0, k - window):min(len(rows), k + window)])


def _markers_on(feed, topic: str, partition: int) -> list[dict]:
    """The producer's markers on one partition (an index kept up to date as markers come)."""
    idx = feed.markers_by_tp
    for m in feed.markers[feed.markers_indexed:]:
        idx.setdefault((m["topic"], m["partition"]), []).append(m)
    feed.markers_indexed = len(feed.markers)
    return idx.get((topic, partition), [])


def _txn_of(feed, tp: str, last: dict):
    """The transaction of the data `last` a fetched marker follows: the latest one listing its
    partition begun by that data's time."""
    for t in reversed(feed.txns[-64:]):
        if tp in t.partitions and t.start * 1000 <= last["base_timestamp_ms"] + 1:
            return t
    return None


def place(feed) -> None:
    """A fetched marker's place in its partition: right after the last data below its offset."""
    for m in feed.markers:
        if m.get("fetched"):
            m["rank"] = tuple(m.pop("after")["rank"]) + (1,)

