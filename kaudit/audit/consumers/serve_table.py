"""The consumers' served ranges as columns: one row per Fetch response and partition, in time
order (response time, then frame position), with the connection, client, partition and isolation
level as integer codes. The rules' whole-capture checks run over these columns (certify.py); a
`Serve` object is made only for a row a rule reads one by one, once (the same object on every
call: the timelines attribute it to a member in place)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kaudit.audit.capture_holes import host_of
from kaudit.audit.folds import np_indices


def host(connection: str | None) -> str:
    """The client's address of "client:port -> server:port" ("" for none): the address the
    capture's holes name clients by too (capture_holes.host_of)."""
    return host_of(connection, 0) or ""


@dataclass
class Serve:
    """One consumer Fetch response's answer for one partition, or (error None, no records) a
    partition its request named that the response left out (KIP-227 incremental fetch sessions
    omit those with nothing new): the request's fetch offset is where the client stood."""
    ts: float
    position: int
    source: str
    connection: str
    client: tuple
    client_id: str | None
    tp: tuple
    isolation: str | None
    fetch_offset: int | None
    error: int | None
    hw: int | None
    lso: int | None
    log_start: int | None
    first: int | None = None   # lowest offset served at or past the fetch offset
    end: int | None = None     # one past the last offset served (None: no records)
    data_first: int | None = None   # the records the client delivers (no control batch, no aborted
    data_end: int | None = None     # one under read_committed): their first offset and one past the last
    member: object = None   # the timeline.Member the timelines attribute it to (None: none)
    request_ts: float | None = None   # when the Fetch was sent (ts: its response)


# the columns of a fetch table (fold.serves_of) a Serve is made of, by Serve field
_FIELDS = {"source": "source", "connection": "connection", "client_id": "client_id",
           "isolation": "isolation_level", "fetch_offset": "fetch_offset", "error": "error_code",
           "hw": "high_watermark", "lso": "last_stable_offset", "log_start": "log_start_offset",
           "request_ts": "request_ts"}
RANGES = ("first", "end", "data_first", "data_end")
INT64_MIN, INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)


def _codes(values: list) -> tuple[np.ndarray, list]:
    """Codes by value (equal values, one code) and the distinct values in first-seen order."""
    index: dict = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int64, len(values))
    return codes, list(index)


def _recode(codes: np.ndarray, values: list) -> tuple[np.ndarray, list]:
    """Codes over `values` made unique by value (two codes whose values are equal become one)."""
    index: dict = {}
    remap = np.array([index.setdefault(v, len(index)) for v in values] or [0], np.int64)
    return (remap[codes] if len(codes) else codes), list(index)


def _encoded(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list]:
    """Dictionary codes of an Arrow column (null: a value of its own, None)."""
    d = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    d = d.dictionary_encode(null_encoding="encode")
    return d.indices.to_numpy(zero_copy_only=False).astype(np.int64), d.dictionary.to_pylist()


def int_values(col) -> tuple[np.ndarray, np.ndarray]:
    """(values with 0 for null, mask of the non-null) of an integer column."""
    a = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    valid = np.ones(len(a), bool) if a.null_count == 0 else a.is_valid().to_numpy(zero_copy_only=False)
    return a.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), valid


