"""KIP-360 on the wire: an InitProducerId v3+ request carries the producer id and epoch the client
holds; a broker answers a request without a transactional id with a new producer id at epoch 0.
The txn_event row keeps both (request_producer_id/_epoch beside the answer), txn_lineage links
request id -> answered id for idempotent producers too (a lineage keyed by the producer), the
sequence rules read the new id's restart at 0 as the new session it is, and a Produce under the
old id sent after the bump was answered and stored is a write after that session ended - told at
info: the broker never fences an idempotent id, so storing it was right (the corpus's
11-crafted-sequence-anomalies G-old-pid-continues is such a write, no anomaly by its truth)."""

from __future__ import annotations

import pyarrow as pa

from kaudit.audit.txn import txn_lineage
from kaudit.model import SCHEMAS
from tests.audit.wire.wirecraft import audit, batch, by_rule, details, init_producer_id, send
from tests.sources.pcap.craft import Conn

PID = 5001
SEQ_RULES = ("out-of-order-sequence", "duplicate-batch", "fenced-epoch", "write-after-epoch-end")


def bumped(zombie: int | None = None, *, asked: tuple[int, int] = (PID, 3), late: bool = True):
    """Producer PID epoch 3 writes 0-4; an unresolved batch (5-9, no answer); the client asks
    InitProducerId with (PID, 3) and gets PID + 1 epoch 0, and re-sends the records from sequence 0.
    `zombie`: a Produce under PID epoch 3 (sequences 5-9) sent after the bump (`late`) or before
    the answer (on another connection), answered with that error code."""
    a = (init_producer_id(1, PID, 3, txn_id=None) + send(2, batch(PID, 3, 0, 5), offset=0)
         + send(3, batch(PID, 3, 5, 5), error=None))
    b = (init_producer_id(4, PID + 1, 0, txn_id=None, asked=asked)
         + send(5, batch(PID + 1, 0, 0, 5, tag="r"), offset=5) + send(6, batch(PID + 1, 0, 5, 5), offset=10))
    conns = [Conn(a), Conn(b, client=("10.0.0.1", 40011))]
    if zombie is not None:
        z = send(7, batch(PID, 3, 5, 5, tag="z"), offset=15 if zombie == 0 else -1, error=zombie)
        conns.append(Conn(z, client=("10.0.0.1", 40012)))
        if not late:
            conns = [conns[0], conns[2], conns[1]]
    return conns


def seq_findings(fs):
    return [f for f in fs if f["rule"] in SEQ_RULES]


def test_the_txn_event_row_keeps_the_request_producer_id_and_epoch(tmp_path):
    from kaudit.sources.pcap import decode_capture
    from tests.sources.pcap.craft import write_capture

    path = tmp_path / "c.pcap"
    write_capture(path, bumped())
    rows = [r for kind, t in decode_capture(str(path)) if kind == "txn_event" for r in t.to_pylist()]
    inits = [(r["request_producer_id"], r["request_producer_epoch"], r["producer_id"], r["producer_epoch"])
             for r in rows if r["event"] == "INIT_PRODUCER_ID"]
    assert inits == [(-1, -1, PID, 3), (PID, 3, PID + 1, 0)]


def test_the_bump_to_a_new_producer_id_is_clean(tmp_path):
    fs = audit(tmp_path, bumped())
    assert seq_findings(fs) == []
    # the unresolved batch re-sent under the new id: whether the first was stored too the capture
    # alone cannot tell (a warning), told as the same producer's KIP-360 bump
    (d,) = by_rule(fs, "duplicate-records")
    assert d["severity"] == "warning" and d["producer_id"] == PID + 1
    assert f"the new producer id its KIP-360 InitProducerId obtained for producer {PID}" in d["message"]


def test_an_accepted_write_under_the_old_id_after_the_bump_ended_its_session(tmp_path):
    fs = audit(tmp_path, bumped(0))
    (w,) = by_rule(fs, "write-after-epoch-end")
    assert (w["producer_id"], w["producer_epoch"], w["first_offset"], w["severity"]) == (PID, 3, 15, "info")
    assert w["transactional_id"] is None and f"producer id {PID + 1}" in w["message"]
    d = details(w)
    assert d["next_producer_id"] == PID + 1 and d["last_epoch_asked"] == 3
    assert [e["kind"] for e in w["evidence"]] == ["produce", "request"]
    assert [f["rule"] for f in seq_findings(fs)] == ["write-after-epoch-end"]


