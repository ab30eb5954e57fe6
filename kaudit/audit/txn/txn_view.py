"""The `kaudit txn` view: a producer's transactions as plain rows, from the same facts and the
same grouping the rules judge (txn_model.group), whether the evidence was a log dir or a capture
(or both: `merge_rows` follows one transactional id through them)."""

from __future__ import annotations

from kaudit.audit.txn.txn_model import Part, ProducerTxns, Transaction, group
from kaudit.timefmt import iso_ms


def _part_row(p: Part, wire: bool) -> dict:
    m = p.marker
    row = _part_fields(p)
    if m is not None and m.transaction_version is not None:
        row["marker"]["transaction_version"] = m.transaction_version   # WriteTxnMarkers v2 (KIP-1228)
    return row


def _part_fields(p: Part) -> dict:
    m = p.marker
    return {"partition": p.tp, "replicas": [r for r in p.replicas if r is not None],
            "first_offset": p.start_offset, "last_data_offset": p.last_data_offset,
            "data_batches": len(p.data), "producer_epoch": p.data_epoch,
            "first_data": iso_ms(p.first_ts) if p.data and p.first_ts is not None else None,
            "evidence": [{"source": b["source"], "position": b["position"]} for b in p.data[:1]],
            "marker": None if m is None else {
                "offset": m.offset, "result": m.result, "epoch": m.epoch,
                "coordinator_epoch": m.coordinator_epoch, "ts_ms": m.ts, "time": iso_ms(m.ts),
                "writer": m.writer, "client_id": m.client_id,
                "evidence": {"source": m.source, "position": m.position}}}


def _row(pt: ProducerTxns, t: Transaction) -> dict:
    c = t.coord
    wire = pt.coverage.source == "wire"
    who, how = t.ended_by()
    return {
        "producer_id": pt.producer_id, "transactional_id": t.transactional_id,
        "transaction": t.key, "source": pt.coverage.source,
        "transaction_version": pt.version,
        "producer_epoch": c.epoch if c is not None else t.epoch,
        "start_ms": t.start_ms, "start": iso_ms(t.start_ms) if t.start_ms is not None else None,
        "timeout_ms": c.timeout_ms if c is not None else None,
        "registered_partitions": sorted(c.partitions) if c is not None else None,
        "outcome": t.outcome, "ended_by": who if how is None else f"{who} ({how})" if who else None,
        "coordinator_states": [{"state": s["state"], "epoch": s["epoch"], "ts_ms": s["ts"], "time": iso_ms(s["ts"]),
                                "offset": None if wire else s["offset"], "partitions": s["partitions"]}
                               for s in (c.states if c is not None else ())],
        "parts": [_part_row(p, wire) for p in sorted(t.parts, key=lambda p: (p.tp, p.key))],
    }


def describe(pt: ProducerTxns) -> list[dict]:
    """The transactions of one producer as plain rows: one per coordinator transaction (its
    records, or on the wire its requests), then the parts none claims, in time order. Each row
    carries the producer's `transaction_version` (txn_model.transaction_version) and who ended
    the transaction where the evidence tells."""
    coord = [t for t in group(pt) if t.coord is not None]
    loose = [t for t in group(pt) if t.coord is None]
    order = {id(c): i for i, c in enumerate(pt.view.txns)}
    coord.sort(key=lambda t: order.get(id(t.coord), 0))
    return [_row(pt, t) for t in coord + loose]


def follow(rows: list[dict], transactional_id: str | None) -> list[dict]:
    """Rows of one transactional id across its producer ids (a new instance, or the id moved to
    a new producer id when its epoch ran out): the producer ids its rows name, and the rows of
    those producer ids no coordinator record names."""
    if transactional_id is None:
        return rows
    pids = {r["producer_id"] for r in rows if r["transactional_id"] == transactional_id}
    return [r for r in rows if r["producer_id"] in pids and r["transactional_id"] in (transactional_id, None)]


