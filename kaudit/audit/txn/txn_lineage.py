"""One history per transactional id, cluster-wide: its producer ids in order, and when and how it
moved from one to the next (KIP-98, KIP-360, KIP-890).

A transactional id keeps its producer id while the epoch can be bumped; the coordinator gives it
a new producer id (epoch 0) when the epoch runs out - under transaction version 2 at the end of a
transaction (the PrepareX record carries NextProducerId, the CompleteX record is written under
the new id with PreviousProducerId), under 0/1 at the next InitProducerId - and when a
producer's id was lost (its `__transaction_state` record expired: a new InitProducerId starts a
new id). Once the id has moved, the old producer id has no epoch left: the coordinator refuses
it, and a batch of it stored afterwards is a zombie's, exactly as a fenced epoch's
(txn_epoch_rules.stale_epoch_write reads the move as the end of every epoch of the old id).

An idempotent producer (no transactional id) is linked the same way where the wire shows it:
an InitProducerId v3+ request carries the id and epoch the client holds (KIP-360: unresolved
batches, UNKNOWN_PRODUCER_ID, an exhausted epoch; librdkafka sends them, the Java client bumps
an idempotent epoch locally and asks with -1 only once it ran out), and a broker always answers
a request without a transactional id with a new producer id at epoch 0
(TransactionCoordinator.handleInitProducerId): request id -> answered id is the producer's
move, and its lineage is keyed by the producer (`Lineage.transactional_id` None).

The facts come from every input of one run and are merged by the engine (plan.Facts): on disk
the `__transaction_state` records (`disk_links`), on the wire the answered InitProducerId and
the EndTxn v5 answers and the KIP-360 requests (`wire_links`); `build` turns them into `Lineage`s, one per transactional
id, settled into the folds' context (`Context.producer_lineage`: producer id -> its Lineage).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.txn import txn_kept


@dataclass(frozen=True)
class Move:
    """The transactional id left producer id `old` for `new` at `ts_ms`."""

    transactional_id: str | None   # None: an idempotent producer (no transactional id)
    old: int
    new: int
    ts_ms: int | None
    how: str                      # in words, for the stories
    source: str | None = None     # the record or request that shows the move
    position: int | None = None
    last_epoch: int | None = None  # the old id's highest epoch in the evidence

    @property
    def text(self) -> str:
        if self.transactional_id is None:
            return f"the idempotent producer moved from producer id {self.old} to producer id {self.new} ({self.how})"
        return f"transactional id {self.transactional_id!r} moved from producer id {self.old} to producer id {self.new} ({self.how})"


@dataclass
class Lineage:
    """The producer ids of one transactional id (or of one idempotent producer, linked by its
    KIP-360 InitProducerId requests: `transactional_id` None), oldest first, and the moves
    between them."""

    transactional_id: str | None
    producer_ids: list[int] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)

    def next_move(self, pid: int) -> Move | None:
        """The move that left `pid` behind (None: it is the id's latest producer id)."""
        return next((m for m in self.moves if m.old == pid), None)

    def previous_move(self, pid: int) -> Move | None:
        return next((m for m in self.moves if m.new == pid), None)


# -- the facts: compact rows gathered from every input ------------------------------------------

def _col(t: pa.Table, name: str):
    return t.column(name) if name in t.column_names else None


def disk_links(table: pa.Table) -> list[dict]:
    """Link rows of a `__transaction_state` (txn_log) chunk: per (transactional id, producer id,
    file) its first and last record time, its highest epoch and first position; and each record
    naming a previous or next producer id (TV2 tagged fields)."""
    need = ("transactional_id", "producer_id", "timestamp_ms", "producer_epoch", "source", "position")
    if table.num_rows == 0 or any(_col(table, n) is None for n in need):
        return []
    ok = pc.and_(pc.is_valid(table.column("transactional_id")), pc.is_valid(table.column("producer_id")))
    if _col(table, "tombstone") is not None:
        ok = pc.and_(ok, pc.invert(pc.fill_null(table.column("tombstone"), False)))
    t = table.filter(ok).select([n for n in need + ("previous_producer_id", "next_producer_id", "state")
                                 if n in table.column_names])
    if t.num_rows == 0:
        return []
    for i, f in enumerate(t.schema):   # a fold's selection is dictionary-encoded (txn_rows.lean)
        if pa.types.is_dictionary(f.type):
            t = t.set_column(i, f.name, t.column(i).cast(f.type.value_type))
    g = t.group_by(["transactional_id", "producer_id", "source"]).aggregate(
        [("timestamp_ms", "min"), ("timestamp_ms", "max"), ("producer_epoch", "max"), ("position", "min")])
    out = [{"tid": r["transactional_id"], "pid": r["producer_id"], "first": r["timestamp_ms_min"],
            "last": r["timestamp_ms_max"], "epoch": r["producer_epoch_max"], "source": r["source"],
            "position": r["position_min"], "via": "record"} for r in g.to_pylist()]
    for name, via in (("next_producer_id", "next"), ("previous_producer_id", "previous")):
        c = _col(t, name)
        if c is None:
            continue
        linked = t.filter(pc.fill_null(pc.greater_equal(c, 0), False))
        for r in linked.to_pylist():
            other = r[name]
            old, new = (r["producer_id"], other) if via == "next" else (other, r["producer_id"])
            if old != new:
                out.append({"tid": r["transactional_id"], "old": old, "new": new, "ts": r["timestamp_ms"],
                            "source": r["source"], "position": r["position"], "via": via,
                            "epoch": r["producer_epoch"], "state": r.get("state")})
    return out


def wire_ends(table: pa.Table) -> list[tuple]:
    """(producer id, epoch, time s, COMMIT|ABORT) of each EndTxn of a txn_event chunk answered
    without error (folds.Context.txn_ends)."""
    need = ("event", "producer_id", "producer_epoch", "ts", "result", "error_codes")
    if table.num_rows == 0 or any(_col(table, n) is None for n in need):
        return []
    ev = table.column("event")
    ev = ev.cast(pa.string()) if pa.types.is_dictionary(ev.type) else ev
    t = table.filter(pc.fill_null(pc.equal(ev, "END_TXN"), False))
    out = []
    for pid, epoch, ts, result, codes in zip(*(t.column(c).to_pylist() for c in need[1:])):
        if pid is not None and pid >= 0 and ts is not None and codes is not None and \
                all(c.strip() in ("", "0") for c in str(codes).replace(";", ",").split(",")):
            out.append((pid, epoch, ts, result))
    return out


def ends_by_producer(ends: list[tuple]) -> dict:
    """(producer id, epoch) -> [(time s, result)] in time order (folds.Context.txn_ends)."""
    out: dict = {}
    for pid, epoch, ts, result in ends:
        out.setdefault((pid, epoch), []).append((ts, result))
    for v in out.values():
        v.sort()
    return out


def wire_links(table: pa.Table) -> list[dict]:
    """Link rows of a txn_event chunk: each answered InitProducerId (the producer id it gave the
    transactional id) and each EndTxn answered with another producer id (TV2: the epoch ran out)."""
    need = ("event", "transactional_id", "producer_id", "ts", "source", "position")
    if table.num_rows == 0 or any(_col(table, n) is None for n in need):
        return []
    ev = table.column("event")
    ev = ev.cast(pa.string()) if pa.types.is_dictionary(ev.type) else ev
    keep = pc.or_(pc.and_(pc.is_in(ev, value_set=pa.array(["INIT_PRODUCER_ID", "END_TXN"])),
                          pc.is_valid(table.column("transactional_id"))),
                  _asked_with_an_id(table, ev))
    out = []
    for r in table.filter(keep).to_pylist():
        pid, tid, ts = r["producer_id"], r["transactional_id"], r["ts"]
        if pid is None or pid < 0 or ts is None:
            continue
        ms = int(ts * 1000)
        codes = r.get("error_codes")   # None: no answer; "" or "0": answered without error
        answered = codes is not None and all(c.strip() in ("", "0") for c in str(codes).replace(";", ",").split(","))
        asked = r.get("request_producer_id")
        if r["event"] == "INIT_PRODUCER_ID" and answered and asked is not None and 0 <= asked != pid:
            # KIP-360: the client asked with its id and got another (an idempotent producer always
            # gets a new id, epoch 0; a transactional id whose epoch ran out or whose id expired)
            out.append({"tid": tid, "old": asked, "new": pid, "ts": ms, "source": r["source"],
                        "position": r["position"], "via": "kip360" if tid is not None else "idempotent",
                        "epoch": r.get("request_producer_epoch")})
        if tid is None:
            continue
        if r["event"] == "INIT_PRODUCER_ID" and answered:
            out.append({"tid": tid, "pid": pid, "first": ms, "last": ms, "epoch": r.get("producer_epoch"),
                        "source": r["source"], "position": r["position"], "via": "init",
                        "two_pc": bool(r.get("enable_2pc")),   # KIP-939 Enable2Pc (two_pc_inits)
                        "kept": txn_kept.two_pc_entries(r)})   # and the prepared transaction it kept
        elif r["event"] == "END_TXN":
            new = r.get("new_producer_id")
            out.append({"tid": tid, "pid": pid, "first": ms, "last": ms, "epoch": r.get("producer_epoch"),
                        "source": r["source"], "position": r["position"], "via": "request"})
            if answered and new is not None and new >= 0 and new != pid:
                out.append({"tid": tid, "old": pid, "new": new, "ts": ms, "source": r["source"],
                            "position": r["position"], "via": "endtxn", "epoch": r.get("producer_epoch")})
    return out


def two_pc_inits(rows: list[dict]) -> dict:
    """producer id -> ((epoch, enable_2pc, transactional id), ...) in time order, of the answered
    InitProducerIds among the wire's link rows, for every producer id one of them gave to a client
    asking for KIP-939 two-phase commit, or whose prepared transaction a KeepPreparedTxn recovery
    with Enable2Pc kept (txn_kept.two_pc_entries) (folds.Context.two_pc_inits: the wire's own, as
    joint.join_rows.two_pc_inits is the capture's for the log dirs)."""
    inits = sorted((r for r in rows if r.get("via") == "init" and "two_pc" in r), key=lambda r: r["first"] or 0)
    entries = []
    for r in inits:
        entries.append((r["pid"], (r["epoch"], r["two_pc"], r["tid"])))
        entries.extend(r.get("kept") or ())   # KIP-939: a recovery's Enable2Pc is its kept transaction's
    return txn_kept.two_pc_by_pid(entries)


def _asked_with_an_id(table: pa.Table, ev) -> pa.Array:
    """InitProducerId rows whose request named a producer id (v3+, KIP-360), idempotent or not."""
    asked = _col(table, "request_producer_id")
    if asked is None:
        return pa.array([False] * table.num_rows)
    return pc.fill_null(pc.and_(pc.equal(ev, "INIT_PRODUCER_ID"), pc.greater_equal(asked, 0)), False)


# -- the lineages --------------------------------------------------------------------------------

_HOW = {
    "next": "its epoch ran out: the coordinator's PrepareCommit/PrepareAbort named the next producer id "
            "(transaction version 2, KIP-890)",
    "previous": "its epoch ran out: the coordinator completed the transaction under the next producer id "
                "(transaction version 2, KIP-890)",
    "endtxn": "its epoch ran out: EndTxn answered a new producer id (transaction version 2, KIP-890)",
    "kip360": "the client asked InitProducerId to bump its producer id and epoch (KIP-360) and was given "
              "a new producer id (its epoch ran out, or its producer id expired)",
    "idempotent": "the idempotent producer asked InitProducerId to bump its producer id and epoch "
                  "(KIP-360: unresolved batches, UNKNOWN_PRODUCER_ID, an exhausted epoch) and the broker "
                  "gave it a new producer id (epoch 0): its old producer id's session ended there",
    "init": "an InitProducerId gave the transactional id a new producer id (its epoch ran out, or its "
            "producer id expired)",
    "record": "the coordinator's records show the transactional id under a new producer id (its epoch "
              "ran out, or its producer id expired)",
}


def build(rows: list[dict]) -> dict[int, Lineage]:
    """Producer id -> the Lineage of its transactional id (or of its idempotent producer: the ids
    its KIP-360 InitProducerId requests link), from the link rows of every input; only lineages
    with more than one producer id are kept (the others have nothing to link)."""
    seen: dict = {}
    explicit: dict = {}
    idem = _idempotent_keys(rows)
    for r in rows:
        tid = r["tid"] if r["tid"] is not None else idem.get(r.get("old", r.get("pid")))
        if tid is None:
            continue
        if "old" in r:
            k = (r["old"], r["new"])
            have = explicit.setdefault(tid, {}).get(k)
            if have is None or (r["ts"] is not None and (have["ts"] is None or r["ts"] < have["ts"])):
                explicit[tid][k] = r
            # a KIP-360 request names the old id's epoch; the other links' epochs are not the old id's
            asked = r.get("epoch") if r.get("via") in ("kip360", "idempotent") else None
            for pid, t, e in ((r["old"], r["ts"], asked), (r["new"], r["ts"], None)):
                _seen(seen.setdefault(tid, {}), pid, t, t, e, None)
            continue
        _seen(seen.setdefault(tid, {}), r["pid"], r["first"], r["last"], r.get("epoch"), r)
    out: dict[int, Lineage] = {}
    for tid, pids in seen.items():
        if len(pids) < 2:
            continue
        links = explicit.get(tid, {})
        depth = _depths(links)
        order = sorted(pids, key=lambda p: (pids[p]["first"] is None, pids[p]["first"] or 0, depth.get(p, 0), p))
        name = tid if isinstance(tid, str) else None   # None: an idempotent producer's ids
        lin = Lineage(name, order)
        for old, new in zip(order, order[1:]):
            lin.moves.append(_move(name, old, new, pids, links.get((old, new))))
        for p in order:
            out.setdefault(p, lin)
    return out


def _idempotent_keys(rows: list[dict]) -> dict[int, tuple]:
    """Producer id -> its idempotent producer's key: the ids an InitProducerId without a
    transactional id linked (request id -> answered id, KIP-360), joined transitively."""
    parent: dict[int, int] = {}

    def root(p: int) -> int:
        while parent.setdefault(p, p) != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for r in rows:
        if r["tid"] is None and "old" in r:
            a, b = root(r["old"]), root(r["new"])
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {p: ("idempotent", root(p)) for p in list(parent)}


def _depths(links: dict) -> dict[int, int]:
    """How many explicit moves lead to each producer id: an old id sorts before its new one when
    both are known only from the move's time."""
    prev = {new: old for old, new in links}
    out: dict[int, int] = {}
    for p in prev:
        n, q, hops = 0, p, set()
        while q in prev and q not in hops:
            hops.add(q)
            q, n = prev[q], n + 1
        out[p] = n
    return out


def _seen(by_pid: dict, pid: int, first, last, epoch, row) -> None:
    s = by_pid.setdefault(pid, {"first": first, "last": last, "epoch": epoch, "row": row})
    if first is not None and (s["first"] is None or first < s["first"]):
        s["first"] = first
        if row is not None:
            s["row"] = row
    elif s["row"] is None and row is not None:
        s["row"] = row
    if last is not None and (s["last"] is None or last > s["last"]):
        s["last"] = last
    if epoch is not None and (s["epoch"] is None or epoch > s["epoch"]):
        s["epoch"] = epoch


def _move(tid: str, old: int, new: int, pids: dict, link: dict | None) -> Move:
    """The move from `old` to `new`: at the explicit link (TV2 fields, an EndTxn answer) when the
    evidence holds one, else at the new id's first record or InitProducerId answer."""
    last_epoch = pids[old]["epoch"]
    if link is not None:
        return Move(tid, old, new, link["ts"], _HOW[link["via"]], link["source"], link["position"], last_epoch)
    row = pids[new]["row"] or {}
    return Move(tid, old, new, pids[new]["first"], _HOW.get(row.get("via"), _HOW["record"]), row.get("source"),
                row.get("position"), last_epoch)


# -- `kaudit txn`: one history per transactional id ----------------------------------------------

def annotate(rows: list[dict], lineage: dict[int, Lineage]) -> list[dict]:
    """The `kaudit txn` rows (txn_view) with each transactional id's history together
    (`together`): each row of a producer id with a lineage carries `producer_ids` (its
    transactional id's, in order), and the first row under a newer producer id
    `producer_id_change` (from, to, when, how, the evidence)."""
    if not lineage:
        return rows
    seen: set = set()
    for r in rows:
        lin = lineage.get(r["producer_id"])
        if lin is None:
            continue
        r["producer_ids"] = list(lin.producer_ids)
        m = lin.previous_move(r["producer_id"])
        if m is not None and r["producer_id"] not in seen:
            r["producer_id_change"] = {"from": m.old, "to": m.new, "ts_ms": m.ts_ms, "how": m.how,
                                       "evidence": {"source": m.source, "position": m.position}}
        seen.add(r["producer_id"])
    return together(rows)


def together(rows: list[dict]) -> list[dict]:
    """Rows of one transactional id's producer ids (same `producer_ids`) one after the other,
    where its first row was, oldest producer id first (each id's rows in their order); the
    other rows keep their places."""
    groups: dict[tuple, list[dict]] = {}
    out: list = []
    for r in rows:
        ids = tuple(r.get("producer_ids") or ())
        if not ids:
            out.append(r)
            continue
        if ids not in groups:
            groups[ids] = []
            out.append(groups[ids])
        groups[ids].append(r)
    flat: list[dict] = []
    for x in out:
        if isinstance(x, list):
            rank = {p: i for i, p in enumerate(x[0]["producer_ids"])}
            x.sort(key=lambda r: rank.get(r["producer_id"], 0))
            flat.extend(x)
        else:
            flat.append(x)
    return flat
