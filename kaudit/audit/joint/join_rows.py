"""What the joins of `kaudit audit` take from the rows (audit/joint/join.py, audit/joint/reader_join.py), as
taps both engines run on their decode pass: the wire's selections (a few columns of the Produce
batches, the EndTxn events, read_committed Fetch responses and their batches) and the log's (the
batches of the producer ids seen on the wire, the non-idempotent ones whose CRC or offset a
capture names, the transaction markers of the wire's transactional producer ids, the readers'
partitions' batches and .txnindex entries, and each partition's offset range per replica).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.joint import acked_loss as AL
from kaudit.audit.joint import join as J
from kaudit.audit.joint import join_content as JC
from kaudit.audit.joint import reader_join as RJ
from kaudit.audit.wire import wire_readers as WR
from kaudit.audit.folds import Fold, Tap, constant, np_col, np_mask
from kaudit.audit.producers.acked_writes import acked_batches, merged, overlap_mask


def _produce_where(t: pa.Table):
    return pc.and_(pc.fill_null(pc.equal(t.column("source_kind"), "produce"), False),
                   pc.invert(pc.fill_null(t.column("is_control"), False)))


# What the join takes from the wire, as selections (no rule runs them): both engines select with
# them, the Spark engine in its tasks.
# (with the columns a records' fingerprint needs: join_content.with_content adds it, then drops them)
_PRODUCE_READS = J.PRODUCE_COLUMNS + tuple(c for c in JC.CONTENT_INPUTS if c not in J.PRODUCE_COLUMNS)
PRODUCE_TAP = Fold("join-produce", {"batch": _PRODUCE_READS}, (), (), None,
                   where={"batch": _produce_where})
END_TXN_TAP = Fold("join-end-txn", {"txn_event": J.END_TXN_COLUMNS}, (), (), None,
                   where={"txn_event": lambda t: pc.fill_null(pc.equal(t.column("event"), "END_TXN"), False)})
# the readers' join: read_committed consumer responses and their transactional/control batches
READER_FETCH_TAP = Fold("join-reader-fetch", {"fetch_partition": WR.FETCH_COLUMNS}, (), (), None,
                        where={"fetch_partition": WR.FOLD.where["fetch_partition"]})
READER_BATCH_TAP = Fold("join-reader-batch", {"batch": WR.BATCH_COLUMNS}, (), (), None,
                        where={"batch": lambda t: pc.and_(
                            pc.fill_null(pc.equal(t.column("source_kind"), "fetch"), False),
                            pc.fill_null(pc.or_(t.column("is_transactional"), t.column("is_control")), False))})
# the InitProducerIds: which producers asked for KIP-939 two-phase commit (two_pc_inits)
INIT_COLUMNS = ("ts", "event", "transactional_id", "producer_id", "producer_epoch", "error_codes", "enable_2pc",
                "keep_prepared_txn", "ongoing_txn_producer_id", "ongoing_txn_producer_epoch")
INIT_TAP = Fold("join-init-producer-id", {"txn_event": INIT_COLUMNS}, (), (), None,
                where={"txn_event": lambda t: pc.fill_null(pc.equal(t.column("event"), "INIT_PRODUCER_ID"), False)})
WIRE_TAPS = (PRODUCE_TAP, END_TXN_TAP, READER_FETCH_TAP, READER_BATCH_TAP, INIT_TAP)


def two_pc_inits(rows: list[dict]) -> dict:
    """producer id -> ((epoch, enable_2pc, transactional id), ...) of the answered InitProducerIds (no error) of
    every producer id one of them gave to a client asking for KIP-939 two-phase commit, or whose
    prepared transaction a KeepPreparedTxn recovery with Enable2Pc kept (txn_kept): the
    capture's knowledge the disk's transactions fold needs (folds.Context.two_pc_inits)."""
    ok = [r for r in rows if r["error_codes"] is not None and not _errors(r["error_codes"])
          and r["producer_id"] is not None and r["producer_id"] >= 0]
    from kaudit.audit.txn import txn_kept

    entries = []
    for r in sorted(ok, key=lambda r: r["ts"] or 0):
        entries.append((r["producer_id"], (r["producer_epoch"], bool(r.get("enable_2pc")), r["transactional_id"])))
        entries.extend(txn_kept.two_pc_entries(r))   # KIP-939: the prepared transaction a recovery kept
    return txn_kept.two_pc_by_pid(entries)


def _errors(codes: str) -> list[int]:
    from kaudit.audit.txn.txn_wire_rows import nonzero

    return nonzero(codes)


class WireTap(Tap):
    """The wire's selections for the join, one list per tap (`of(tap name)`)."""

    def __call__(self, kind: str, t: pa.Table) -> None:
        for tap in WIRE_TAPS:
            sel = tap.select(kind, t)
            if sel is not None:
                self.out.append((tap.name, JC.with_content(sel, J.PRODUCE_COLUMNS) if tap is PRODUCE_TAP else sel))


