"""The epochs of one producer id as the coordinator's evidence shows them (KIP-98, KIP-890):
when each epoch began and when the coordinator moved past it - fenced by a new instance's
InitProducerId, aborted on a timeout, or ended by the client's own EndTxn under transaction
version 2 (every end bumps the epoch) - from `__transaction_state` records or, on the wire, the
records the requests imply (txn_wire_feed). Once an epoch has ended, no batch of it may be
stored anywhere: the partition leaders learn of the new epoch from the markers, or, under
KIP-890 verification, from the coordinator; a broker that stores one anyway holds a zombie's
data (txn_epoch_rules)."""

from __future__ import annotations

from dataclasses import dataclass

from kaudit.audit.txn.coordinator_state import CoordView

MOVED = "left behind"   # EpochSpan.how of the epochs a move to a new producer id ended


@dataclass
class EpochSpan:
    epoch: int
    began_ms: int | None
    ended_ms: int | None = None     # when the coordinator moved past it (None: not in the evidence)
    how: str | None = None          # in words: "fenced by a new instance's InitProducerId", ...
    source: str | None = None       # the record or request that ended it
    position: int | None = None

    @property
    def fenced(self) -> bool:
        return bool(self.how) and self.how.startswith("fenced")


class ProducerEpochs(dict):
    """Epoch -> EpochSpan of one producer id (`epochs`), and - when its transactional id moved on
    to a newer producer id (txn_lineage.Move: the epoch ran out, or the id was lost) - every epoch
    of it, those the records name and those they do not, ended at that move: the coordinator
    gives the old id no epoch any more."""

    def __init__(self, spans: dict, move=None):
        super().__init__(spans)
        self.move = move
        if move is not None and move.ts_ms is not None:
            for s in self.values():
                if s.ended_ms is None or s.ended_ms > move.ts_ms:
                    _left(s, move)

    def get(self, epoch, default=None):
        if epoch in self:
            return self[epoch]
        if self.move is None or self.move.ts_ms is None or epoch is None or epoch < 0:
            return default
        s = EpochSpan(epoch, None)
        _left(s, self.move)
        self[epoch] = s
        return s


def _left(s: EpochSpan, move) -> None:
    s.ended_ms, s.source, s.position = move.ts_ms, move.source, move.position
    s.how = (f"{MOVED} when transactional id {move.transactional_id!r} moved to producer id {move.new} "
             f"({move.how})")


def producer_epochs(pt) -> ProducerEpochs:
    """The epochs of a producer's history (txn_model.ProducerTxns), its cluster-wide lineage's
    move to a newer producer id included (`pt.lineage`, txn_lineage.Lineage)."""
    lin = getattr(pt, "lineage", None)
    return ProducerEpochs(epochs(pt.view), lin.next_move(pt.producer_id) if lin is not None else None)


def epochs(view: CoordView) -> dict[int, EpochSpan]:
    """Each epoch of the producer id's records with its begin and its end: the first record of a
    higher epoch ends every lower one still running (a producer's epochs only rise)."""
    spans: dict[int, EpochSpan] = {}
    top = None
    for st in view.log:
        e = st.get("epoch")
        if e is None or e < 0:
            continue
        if e not in spans:
            spans[e] = EpochSpan(e, st.get("ts"))
        if top is not None and e > top:
            how = _how(st, view)
            for s in spans.values():
                if s.epoch < e and s.ended_ms is None:
                    s.ended_ms, s.how, s.source, s.position = st.get("ts"), how, st.get("source"), st.get("position")
        top = e if top is None else max(top, e)
    return spans


def _how(st: dict, view: CoordView) -> str:
    """Why the record at a higher epoch ended the epochs below it."""
    state = st.get("state")
    t = view.txns[st["txn"]] if st.get("txn") is not None else None
    if state == "Empty":
        return "fenced: a new InitProducerId got a higher epoch"
    if t is not None and t.ended_by == "coordinator":
        detail = t.end_detail or "timeout or fencing"
        if "fencing" in detail and "timeout" not in detail:
            return "fenced by a new instance's InitProducerId (the coordinator aborted its transaction)"
        return f"aborted by the coordinator ({detail})"
    if state in ("PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"):
        return f"ended by its EndTxn ({'commit' if 'Commit' in state else 'abort'}; transaction version 2 bumps the epoch)"
    return f"superseded by a transaction at a higher epoch ({state})"
