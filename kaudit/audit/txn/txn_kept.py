"""KIP-939 recovery of a prepared transaction: an InitProducerId v6 with KeepPreparedTxn links
the transaction its coordinator kept open to the session that recovers it.

The coordinator's invariant (KIP-939, TransactionCoordinator.handleInitProducerId): asked to
keep the prepared transaction, it does not abort the transactional id's ongoing transaction;
it bumps the epoch (a new producer id when the epoch runs out) so that the previous instance is
fenced, and answers the new ProducerId/ProducerEpoch for the recovering session beside
OngoingTxnProducerId/OngoingTxnProducerEpoch, the kept transaction's own (-1 when there was
none: then nothing was kept, and a transaction the evidence shows open was not the
coordinator's ongoing one). The recovering session may only end the kept transaction: its
EndTxn (under its own producer id and epoch) commits or aborts it, and the coordinator writes
the markers under the kept transaction's producer id at its epoch + 1. A transaction that asked
Enable2Pc has no timeout (Int.MaxValue): it is never hanging by age, however long its external
transaction manager takes.

So a kept transaction is judged with its recovering session: not fenced by the recovery's
InitProducerId (no coordinator abort), not timed out when the recovery asked Enable2Pc, and
ended by the recovering session's EndTxn or by the markers that follow it. A KeepPreparedTxn
answered OngoingTxnProducerId -1, or naming another producer id or epoch than the open
transaction's, kept nothing of it: that transaction is fenced as by any InitProducerId.

On the wire the recovering session may have another producer id than the kept transaction
(txn_wire keys its fold by producer id): `linked_rows` gives the kept producer id its own rows
of the recovery (KEEP_PREPARED) and of the recovering session's first EndTxn after it
(KEPT_END), which WireFeed replays (`kept`, `kept_end`). `two_pc_entries` gives the kept
producer id the recovery's Enable2Pc (folds.Context.two_pc_inits) for wire-lso and for the log
dirs' audit.
"""

from __future__ import annotations

from kaudit.audit.thresholds import NO_TIMEOUT_MS

KEEP_PREPARED, KEPT_END = "KEEP_PREPARED", "KEPT_END"


def ongoing(r: dict) -> tuple | None:
    """(producer id, epoch) of the transaction a KeepPreparedTxn InitProducerId's answer says
    the coordinator kept; None when it kept none (-1), did not answer, or was not asked."""
    pid, epoch = r.get("ongoing_txn_producer_id"), r.get("ongoing_txn_producer_epoch")
    if not r.get("keep_prepared_txn") or pid is None or pid < 0:
        return None
    return pid, (epoch if epoch is not None and epoch >= 0 else None)


def keeps(r: dict, pid: int, epoch: int | None) -> bool:
    """Whether a KeepPreparedTxn InitProducerId (`r`) kept the open transaction of producer id
    `pid` at `epoch`: its answer names that transaction; an answer without the fields (none
    decoded, an error) is taken at its word, as before KIP-939's answer was read."""
    if not r.get("keep_prepared_txn"):
        return False
    if r.get("ongoing_txn_producer_id") is None:
        return True
    kept = ongoing(r)
    return kept is not None and kept[0] == pid and (kept[1] is None or epoch is None or kept[1] == epoch)


def take_over(feed, t, ts: float, r: dict, new: tuple) -> None:
    """The recovering session (`new`: its producer id and epoch) takes over the open
    transaction `t` of `feed` (txn_wire_feed.WireFeed): no fencing; with Enable2Pc no timeout,
    written as the coordinator rewrites the transaction's state."""
    t.kept = new
    if r.get("enable_2pc"):
        feed.timeout_ms = t.timeout_ms = NO_TIMEOUT_MS
    feed.record("Ongoing", ts, r, t)


def kept(feed, ts: float, r: dict, errs: list[int]) -> None:
    """WireFeed's KEEP_PREPARED: another producer id's recovery kept this producer id's
    transaction at `producer_epoch` (r's new_producer_id/_epoch: the recovering session)."""
    e, new = r["producer_epoch"], (r["new_producer_id"], r["new_producer_epoch"])
    feed.step(ts, r["position"], f"InitProducerId of transactional id {r['transactional_id']!r} keeps its "
                                 f"prepared transaction of epoch {e} open (KeepPreparedTxn"
                                 + (", two-phase commit" if r.get("enable_2pc") else "")
                                 + f", KIP-939) for the recovering session, producer id {new[0]} epoch {new[1]}")
    if r.get("enable_2pc"):
        feed.timeout_ms = NO_TIMEOUT_MS
    t = feed.open_txn()
    if t is not None and (e is None or t.epoch is None or t.epoch == e):
        take_over(feed, t, ts, r, new)


