"""The transaction fold's replay functions as they were before their column-wise and indexed
versions (verbatim, but for the names they import): the reference test_wire_txn_reference.py
holds the fast versions to - the same findings, story and `kaudit txn` rows on any input.
What changed the verdicts since is carried here too, or the two would differ for that reason
alone: a capture's lost bytes (`add_lost`, `lost_within`), data whose Produce no answer shows
stored (`unconfirmed`), a write answered while the last transaction's markers were out
(`answered`, read by WireFeed._completing), a fetched copy of a write the capture holds no answer
to (`copies_of_unanswered`, txn_fetched.stored_copy), a retry's answer (`stored_by_retry`), an
AddPartitionsToTxn the capture holds no answer to (`WireFeed._asked`)."""

# ruff: noqa
from __future__ import annotations

import pyarrow as pa

from kaudit.audit.txn import txn_fetched, txn_wire_cover, txn_wire_rows
from kaudit.audit.txn.txn_fetched import (_bare_txn, _date, _later_owner, _markers_on, _txn_of, _written,
                                          _written_alone, decides)
from kaudit.audit.txn.txn_rules import unconfirmed
from kaudit.audit.txn.txn_parts import MATCH_WINDOW_MS, _ended_early, _ended_with, _Nearest, log_order
from kaudit.audit.txn.txn_wire import ADMIN_APIS, FRAME_COLUMNS, row_ts
from kaudit.audit.txn.txn_wire_feed import _host
from kaudit.audit.txn.txn_wire_rows import FENCED
from kaudit.audit.txn.txn_wire_rows import copies_of_unanswered, drop_fetched_repeats, rows_of


def feed(self, kind: str, table: pa.Table) -> list[dict]:   # ProducerWire.feed
    self.rows.extend((row_ts(kind, r) or 0.0, r["position"] or 0, kind, r) for r in rows_of(table))
    return []


def producer_facts_order(rows: list[tuple]) -> list[tuple]:   # txn_wire.producer_facts's order
    return sorted(rows, key=lambda x: (x[0], x[1]))


def fetched(feed, ts: float, r: dict) -> None:
    """A COMMIT/ABORT control batch of this producer a leader served in a Fetch response: its
    log's marker at that offset, which ends the producer's data on the partition below it -
    the evidence a marker on disk is, whoever wrote it. Counted once per (partition, offset);
    a WriteTxnMarkers already replayed for the same end (same result and epoch, after that
    data) is that marker: it gets the offset. On a registered partition where the capture
    shows no data of the transaction, it is that transaction's marker when no earlier
    transaction of the producer could own it (`_bare_txn`). A marker that proves the
    coordinator's decision (`decides`) ends the whole transaction."""
    result, offset = r["control_type"], r["base_offset"]
    if result not in ("COMMIT", "ABORT") or offset is None or r["topic"] is None or r["partition"] is None:
        return
    tp = f"{r['topic']}-{r['partition']}"
    if (tp, offset) in feed._fetched:
        return
    feed._fetched.add((tp, offset))
    mine = _recent(feed.data_by_tp.get((r["topic"], r["partition"]), ()), offset)
    below = [d for d in mine if d["last_offset"] is not None and d["last_offset"] < offset]
    last = max(below, key=lambda d: d["last_offset"]) if below else None
    for d in below:
        # the offsets acknowledged again to another epoch's write (an unclean election lost the
        # first): the log holds the later one, which the marker follows
        if d["last_offset"] == last["last_offset"] and d is not last and below.index(d) > below.index(last) \
                and d["producer_epoch"] != last["producer_epoch"]:
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


def _recent(rows, offset: int, window: int = 64) -> list[dict]:
    """The partition's data rows around a marker at `offset`: its rows come in about offset
    order, so the last data below it is among the last rows below it (a bounded look back)."""
    k = len(rows)
    while k > 0 and (rows[k - 1]["last_offset"] is None or rows[k - 1]["last_offset"] >= offset):
        k -= 1   # rows above the marker (a later transaction's), newest first
        if len(rows) - k > 4096:
            break
    return list(rows[max(0, k - window):min(len(rows), k + window)])


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


