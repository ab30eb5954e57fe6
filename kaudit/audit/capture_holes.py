"""Where the captures lost bytes (wire): the connections and frames at which a TCP stream has
bytes missing (`stream-gap`), conflicting retransmissions, bytes skipped to find the next frame,
frames cut or undecodable, and TLS kaudit could not read - every `decode_issue` row of a
connection (sources.pcap_session, sources.wire_rows).

Why rules read it: a capture that lost bytes on a connection proves no absence there. A rule
that concludes from a request or a marker *not seen* (an idempotent producer's sequences that
jump, a transaction marker or registration missing, a fetch that skips offsets) asks first
whether the connections that would have carried it lost bytes in the window where it would be;
if they did, the absence is the capture's, not Kafka's, and the rule says so instead of raising
an anomaly (docs/architecture.md §4, "what the evidence covers").

A place is (capture file, frame number); frames of two files compare by the files' order (the
order they were decoded in: rotated files by their first packet, sources.pcap_stitch)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

# issue kinds after which the rest of the connection is unreadable (not one lost stretch)
DARK = frozenset({"tls", "tls-decrypt-failed", "tls-not-records"})
# issues that lose nothing of the Kafka exchanges (a SASL token frame is read as what it is)
NOT_LOST = frozenset({"sasl-token"})
# txn_event kinds whose connections the rules ask about: the coordinator's marker sender to a
# leader (WriteTxnMarkers), a client's or a version-2 leader's AddPartitionsToTxn
CARRIED = ("WRITE_MARKERS", "ADD_PARTITIONS")


def hole_rows(table: pa.Table) -> list[tuple]:
    """(source, connection, after, frame, dark) of a decode_issue chunk's rows on a connection:
    the bytes lost were sent after frame `after` - a stream-gap's `after_position`, the last
    bytes delivered before it (none: nothing was, the hole starts the stream: any time before);
    else the frame before the issue's own (a request that did not decode, bytes skipped up to a
    frame) - and by `frame`, where the capture knew them lost."""
    if table.num_rows == 0 or "connection" not in table.schema.names:
        return []
    t = table.filter(pc.is_valid(table.column("connection")))
    after = t.column("after_position").to_pylist() if "after_position" in t.schema.names else [None] * t.num_rows
    cols = [t.column(c).to_pylist() for c in ("source", "connection", "position", "issue")]
    return [(s, c, a if a is not None else -1 if i == "stream-gap" else p - 1, p, i in DARK)
            for s, c, p, i, a in zip(*cols, after) if p is not None and i not in NOT_LOST]


def carrier_rows(table: pa.Table) -> list[tuple[str, str]]:
    """(event, connection) of a txn_event chunk's WriteTxnMarkers and AddPartitionsToTxn rows."""
    if table.num_rows == 0 or not {"event", "connection"} <= set(table.schema.names):
        return []
    ev = table.column("event")
    ev = ev.cast(pa.string()) if pa.types.is_dictionary(ev.type) else ev
    t = table.filter(pc.fill_null(pc.is_in(ev, pa.array(CARRIED)), False))
    ev = t.column("event")
    ev = ev.cast(pa.string()) if pa.types.is_dictionary(ev.type) else ev
    return sorted({(e, c) for e, c in zip(ev.to_pylist(), t.column("connection").to_pylist()) if c})


def server_of(connection: str | None) -> str | None:
    """The server end ("ip:port") of a connection named "client -> server"."""
    if not connection or " -> " not in connection:
        return None
    return connection.rsplit(" -> ", 1)[1]


def host_of(connection: str | None, side: int) -> str | None:
    """The address (no port) of a connection's client (0) or server (1)."""
    if not connection or " -> " not in connection:
        return None
    return connection.split(" -> ")[side].rsplit(":", 1)[0]