class ServeTable:
    """Columns (numpy, one row per served partition, in time order): ts, position, conn, client,
    tp, iso (codes into conns, clients, tps, isos), fetch_offset, ok (error none or 0), error and
    the served ranges first, end, data_first, data_end, each int64 with a has_<name> mask."""

    def __init__(self, n: int):
        self.n = n
        self._objs: list = [None] * n
        self._py: dict[str, list] = {}     # Serve field -> its column as Python values (made on demand)
        self._arrow: dict[str, pa.Array] = {}
        self._index: dict[str, tuple] = {}
        # rows whose ranges int64 cannot hold -> (first, end, data_first, data_end): the columns
        # are then not exact, and no whole-column check may certify anything
        self.exact: dict[int, tuple] = {}

    @property
    def certifiable(self) -> bool:
        return not self.exact

    # ---- building ----------------------------------------------------------------------------
    @classmethod
    def of_serves(cls, serves: list[Serve]) -> "ServeTable":
        """The table of Serve objects (in their order), which stay its rows' objects."""
        t = cls(len(serves))
        t._objs = list(serves)
        t.ts = np.array([s.ts for s in serves], np.float64)
        t.position = np.array([s.position for s in serves], np.int64)
        t.conn, t.conns = _codes([s.connection for s in serves])
        t.client, t.clients = _codes([s.client for s in serves])
        t.tp, t.tps = _codes([s.tp for s in serves])
        t.iso, t.isos = _codes([s.isolation for s in serves])
        for name in ("fetch_offset", "error") + RANGES:
            vals = [getattr(s, name) for s in serves]
            has = np.array([v is not None for v in vals], bool)
            fits = [0 if v is None else min(max(v, INT64_MIN), INT64_MAX) for v in vals]
            if fits != [0 if v is None else v for v in vals]:
                t.exact = {i: None for i, s in enumerate(serves)}   # the objects are exact
            setattr(t, name, np.array(fits, np.int64))
            setattr(t, "has_" + name, has)
        t.ok = ~t.has_error | (t.error == 0)
        return t

    @classmethod
    def of_fetch(cls, fetch: pa.Table, ranges: dict[str, tuple], delivered: dict[int, tuple],
                 exact: dict[int, tuple]) -> "ServeTable":
        """The table of fetch rows (fold.serves_of's columns) with their served `ranges` (name ->
        (values, mask), in the fetch table's order), the read_committed replays `delivered`
        (row -> (data_first, data_end) or None) and the rows whose ranges int64 cannot hold
        (`exact`: row -> first, end, data_first, data_end); rows sorted by (response time or 0,
        position), rows of one response keeping the fetch table's order."""
        ts = fetch.column("response_ts").fill_null(0.0).to_numpy().astype(np.float64)
        position = fetch.column("position").to_numpy().astype(np.int64)
        order = np.lexsort((position, ts))   # stable: the fetch table's order among ties
        t = cls(fetch.num_rows)
        t.ts, t.position = ts[order], position[order]
        # the fold's rows come by position, mostly in time order too: then no copy
        sorted_fetch = fetch if bool((order[1:] > order[:-1]).all()) else fetch.take(np_indices(order))
        t._arrow = {f: sorted_fetch.column(c) for f, c in _FIELDS.items()}
        for name, (v, has) in ranges.items():
            setattr(t, name, v[order])
            setattr(t, "has_" + name, has[order])
        where = np.empty(len(order), np.int64)
        where[order] = np.arange(len(order))
        for row, got in delivered.items():
            i = where[row]
            t.has_data_first[i] = t.has_data_end[i] = got is not None
            if got is not None and row not in exact:
                t.data_first[i], t.data_end[i] = got
        t.exact = {int(where[row]): v for row, v in exact.items()}
        t._encode(sorted_fetch)
        return t

    def _encode(self, f: pa.Table) -> None:
        self.conn, self.conns = _encoded(f.column("connection"))
        cid, cids = _encoded(f.column("client_id"))
        pairs = self.conn * (len(cids) + 1) + cid
        uniq, inv = np.unique(pairs, return_inverse=True)
        self.client, self.clients = _recode(inv.reshape(-1), [(host(self.conns[p // (len(cids) + 1)]),
                                                               cids[p % (len(cids) + 1)]) for p in uniq])
        topic, topics = _encoded(f.column("topic"))
        part, partitions_valid = int_values(f.column("partition"))
        # one number per (topic, partition): partitions are int32, a null one is 2**32
        pkey = np.where(partitions_valid, part + 2**31, 2**32)
        uniq, inv = np.unique(topic * (2**32 + 1) + pkey, return_inverse=True)
        self.tp, self.tps = _recode(inv.reshape(-1), [
            (topics[k // (2**32 + 1)], None if k % (2**32 + 1) == 2**32 else k % (2**32 + 1) - 2**31)
            for k in uniq.tolist()])
        self.iso, self.isos = _encoded(f.column("isolation_level"))
        self.fetch_offset, self.has_fetch_offset = int_values(f.column("fetch_offset"))
        self.error, self.has_error = int_values(f.column("error_code"))
        self.ok = ~self.has_error | (self.error == 0)

    def rename(self, fn) -> None:
        """Partitions renamed by fn(topic, partition) (topic ids to names): rows of equal names
        share a code. Made objects are renamed the same way."""
        self.tp, self.tps = _recode(self.tp, [fn(*tp) for tp in self.tps])
        self._index.clear()
        for s in self._objs:
            if s is not None:
                s.tp = fn(*s.tp)

    # ---- rows as Serve objects ---------------------------------------------------------------
    def obj(self, i: int) -> Serve:
        s = self._objs[i]
        if s is None:
            s = self._objs[i] = self._make(int(i))
        return s

    def objs(self, rows) -> list[Serve]:
        return [self.obj(i) for i in rows]

    def all(self) -> list[Serve]:
        if any(s is None for s in self._objs):
            self.objs(range(self.n))
        return self._objs

    def _column(self, name: str) -> list:
        col = self._py.get(name)
        if col is None:
            if name in RANGES:
                v = getattr(self, name).astype(object)
                v[~getattr(self, "has_" + name)] = None
                col = v.tolist()
            else:
                col = self._arrow[name].to_pylist()
            self._py[name] = col
        return col

    def _make(self, i: int) -> Serve:
        c = self._column
        s = Serve(float(self.ts[i]), int(self.position[i]), c("source")[i], self.conns[self.conn[i]],
                  self.clients[self.client[i]], c("client_id")[i], self.tps[self.tp[i]], c("isolation")[i],
                  c("fetch_offset")[i], c("error")[i], c("hw")[i], c("lso")[i], c("log_start")[i],
                  request_ts=c("request_ts")[i])
        s.first, s.end, s.data_first, s.data_end = self.exact.get(i) or (c(r)[i] for r in RANGES)
        return s

    # ---- indexes -----------------------------------------------------------------------------
    def values(self, col: str) -> list:
        return {"conn": self.conns, "client": self.clients, "tp": self.tps, "iso": self.isos}[col]

    def rows_by(self, *cols: str) -> dict[tuple, np.ndarray]:
        """(value of each code column) -> its rows, in time order."""
        got = self._index.get(cols)
        if got is None:
            got = self._index[cols] = {}
            if not self.n:
                return got
            combined = np.zeros(self.n, np.int64)
            for c in cols:
                combined = combined * max(len(self.values(c)), 1) + getattr(self, c)
            order = np.argsort(combined, kind="stable")
            parts = np.split(order, np.flatnonzero(np.diff(combined[order])) + 1)
            for g in sorted(parts, key=lambda g: g[0]):   # in order of first appearance
                got[tuple(self.values(c)[getattr(self, c)[g[0]]] for c in cols)] = g
        return got
