"""The lost-marker floor of the transaction model: one replica's parts of a partition with the
data of a transaction whose own marker is missing there cut from the data after it
(`split_lost_markers`), before the replicas are merged (txn_parts.merge_replicas). Disk only: a
log holds every marker between its data, a capture may miss one."""

from __future__ import annotations

from bisect import bisect_left

from kaudit.audit.thresholds import MATCH_WINDOW_MS
from kaudit.audit.txn.coordinator_state import CoordTxn, CoordView
from kaudit.audit.txn.txn_parts import Marker, Part, _Nearest, create_ms


def split_lost_markers(parts: list[Part], view: CoordView, slack_ms: int) -> list[Part]:
    """One replica's parts of a partition (in log order) with the data of a transaction whose own
    marker is missing there cut from the data after it. Invariant: the coordinator writes a
    transaction's marker to every partition it registered before it writes its Complete record
    (TransactionMarkerChannelManager, KIP-98). So where a coordinator transaction that registered
    the partition completed, the part's marker was written after that and is a later
    transaction's (the one whose window is nearest it, as match_markers picks), and the part's
    first data was created inside that transaction (not after its own marker: the previous
    marker came before its Prepare), its marker is missing on this replica - lost (an unclean
    election, a truncation) - and the later marker ended its data too. Its data: the batches of
    its epoch up to the first of another epoch (the later transaction's: version 2 gives each
    transaction its own epoch, a fencing moves to a new one). Under version 0/1 transactions of
    one epoch are not told apart: only the clocks would cut them (client times against the
    coordinator's, `slack_ms` apart, transactions milliseconds apart), which the evidence does not
    make safe. A fenced instance's late write is another case: its transaction never
    registered the partition, or its data follows its own marker (write-after-epoch-end,
    late-transactional-write). Cut on each replica before they are merged (merge_replicas: a
    replica holding the marker keeps it for the part, the others' loss is replica-divergence's).
    The transaction's piece gets its transaction (`coord`), the part's marker and
    `borrowed_marker`."""
    out: list[Part] = []
    lost = _Lost(parts[0].tp, view, slack_ms) if parts else None
    for k, p in enumerate(parts):
        before = parts[k - 1].marker if k else None
        while True:
            cut = _lost_marker_cut(p, before, lost)
            if cut is None:
                break
            head, p = _split(p, *cut)
            out.append(head)
        out.append(p)
    return out


def _lost_marker_cut(p: Part, before: Marker | None, lost: "_Lost") -> tuple[int, CoordTxn] | None:
    """(where its data ends, the transaction) of the data of a transaction whose marker is missing
    at the start of part `p`, data of a later epoch after it (split_lost_markers; `before`: the
    marker before it), else None."""
    m = p.marker
    if m is None or m.ts is None or not p.data or p.borrowed_marker:
        return None
    e, t0 = p.data[0]["producer_epoch"], create_ms(p.data[0])
    if e is None or t0 is None:
        return None
    for t in lost.ended_between(t0, m.ts):
        if (t.epoch == e and m.ts > t.complete_ts and t.start_ms - MATCH_WINDOW_MS <= t0 <= t.prepare_ts + lost.slack
                # after a marker written once it ended (its own): a late write, not its data
                and (before is None or before.ts is None or before.ts < t.prepare_ts)
                and lost.owner(p).index > t.index):
            i = next((k for k, b in enumerate(p.data) if b["producer_epoch"] != e), None)
            return None if i is None or p.data[i]["producer_epoch"] is None else (i, t)
    return None


class _Lost:
    """What _lost_marker_cut reads of the coordinator's transactions listing one partition,
    indexed (a producer's long life on one partition: every transaction for every part before):
    the completed ones a part's data may belong to - completed before its marker, prepared no
    earlier than `slack` before its first data: where every one's PrepareX comes no later than
    its CompleteX, those that completed in between, by bisection - in the coordinator's order;
    and a part's own transaction (the one whose window is nearest its marker's time, one with
    the marker's result first, as match_markers picks it)."""

    def __init__(self, tp: str, view: CoordView, slack_ms: int):
        self.slack = slack_ms
        self.cands = [t for t in view.txns if tp in t.partitions]
        self.done = [t for t in self.cands
                     if t.complete_ts is not None and t.prepare_ts is not None and t.start_ms is not None]
        self.ordered = all(t.prepare_ts <= t.complete_ts for t in self.done)
        self.order = {id(t): i for i, t in enumerate(view.txns)}
        if self.ordered:
            self.done.sort(key=lambda t: t.complete_ts)
            self.completes = [t.complete_ts for t in self.done]
        self.owners: dict = {}   # marker result -> _Nearest over its candidates

    def ended_between(self, first: int, marker: int) -> list[CoordTxn]:
        """The completed transactions with complete < `marker` and prepare + slack >= `first`
        (a superset where not `ordered`), in the coordinator's order."""
        if not self.ordered:
            return self.done
        lo, hi = bisect_left(self.completes, first - self.slack), bisect_left(self.completes, marker)
        return sorted((t for t in self.done[lo:hi] if t.prepare_ts + self.slack >= first),
                      key=lambda t: self.order[id(t)])

    def owner(self, p: Part) -> CoordTxn:
        r = p.marker.result
        near = self.owners.get(r)
        if near is None:
            near = self.owners[r] = _Nearest.of_result(self.cands, r)
        return near.nearest(p.marker.ts)[0]


def _split(p: Part, i: int, t: CoordTxn) -> tuple[Part, Part]:
    """One replica's part cut before its data's `i`th batch: (its transaction's piece, the rest)."""
    off = p.data[i]["base_offset"]
    plain = ([b for b in p.nontxn if b["base_offset"] < off], [b for b in p.nontxn if b["base_offset"] >= off])
    head = Part(p.topic, p.partition, p.producer_id, list(p.replicas), p.data[:i], plain[0], p.marker,
                coord=t, key=p.key, borrowed_marker=True)
    tail = Part(p.topic, p.partition, p.producer_id, list(p.replicas), p.data[i:], plain[1], p.marker,
                key=off)   # disk only: a log's parts are keyed by their offsets (log_order)
    return head, tail