def test_a_refused_write_under_the_old_id_stored_nothing(tmp_path):
    assert by_rule(audit(tmp_path, bumped(45)), "write-after-epoch-end") == []


def test_a_write_sent_before_the_bump_was_answered_is_no_zombie(tmp_path):
    assert by_rule(audit(tmp_path, bumped(0, late=False)), "write-after-epoch-end") == []


def test_without_the_request_id_nothing_links_the_two_producer_ids(tmp_path):
    """A Java client asks for a new id with -1 once its epoch ran out: two producers, no verdict."""
    assert seq_findings(audit(tmp_path, bumped(0, asked=(-1, -1)))) == []


def _events(rows):
    names = SCHEMAS["txn_event"].names
    return pa.Table.from_pylist([{n: r.get(n) for n in names} for r in rows], schema=SCHEMAS["txn_event"])


def _init(ts, tid, asked, got, error="0"):
    return {"source": "c.pcap", "position": int(ts), "ts": ts, "event": "INIT_PRODUCER_ID", "transactional_id": tid,
            "request_producer_id": asked[0], "request_producer_epoch": asked[1],
            "producer_id": got[0], "producer_epoch": got[1], "error_codes": error}


def test_lineage_of_an_idempotent_producer_follows_its_requests():
    t = _events([_init(1.0, None, (-1, -1), (7, 0)), _init(2.0, None, (7, 4), (9, 0)),
                 _init(3.0, None, (9, 0), (3, 0)),                    # ids need not grow
                 _init(4.0, None, (20, 1), (21, 0), error="15"),      # refused: no move
                 _init(5.0, None, (30, 2), (30, 3))])                 # same id: nothing to link
    lin = txn_lineage.build(txn_lineage.wire_links(t))
    assert set(lin) == {7, 9, 3}
    a = lin[7]
    assert a.transactional_id is None and a.producer_ids == [7, 9, 3]
    first, second = a.moves
    assert (first.old, first.new, first.ts_ms, first.last_epoch) == (7, 9, 2000, 4)
    assert "idempotent producer" in first.text and "KIP-360" in first.how
    assert (second.old, second.new) == (9, 3) and a.next_move(3) is None


def test_a_transactional_kip360_request_links_its_ids_explicitly():
    t = _events([_init(1.0, "tx", (-1, -1), (7, 32766)), _init(2.0, "tx", (7, 32767), (8, 0))])
    lin = txn_lineage.build(txn_lineage.wire_links(t))
    m = lin[7].next_move(7)
    assert lin[7].transactional_id == "tx" and (m.old, m.new, m.position) == (7, 8, 2) and "KIP-360" in m.how


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=2, max_size=6, unique=True), st.randoms(use_true_random=False))
def test_a_chain_of_requests_is_one_lineage_in_the_order_of_its_moves(ids, rnd):
    """Whatever the ids' values and the order the rows come in, one idempotent producer's chain of
    KIP-360 requests is one lineage, its ids in the order the moves took them."""
    rows = [_init(float(i + 1), None, (old, i), (new, 0)) for i, (old, new) in enumerate(zip(ids, ids[1:]))]
    rnd.shuffle(rows)
    lin = txn_lineage.build(txn_lineage.wire_links(_events(rows)))
    assert set(lin) == set(ids) and len({id(x) for x in lin.values()}) == 1
    a = lin[ids[0]]
    assert a.transactional_id is None and a.producer_ids == ids
    assert [(m.old, m.new, m.last_epoch) for m in a.moves] == [(o, n, i) for i, (o, n) in enumerate(zip(ids, ids[1:]))]


def test_a_refused_bump_is_the_error_of_the_producer_that_asked(tmp_path):
    """An InitProducerId that asked with (PID, 3) answered with an error names no producer id:
    the frame and its producer-error are the asking producer's, not an orphan waiting for the
    next id (nor a non-idempotent producer)."""
    m = (init_producer_id(1, PID, 3, txn_id=None) + send(2, batch(PID, 3, 0, 5), offset=0)
         + init_producer_id(3, -1, -1, txn_id=None, asked=(PID, 3), error=15))   # COORDINATOR_NOT_AVAILABLE
    fs = audit(tmp_path, Conn(m))
    (e,) = by_rule(fs, "producer-error")
    assert (e["producer_id"], e["producer_epoch"]) == (PID, 3) and f"producer {PID} epoch 3" in e["message"]