def merge_rows(disk: list[dict], wire: list[dict]) -> list[dict]:
    """Disk and wire rows of the same transactions side by side: a wire row whose transaction
    the log also holds is attached to the log's row as `wire`; the others stay on their own (the
    capture saw what the log dirs given do not hold, or the reverse). See `pair_rows`."""
    pairs = pair_rows(disk, wire)
    out = list(disk)
    for j, w in enumerate(wire):
        i = pairs.get(j)
        if i is None:
            out.append(w)
            continue
        d = disk[i]
        d["wire"] = {k: w[k] for k in ("outcome", "ended_by", "coordinator_states", "parts")}
        if d.get("ended_by") is None:
            d["ended_by"] = w["ended_by"]
    from kaudit.audit.txn.txn_lineage import together

    return together(sorted(out, key=lambda r: (r["start_ms"] is None, r["start_ms"] or 0, r["producer_id"])))


def pair_rows(disk: list[dict], wire: list[dict]) -> dict[int, int]:
    """wire row -> disk row of the same transaction, each row in one pair at most: the same
    `transaction` key (producer id, epoch, first data); else the same producer id and epoch
    and a part at the same place (a partition's first data offset or marker offset); else the
    same producer id and epoch begun within MATCH_WINDOW_MS, the nearest first. The keys differ
    where the log's first data is not the capture's: the group's `__consumer_offsets` batch of
    a TxnOffsetCommit (data on disk, a request on the wire), data or markers the cleaner
    removed, data an unclean election lost (the same offsets then hold another epoch's)."""
    from bisect import bisect_left, bisect_right

    from kaudit.audit.thresholds import MATCH_WINDOW_MS

    pairs: dict[int, int] = {}
    free = set(range(len(disk)))
    by_key = {r["transaction"]: i for i, r in enumerate(disk)}
    by_place: dict = {}
    for i, r in enumerate(disk):
        for place in _places(r):
            by_place.setdefault(data_producer(r) + place, i)

    def pair(j: int, i: int | None) -> None:
        if i is not None and i in free and j not in pairs:
            pairs[j] = i
            free.discard(i)

    for j, w in enumerate(wire):
        pair(j, by_key.get(w["transaction"]))
    for j, w in enumerate(wire):
        pair(j, next((i for i in (by_place.get(data_producer(w) + place) for place in _places(w)) if i in free), None))
    begun: dict = {}   # (producer id, epoch) -> the unpaired disk rows' (start, index), by start
    for i in sorted(free):
        if disk[i]["start_ms"] is not None:
            begun.setdefault(data_producer(disk[i]), []).append((disk[i]["start_ms"], i))
    for v in begun.values():
        v.sort()
    starts = {k: [ts for ts, _ in v] for k, v in begun.items()}
    near = []
    for j, w in enumerate(wire):
        k = data_producer(w)
        if j not in pairs and w["start_ms"] is not None and k in begun:
            # those begun within MATCH_WINDOW_MS of it, by bisection (a producer's long life)
            lo = bisect_left(starts[k], w["start_ms"] - MATCH_WINDOW_MS)
            hi = bisect_right(starts[k], w["start_ms"] + MATCH_WINDOW_MS)
            near.extend((abs(w["start_ms"] - ts), j, i) for ts, i in begun[k][lo:hi])
    for _, j, i in sorted(near):
        pair(j, i)
    return pairs


def data_producer(row: dict) -> tuple:
    """Its producer id and data epoch (as its key names them: the coordinator's records give a
    version-2 transaction the epoch it ended at where the capture lacks them)."""
    return row["producer_id"], row["transaction"].split("/")[1]


def _places(row: dict) -> list[tuple]:
    """Where a transaction row's parts sit in their partitions' logs: (partition, data or
    marker, offset) of each part whose offset the evidence gives."""
    out = []
    for p in row["parts"]:
        if p["first_offset"] is not None and p["data_batches"]:
            out.append((p["partition"], "data", p["first_offset"]))
        m = p["marker"]
        if m is not None and m["offset"] is not None:
            out.append((p["partition"], "marker", m["offset"]))
    return out