class DiskTap(Tap):
    """The log's batches the join can use (of the wire's producer ids, the markers of its
    transactional ones, non-idempotent batches a capture names by CRC or offset: `of("rows")`),
    the readers' join's batches and .txnindex entries (`of("reader")`, `of("txnindex")`), and
    each partition's offset range per replica and cleaner checkpoint (its facts)."""

    def __init__(self, produce: list[dict], readers: list[dict] = ()):
        super().__init__()
        sets = self.sets_of(produce, readers)
        self.pids, self.txn_pids, self.crcs, self.offsets, self.reader_pids = (
            pa.array(sets.get(k, []), pa.int64()) for k in ("pids", "txn_pids", "crcs", "offsets", "reader_pids"))
        self.reader_tps = {tuple(x) for x in sets.get("reader_tps", [])}
        # (topic, partition) -> (starts, ends): the acknowledged offsets, merged and sorted
        self.acked = {(t, p): (np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64))
                      for t, p, lo, hi in sets.get("acked", [])}
        # the records' fingerprints of the wire's uncertain sends, and their partitions (join_content)
        self.contents = np.asarray(sets.get("contents", []), dtype=np.int64)
        self.content_tps = {tuple(x) for x in sets.get("content_tps", [])}
        self.ranges: dict = {}
        self.cleaned: dict = {}   # (replica, topic, partition) -> cleaner-offset-checkpoint offset
        self.latest: dict = {}    # (replica, topic, partition) -> the latest batch timestamp (ms)
        # (replica, topic, partition) -> {leader epoch: its first offset in that log}, for the
        # partitions the captures acknowledged writes to: which epoch a log reached by an offset
        self.epoch_starts: dict = {}

    def fresh(self) -> "DiskTap":
        tap = super().fresh()
        tap.ranges, tap.cleaned, tap.latest, tap.epoch_starts = {}, {}, {}, {}
        return tap

    def facts(self) -> dict:
        return {"ranges": dict(self.ranges), "cleaned": dict(self.cleaned), "latest": dict(self.latest),
                "epoch_starts": dict(self.epoch_starts)}

    def merge(self, facts: dict) -> None:
        merge_ranges(self.ranges, [(*k, lo, hi) for k, (lo, hi) in facts["ranges"].items()])
        for k, off in facts["cleaned"].items():
            self.cleaned[k] = max(off, self.cleaned.get(k, -1))
        for k, starts in facts.get("epoch_starts", {}).items():
            merge_epochs(self.epoch_starts.setdefault(k, {}), starts.items())
        for k, ts in facts.get("latest", {}).items():
            self.latest[k] = max(ts, self.latest.get(k, ts))

    @staticmethod
    def sets_of(produce: list[dict], readers: list[dict] = ()) -> dict:
        anon = [r for r in produce if r["producer_id"] is None or r["producer_id"] < 0]
        return {
            "reader_pids": sorted({r["producer_id"] for r in readers if r["producer_id"] is not None
                                   and r["producer_id"] >= 0}),
            "reader_tps": sorted({(r["topic"], r["partition"]) for r in readers if r["topic"] is not None}),
            "pids": sorted({r["producer_id"] for r in produce if r["producer_id"] is not None and r["producer_id"] >= 0}),
            "txn_pids": sorted({r["producer_id"] for r in produce if r["is_transactional"]
                                and r["producer_id"] is not None and r["producer_id"] >= 0}),
            "crcs": sorted({r["crc"] for r in anon if r["crc"] is not None}),
            "offsets": sorted({r["response_base_offset"] for r in anon
                               if r["response_base_offset"] is not None and r["response_base_offset"] >= 0}),
            "acked": acked_ranges(produce),
            "contents": sorted({r["content"] for r in produce if r.get("content") is not None}),
            "content_tps": sorted({(r["topic"], r["partition"]) for r in produce
                                   if r.get("content") is not None and r["topic"] is not None}),
        }

    def __call__(self, kind: str, t: pa.Table) -> None:
        if not t.num_rows:
            return
        if kind == "checkpoint_entry":
            for rep, top, part, name, off in zip(*(t.column(c).to_pylist() for c in
                                                   ("replica", "topic", "partition", "checkpoint", "offset"))):
                if name == "cleaner-offset-checkpoint" and off is not None:
                    self.cleaned[(rep, top, part)] = max(off, self.cleaned.get((rep, top, part), -1))
            return
        if kind == "txnindex_entry" and self.reader_tps:
            t = _of_partitions(t, self.reader_tps)
            if t is not None:
                self.out.append(("txnindex", t.select(list(RJ.TXNINDEX_COLUMNS))))
            return
        if kind == "leader_epoch_entry" and self.acked:
            self._checkpoint_epochs(t)
            return
        if kind != "batch":
            return
        t = t.filter(pc.and_(pc.fill_null(pc.equal(t.column("source_kind"), "log"), False),
                             pc.invert(pc.ends_with(t.column("source"), ".checkpoint"))))
        if not t.num_rows:
            return
        g = t.group_by(["replica", "topic", "partition"]).aggregate(
            [("base_offset", "min"), ("last_offset", "max"), ("max_timestamp_ms", "max")])
        merge_ranges(self.ranges, zip(*(g.column(c).to_pylist() for c in
                                        ("replica", "topic", "partition", "base_offset_min", "last_offset_max"))))
        for rep, top, part, ts in zip(*(g.column(c).to_pylist() for c in
                                        ("replica", "topic", "partition", "max_timestamp_ms_max"))):
            if ts is not None:
                self.latest[(rep, top, part)] = max(ts, self.latest.get((rep, top, part), ts))
        pid = t.column("producer_id").cast(pa.int64())
        control = pc.fill_null(t.column("is_control"), False)
        data = pc.and_(pc.invert(control), pc.is_in(pid, value_set=self.pids))
        marker = pc.and_(control, pc.is_in(pid, value_set=self.txn_pids))
        anon = pc.and_(pc.invert(control), pc.fill_null(pc.less(pid, 0), True))
        anon = pc.and_(anon, pc.or_(pc.is_in(t.column("crc").cast(pa.int64()), value_set=self.crcs),
                                    pc.is_in(t.column("base_offset"), value_set=self.offsets)))
        if self.reader_tps:
            self._readers(t, pid, control)
        if self.acked:
            self._at_acked(t)
            self._epochs(t)
        keep = pc.fill_null(pc.or_(pc.or_(data, marker), anon), False).to_numpy(zero_copy_only=False)
        content, same = JC.disk_content(t, self.content_tps, self.contents)
        keep = keep | same
        if keep.any():
            rows = t.select(list(J.DISK_COLUMNS)).append_column("content", content)
            self.out.append(("rows", rows if keep.all() else rows.filter(pa.array(keep))))

    def _readers(self, t: pa.Table, pid, control) -> None:
        mine = pc.and_(pc.is_in(pid, value_set=self.reader_pids),
                       pc.fill_null(pc.or_(t.column("is_transactional"), control), False))
        t = t.filter(mine)
        if t.num_rows:
            t = _of_partitions(t, self.reader_tps)
            if t is not None:
                self.out.append(("reader", t.select(list(RJ.DISK_COLUMNS))))

    def _epochs(self, t: pa.Table) -> None:
        ok_t, topic = constant(t.column("topic"))
        ok_p, part = constant(t.column("partition"))
        if ok_t and ok_p and (topic, part) not in self.acked:
            return   # a chunk is one file: one partition, most of them never acknowledged on the wire
        g = t.group_by(["replica", "topic", "partition", "partition_leader_epoch"]).aggregate([("base_offset", "min")])
        for rep, top, part, epoch, lo in zip(*(g.column(c).to_pylist() for c in
                                               ("replica", "topic", "partition", "partition_leader_epoch",
                                                "base_offset_min"))):
            if epoch is not None and epoch >= 0 and (top, part) in self.acked:
                merge_epochs(self.epoch_starts.setdefault((rep, top, part), {}), [(epoch, lo)])

    def _checkpoint_epochs(self, t: pa.Table) -> None:
        """A replica's leader-epoch-checkpoint entries (epoch, start offset) of an acknowledged
        partition: its log reached that epoch by that offset even where no batch of the epoch is
        stored yet - a new leader records its epoch's start (its log end) before it appends
        anything (Partition.makeLeader, maybeAssignEpochStartOffset), and a follower's entry is a
        batch it copied from that epoch's leader."""
        cols = [t.column(c).to_pylist() for c in ("replica", "topic", "partition", "leader_epoch", "start_offset")]
        for rep, top, part, epoch, lo in zip(*cols):
            if epoch is not None and epoch >= 0 and lo is not None and lo >= 0 and (top, part) in self.acked:
                merge_epochs(self.epoch_starts.setdefault((rep, top, part), {}), [(epoch, lo)])

    def _at_acked(self, t: pa.Table) -> None:
        """Every stored batch (any producer) overlapping an acknowledged offset range."""
        ok_t, topic = constant(t.column("topic"))
        ok_p, part = constant(t.column("partition"))
        base, last = np_col(t, "base_offset", -1, np.int64), np_col(t, "last_offset", -1, np.int64)
        if ok_t and ok_p:
            iv = self.acked.get((topic, part))
            if iv is None:
                return
            mask = overlap_mask(base, last, *iv)
        else:
            mask = np.zeros(t.num_rows, dtype=bool)
            tps = list(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist()))
            for tp in set(tps):
                iv = self.acked.get(tp)
                if iv is not None:
                    rows = np.array([i for i, x in enumerate(tps) if x == tp], dtype=np.int64)
                    mask[rows] = overlap_mask(base[rows], last[rows], *iv)
        if mask.any():
            self.out.append(("acked", t.filter(np_mask(mask)).select(list(AL.AT_COLUMNS))))


