"""`repeated-records`: the same records stored again where nothing shows a failed send.

Batches written without a timestamp (magic 0 messages, and the v2 batches a broker up-converts
from them: producer id -1, timestamps -1) that hold the same records are byte-identical whether a
client retried one or the application sent the same values twice, so their CRC is no evidence of
a retry (duplicate-records needs the retried batch's own create time). Such repeats are reported
once per replica, partition and producer, at info: how many batches repeat earlier ones, the
first with its original and the last - never one finding per pair.

Records compare by their content (record_content.records_crc: keys, values, headers, offset and
timestamp deltas), sorted per chunk; a batch repeats an earlier one when an equal batch lies at
most RECENT_ROWS batches before it, counted in the partition's log order, so the result does not
depend on how the rows were chunked. All of it is numpy searches: no per-pair Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit.audit.producers.record_content import np_col, records_crc
from kaudit.audit.registry import evidence, finding, rule
from kaudit.ranges import offsets as offset_span

RECENT_ROWS = 100_000   # batches: how far back a repeat is looked for (bounds the memory)
_K1, _K2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@rule("repeated-records", "info", "disk", "the same records stored again, with no sign of a failed send",
      "Nothing to do if the application sends the same values again on purpose. If it should not, "
      "deduplicate downstream by key, and give the producer timestamps (a client of Kafka 0.10 or "
      "later) and idempotence so that a retry can be told from a repeat.")
def repeated_records(original: dict, repeat: dict) -> bool:
    """Invariant: none the broker enforces. A batch whose records (keys, values, headers, offset
    and timestamp deltas) equal an earlier batch's of the same partition was either retried by a
    client without idempotence (producer id -1: kafka.log.ProducerStateManager keeps no state for
    it, KIP-98) or sent again by the application. Without a create timestamp - magic 0 messages
    (KIP-32 added timestamps in magic 1) and the v2 batches a broker converts them to - the two
    cannot be told apart from the log, and a real retry stays within the producer's in-flight
    window: a repetition thousands of offsets later is most likely the application's own.
    Reported at info, once per replica, partition and producer. Benign causes: an application
    that writes the same values repeatedly (heartbeats, status values, test data)."""
    return original["fp"] == repeat["fp"]


def _span(a: int, b: int) -> str:
    return f"{a}" if a == b else f"{a}-{b}"


def _mix(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _K1
        z = (z ^ (z >> np.uint64(27))) * _K2
        return z ^ (z >> np.uint64(31))


def content_fingerprints(t: pa.Table, mask: np.ndarray) -> np.ndarray:
    """64-bit fingerprints of the selected rows' records, with their count and length."""
    content = records_crc(t, mask)
    count = np_col(t, "record_count", 0, np.uint64)[mask]
    size = np_col(t, "batch_size", 0, np.uint64)[mask]
    return _mix(_mix(content ^ (count << np.uint64(40))) ^ size)


class _Run:
    """One chunk's fingerprints sorted (equal ones in log order) with their rows' evidence."""

    __slots__ = ("fp", "row", "base", "last", "pos", "src", "max_row")

    def __init__(self, fp, row, base, last, pos, src, order):
        self.fp, self.row, self.base, self.last, self.pos, self.src = (
            fp[order], row[order], base[order], last[order], pos[order], src[order])
        self.max_row = int(row.max())

    def latest(self, fp: np.ndarray) -> np.ndarray:
        """For each of `fp`: the index of its latest occurrence in this run, or -1."""
        j = np.searchsorted(self.fp, fp, "right") - 1
        ok = (j >= 0) & (self.fp[np.maximum(j, 0)] == fp)
        return np.where(ok, j, -1)


