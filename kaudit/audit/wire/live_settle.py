"""How a live capture settles the wire folds that are buffered (`Fold.live`, folds.Settler):
the connections of wire-frames and the readers' compaction. The transaction fold's producers
settle in txn_settle.py. The live executor (engine/live.py) runs these without naming a fold."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.folds import Settler, concat_by_kind, gather_tail
from kaudit.audit.wire.reader_compact import compact, merge_cover

COMPACT_ROWS = 4096   # the readers' new rows compacted together (fewer, bigger tables)


class ConnectionSettle(Settler):
    """A fold keyed by connection settles a connection once its connection row has come (the
    reassembler forgot it after its close, or it was idle for capture.live.CONN_IDLE_S): no row
    of it can come any more, so its rows are folded alone and dropped."""

    def __init__(self, fold):
        self.fold = fold
        self.settled = 0

    def settle(self, items: list, now: float) -> list:
        done = set()
        for kind, t in items:
            if kind == "connection":
                done.update(zip(t.column("source").to_pylist(), t.column("connection").to_pylist()))
        if not done:
            return []
        keys = pa.array([f"{s}\x00{c}" for s, c in done])
        settled, rest = [], []
        for kind, t in items:
            joined = pc.binary_join_element_wise(t.column("source"), t.column("connection"), "\x00")
            mask = pc.fill_null(pc.is_in(joined, keys), False)
            a, b = t.filter(mask), t.filter(pc.invert(mask))
            if a.num_rows:
                settled.append((kind, a))
            if b.num_rows:
                rest.append((kind, b))
        items[:] = concat_by_kind(rest)   # (thousands of small chunks kept fragment the heap)
        self.settled += len(done)
        return settled

    def counters(self) -> dict:
        return {"connections_settled": self.settled}


class ReaderSettle(Settler):
    """The readers' selection is kept to the end (a read is judged against markers that may come
    later), but made smaller as it grows (reader_compact: the same findings)."""

    def __init__(self, fold):
        self.fold = fold
        self.done = 0        # the chunks compacted so far
        self.gathered = 0    # the chunks before this one were gathered
        self.cover = None    # their batches that only count for the covered offsets, merged

    def settle(self, items: list, now: float) -> list:
        new = items[self.done:]
        if sum(t.num_rows for _, t in new) >= COMPACT_ROWS:
            kept, cover = compact(new)
            items[self.done:] = kept
            self.gathered = gather_tail(items, self.gathered)
            self.done = len(items)
            self.cover = merge_cover([self.cover, cover])
        return []

    def finish(self, items: list) -> None:
        if self.cover is not None:
            items.append(("batch", self.cover))