def acked_ranges(produce: list[dict]) -> list:
    """[(topic, partition, starts, ends)]: each partition's acknowledged offsets, merged."""
    spans: dict = {}
    for w in acked_batches(produce):
        spans.setdefault((w.row["topic"], w.row["partition"]), []).append((w.lo, w.hi))
    return [(t, p, *(x.tolist() for x in merged(iv))) for (t, p), iv in spans.items()]


def _of_partitions(t: pa.Table, tps: set) -> pa.Table | None:
    """The rows of `t` in the (topic, partition) pairs `tps` (a chunk is one file: one pair)."""
    ok_t, topic = constant(t.column("topic"))
    ok_p, part = constant(t.column("partition"))
    if ok_t and ok_p:
        return t if (topic, part) in tps else None
    keep = [(a, b) in tps for a, b in zip(t.column("topic").to_pylist(), t.column("partition").to_pylist())]
    t = t.filter(pa.array(keep))
    return t if t.num_rows else None


def merge_epochs(into: dict, starts) -> None:
    for epoch, lo in starts:
        into[epoch] = min(lo, into.get(epoch, lo))


def merge_ranges(into: dict, ranges) -> dict:
    for rep, top, part, lo, hi in ranges:
        rng = into.setdefault((rep, top, part), [lo, hi])
        rng[0], rng[1] = min(rng[0], lo), max(rng[1], hi)
    return into
