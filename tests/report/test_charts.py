"""The HTML report's figures without a browser: what each trace holds (report/charts.py,
charts_txn.py) for hand-made rows - every partition a finding names, one trace per producer
epoch and answer, one panel per replica, no latency invented for unanswered requests."""

from __future__ import annotations

from kaudit.report import charts
from kaudit.report.chart_rows import incident_partitions


def _pt(ts, offset, *, epoch=0, bseq=None, control=None, txn=True, answer="stored", last=None, pos=0):
    return {"ts": ts, "epoch": epoch, "bseq": bseq, "lseq": bseq, "offset": offset, "last": last, "count": 1,
            "source": "/x/00000000000000000000.log", "position": pos, "control": control, "txn": txn, "answer": answer}


def _inc(tps, pids=(7,), epochs=(0,), tids=("tx",)):
    return {"producer_ids": list(pids), "topic_partitions": list(tps), "producer_epochs": list(epochs),
            "transactional_ids": list(tids)}


TORN = {"rule": "torn-transaction", "severity": "critical", "topic": "a", "partition": 0, "producer_id": 7,
        "producer_epoch": 0, "replica": "1", "evidence": [], "message": "torn", "first_offset": 0,
        "details": {"coordinator_result": "COMMIT", "results": {"(coordinator)": "COMMIT", "a-0": "ABORT",
                                                                "b-0": "COMMIT", "c-0": None}}}


def _marks(fig):
    return [tuple(d[:3]) + (d[5], t.name) for t in fig.data for d in (t.customdata or [])]


def test_every_partition_a_finding_names_is_drawn():
    assert incident_partitions(_inc(["a-0"]), [TORN]) == ["a-0", "b-0", "c-0"]
    data = {"series": [
        {"pid": 7, "tp": "a-0", "where": "replica 1", "points": [_pt(1, 0), _pt(5, 1, control="ABORT")]},
        {"pid": 7, "tp": "b-0", "where": "replica 1", "points": [_pt(2, 0), _pt(6, 1, control="COMMIT")]}],
        "states": [{"tid": "tx", "pid": 7, "epoch": 0, "ts": 4, "state": "PrepareCommit", "partitions": "a-0,b-0"}]}
    fig = charts.transaction_gantt(_inc(["a-0"]), [TORN], data, 10)
    marks = _marks(fig)
    assert ("a-0", "replica 1", 1, "marker", "ABORT marker by an unknown writer") in marks
    assert ("b-0", "replica 1", 1, "marker", "COMMIT marker by coordinator") in marks
    assert ("a-0", "replica 1", 0, "data", "data (ABORT)") in marks and ("b-0", "replica 1", 0, "data", "data (COMMIT)") in marks
    assert ("c-0", None, None, "missing", "partition without rows") in marks       # named, no rows: said so
    assert [a.text for a in fig.layout.annotations] == ["decision: COMMIT"]
    assert all("text" not in (t.mode or "") for t in fig.data)                    # labels only on hover


def test_sequences_separate_epochs_answers_and_replicas():
    pts = [_pt(1, 0, bseq=0), _pt(2, 1, bseq=1), _pt(3, None, bseq=2, answer="refused"),
           _pt(4, None, bseq=2, answer="no answer"), _pt(5, 2, epoch=1, bseq=0)]
    stored = [_pt(1, 0, bseq=0, pos=0), _pt(2, 1, bseq=1, pos=70), _pt(1, 2, bseq=0, pos=140)]   # a copy, same ts
    data = {"series": [{"pid": 7, "tp": "t-0", "where": "capture c.pcap", "points": pts}] +
            [{"pid": 7, "tp": "t-0", "where": f"replica {r}", "points": stored} for r in (1, 2, 3)]}
    fig = charts.sequence_timeline(_inc(["t-0"], tids=()), [], data)
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["t-0 · replica 1", "t-0 · replica 2", "t-0 · replica 3", "t-0 · capture c.pcap"]
    wire = {t.name: t for t in fig.data if t.customdata is not None and t.customdata[0][1] == "capture c.pcap"}
    assert set(wire) == {"producer 7 epoch 0", "producer 7 epoch 0 refused", "producer 7 epoch 0 no answer",
                         "producer 7 epoch 1"}
    assert wire["producer 7 epoch 0"].mode == "lines+markers" and list(wire["producer 7 epoch 0"].y) == [0, 1]
    assert wire["producer 7 epoch 0 refused"].mode == "markers" == wire["producer 7 epoch 0 no answer"].mode
    for r in (1, 2, 3):
        [t] = [t for t in fig.data if t.customdata is not None and t.customdata[0][1] == f"replica {r}"]
        assert list(t.x) == [0, 1, 2] and list(t.y) == [0, 1, 0]                  # the copy at its own offset


def test_unanswered_requests_have_no_latency():
    frames = [{"ts": 1, "latency_ms": 0.5, "api": "Produce", "error": "", "client": "c"},
              {"ts": 2, "latency_ms": None, "api": "Produce", "error": "no response", "client": "c"}]
    fig = charts.latency_view({"frames": frames, "frames_total": 2})
    [none] = [t for t in fig.data if t.name.startswith("no answer")]
    assert list(none.y) == ["no answer"]
    assert all(0.01 not in list(t.y) for t in fig.data)


def test_loss_map_draws_each_range_lost_per_replica():
    from kaudit.report.charts_loss import loss_map

    fs = [{"rule": "missing-offsets", "severity": "error", "topic": "o", "partition": 0, "replica": r,
           "first_offset": 6, "last_offset": 11, "message": "lost"} for r in ("1", "2")]
    fs.append({"rule": "corrupt-batch", "severity": "error", "topic": "o", "partition": 0, "replica": "1",
               "first_offset": None, "last_offset": None, "message": "bytes"})
    fig = loss_map({}, fs)
    assert sorted(tuple(d) for t in fig.data for d in t.customdata) == [
        ("o-0", "replica 1", 6, 11, None, "missing-offsets"), ("o-0", "replica 2", 6, 11, None, "missing-offsets")]
    assert [t.base[0] for t in fig.data] == [6, 6] and [t.x[0] for t in fig.data] == [6, 6]
