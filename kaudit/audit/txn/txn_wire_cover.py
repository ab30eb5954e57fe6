"""What a capture can show of one producer's transactions (`WireCoverage`), and where the
capture's lost bytes (audit.capture_holes) leave a registration or a marker unprovable: a rule
never reads an absence the capture may have lost as an absence of the event."""

from __future__ import annotations

from kaudit.audit.capture_holes import server_of
from kaudit.audit.txn.txn_model import Coverage


def _address(endpoint: str | None) -> str | None:
    """"ip:port" -> "ip" (the feed names leaders by address: txn_wire_feed._host)."""
    return endpoint.rsplit(":", 1)[0] if endpoint else None


def _holes(feed):
    return getattr(feed.ctx, "capture_holes", None) if feed.ctx is not None else None


def add_lost(feed, row: dict, tp: str) -> bool:
    """Whether a version 0/1 client's AddPartitionsToTxn of `tp` for this data may be in bytes
    the capture lost: the data's partition is not in its open transaction, and the client's
    own connections to its coordinator lost bytes since its last InitProducerId or EndTxn
    (the transaction's start) and before the data. The client registers a partition before it
    sends it data (the Java client's TransactionManager, librdkafka's), so the data is of the
    producer's transaction all the same."""
    t = feed.open_txn()
    return not (t is not None and tp in t.partitions) and client_lost(feed, row)


def client_lost(feed, row: dict) -> bool:
    """Whether the client's own connections to its coordinator lost bytes since its last
    InitProducerId or EndTxn and before `row` (an EndTxn there may be in them: markers with
    no EndTxn before them are then not the coordinator's own abort)."""
    holes = _holes(feed)
    return bool(holes) and bool(feed.coord_conns) and \
        holes.lost_on(feed.coord_conns, feed.since, (row["source"], row["position"])) is not None


def marker_lost(feed, tp: str, part=None):
    """The capture hole (capture_holes.Lost) where the coordinator's marker for `tp` may be:
    bytes lost on a connection that carried WriteTxnMarkers to the partition's leader, after
    the part's first data (its transaction's marker comes after it); None: none."""
    holes = _holes(feed)
    if not holes:
        return None
    host = feed.produce_hosts.get(tp)
    first = part.data[0] if part is not None and part.data else None
    since = (first.get("source"), first.get("position")) if first is not None else None
    conns = [c for c in holes.carrying("WRITE_MARKERS") if _address(server_of(c)) == host]
    return holes.lost_on(conns, since) if conns else None


class WireCoverage(Coverage):
    """What a capture shows of one producer: a partition's registration only when the capture
    holds its leader's KIP-890 adds (version 2) or the client's own AddPartitionsToTxn (0/1),
    after a transaction boundary it shows (a capture may start mid-transaction); a marker only
    when it holds WriteTxnMarkers to that partition's leader, and lost no bytes of them after
    the part's data (`marker_lost`)."""

    def __init__(self, *, feed, **kw):
        super().__init__(**kw)
        self.feed = feed

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
