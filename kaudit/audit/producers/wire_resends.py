"""On the wire: records re-sent by a new producer session after a send that failed or got no
answer (the wire side of session_copies.py; the rule is `duplicate-records`).

Idempotence deduplicates a retry only within its producer session (ProducerStateManager,
KIP-98). When an idempotent producer's Produce gets no answer or an error after which the broker
may have appended it (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a dropped connection),
and the application then sends the same records (record_content: keys, values, headers, offset
and timestamp deltas) under another producer id or epoch - a restart, a re-created producer - the
broker takes them as new data. Whether the first write was stored the capture alone cannot tell:
the finding is a warning that says so (`kaudit audit` with the log dirs resolves it; on disk
session_copies finds the stored pair).

Vectorised: the records' fingerprints of a chunk are computed only while the partition has an
unresolved failed send to compare them with (rare), and compared with np.isin.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from kaudit.audit.producers.record_content import np_col
from kaudit.audit.registry import evidence, finding
from kaudit.audit.producers.repeated_records import content_fingerprints

RESTART_WINDOW_S = 15 * 60   # delivery timeout (2 min by default) + restart, generously
MAX_FAILED = 10_000          # failed sends remembered per partition (the oldest go first)
# errors after which the broker may still have appended the batch (the others say it did not)
MAY_HAVE_APPENDED = {7: "REQUEST_TIMED_OUT", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 13: "NETWORK_EXCEPTION"}
COLUMNS = ("magic", "attributes", "base_offset", "last_offset", "crc", "batch_size", "record_count",
           "base_timestamp_ms", "max_timestamp_ms", "producer_id", "producer_epoch", "base_sequence")


class Resends:
    """One partition's failed idempotent sends, by their records' fingerprint."""

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self.failed: dict[int, dict] = {}
        self.left: dict = {}   # producer id -> its KIP-360 move to a new id (wire_produce.left_behind)

    def feed(self, t: pa.Table) -> list[dict]:
        pid = np_col(t, "producer_id", -1, np.int64)
        data = (pid >= 0) & ~np_col(t, "is_control", False, bool) & pc_null(t, "transactional_id")
        if not data.any():
            return []
        err = np_col(t, "response_error", -2, np.int64)      # -2: no answer
        acks = np_col(t, "acks", -1, np.int64)
        failed = data & (((err == -2) & (acks != 0)) | np.isin(err, list(MAY_HAVE_APPENDED)))
        out: list[dict] = []
        # the chunk's failed sends first: a re-send in the same chunk follows its failed send
        if failed.any():
            fp = content_fingerprints(t, failed)
            for i, f in zip(np.flatnonzero(failed).tolist(), fp.tolist()):
                self.failed.setdefault(f, _facts(t, i))
            while len(self.failed) > MAX_FAILED:
                self.failed.pop(next(iter(self.failed)))
        if self.failed:
            ok = data & (err == 0)
            if ok.any():
                fp = content_fingerprints(t, ok)
                hit = np.isin(fp, np.fromiter(self.failed, dtype=np.uint64, count=len(self.failed)))
                rows = np.flatnonzero(ok)
                for i, f in zip(rows[hit].tolist(), fp[hit].tolist()):
                    out.extend(self._resend(t, i, self.failed[f]))
        return out

    def _resend(self, t: pa.Table, i: int, a: dict) -> list[dict]:
        b = _facts(t, i)
        if (b["pid"], b["epoch"]) == (a["pid"], a["epoch"]) or b["ts"] is None or a["ts"] is None:
            return []   # the same session's retry: the sequence rules judge it
        if not 0 <= b["ts"] - a["ts"] <= RESTART_WINDOW_S:
            return []
        why = ("got no answer" if a["err"] is None else
               f"got error {a['err']} {MAY_HAVE_APPENDED.get(a['err'], '')}".rstrip())
        m = self.left.get(a["pid"])
        new = ("a new producer id" if b["pid"] != a["pid"] else "a bumped epoch (KIP-360)") if m is None or \
            m.new != b["pid"] else f"the new producer id its KIP-360 InitProducerId obtained for producer {a['pid']}"
        where = f"{self.topic}-{self.partition}"
        return [finding(
            "duplicate-records", f"{where}: the records producer {a['pid']} epoch {a['epoch']} sent "
            f"(corr {a['corr']} on {a['conn']}) {why}; {b['ts'] - a['ts']:.1f} s later producer {b['pid']} "
            f"epoch {b['epoch']} - {new}, another producer session - sent the same records (keys, values, "
            f"headers) and they were acknowledged at offset {b['offset']}. Idempotence deduplicates only "
            f"within one session: if the first write was stored too, consumers process these records "
            f"twice - audit the capture with the log dirs (kaudit audit) to know",
            severity="warning",
            evidence=[evidence(b["source"], b["position"], "produce", f"corr {b['corr']} on {b['conn']}"),
                      evidence(a["source"], a["position"], "produce", f"corr {a['corr']} on {a['conn']}; the failed send")],
            details={"outcome": "unknown", "original_producer_id": a["pid"], "original_producer_epoch": a["epoch"],
                     "original_answer": why, "cause": "re-sent by a new producer session"},
            topic=self.topic, partition=self.partition, connection=b["conn"], client_id=b["client"],
            producer_id=b["pid"], producer_epoch=b["epoch"], first_offset=b["offset"],
            last_offset=None if b["offset"] is None else b["offset"] + b["count"] - 1,
            first_ts_ms=int(b["ts"] * 1000))]


def pc_null(t: pa.Table, name: str) -> np.ndarray:
    col = t.column(name)
    if col.null_count == len(col):
        return np.ones(len(col), dtype=bool)
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _facts(t: pa.Table, i: int) -> dict:
    def v(name):
        return t.column(name)[i].as_py()
    return {"pid": v("producer_id"), "epoch": v("producer_epoch"), "ts": v("request_ts"), "err": v("response_error"),
            "corr": v("correlation_id"), "conn": v("connection"), "source": v("source"), "position": v("position"),
            "offset": v("response_base_offset"), "count": v("record_count") or 0, "client": v("client_id")}
