"""What the wire's sequence fold remembers of each producer id in one partition: its attempts
(for retries), the sequence ranges the broker refused, its last batches (for timelines). Shared by
the checked path (audit/producers/wire_produce.py) and the clean-producer pass (audit/producers/wire_clean.py)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kaudit.audit.producers.producer_state import BatchView, ProducerState
from kaudit.audit.thresholds import RETRY_WINDOW_S

MAX_ATTEMPT_KEYS = 4096     # batches remembered per producer id and partition
MAX_ANON_KEYS = 65536       # batches of producer id -1 remembered per partition
MAX_REFUSED = 64


class Chunk:
    """The accepted batches of a chunk table that the clean-producer pass remembers: their times and
    offsets as lists, the rows built only when asked (a finding needs more than time and answer)."""

    __slots__ = ("view", "table", "ts", "off", "rows")

    def __init__(self, view: type, table, ts: list, off: list):
        self.view, self.table, self.ts, self.off, self.rows = view, table, ts, off, {}

    def row(self, i: int):
        r = self.rows.get(i)
        if r is None:
            r = self.rows[i] = self.view._make(self.table.column(c)[i].as_py() for c in self.view._fields)
        return r


class LazyRow(tuple):
    """(chunk, row index): an accepted batch row of a chunk, read only when a finding needs it."""

    __slots__ = ()
    request_ts = property(lambda s: s[0].ts[s[1]])
    response_base_offset = property(lambda s: s[0].off[s[1]])
    response_error = 0   # only accepted batches are remembered this way

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self[0].row(self[1]), name)

    def batch_view(self) -> BatchView:
        """The batch as the sequence rules read it (ProducerState.noted: a noted clean row)."""
        r, off = self[0].row(self[1]), self.response_base_offset
        return BatchView(r.source, r.position, off, off + r.record_count - 1, r.producer_id, r.producer_epoch,
                         r.base_sequence, r.last_sequence, r.record_count, r.crc, r.batch_size, False, None,
                         r.base_timestamp_ms, r.max_timestamp_ms, r.attributes)


class Attempts:
    """The attempts of each batch (by key) sent in the last RETRY_WINDOW_S seconds, at most
    `cap` keys: a retry follows its original within the producer's delivery.timeout.ms (2 min by
    default), so older batches are forgotten and memory stays bounded on long captures.
    `unsettled` holds the keys with an attempt the broker did not accept (refused or
    unanswered): while there is none, a batch that follows the state cannot be a retry."""

    def __init__(self, cap: int):
        self.cap = cap
        self._by_key: dict = {}
        self._order: deque = deque()   # (request_ts, key), oldest first
        self.unsettled: set = set()
        self._later = None   # an add_new taken the bulk way, made when first read (`add_later`)

    @property
    def by_key(self) -> dict:
        self._flush()
        return self._by_key

    @property
    def order(self) -> deque:
        self._flush()
        return self._order

    def _flush(self) -> None:
        if self._later is not None:
            make, self._later = self._later, None
            keys, rows, times = make()
            self._by_key.update(zip(keys, map(list, zip(rows))))   # key -> [row]
            self._order.extend(zip((ts or 0.0 for ts in times), keys))

    def add_later(self, n: int, first: float, top: float, make) -> bool:
        """add_new(*make()) of `n` accepted attempts (request times: the first `first`, the
        highest `top`, each `or 0.0`) made only when the attempts are next read, where add_new
        would take its bulk way (nothing expires): the clean-producer pass remembers most
        producers' batches and never reads them again. False: not so (call add_new)."""
        self._flush()
        front = self._order[0][0] if self._order else first
        if len(self._by_key) + n <= self.cap and front >= top - RETRY_WINDOW_S:
            self._later = make
            return True
        return False

    def get(self, key) -> list:
        return self.by_key.get(key, [])

    def add(self, key, row) -> None:
        ts = row.request_ts or 0.0
        self.by_key.setdefault(key, []).append(row)
        if row.response_error != 0:
            self.unsettled.add(key)
        self.order.append((ts, key))
        self._expire(ts - RETRY_WINDOW_S)

    def add_new(self, keys: list, rows: list, times: list) -> None:
        """`add` of accepted attempts whose keys are not held, `times` their request_ts."""
        by_key, order, cap = self.by_key, self.order, self.cap
        times = [ts or 0.0 for ts in times]
        front = order[0][0] if order else (times[0] if times else 0.0)
        if len(by_key) + len(keys) <= cap and (not times or front >= max(times) - RETRY_WINDOW_S):
            # no step of the loop below would expire anything (the oldest attempt stays in the
            # window of the newest, the keys under the cap): the same, in bulk
            by_key.update(zip(keys, map(list, zip(rows))))   # key -> [row]
            order.extend(zip(times, keys))
            return
        for key, row, ts in zip(keys, rows, times):
            by_key[key] = [row]
            ts = ts or 0.0
            order.append((ts, key))
            if len(by_key) > cap or order[0][0] < ts - RETRY_WINDOW_S:
                self._expire(ts - RETRY_WINDOW_S)

    def _expire(self, horizon: float) -> None:
        by_key, order = self.by_key, self.order
        while order and (order[0][0] < horizon or len(by_key) > self.cap):
            _, old = order.popleft()
            rows = by_key.get(old)
            if rows is not None and ((rows[-1].request_ts or 0.0) < horizon or len(by_key) > self.cap):
                del by_key[old]
                self.unsettled.discard(old)


@dataclass
class Pid:
    state: ProducerState | None = None   # the broker's view: last accepted (or unanswered) batch
    attempts: Attempts = field(default_factory=lambda: Attempts(MAX_ATTEMPT_KEYS))
    recent: list = field(default_factory=list)   # the last 4 batch rows
    # sequence ranges the broker refused (epoch, lo, hi), newest last: an in-flight batch that
    # follows one of them is answered OUT_OF_ORDER_SEQUENCE_NUMBER and retried (benign)
    refused: list = field(default_factory=list)

    def covered_by_refused(self, epoch: int, lo: int, hi: int) -> bool:
        """True when every sequence of [lo, hi] was in a batch the broker refused."""
        need = lo
        for e, a, b in sorted(r for r in self.refused if r[0] == epoch):
            if a <= need <= b:
                need = b + 1
            if need > hi:
                return True
        return need > hi