class Repetitions:
    """The repeats of one replica of one partition, one summary per producer id."""

    def __init__(self, key: tuple, sources: list[str]):
        self.replica, self.topic, self.partition = key
        self.sources = sources          # shared with duplicate_records (source ids)
        self.runs: list[_Run] = []
        self.rows = 0
        self.by_pid: dict[int, dict] = {}

    def feed(self, t: pa.Table, mask: np.ndarray, src_all: np.ndarray) -> None:
        if not mask.any():
            return
        fp = content_fingerprints(t, mask)
        n = fp.size
        row = self.rows + np.arange(n, dtype=np.int64)
        self.rows += n
        base = np_col(t, "base_offset", -1, np.int64)[mask]
        last = np_col(t, "last_offset", -1, np.int64)[mask]
        pos = np_col(t, "position", -1, np.int64)[mask]
        pid = np_col(t, "producer_id", -1, np.int64)[mask]
        src = src_all
        # the latest earlier occurrence of each row's fingerprint: in this chunk (the previous
        # equal one in a stable sort), else in the runs of earlier chunks
        order = np.argsort(fp, kind="stable")
        s = fp[order]
        prev = np.full(n, -1, dtype=np.int64)          # row index in this chunk
        same = np.flatnonzero(s[1:] == s[:-1]) + 1
        prev[order[same]] = order[same - 1]
        orig_row = np.where(prev >= 0, row[np.maximum(prev, 0)], -1)
        orig_run = np.full(n, -1, dtype=np.int64)
        orig_at = np.full(n, -1, dtype=np.int64)
        for k, run in enumerate(self.runs):
            todo = np.flatnonzero(prev < 0)
            if not todo.size:
                break
            j = run.latest(fp[todo])
            hit = j >= 0
            better = hit & (run.row[np.maximum(j, 0)] > orig_row[todo])
            w = todo[better]
            orig_row[w] = run.row[j[better]]
            orig_run[w], orig_at[w] = k, j[better]
        rep = np.flatnonzero((orig_row >= 0) & (orig_row >= row - RECENT_ROWS))
        if rep.size:
            self._note(rep, pid, base, last, pos, src, prev, orig_run, orig_at, row, orig_row)
        self.runs.append(_Run(fp, row, base, last, pos, src, order))
        self.runs = [r for r in self.runs if r.max_row >= self.rows - RECENT_ROWS]

    def _note(self, rep, pid, base, last, pos, src, prev, orig_run, orig_at, row, orig_row) -> None:
        """Counts the repeats `rep` (ascending) per producer; the first keeps its evidence."""
        p = pid[rep]
        for q in np.unique(p).tolist():
            mine = rep[p == q]
            s = self.by_pid.get(q)
            if s is None:
                i = int(mine[0])
                if prev[i] >= 0:
                    j = int(prev[i])
                    o = (int(base[j]), int(last[j]), int(pos[j]), int(src[j]))
                else:
                    r, a = self.runs[int(orig_run[i])], int(orig_at[i])
                    o = (int(r.base[a]), int(r.last[a]), int(r.pos[a]), int(r.src[a]))
                s = self.by_pid[q] = {"n": 0, "first": (int(base[i]), int(last[i]), int(pos[i]), int(src[i])),
                                      "orig": o, "gap": int(row[i] - orig_row[i])}
            s["n"] += int(mine.size)
            k = int(mine[-1])
            s["last"] = (int(base[k]), int(last[k]), int(pos[k]), int(src[k]))
            s["max_gap"] = max(s.get("max_gap", 0), int((row[mine] - orig_row[mine]).max()))
            s["min_gap"] = min(s.get("min_gap", s["gap"]), int((row[mine] - orig_row[mine]).min()))

    def finish(self) -> list[dict]:
        out = []
        where = f"{self.topic}-{self.partition} (replica {self.replica})"
        for q, s in sorted(self.by_pid.items()):
            fb, fl, fp_, fs = s["first"]
            ob, ol, op, os_ = s["orig"]
            lb, ll, lp, ls = s["last"]
            who = "producer id -1 (no idempotence)" if q < 0 else f"producer {q}"
            out.append(finding(
                "repeated-records", f"{where}: {s['n']} batch(es) of {who} at {offset_span(fb, ll)} repeat the "
                f"records (keys, values, headers) of earlier batches - first offset(s) {_span(fb, fl)}, the same as "
                f"offset(s) {_span(ob, ol)}. The batches carry no timestamp, so a client's retry cannot be told from "
                f"the application sending the same values again, and nothing shows a failed send: most "
                f"likely the application's own repetition (consumers read every copy)",
                evidence=[evidence(self.sources[fs], fp_, "batch", "first repeat"),
                          evidence(self.sources[os_], op, "batch", "original"),
                          evidence(self.sources[ls], lp, "batch", "last repeat")],
                details={"repeats": s["n"], "original_first_offset": ob, "original_last_offset": ol,
                         "first_repeat_offsets": [fb, fl], "last_repeat_offsets": [lb, ll],
                         "batches_apart": [s["min_gap"], s["max_gap"]], "timestamps": "none"},
                topic=self.topic, partition=self.partition, replica=self.replica, producer_id=q,
                first_offset=fb, last_offset=ll))
        self.by_pid = {}
        self.runs = []
        return out
