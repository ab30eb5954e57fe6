"""The rows the HTML report draws (report/charts.py), gathered from decoded chunks once the audit
has named the incidents (engine/charts.py reads the inputs again): the batches of the producers
involved on their partitions, the coordinator's transaction states of the transactional ids
involved, and a capture's request/response pairs.

Bounded: each series keeps at most MAX_POINTS points (evenly thinned), the frames MAX_FRAMES.
"""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pyarrow.compute as pc

MAX_POINTS = 2000
MAX_FRAMES = 5000
TOPIC_PARTITION = re.compile(r"^.+-\d+$")
BATCH_COLS = ("source_kind", "source", "position", "replica", "topic", "partition", "producer_id", "producer_epoch",
              "base_sequence",
              "last_sequence", "base_offset", "last_offset", "max_timestamp_ms", "request_ts", "response_base_offset",
              "response_error", "is_transactional", "is_control", "control_type", "record_count")


def capture_place(source: str | None) -> str:
    """A capture's place name, as the incidents' places name it."""
    return f"capture {os.path.basename(source or '') or '?'}"


def is_capture(where: str) -> bool:
    return where.startswith("capture ")


def _details(f: dict) -> dict:
    from kaudit.audit.stories.incidents import details_of

    return details_of(f)


def finding_partitions(f: dict) -> list[str]:
    """The "topic-partition" names a finding involves: its own, and those its details name (a
    transaction's results, markers and marker writers per partition)."""
    out = [f"{f['topic']}-{f['partition']}"] if f.get("topic") is not None and f.get("partition") is not None else []
    d = _details(f)
    for k in ("results", "markers", "writers"):
        v = d.get(k)
        if isinstance(v, dict):
            out.extend(tp for tp in v if isinstance(tp, str) and TOPIC_PARTITION.match(tp))
    return list(dict.fromkeys(out))


def incident_partitions(inc: dict, findings: list[dict]) -> list[str]:
    """Every partition an incident involves: the incident's, and every one its findings name."""
    out = list(inc.get("topic_partitions") or [])
    for f in findings:
        out.extend(finding_partitions(f))
    return sorted(dict.fromkeys(out), key=_tp_order)


def _tp_order(tp: str):
    topic, _, part = tp.rpartition("-")
    return (topic, int(part) if part.isdigit() else -1)


def involved(report: dict) -> tuple[set, set, set]:
    """(producer ids, "topic-partition" names, transactional ids) of the report's incidents and
    of their findings (a torn transaction's finding names partitions its incident may not)."""
    pids, tps, tids = set(), set(), set()
    kinds = {i["id"]: i["kind"] for i in report["incidents"]}
    for i in report["incidents"]:
        if i["kind"] == "coverage":
            continue
        pids.update(p for p in i["producer_ids"] if p is not None)
        tps.update(i["topic_partitions"])
        tids.update(i["transactional_ids"])
    for f in report.get("findings") or []:
        if kinds.get(f.get("incident"), "coverage") != "coverage":
            tps.update(finding_partitions(f))
            if f.get("producer_id") is not None:
                pids.add(f["producer_id"])
    return pids, tps, tids