def kept_end(feed, ts: float, r: dict, errs: list[int]) -> None:
    """WireFeed's KEPT_END: the recovering session's EndTxn ends the kept transaction; the
    coordinator's markers carry the kept producer id at its epoch + 1 (KIP-939)."""
    result = r["result"]
    feed.step(ts, r["position"], f"EndTxn {result} of the recovering session, producer id {r['new_producer_id']} "
                                 f"epoch {r['new_producer_epoch']}, ends the kept transaction (KIP-939)")
    t = feed.open_txn()
    if t is None or getattr(t, "kept", None) is None:
        return
    feed._boundary(ts)
    t.prepared = result
    t.prepare_epoch = None if t.epoch is None else t.epoch + 1
    feed.record("Prepare" + result.capitalize(), ts, r, t, epoch=t.prepare_epoch, cause="client",
                detail=f"EndTxn {result.lower()} of the recovering session (KIP-939)")
    feed._maybe_complete(t, ts, r)


def session_end(t, result: str) -> bool:
    """Whether a coordinator's markers with no EndTxn before them are the recovering session's
    end of kept transaction `t`: only that session ends it - but for a timeout's abort of one
    kept without Enable2Pc (its timeout still applies)."""
    return getattr(t, "kept", None) is not None and (result == "COMMIT" or (t.timeout_ms or 0) >= NO_TIMEOUT_MS)


def marker_epochs(t) -> tuple:
    """The epochs a coordinator's markers may carry for transaction `t`: its PrepareX's, and
    for a kept transaction also its own epoch + 1 (KIP-939: the markers of a kept transaction
    carry its producer id and epoch + 1, whatever the recovering session's epoch)."""
    out = (t.prepare_epoch,)
    if getattr(t, "kept", None) is not None and t.epoch is not None:
        out += (t.epoch + 1,)
    return out


def marker_epoch(t, epoch: int):
    """Transaction `t`, its markers' `epoch` (one of marker_epochs) taken as its PrepareX's: the
    markers show which epoch the coordinator wrote for a kept transaction - the KIP's kept
    epoch + 1, or the recovering session's end - where the requests left it open."""
    if epoch != t.prepare_epoch:
        t.prepare_epoch = epoch
        if t.prepare_record is not None:
            t.prepare_record["producer_epoch"] = epoch
    return t


def linked_rows(cols: dict) -> list[dict]:
    """KEEP_PREPARED and KEPT_END rows for the kept producer ids that differ from their
    recovering session's (`cols`: txn_wire's joined event columns, any order), as row dicts of
    the same columns."""
    n = len(cols["event"])
    names = list(cols)
    order = sorted(range(n), key=lambda i: (cols["ts"][i] or 0.0, cols["position"][i] or 0))
    pending: dict = {}   # the recovering producer id -> (kept producer id, epoch, its session epoch)
    out = []
    for i in order:
        ev, pid = cols["event"][i], cols["producer_id"][i]
        answered = cols["error_codes"][i] is not None and _clean(cols["error_codes"][i])
        if ev == "INIT_PRODUCER_ID" and answered:
            row = {c: cols[c][i] for c in names}
            k = ongoing(row)
            if k is not None and k[0] != pid:
                pending[pid] = (k[0], k[1], row["producer_epoch"])
                out.append(dict(row, event=KEEP_PREPARED, producer_id=k[0], producer_epoch=k[1],
                                new_producer_id=pid, new_producer_epoch=row["producer_epoch"]))
            else:
                pending.pop(pid, None)
        elif ev == "END_TXN" and answered and pid in pending and cols["result"][i] in ("COMMIT", "ABORT"):
            kpid, kepoch, _ = pending.pop(pid)
            row = {c: cols[c][i] for c in names}
            out.append(dict(row, event=KEPT_END, producer_id=kpid, producer_epoch=kepoch,
                            new_producer_id=pid, new_producer_epoch=row["producer_epoch"]))
    return out


def _clean(codes) -> bool:
    return all(c.strip() in ("", "0") for c in str(codes).replace(";", ",").split(","))


def two_pc_entries(r: dict) -> list[tuple]:
    """(kept producer id, (epoch, True, transactional id)) of a KeepPreparedTxn recovery that
    asked Enable2Pc: the kept transaction is a two-phase-commit one (folds.Context.two_pc_inits),
    whatever its own InitProducerId the evidence holds or lacks."""
    k = ongoing(r)
    if k is None or not r.get("enable_2pc") or k[1] is None:
        return []
    return [(k[0], (k[1], True, r.get("transactional_id")))]


def two_pc_by_pid(entries) -> dict:
    """producer id -> ((epoch, enable_2pc, transactional id), ...) in the order given, of the
    producer ids among (producer id, entry) `entries` one of whose entries asked two-phase commit
    (folds.Context.two_pc_inits)."""
    entries = list(entries)
    asked = {pid for pid, e in entries if e[1]}
    out: dict = {}
    for pid, e in entries:
        if pid in asked:
            out.setdefault(pid, []).append(e)
    return {pid: tuple(v) for pid, v in out.items()}