def ends_unseen(feed) -> list[dict]:
    """Where a transaction the coordinator ended stops on a partition whose marker the capture
    does not show: a boundary row right after its last data there, in the log's order
    (txn_parts.log_order) - txn_fetched.ends_unseen without its single pass: for each data row,
    the next one and the markers between, looked for anew."""
    owner = {id(d): t for t in feed.txns for rows in t.rows.values() for d in rows}
    out = []
    for key, rows in feed.data_by_tp.items():
        seq = list(rows) + [m for m in feed.markers if (m["topic"], m["partition"]) == key and m["rank"] is not None]
        log_order(seq)
        data = [i for i, x in enumerate(seq) if not x["is_control"]]
        for n, i in enumerate(data):
            d = seq[i]
            t = owner.get(id(d))
            j = data[n + 1] if n + 1 < len(data) else len(seq)
            nxt = seq[j] if j < len(seq) else None
            if t is None or t.prepared is None or (nxt is not None and owner.get(id(nxt)) in (t, None)):
                continue   # not its last data here, or data no transaction claims follows (a write
                # racing the marker may have landed before it)
            if any(seq[k]["is_control"] for k in range(i + 1, j)):
                continue   # a marker the capture shows ends it
            out.append({"topic": d["topic"], "partition": d["partition"], "replica": None,
                        "producer_id": feed.pid, "is_control": True, "is_transactional": True,
                        "control_type": None, "boundary": True, "rank": tuple(d["rank"]) + (2,),
                        "coord_start_ms": int(t.start * 1000), "base_offset": None})
    return out


def batch(self, ts: float, r: dict) -> None:  # WireFeed.batch
    if r.get("source_kind") == "fetch":
        return txn_fetched.fetched(self, ts, r)
    tp = f"{r['topic']}-{r['partition']}"
    err = r["response_error"]
    if self.tid is None and r.get("transactional_id"):
        # a producer id whose first request is a Produce (TV2: EndTxn v5 gave it, KIP-890)
        self.tid = r["transactional_id"]
    self.timeline.append((ts, r["position"], r))   # told in words only if a finding shows it (Story)
    if err not in (0, None):
        return
    base = r["response_base_offset"]
    base = base if err == 0 and base is not None and base >= 0 else None
    n = r["record_count"] or 1
    data = {
        "topic": r["topic"], "partition": r["partition"], "replica": None, "producer_id": self.pid,
        "producer_epoch": r["producer_epoch"], "base_offset": base,
        "last_offset": None if base is None else base + n - 1, "is_transactional": True,
        "is_control": False, "control_type": None, "coordinator_epoch": None,
        "base_timestamp_ms": int(ts * 1000), "max_timestamp_ms": int(ts * 1000),
        "source": r["source"], "position": r["position"], "connection": r["connection"],
        "client_id": r["client_id"], "correlation_id": r["correlation_id"], "base_sequence": r["base_sequence"],
        "last_sequence": r["last_sequence"], "response_error": err, "rank": (ts, r["position"]),
        "answered": r.get("response_ts")}
    key = (tp, r["producer_epoch"], r["base_sequence"])
    first = self._seen.get(key)
    if first is not None:
        # a retry of a batch already counted: the broker stored it once - as this attempt's answer
        # says, where the capture holds none of the first's
        if first["base_offset"] is None and first["answered"] is None and first["response_error"] is None \
                and base is not None:
            first.update({k: data[k] for k in txn_wire_rows._STORED}, by_retry=True)
            self.below.pop((r["topic"], r["partition"]), None)
        return
    self._seen[key] = data
    if tp not in self.produce_hosts:
        self.produce_hosts[tp] = _host(r["connection"], 1)
    row = dict(r, answered=r.get("response_ts"))   # (its answer: _completing)
    if self.version == 2 or not self.tv1_adds or self._asked(tp) or txn_wire_cover.add_lost(self, row, tp):
        self._implicit_add(ts, row, tp)
    t = self.open_txn()
    self.data.append(row := data)
    self.data_by_tp.setdefault((r["topic"], r["partition"]), []).append(row)
    if t is not None and tp in t.partitions:
        t.rows.setdefault(tp, []).append(row)



def _produce_text(r: dict) -> str:
    err = r["response_error"]
    answer = ("no response" if err is None else f"accepted at offset {r['response_base_offset']}" if err == 0
              else f"rejected {FENCED.get(err, err)}")
    text = (f"Produce {r['topic']}-{r['partition']} epoch {r['producer_epoch']} seq {r['base_sequence']}-"
            f"{r['last_sequence']} ({r['record_count']} records) -> {answer}")
    return text + " (a zombie: its epoch was fenced)" if err in FENCED else text


def judged_ranges(t: Transaction, pt: ProducerTxns) -> list[Range]:
    """The stretches whose outcome is judged: those with data (without a marker only where the
    evidence would show one), and on a partition without data the first marker (a registered
    partition never written gets the coordinator's marker all the same; later markers there may
    be other transactions' the evidence could not tell apart: on the wire the offsets group's
    markers come without its data)."""
    out, bare = [], set()
    with_data = {r.tp for r in t.ranges() if r.has_data}
    for r in t.ranges():
        if r.has_data:
            if pt.coverage.lost_within(r.part):
                continue   # (as the fast one: its marker's transaction may be in bytes the capture lost)
            if r.result is not None or (pt.coverage.sees_marker(r.tp, r.part) and not unconfirmed(r.part, pt)):
                out.append(r)
        elif r.tp not in with_data and r.tp not in bare:
            bare.add(r.tp)
            out.append(r)
    return out