class ChartRows:
    def __init__(self, pids: set, tps: set, tids: set):
        self.pids = pa.array(sorted(pids), pa.int64())
        self.tps, self.tids = tps, pa.array(sorted(tids), pa.string())
        self.series: dict[tuple, list[dict]] = {}
        self.states: list[dict] = []
        self.frames: list[dict] = []
        self.frame_stride, self.frames_seen = 1, 0

    def add(self, kind: str, t: pa.Table) -> None:
        if not t.num_rows:
            return
        if kind == "batch":
            self._batches(t)
        elif kind == "txn_event" and len(self.pids):
            self._wire_markers(t)
        if kind in ("txn_log", "txn_event") and len(self.tids):
            t = t.filter(pc.fill_null(pc.is_in(t.column("transactional_id"), value_set=self.tids), False))
            ts = "timestamp_ms" if kind == "txn_log" else "ts"
            for r in t.to_pylist():
                when = r[ts] if kind == "txn_log" else (r[ts] * 1000 if r[ts] is not None else None)
                self.states.append({"tid": r["transactional_id"], "pid": r["producer_id"], "epoch": r["producer_epoch"],
                                    "ts": when, "state": " ".join(x for x in (r.get("state") or r.get("event"),
                                                                             r.get("result")) if x),
                                    "partitions": r.get("partitions")})
        elif kind == "frame":
            self._frames(t)

    def _batches(self, t: pa.Table) -> None:
        pid = t.column("producer_id").cast(pa.int64())
        keep = pc.fill_null(pc.is_in(pid, value_set=self.pids), False)
        keep = pc.and_(keep, pc.invert(pc.equal(t.column("source_kind"), "fetch")))
        t = t.filter(keep)
        if not t.num_rows:
            return
        for r in t.select([c for c in BATCH_COLS if c in t.column_names]).to_pylist():
            tp = f"{r['topic']}-{r['partition']}"
            if tp not in self.tps:
                continue
            wire = r["source_kind"] == "produce"
            if wire and r["response_error"] not in (0, None):
                answer = "refused"
            else:
                answer = "stored" if not wire or r["response_error"] == 0 else "no answer"
            pt = {"ts": r["request_ts"] * 1000 if wire and r["request_ts"] else r["max_timestamp_ms"],
                  "epoch": r["producer_epoch"], "bseq": r["base_sequence"], "lseq": r["last_sequence"],
                  "offset": r["response_base_offset"] if wire else r["base_offset"],
                  "last": None if wire else r["last_offset"], "count": r.get("record_count"),
                  "source": r.get("source"), "position": r.get("position"),
                  "control": r["control_type"] if r["is_control"] else None, "txn": bool(r["is_transactional"]),
                  "answer": answer}
            where = capture_place(r.get("source")) if wire else f"replica {r['replica']}"
            self.series.setdefault((r["producer_id"], tp, where), []).append(pt)

    def _wire_markers(self, t: pa.Table) -> None:
        """WriteTxnMarkers requests of the producers involved: a marker per partition named (the
        wire shows no offset for it), beside the Produce requests' batches of the wire series."""
        t = t.filter(pc.and_(pc.equal(t.column("event"), "WRITE_MARKERS"),
                             pc.fill_null(pc.is_in(t.column("producer_id"), value_set=self.pids), False)))
        for r in t.to_pylist():
            for tp in (r["partitions"] or "").split(","):
                tp = tp.strip()
                if tp in self.tps and r["result"] in ("COMMIT", "ABORT"):
                    self.series.setdefault((r["producer_id"], tp, capture_place(r["source"])), []).append(
                        {"ts": r["ts"] * 1000 if r["ts"] is not None else None, "epoch": r["producer_epoch"],
                         "bseq": None, "lseq": None, "offset": None, "last": None, "count": None,
                         "source": r["source"], "position": r["position"], "control": r["result"],
                         "txn": True, "answer": "stored"})

    def _frames(self, t: pa.Table) -> None:
        for r in t.select(["request_ts", "latency_ms", "api_name", "error_names", "client_id",
                           "response_frame"]).to_pylist():
            self.frames_seen += 1
            if r["request_ts"] is None or self.frames_seen % self.frame_stride:
                continue
            self.frames.append({"ts": r["request_ts"] * 1000, "latency_ms": r["latency_ms"], "api": r["api_name"] or "?",
                                "error": r["error_names"] or ("no response" if r["response_frame"] is None else ""),
                                "client": r["client_id"]})
            if len(self.frames) >= MAX_FRAMES:   # thin out: every other frame, and half as many from now on
                self.frames = self.frames[::2]
                self.frame_stride *= 2

    def result(self) -> dict:
        series = []
        for (pid, tp, where), pts in sorted(self.series.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
            if is_capture(where):   # requests and markers arrive as separate chunks: in time order
                pts = sorted(pts, key=lambda p: (p["ts"] is None, p["ts"] or 0))
            step = max(1, -(-len(pts) // MAX_POINTS))
            series.append({"pid": pid, "tp": tp, "where": where, "points": pts[::step], "total": len(pts)})
        return {"series": series, "states": sorted(self.states, key=lambda s: (s["ts"] or 0)),
                "frames": self.frames, "frames_total": self.frames_seen}
