"""What a capture can show of one producer's transactions (`WireCoverage`), and where the
capture's lost bytes (audit.capture_holes) leave a registration or a marker unprovable: a rule
never reads an absence the capture may have lost as an absence of the event."""

from __future__ import annotations

from kaudit.audit.capture_holes import host_of
from kaudit.audit.txn.txn_model import Coverage


def _place(row: dict) -> tuple:
    """A data row's place in the captures (capture_holes.CaptureHoles.place's source, frame)."""
    return row.get("source"), row.get("position")


def holes_of(feed):
    """The captures' holes (audit.capture_holes.CaptureHoles) the feed's context holds; None: none."""
    return getattr(feed.ctx, "capture_holes", None) if feed.ctx is not None else None


def _marker_conns(holes, host: str | None) -> set[str]:
    """The connections that carried WriteTxnMarkers to leader address `host` (the feed names
    leaders by address: a broker's listeners share it)."""
    return {c for c in holes.carrying("WRITE_MARKERS") if host_of(c, 1) == host}


def add_lost(feed, row: dict, tp: str) -> bool:
    """Whether a version 0/1 client's AddPartitionsToTxn of `tp` for this data may be in bytes
    the capture lost: the data's partition is not in its open transaction, and the client's
    own connections to its coordinator lost bytes since its last InitProducerId or EndTxn
    (the transaction's start) and before the data. The client registers a partition before it
    sends it data (the Java client's TransactionManager, librdkafka's), so the data is of the
    producer's transaction all the same."""
    if not holes_of(feed):
        return False    # (every Produce row of a version 0/1 producer asks: the cheap test first)
    t = feed.open_txn()
    return not (t is not None and tp in t.partitions) and client_lost(feed, row)


def client_lost(feed, row: dict) -> bool:
    """Whether the client's own connections to its coordinator lost bytes since its last
    InitProducerId or EndTxn and before `row` (an EndTxn there may be in them: markers with
    no EndTxn before them are then not the coordinator's own abort)."""
    holes = holes_of(feed)
    return bool(holes) and bool(feed.coord_conns) and \
        holes.lost_on(feed.coord_conns, feed.since, (row["source"], row["position"])) is not None


def marker_lost(feed, tp: str, part=None, since: dict | None = None):
    """The capture hole (capture_holes.Lost) where the coordinator's marker for `tp` may be:
    bytes lost on a connection that carried WriteTxnMarkers to the partition's leader, after
    the part's first data (its transaction's marker comes after it) or the data row `since`;
    None: none."""
    holes = holes_of(feed)
    if not holes:
        return None
    first = since if since is not None else part.data[0] if part is not None and part.data else None
    since = _place(first) if first is not None else None
    conns = _marker_conns(holes, feed.produce_hosts.get(tp))
    return holes.lost_on(conns, since) if conns else None


def leader_lost(feed, part):
    """The capture hole (capture_holes.Lost) that may hold the part's marker, whoever wrote or
    served it: bytes lost, after the part's first data, on any connection to its leader's
    address - the coordinator's WriteTxnMarkers (on a connection the capture may not know as
    the marker sender's: all its frames lost), a Fetch answer serving the marker; None: none."""
    holes = holes_of(feed)
    if not holes or not part.data:
        return None
    conns = holes.to_hosts([feed.produce_hosts.get(part.tp)])
    return holes.lost_on(conns, _place(part.data[0])) if conns else None


def lost_within(feed, tp: str, part) -> bool:
    """Whether the capture lost bytes, between the part's first data and its marker (or the
    end), on the client's connections to its coordinator or on those that carried
    WriteTxnMarkers to the partition's leader: an EndTxn or a marker that would split the part
    in two transactions, or date its epoch's end, may be in them."""
    holes = holes_of(feed)
    if not holes or not part.data:
        return False
    first, m = part.data[0], part.marker
    lo = _place(first)
    hi = (m.source, m.position) if m is not None and not m.fetched else None
    conns = set(feed.coord_conns) | _marker_conns(holes, feed.produce_hosts.get(tp))
    return holes.lost_on(conns, lo, hi) is not None


class WireCoverage(Coverage):
    """What a capture shows of one producer: a partition's registration only when the capture
    holds its leader's KIP-890 adds (version 2) or the client's own AddPartitionsToTxn (0/1),
    after a transaction boundary it shows (a capture may start mid-transaction); a marker only
    when it holds WriteTxnMarkers to that partition's leader, and lost no bytes of them after
    the part's data (`marker_lost`)."""

    def __init__(self, *, feed, **kw):
        super().__init__(**kw)
        self.feed = feed
        self._lost: dict[int, tuple] = {}   # id(part) -> (part, its data and marker, lost_within): several rules ask

    def sees_registration(self, tp: str, ts_ms: int | None) -> bool:
        f = self.feed
        if not self.registrations or f.known_from is None or ts_ms is None or ts_ms < f.known_from * 1000:
            return False
        if f.version == 2:
            return f.produce_hosts.get(tp) in f.add_hosts
        return f.tv1_adds

    def sees_marker(self, tp: str, part=None) -> bool:
        f = self.feed
        return f.produce_hosts.get(tp) in f.marker_hosts and marker_lost(f, tp, part) is None

    def marker_unproven(self, part) -> bool:
        return leader_lost(self.feed, part) is not None

    def lost_within(self, part) -> bool:
        got = self._lost.get(id(part))
        now = (len(part.data), part.marker)   # (what it is judged by)
        if got is None or got[0] is not part or got[1] != now:
            got = self._lost[id(part)] = (part, now, lost_within(self.feed, part.tp, part))
        return got[2]