def match_markers(parts: list[Part], view: CoordView, since_ms: int | None = None) -> None:
    """Each part with a marker gets the coordinator transaction that wrote it: one listing its
    partition, with the marker's result, whose [PrepareX, CompleteX] window is nearest the
    marker's time (the first such in the coordinator's order on a tie; a transaction with
    another result only when none has the marker's; none further than MATCH_WINDOW_MS). A part
    without marker gets the coordinator's open transaction if it lists the partition.
    `since_ms` (the disk's earliest coordinator record, txn_parts.match_markers) is None on the
    wire, which this reference replays."""
    assert since_ms is None
    by_tp: dict[str, list[CoordTxn]] = {}   # the coordinator transactions listing each partition, in order
    for t in view.txns:
        for tp in t.partitions:
            by_tp.setdefault(tp, []).append(t)
    matchers: dict[tuple, _Nearest] = {}
    for p in parts:
        tp = p.tp
        if p.marker is None:
            t = view.open_txn
            if p.ended_unseen is not None:
                # wire: its transaction's end is known, its marker here not seen
                p.coord = next((c for c in by_tp.get(tp, ()) if c.start_ms == p.ended_unseen), None) \
                    or _ended_with(by_tp.get(tp), p.first_ts)
            elif t is not None and tp in t.partitions:
                p.coord = t
            else:
                p.coord = _ended_with(by_tp.get(tp), p.first_ts)
            continue
        cands = by_tp.get(tp)
        if not cands:
            continue
        inside = _ended_early(cands, p)
        if inside is not None:
            p.coord = inside
            continue
        key = (tp, p.marker.result)
        m = matchers.get(key)
        if m is None:
            # a marker whose result differs from its transaction's is still its (torn)
            same = [t for t in cands if t.result is None or t.result == p.marker.result]
            m = matchers[key] = _Nearest(same or cands)
        best, d = m.nearest(p.marker.ts)
        if d <= MATCH_WINDOW_MS:
            p.coord = best


def prepare(items: list[tuple[str, pa.Table]], ctx: Context) -> list[tuple[str, pa.Table]]:
    """The fold needs the txn_event rows' response times, senders and per-partition answers
    (from their frames) and the producer id of failed InitProducerId requests (from their
    transactional id): added before sorting, from the whole selection."""
    frames = {}
    admins = set()
    for kind, t in items:
        if kind == "frame":
            for f in rows_of(t.select(FRAME_COLUMNS)):
                frames[(f["source"], f["connection"], f["request_frame"])] = f
                if f["api_key"] in ADMIN_APIS and f["client_id"]:
                    admins.add(f["client_id"])
    out = []
    events = [t for k, t in items if k == "txn_event"]
    if events:
        rows = rows_of(pa.concat_tables(events))
        # a failed request names no producer id: it is the one its transactional id obtains next
        # (else the last it had), in time order
        nxt: dict = {}
        for r in sorted(rows, key=lambda r: (r["ts"] or 0.0, r["position"] or 0), reverse=True):
            tid = r["transactional_id"]
            if tid and r["producer_id"] is not None and r["producer_id"] >= 0:
                nxt[tid] = r["producer_id"]
            elif tid and tid in nxt:
                r["producer_id"] = nxt[tid]
        last: dict = {}
        for r in sorted(rows, key=lambda r: (r["ts"] or 0.0, r["position"] or 0)):
            tid = r["transactional_id"]
            if tid and r["producer_id"] is not None and r["producer_id"] >= 0:
                last[tid] = r["producer_id"]
            elif tid in last:
                r["producer_id"] = last[tid]
            f = frames.get((r["source"], r["connection"], r["position"]), {})
            r.update(response_ts=f.get("response_ts"), client_id=f.get("client_id"),
                     api_version=f.get("api_version"), partition_errors=f.get("partition_errors"),
                     markers=f.get("markers"),
                     admin_clients=sorted(admins) if r["event"] == "WRITE_MARKERS" else None)
        out.append(("txn_event", pa.Table.from_pylist(rows)))
    batches = [t for k, t in items if k == "batch" and t.num_rows]
    if batches:
        out.append(("batch", copies_of_unanswered(drop_fetched_repeats(pa.concat_tables(batches)))))
    return out