class Lost(NamedTuple):
    """A hole found: the connection that lost bytes and the frame after which it lost them (in
    capture file `source` when there are several)."""

    connection: str
    source: str | None
    after: int

    def words(self) -> str:
        where = f"frame {self.after}" + (f" of {self.source.rsplit('/', 1)[-1]}" if self.source else "")
        return f"{self.connection} after {where}"


class CaptureHoles:
    """The holes of every connection, and which connections carried what (see the module)."""

    def __init__(self, holes: Iterable[tuple], carriers: Iterable[tuple[str, str]] = (),
                 sources: Iterable[str] = ()):
        self._rank = {s: i for i, s in enumerate(dict.fromkeys(sources))}
        self._names = {i: s for s, i in self._rank.items()}
        # connection -> its holes: (after, by) places, the bytes lost sent in between; a TLS
        # connection kaudit could not read is one hole from its start to the end
        self._at: dict[str, list[tuple]] = {}
        for source, conn, after, frame, dark in holes:
            by = (len(self._rank) + 1, 0) if dark else self.place(source, frame)
            self._at.setdefault(conn, []).append((self.place(source, after), by))
        for spans in self._at.values():
            spans.sort()
        self._carried: dict[str, set[str]] = {}
        for event, conn in carriers:
            self._carried.setdefault(event, set()).add(conn)

    def __bool__(self) -> bool:
        return bool(self._at)

    def place(self, source: str | None, frame: int | None) -> tuple:
        """A row's place (its capture file's rank, its frame) as the holes' places compare."""
        return (self._rank.get(source, 0), frame if frame is not None else 0)

    def _overlapping(self, connections: Iterable[str | None], after: tuple | None,
                     before: tuple | None) -> Iterator[tuple]:
        """(start, by, connection) of the holes on `connections` whose bytes may have been sent
        at or after place `after` and before place `before` (None: open-ended), the connections
        in name order, each one's holes in start order."""
        lo = self.place(*after) if after is not None else None
        hi = self.place(*before) if before is not None else None
        for conn in sorted({c for c in connections if c}):
            for start, by in self._at.get(conn, ()):
                if hi is not None and start >= hi:
                    break
                if lo is None or by >= lo:
                    yield start, by, conn

    def lost_on(self, connections: Iterable[str | None], after: tuple | None = None,
                before: tuple | None = None) -> Lost | None:
        """The first hole on one of `connections` whose bytes may have been sent at or after
        place `after` and before place `before` (None: open-ended) - places (source, frame),
        a row's `position`; None: no hole. On one connection a request after the hole in its
        stream has a frame past the hole's `after`, one before it a frame at or below it."""
        found = min(self._overlapping(connections, after, before), key=lambda h: h[0], default=None)
        if found is None:
            return None
        (rank, frame), _, conn = found
        return Lost(conn, self._names.get(rank) if len(self._names) > 1 else None, frame)

    def lost_until(self, connections: Iterable[str | None], after: tuple, before: tuple) -> tuple | None:
        """The place by which the capture knew lost the last bytes that `connections` may have
        carried between places `after` and `before` (as `lost_on`), None: none lost there - what
        came after it was sent after every request lost between."""
        return max((by for _, by, _ in self._overlapping(connections, after, before)), default=None)

    def from_hosts(self, hosts: Iterable[str | None]) -> set[str]:
        """The connections with a hole whose client end is one of `hosts` (addresses, no port): a
        request lost whole on a connection leaves nothing that names its client but the address."""
        return self._ends_at(hosts, 0)

    def to_hosts(self, hosts: Iterable[str | None]) -> set[str]:
        """The connections with a hole whose server end is one of `hosts` (addresses, no port):
        whatever a broker at that address sent or was sent there (its listeners share it)."""
        return self._ends_at(hosts, 1)

    def _ends_at(self, hosts: Iterable[str | None], side: int) -> set[str]:
        hosts = {h for h in hosts if h}
        return {c for c in self._at if host_of(c, side) in hosts} if hosts else set()

    def carrying(self, event: str) -> set[str]:
        """The connections that carried `event` rows (CARRIED)."""
        return self._carried.get(event, set())
