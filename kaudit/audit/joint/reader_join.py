"""Readers on the wire against the log dirs (`kaudit audit`): read_committed Fetch responses judged
with what the brokers stored.

- `aborted-read`: a batch the consumer delivers whose transaction the log ends with ABORT. The
  replica consulted must hold the batch itself (same offset, producer, epoch, sequence): the
  cleaner keeps a transaction's marker while any of its data remains, so the first marker of the
  producer after the batch in that replica is the one that ended it.
- `txnindex-mismatch` (wire and disk): the response's aborted_transactions against the .txnindex
  entries of the same partition - an entry whose transaction's data the response returned but
  does not list, or a listed transaction that the log ends with COMMIT (its committed records
  hidden from the consumer). Only replicas whose log covers the returned offsets are consulted.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from kaudit.audit.read_committed import parse_aborted
from kaudit.audit.wire.reader_replay import delivered
from kaudit.audit.registry import evidence, finding
from kaudit.audit.wire.wire_readers import aborted_read

# columns the engine collects from the log dirs for the readers' join
DISK_COLUMNS = ("source", "position", "replica", "topic", "partition", "base_offset", "last_offset",
                "producer_id", "producer_epoch", "base_sequence", "is_control", "control_type")
TXNINDEX_COLUMNS = ("source", "position", "replica", "topic", "partition", "producer_id", "first_offset",
                    "last_offset", "last_stable_offset")


@dataclass
class ReaderInput:
    fetch: list[dict] = field(default_factory=list)       # read_committed consumer responses' partitions
    batches: list[dict] = field(default_factory=list)     # their transactional and control batches
    disk: list[dict] = field(default_factory=list)        # the log's batches of those producers
    txnindex: list[dict] = field(default_factory=list)    # the .txnindex entries of those partitions
    ranges: dict = field(default_factory=dict)            # (replica, topic, partition) -> [lo, hi]


class _Log:
    """One partition's stored batches of the wire's producers, per replica."""

    def __init__(self, rows: list[dict]):
        self.data: dict[tuple, list[dict]] = {}      # (pid, epoch, seq, base offset) -> copies
        self.markers: dict[tuple, list[dict]] = {}   # (replica, pid) -> markers by offset
        for r in rows:
            if r["is_control"]:
                if r["control_type"] in ("COMMIT", "ABORT"):
                    self.markers.setdefault((r["replica"], r["producer_id"]), []).append(r)
            else:
                key = (r["producer_id"], r["producer_epoch"], r["base_sequence"], r["base_offset"])
                self.data.setdefault(key, []).append(r)
        for ms in self.markers.values():
            ms.sort(key=lambda m: m["base_offset"])

    def end_of(self, b: dict) -> dict | None:
        """The marker that ended the transaction of wire batch `b`, per the first replica that
        holds the batch and a marker after it."""
        for copy in self.data.get((b["producer_id"], b["producer_epoch"], b["base_sequence"], b["base_offset"]), ()):
            ms = self.markers.get((copy["replica"], b["producer_id"]), [])
            i = bisect_right([m["base_offset"] for m in ms], copy["last_offset"])
            if i < len(ms):
                return ms[i]
        return None


def join_readers(inp: ReaderInput) -> list[dict]:
    parts: dict[tuple, list[dict]] = {}
    for b in inp.batches:
        parts.setdefault((b["source"], b["connection"], b["position"], b["topic"], b["partition"]), []).append(b)
    logs: dict[tuple, _Log] = {}
    by_tp: dict[tuple, list[dict]] = {}
    for r in inp.disk:
        by_tp.setdefault((r["topic"], r["partition"]), []).append(r)
    index: dict[tuple, list[dict]] = {}
    for e in inp.txnindex:
        index.setdefault((e["topic"], e["partition"]), []).append(e)
    out = []
    for r in sorted(inp.fetch, key=lambda r: (r["response_ts"] or 0, r["source"], r["position"])):
        tp = (r["topic"], r["partition"])
        got = parts.get((r["source"], r["connection"], r["position"], *tp))
        if not got:
            continue
        log = logs.get(tp) or logs.setdefault(tp, _Log(by_tp.get(tp, [])))
        out += _aborted(r, got, log)
        out += _index(r, got, log, index.get(tp, []), inp.ranges)
    return out


def _aborted(r: dict, got: list[dict], log: _Log) -> list[dict]:
    groups: dict = {}
    for b in delivered(got, parse_aborted(r["aborted_transactions"])):
        end = log.end_of(b)
        if end is not None and aborted_read(end["control_type"]):
            groups.setdefault((b["producer_id"], end["replica"], end["base_offset"]), (end, []))[1].append(b)
    out = []
    for (pid, _, _), (end, bs) in groups.items():
        listed = [f"{p}@{o}" for p, o in parse_aborted(r["aborted_transactions"])]
        out.append(finding(
            "aborted-read", f"{r['topic']}-{r['partition']}: read_committed Fetch response (frame {r['position']}, "
            f"{r['connection']}, client {r['client_id']}) returned producer {pid}'s batch(es) at offsets "
            f"{bs[0]['base_offset']}-{bs[-1]['last_offset']} of a transaction the log ends with ABORT (offset "
            f"{end['base_offset']}, replica {end['replica']}), and its aborted_transactions "
            f"({', '.join(listed) or 'empty'}) does not cover them: the consumer delivers aborted records "
            "(G1a, aborted read)",
            evidence=[evidence(r["source"], r["position"], "fetch"), evidence(end["source"], end["position"], "marker")],
            topic=r["topic"], partition=r["partition"], connection=r["connection"], producer_id=pid,
            producer_epoch=bs[0]["producer_epoch"], first_offset=bs[0]["base_offset"],
            last_offset=bs[-1]["last_offset"], first_ts_ms=_ms(r["response_ts"]),
            details={"aborted_transactions": listed, "abort": f"ABORT marker at offset {end['base_offset']} (log)",
                     "batches": len(bs)}))
    return out


def _returns_data_of(got: list[dict], e: dict) -> bool:
    """Whether a response returned data of index entry `e`'s transaction: a batch of its producer
    within its offsets. Replicas clean a compacted partition apart, each dropping an entry once a
    pass finds none of its (aborted, discarded) data left: a response from a replica that did, of
    records around the discarded data, rightly omits an entry another replica still lists."""
    return any(b["producer_id"] == e["producer_id"] and not b["is_control"] and b["base_offset"] <= e["last_offset"]
               and b["last_offset"] >= e["first_offset"] for b in got)


def _index(r: dict, got: list[dict], log: _Log, entries: list[dict], ranges: dict) -> list[dict]:
    lo = r["fetch_offset"] if r["fetch_offset"] is not None else min(b["base_offset"] for b in got)
    hi = max(b["last_offset"] for b in got)
    covering = {rep for (rep, t, p), (a, b) in ranges.items()
                if (t, p) == (r["topic"], r["partition"]) and a <= lo and hi <= b}
    if not covering:
        return []
    listed = set(parse_aborted(r["aborted_transactions"]))
    out = []
    seen = set()
    for e in sorted(entries, key=lambda e: (e["first_offset"], e["producer_id"])):
        key = (e["producer_id"], e["first_offset"])
        if e["replica"] not in covering or key in seen or key in listed:
            continue
        if e["last_offset"] >= lo and e["first_offset"] <= hi and _returns_data_of(got, e):
            seen.add(key)
            out.append(_index_finding(r, e, f"omits producer {e['producer_id']}'s aborted transaction at offsets "
                                      f"{e['first_offset']}-{e['last_offset']}, which the .txnindex of replica "
                                      f"{e['replica']} lists and the returned records overlap"))
    for pid, first in sorted(listed):
        copies = [b for b in got if b["producer_id"] == pid and b["base_offset"] == first and not b["is_control"]]
        end = log.end_of(copies[0]) if copies else None
        if end is not None and end["control_type"] == "COMMIT" and end["replica"] in covering:
            out.append(_index_finding(r, end, f"lists producer {pid} from offset {first} as aborted, but the log "
                                      f"ends that transaction with COMMIT at offset {end['base_offset']}: the "
                                      "consumer drops its committed records", pid=pid, first=first))
    return out


def _index_finding(r: dict, e: dict, what: str, pid: int | None = None, first: int | None = None) -> dict:
    pid = e["producer_id"] if pid is None else pid
    if first is None:
        first = e["first_offset"] if "first_offset" in e else e["base_offset"]
    return finding(
        "txnindex-mismatch", f"{r['topic']}-{r['partition']}: read_committed Fetch response (frame {r['position']}, "
        f"{r['connection']}, client {r['client_id']}) {what} (aborted_transactions: "
        f"{r['aborted_transactions'] or 'empty'})",
        evidence=[evidence(r["source"], r["position"], "fetch"),
                  evidence(e["source"], e["position"], "txnindex" if "first_offset" in e else "marker")],
        topic=r["topic"], partition=r["partition"], connection=r["connection"], replica=e["replica"],
        producer_id=pid, first_offset=first, last_offset=e["last_offset"], first_ts_ms=_ms(r["response_ts"]),
        details={"aborted_transactions": r["aborted_transactions"], "fetch_offset": r["fetch_offset"]})


def _ms(ts) -> int | None:
    return None if ts is None else int(ts * 1000)
