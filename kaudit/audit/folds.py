"""The fold contract shared by every engine (docs/architecture.md §5).

A fold reads rows of one or more kinds, sorted by `key` and, within a key, by `order`; it sees them
as Arrow chunks `(kind, table)` and returns findings (dict rows of model.FINDING). An audit plan
(engine/plan.py) says how each fold is fed - streamed as the sources deliver its keys, or its
selection buffered and sorted - and both engines execute that plan. A fold keeps state for the
current key only and closes it when the key changes, so memory is bounded by one key's state; a
key that comes back once closed breaks the plan's contract (KeyedState). Nothing here knows which
engine runs it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# the column helpers, here too (every fold imports them from this module)
from kaudit.audit.fold_tables import (constant, key_runs, np_col, np_indices, np_mask, sort_indices,  # noqa: F401
                                      sorted_split, split_by_key, unique_ints)


@dataclass
class Context:
    """What a fold may know besides its rows: the reference time (`--now`, else the latest
    broker-side timestamp or last packet), in ms since the epoch. Engines may only settle it
    after the last row (streaming), so folds read it in `finish`, not in `feed`.

    `topic_names`: the id -> name facts of every input (captures' Metadata responses,
    partition.metadata), settled before any wire fold runs.

    `selected_kinds`: the row kinds a buffered fold's selection holds in the whole input, settled
    by the engine (which may prepare the selection a share of the keys at a time); None: the
    fold's `prepare` sees the whole selection. `txn_state_seen` (transactions): whether that
    selection holds any `__transaction_state` row, set by its prepare."""

    reference_time_ms: int | None = None
    txn_state_seen: bool | None = None
    # topic id -> name (KIP-516) from every input: the engines name the rows' topics with it
    # before the folds group them (sources.topics.TopicNames.label)
    topic_names: dict | None = None
    selected_kinds: frozenset | None = None
    # the cluster's finalized transaction.version (KIP-890) from its KRaft metadata in the
    # inputs (FeatureLevelRecord), settled before any buffered fold runs; None: not in the inputs
    cluster_transaction_version: int | None = None
    # producer id -> txn_lineage.Lineage: its transactional id's producer ids across the whole
    # input (epoch exhaustion, a lost id), settled before any buffered fold runs; None or {}:
    # no transactional id of the input has more than one
    producer_lineage: dict | None = None
    # `kaudit audit`: the capture's answered InitProducerIds of the producers that asked for
    # KIP-939 two-phase commit, producer id -> ((epoch, enable_2pc, transactional id), ...), settled before the
    # disk's transactions fold runs (the wire's knowledge the log dirs may lack)
    two_pc_inits: dict | None = None
    # wire: (producer id, epoch) -> [(time s, COMMIT|ABORT)] of the EndTxns the captures show
    # answered without error, in time order (txn_lineage.ends_by_producer): a transaction the
    # client was told committed (wire-acked: a transactional write's committed state)
    txn_ends: dict | None = None
    # wire: where the captures lost bytes (audit.capture_holes.CaptureHoles), settled before any
    # buffered fold runs; None: no hole. A rule that concludes from an absence asks it first
    capture_holes: object = None
    # wire: (capture path, broker id) of the replicas whose Fetches the captures hold (brokers a
    # capture shows exist: audit.consumers), settled before any buffered fold runs
    replica_brokers: frozenset | None = None


@dataclass(frozen=True)
class Fold:
    name: str
    inputs: dict[str, tuple[str, ...]]   # row kind -> the columns the fold reads
    key: tuple[str, ...]
    order: tuple[str, ...]
    make: Callable[[Context], "FoldState"]
    # Per kind: a vectorised row filter (table -> boolean mask); rows it rejects never reach the fold.
    where: dict[str, Callable[[pa.Table], pa.ChunkedArray]] = field(default_factory=dict)
    # Optional: (selection chunks, ctx) -> the chunks to sort and feed, for a fold whose rows need
    # the whole selection first (txn_wire joins frames to events, the transactions certify the
    # producers that need no judging). `prepare_by_key`: it may run on any share of the keys
    # (given the settled context), so an engine may share the keys out; else it sees them all.
    prepare: Callable[[list, Context], list] | None = None
    prepare_by_key: bool = False
    # Its findings are each key's alone: its state is a KeyedState over `key` whose groups read
    # nothing but their key's rows and the settled context, and its finish adds nothing but the
    # last group's. An engine may then fold contiguous ranges of its sorted keys apart (after
    # `prepare`) and concatenate their findings in key order (engine/shared_folds.py).
    per_key: bool = False
    # Its CPU per selected row, in microseconds, as measured (1.0: not measured): an engine's
    # estimate of its share of the work, for the order it runs buffered folds in - never more.
    cost: float = 1.0
    # Optional: (kind, selected table) -> its rows that `cost` is per, where `prepare` drops some
    # (wire-txn's fetched copies of writes: most go); None: every row.
    weigh: Callable[[str, pa.Table], int] | None = None
    # Optional, for a buffered fold in a live capture: (fold) -> its Settler, which says which of
    # its keys nothing can change any more, so the live executor folds them before the stream
    # ends. None: its selection is kept to the end (a streamed fold needs none: see engine/live.py).
    live: Callable[["Fold"], "Settler"] | None = None

    def bind(self, replicated, clusters: dict | None = None, layout=None) -> "Fold":
        """The fold for inputs that hold the (topic, partition) pairs `replicated` in several log
        dirs, of clusters `clusters` (log dir -> cluster id), laid out as `layout` (the inputs'
        sources.logdir.Plan, when known): itself, unless it compares replicas or needs files
        the inputs may not have."""
        return self

    def select(self, kind: str, table: pa.Table, extra: tuple[str, ...] = ()) -> pa.Table | None:
        """The rows and columns of a decoded chunk this fold reads (None: nothing); `extra`
        columns ride along (an engine's row numbers)."""
        cols = self.inputs.get(kind)
        if cols is None or table.num_rows == 0:
            return None
        flt = self.where.get(kind)
        mask = None if flt is None else flt(table)
        table = table.select(list(cols) + list(extra))  # filter only the columns the fold reads
        if mask is not None:
            kept = pc.sum(mask).as_py() or 0
            if kept == 0:
                return None
            if kept < table.num_rows:  # all rows kept (a segment's batches): no copy
                table = table.filter(mask)
        return table

    def run(self, chunks: Iterable[tuple[str, pa.Table]], ctx: Context) -> Iterator[dict]:
        """Findings for chunks already selected, sorted by (key, order)."""
        state = self.make(ctx)
        for kind, table in chunks:
            yield from state.feed(kind, table)
        yield from state.finish()


def weighed(fold: Fold, kind: str, table: pa.Table) -> int:
    """The selected rows of `table` (of `kind`) that the fold's `cost` is per (Fold.weigh)."""
    weigh = getattr(fold, "weigh", None)   # (an engine's stand-in for a fold may have none)
    return table.num_rows if weigh is None else weigh(kind, table)


def run_selection(fold: Fold, items: list[tuple[str, pa.Table]], ctx: Context,
                  internal: list | None = None) -> Iterator[dict]:
    """The findings of a fold over its whole selection (`items`: its (kind, table) chunks in
    decode order), as every engine runs a fold it buffers: its `prepare` first where it has one,
    then the rows sorted by its key. `items` is emptied once prepared: only the prepared rows
    stay for the sort. `internal` gets the fold's broken ordering contracts (order_errors)."""
    if fold.prepare is not None:
        prepared = fold.prepare(items, ctx)
        if prepared is not items:
            items.clear()
        items = prepared
    yield from run_prepared(fold, items, ctx, internal)


def run_prepared(fold: Fold, items: list[tuple[str, pa.Table]], ctx: Context,
                 internal: list | None = None) -> Iterator[dict]:
    """run_selection once the fold's `prepare` (if any) has run: its rows sorted and folded."""
    state = fold.make(ctx)
    # a keyed state takes each key's slice as the sort cut it: no second split by key
    keyed = isinstance(state, KeyedState) and state.key_cols == fold.key
    for kind, k, table in sorted_keyed(fold, items):
        yield from (state.feed_key(kind, k, table) if keyed else state.feed(kind, table))
    yield from state.finish()
    if internal is not None:
        internal.extend(f"{fold.name}: {e}" for e in state.order_errors)


def sorted_stream(fold: Fold, items: list[tuple[str, pa.Table]]) -> Iterator[tuple[str, pa.Table]]:
    """The (kind, table) chunks of a fold sorted by its key (then its order columns, where a kind
    has them); the kinds of one key come together, in the kinds' name order."""
    for kind, _, part in sorted_keyed(fold, items):
        yield kind, part


def sorted_keyed(fold: Fold, items: list[tuple[str, pa.Table]]) -> Iterator[tuple[str, tuple, pa.Table]]:
    """sorted_stream's chunks as (kind, key values, the key's rows of that kind)."""
    by_kind: dict[str, list[pa.Table]] = {}
    for kind, t in items:
        by_kind.setdefault(kind, []).append(t)
    slices = []
    for rank, kind in enumerate(sorted(by_kind)):
        t = pa.concat_tables(by_kind[kind])
        cols = [c for c in fold.key + fold.order if c in t.schema.names]
        for k, part in sorted_split(t, fold.key, cols):
            slices.append((tuple((v is None, v) for v in k), rank, kind, k, part))
    slices.sort(key=lambda s: (s[0], s[1]))
    for _, _, kind, k, part in slices:
        yield kind, k, part


def concat_by_kind(items: list[tuple[str, pa.Table]]) -> list[tuple[str, pa.Table]]:
    """A selection's chunks as one contiguous table per kind (in the order the kinds first came):
    a live capture's kept selection in a few large buffers instead of thousands of small ones
    scattered over the heap (measured: ~60 MB less resident after 500 MB of a stream)."""
    by_kind: dict[str, list] = {}
    for kind, t in items:
        if t.num_rows:
            by_kind.setdefault(kind, []).append(t)
    return [(kind, pa.concat_tables(ts).combine_chunks()) for kind, ts in by_kind.items()]


GATHER_CHUNKS = 32   # a kept selection's newest tables gathered into one a kind once this many


def gather_tail(items: list[tuple[str, pa.Table]], since: int) -> int:
    """A kept selection's tables from `since` on gathered (concat_by_kind) once there are more
    than GATHER_CHUNKS of them - only the newest: the copy stays small. Where the next gathering
    starts."""
    if len(items) - since > GATHER_CHUNKS:
        items[since:] = concat_by_kind(items[since:])
        return len(items)
    return since


class Settler:
    """How a live capture settles one buffered fold's keys before the stream ends (`Fold.live`).
    The live executor hands it every chunk of the fold's selection (`note`), then at each
    checkpoint the selection kept so far (`settle`): it returns the chunks of the keys that
    nothing later can change, removing them from `items`, which the executor folds alone with
    `context`. It may also make `items` smaller without changing the findings. Before each
    `settle` it is told the context known so far (`learn`: the facts settled between
    checkpoints, engine.plan.Audit.so_far, with the topic names known). `finish` runs before
    the final fold over what is left; `counters` go to the report's coverage `live`."""

    def note(self, kind: str, table: pa.Table) -> None:
        pass

    def learn(self, ctx: Context) -> None:
        pass

    def settle(self, items: list, now: float) -> list:
        return []

    def context(self, ctx: Context, now: float, now_ms: int | None) -> Context:
        return ctx

    def finish(self, items: list) -> None:
        pass

    def counters(self) -> dict:
        return {}


class FoldState:
    order_errors: tuple = ()   # broken ordering contracts, for the engine to report

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        raise NotImplementedError

    def finish(self) -> list[dict]:
        raise NotImplementedError


class KeyOrderError(RuntimeError):
    """A key came back after its group was closed: the rows were not grouped by the fold's key."""


# Tests (tests/conftest.py) raise on a broken ordering contract; a production run reports it as
# an internal error and goes on with a fresh group for the key.
STRICT_ORDER = os.environ.get("KAUDIT_STRICT_ORDER") == "1"


class KeyedState(FoldState):
    """A fold state that is one `Group` per key: splits chunks at key changes, closes the
    previous group when a new key starts. Every key's rows must come together: one that comes
    back after its group closed raises KeyOrderError under STRICT_ORDER, else is noted in
    `order_errors` (never silently started over)."""

    def __init__(self, key: tuple[str, ...], group_factory):
        self.key_cols = key
        self.factory = group_factory
        self.current_key = None
        self.group = None
        self.closed: set = set()
        self.order_errors: list[str] = []

    def feed(self, kind: str, table: pa.Table) -> list[dict]:
        out = []
        for k, part in split_by_key(table, self.key_cols):
            out.extend(self.feed_key(kind, k, part))
        return out

    def feed_key(self, kind: str, k: tuple, part: pa.Table) -> list[dict]:
        """Rows of one key: the previous key's group closes when the key changes."""
        out = []
        if self.group is None or k != self.current_key:
            if self.group is not None:
                out.extend(self.group.finish())
                self.closed.add(self.current_key)
            if k in self.closed:
                message = f"key {k} came back after its group was closed (rows not grouped by {self.key_cols})"
                if STRICT_ORDER:
                    raise KeyOrderError(message)
                self.order_errors.append(message)
            self.current_key = k
            self.group = self.factory(k)
        out.extend(self.group.feed(kind, part))
        return out

    def finish(self) -> list[dict]:
        out = self.group.finish() if self.group is not None else []
        self.group = None
        return out


class Tap:
    """Rows an audit hands on besides its findings (the joins' selections, a decode's rows), as
    (name, table) in decode order: a selection no rule runs. An engine that runs the work in
    pieces gives each a `fresh()` copy, ships what it `drain()`s and its `facts()`, and `add`s
    and `merge`s them into the original in decode order."""

    def __init__(self):
        self.out: list[tuple[str, pa.Table]] = []

    def __call__(self, kind: str, table: pa.Table) -> None:
        raise NotImplementedError

    def fresh(self) -> "Tap":
        """A copy with the same selection and nothing collected."""
        tap = copy.copy(self)
        tap.out = []
        return tap

    def drain(self) -> list[tuple[str, pa.Table]]:
        out, self.out = self.out, []
        return out

    def add(self, name: str, table: pa.Table) -> None:
        self.out.append((name, table))

    def of(self, name: str) -> list[pa.Table]:
        return [t for n, t in self.out if n == name]

    def facts(self) -> dict:
        return {}

    def merge(self, facts: dict) -> None:
        pass


class Rows(Tap):
    """Every decoded chunk (`kaudit decode`, Parquet), or the selection of one fold."""

    def __init__(self, fold: Fold | None = None):
        super().__init__()
        self.fold = fold

    def __call__(self, kind: str, table: pa.Table) -> None:
        sel = table if self.fold is None else self.fold.select(kind, table)
        if sel is not None and sel.num_rows:
            self.out.append((kind, sel))


def of_log_segments(t: pa.Table):
    """Which rows are batches of `.log` segments: source_kind "log", and not a KRaft snapshot's
    `.checkpoint` (its batches number their offsets from 0); a null is not. A chunk of one file
    (a segment's batches) is answered with one comparison, not a string test per row."""
    one_kind, kind = constant(t.column("source_kind"))
    one_src, src = constant(t.column("source"))
    if one_kind and one_src:
        return np_mask(np.full(t.num_rows, kind == "log" and not str(src).endswith(".checkpoint")))
    return pc.and_(pc.equal(t.column("source_kind"), "log"),
                   pc.invert(pc.ends_with(t.column("source"), ".checkpoint")))
