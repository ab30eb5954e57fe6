"""The wire feed of the transaction model: one producer id's requests and responses, replayed
in time order, turned into the facts of txn_model (see txn_wire.py for what each request says).
`WireFeed` replays; `WireCoverage` says what the capture can show of that producer."""

from __future__ import annotations

import json

from kaudit.audit.capture_holes import host_of as _host   # a connection's client (0) or server (1) address
from kaudit.audit.txn import txn_fetched, txn_kept, txn_wire_cover, txn_wire_order
from kaudit.audit.txn.coordinator_state import partition_names
from kaudit.audit.folds import Context
from kaudit.audit.registry import evidence
from kaudit.audit.txn.txn_model import ADMIN, COORDINATOR, ProducerTxns, assemble
from kaudit.audit.txn.txn_wire_rows import (FENCED, Story, marker_answers, marker_writer, nonzero, produced_row,
                                            stored_by_retry)
from kaudit.audit.thresholds import NO_TIMEOUT_MS

CONCURRENT = 51   # CONCURRENT_TRANSACTIONS: the coordinator is still ending the id's transaction
# the client's own requests to its coordinator (a version-2 leader's AddPartitionsToTxn aside)
CLIENT_EVENTS = frozenset({"INIT_PRODUCER_ID", "ADD_PARTITIONS", "ADD_OFFSETS", "END_TXN"})

def _newer(a: int | None, b: int | None) -> bool:
    """Whether epoch `a` is known and above `b` (an unknown `b` is below any known epoch)."""
    return a is not None and (b is None or a > b)


class _Txn:
    """The coordinator's transaction as the requests show it."""

    def __init__(self, tid, epoch, ts, timeout_ms):
        self.tid, self.epoch, self.start, self.timeout_ms = tid, epoch, ts, timeout_ms
        self.partitions: list[str] = []
        self.groups: set[str] = set()
        self.offsets_at: float | None = None  # its first answered AddOffsetsToTxn / TxnOffsetCommit
        self.prepared: str | None = None     # COMMIT | ABORT once its end is known
        self.prepare_epoch: int | None = None
        self.marked: set[str] = set()        # partitions whose marker was answered
        self.marks_answered: float | None = None   # the latest answer of its markers seen
        self.complete = False
        self.fence_request: float | None = None   # a new instance's InitProducerId while open
        self.fence_row: dict | None = None
        self.prepared_at: float | None = None     # when its PrepareX was recorded
        self.rows: dict[str, list[dict]] = {}     # tp -> its data rows, in order
        self.kept: tuple | None = None            # KIP-939: the recovering session (producer id, epoch)
        self.prepare_record: dict | None = None
        self.records: list[dict] = []             # its coordinator records, as the replay dates them


class WireFeed:
    """Builds the facts of one producer id from its rows in time order (`rows()`)."""

    def __init__(self, pid: int, ctx: Context):
        self.pid = pid
        self.ctx = ctx
        self.data: list[dict] = []
        self.markers: list[dict] = []
        self.records: list[dict] = []
        self.timeline = Story()
        self.cur: _Txn | None = None
        self.txns: list[_Txn] = []
        self.tid: str | None = None
        self.timeout_ms: int | None = None
        self.seen_init = False
        self.client_coordinator = False      # the client's own coordinator requests show
        self.version: int | None = None      # 2: EndTxn v5 / the leaders' adds (KIP-890)
        self.tv1_adds = False
        self.tv2_adds = False
        self.add_hosts: set[str] = set()     # leaders whose AddPartitionsToTxn the capture holds
        self.marker_hosts: set[str] = set()  # leaders whose WriteTxnMarkers the capture holds
        self.produce_hosts: dict[str, str] = {}   # tp -> the leader its data went to
        self.known_from: float | None = None      # from here on the capture shows every registration
        self._seen: dict[tuple, dict] = {}        # (tp, epoch, first sequence) -> its data row
        self._fetched: set[tuple] = set()         # (tp, offset) of the markers Fetch responses served
        self.data_by_tp: dict[tuple, list[dict]] = {}     # (topic, partition) -> its data rows, in order
        self.markers_by_tp: dict[tuple, list[dict]] = {}  # the same of `markers` (txn_fetched's index)
        self.markers_indexed = 0
        self.fetched_index: dict[tuple, tuple] = {}   # txn_fetched._index
        self.below: dict[tuple, tuple] = {}           # txn_fetched._recent's stacks
        self.top_epoch: int | None = None         # the highest epoch the coordinator's records reached
        self.marker_writes: list[dict] = []       # the coordinator's markers per partition and their answer
        self.busy: list[tuple] = []               # (ts, frame, event) answered CONCURRENT_TRANSACTIONS
        self.coord_conns: set[str] = set()        # the client's own connections to its coordinator
        self.since: tuple | None = None           # (source, frame) of its last InitProducerId or EndTxn
        self.asked: dict[str, tuple | None] = {}  # tp -> `since` of an AddPartitionsToTxn the capture holds no answer to
        self.held: _Txn | None = None             # the open transaction markers of the one before it end (txn_wire_order.unended)
        self.copies: dict[int, tuple] = {}        # txn_fetched.stored_copy: id(data row) -> its served copy

    # -- the producer's story ---------------------------------------------------------------
    def step(self, ts: float, position, text) -> None:
        self.timeline.append((ts, position, text))

    def record(self, state: str, ts: float, r: dict, t: _Txn, *, epoch=None, cause=None, detail=None) -> None:
        e = t.epoch if epoch is None else epoch
        if e is not None and (self.top_epoch is None or e > self.top_epoch):
            self.top_epoch = e
        self.records.append({
            "topic": None, "partition": 0, "replica": None, "offset": len(self.records),
            "source": r["source"], "position": r["position"], "transactional_id": t.tid or self.tid,
            "producer_id": self.pid, "producer_epoch": t.epoch if epoch is None else epoch,
            "state": state, "state_id": None, "partitions": ",".join(t.partitions) or None,
            "timestamp_ms": int(ts * 1000), "start_ms": int(t.start * 1000),
            "transaction_timeout_ms": t.timeout_ms, "tombstone": False,
            "client_transaction_version": self.version, "end_cause": cause, "end_detail": detail,
            "evidence": [evidence(r["source"], r["position"], "request", f"{state} on {r['connection']}")]})
        t.records.append(self.records[-1])
        if state.startswith("Prepare"):   # its record: txn_kept.marker_epoch may date its epoch
            t.prepared_at, t.prepare_record = ts, self.records[-1]

    def open_txn(self) -> _Txn | None:
        t = self.cur
        return t if t is not None and t.prepared is None and not t.complete else None

    def _new(self, ts: float, epoch: int, r: dict) -> _Txn:
        prev = self.cur
        if prev is not None and prev.prepared is not None and not prev.complete:
            # a transaction begins only once the previous one is complete (Ongoing's valid previous
            # states: TransactionState); its markers shown on some partitions only (fetched), the
            # rest outside the capture
            self._maybe_complete(prev, ts, r, force=True)
        self.cur = _Txn(self.tid, epoch, ts, self.timeout_ms)
        self.txns.append(self.cur)
        return self.cur

    def _boundary(self, ts: float) -> None:
        """A transaction boundary the capture shows (InitProducerId, an answered EndTxn): every
        registration after it is in the capture too."""
        if self.known_from is None:
            self.known_from = ts

    # -- events -------------------------------------------------------------------------------
    def event(self, ts: float, r: dict) -> None:
        ev = r["event"]
        if r["transactional_id"]:
            self.tid = r["transactional_id"]
        if ev in ("END_TXN", "WRITE_MARKERS") and r["result"] not in ("COMMIT", "ABORT"):
            return   # a result the decoder could not tell: nothing to replay
        handler = _HANDLERS.get(ev)
        if ev in CLIENT_EVENTS and not (r.get("api_version") is not None and r["api_version"] >= 4
                                        and ev == "ADD_PARTITIONS"):
            self.coord_conns.add(r["connection"])   # a version-2 leader's adds are not the client's
            if ev in ("INIT_PRODUCER_ID", "END_TXN"):
                self.since = (r["source"], r["position"])
        if handler is not None:
            errs = nonzero(r["error_codes"])
            if CONCURRENT in errs and ev != "WRITE_MARKERS":
                self.busy.append((ts, r["position"], ev))
            getattr(self, handler)(ts, r, errs)

    def _init(self, ts: float, r: dict, errs: list[int]) -> None:
        epoch = r["producer_epoch"]
        ok = not errs and epoch is not None and epoch >= 0 and r["error_codes"] is not None
        if r["timeout_ms"]:
            self.timeout_ms = r["timeout_ms"]
        if r.get("enable_2pc"):
            self.timeout_ms = NO_TIMEOUT_MS   # KIP-939: the coordinator never times it out
        keep = bool(r.get("keep_prepared_txn"))
        t = self.open_txn()
        # KIP-939: a recovery keeps (no fencing) the transaction its answer names (no answer: as asked)
        kept = t is not None and keep and (not ok or txn_kept.keeps(r, self.pid, t.epoch))
        text = (f"InitProducerId transactional id {r['transactional_id']!r}"
                + (" (two-phase commit, KIP-939)" if r.get("enable_2pc") else "")
                + (" keeping its prepared transaction" if kept else " (KeepPreparedTxn)" if keep else "")
                + (f" -> producer id {self.pid} epoch {epoch}" if ok else
                   f" -> error {','.join(map(str, errs))}" if errs else " -> no response"))
        t = None if kept else t
        if t is not None and (not ok or _newer(epoch, t.epoch)):
            if t.fence_request is None:
                t.fence_request, t.fence_row = ts, r
            text += f" (a new instance: fences the open transaction of epoch {t.epoch})"
        self.step(ts, r["position"], text)
        if not ok:
            return
        self.client_coordinator = self.seen_init = True
        self._boundary(ts)
        if t is not None and _newer(epoch, t.epoch):
            # TransactionCoordinator.handleInitProducerId aborted it before answering
            bumped = None if t.epoch is None else t.epoch + 1
            self.record("PrepareAbort", t.fence_request or ts, t.fence_row or r, t, epoch=bumped,
                        cause=COORDINATOR, detail="fencing")
            t.prepared, t.prepare_epoch = "ABORT", bumped
            self._maybe_complete(t, ts, r, force=True)
        if kept:
            # KIP-939: the new instance takes the prepared transaction over, still open
            txn_kept.take_over(self, self.cur, ts, r, (self.pid, epoch))
            return
        self.cur = None
        self.record("Empty", ts, r, _Txn(self.tid, epoch, ts, self.timeout_ms))

    _kept, _kept_end = txn_kept.kept, txn_kept.kept_end   # KIP-939: another producer id's recovery

    def _add(self, ts: float, r: dict, errs: list[int]) -> None:
        broker = r.get("api_version") is not None and r["api_version"] >= 4
        verify = r["result"] == "VERIFY"
        tps = self._answered(r)
        who = (f"leader {r.get('client_id')} " if broker else "") + ("verifies" if verify else "AddPartitionsToTxn")
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        self.step(ts, r["position"], f"epoch {r['producer_epoch']} {who} {r['partitions']}{err}")
        if broker:
            self.add_hosts.add(_host(r["connection"], 0))
            if verify:
                self.version = self.version or 1
            else:
                self.version, self.tv2_adds = 2, True
        else:
            self.tv1_adds = self.client_coordinator = True
            if r["error_codes"] is None:   # its answer not in the capture: it may have registered them
                self.asked.update((tp, self.since) for tp in partition_names(r["partitions"]))
        if not tps:
            return
        t = self.open_txn()
        epoch = r["producer_epoch"]
        if t is None or _newer(epoch, t.epoch):
            t = self._new(ts, epoch, r)
        new = [tp for tp in tps if tp not in t.partitions]
        if new:
            t.partitions.extend(new)
            self.record("Ongoing", ts, r, t)

    def _answered(self, r: dict) -> list[str]:
        """The partitions of an AddPartitionsToTxn its answer accepted."""
        if r["error_codes"] is None:
            return []
        errs = r.get("partition_errors")
        if errs:
            try:
                rows = json.loads(errs)
                return [f"{row[1]}-{row[2]}" for row in rows if len(row) > 3 and row[3] == 0]
            except (ValueError, TypeError, IndexError):
                pass
        return [] if nonzero(r["error_codes"]) else list(partition_names(r["partitions"]))

    def _offsets(self, ts: float, r: dict, errs: list[int]) -> None:
        what = "AddOffsetsToTxn" if r["event"] == "ADD_OFFSETS" else f"TxnOffsetCommit {r['partitions'] or ''}"
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        self.step(ts, r["position"], f"epoch {r['producer_epoch']} {what} group {r['group_id']}{err}")
        if errs or r["error_codes"] is None:
            return
        self.client_coordinator = self.client_coordinator or r["event"] == "ADD_OFFSETS"
        t = self.open_txn() or self._new(ts, r["producer_epoch"], r)
        if r["group_id"]:
            t.groups.add(r["group_id"])
            t.offsets_at = ts if t.offsets_at is None else t.offsets_at

    def _end(self, ts: float, r: dict, errs: list[int]) -> None:
        result = r["result"]
        v5 = r.get("api_version") is not None and r["api_version"] >= 5
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        new = ""
        if r["new_producer_epoch"] is not None and r["new_producer_epoch"] >= 0:
            new = f" -> epoch {r['new_producer_epoch']}"
            if r["new_producer_id"] not in (None, -1, self.pid):
                new = (f" -> producer id {r['new_producer_id']} epoch {r['new_producer_epoch']} (the epoch ran "
                       "out: the transactional id moves to a new producer id)")
        text = f"epoch {r['producer_epoch']} EndTxn {result}{err}{new}"
        if errs and set(errs) & set(FENCED):
            text += " (a zombie: its epoch was fenced)"
        self.step(ts, r["position"], text)
        if errs or r["error_codes"] is None:
            return
        self.client_coordinator = True
        self._boundary(ts)
        if v5:
            self.version = 2
        t = self.open_txn()
        if t is None:
            return   # an empty transaction's EndTxn, or a retry: nothing to end
        new_epoch = r["new_producer_epoch"]
        epoch = new_epoch if v5 and new_epoch is not None and new_epoch >= 0 else r["producer_epoch"]
        if r["new_producer_id"] not in (None, -1, self.pid):
            epoch = None if t.epoch is None else t.epoch + 1   # the markers carry the old id's last epoch
        t.prepared, t.prepare_epoch = result, epoch
        self.record("Prepare" + result.capitalize(), ts, r, t, epoch=epoch, cause="client", detail=f"EndTxn {result.lower()}")
        self._maybe_complete(t, ts, r)

    def _markers(self, ts: float, r: dict, errs: list[int]) -> None:
        writer = marker_writer(r.get("client_id"), r.get("admin_clients") or frozenset())
        tv = r.get("transaction_version")   # WriteTxnMarkers v2+ only (KIP-1228)
        if writer != ADMIN and tv is not None:
            # KIP-1228: the coordinator says the transaction's version
            self.version = 2 if tv >= 2 else (self.version or 1)
        answers = marker_answers(r)
        resp = r.get("response_ts")
        err = f" -> error {','.join(map(str, errs))}" if errs else ""
        by = f" from {r.get('client_id')!r} (not the coordinator: an admin)" if writer == ADMIN else ""
        self.step(ts, r["position"], f"WriteTxnMarkers {r['result']} epoch {r['producer_epoch']} coordinator epoch "
                                     f"{r['coordinator_epoch']} to {r['partitions']}{by}{err}")
        if writer != ADMIN:   # an admin's connection to a leader does not carry the coordinator's markers
            self.marker_hosts.add(_host(r["connection"], 1))
        t = self._marker_txn(ts, r) if writer != ADMIN else None
        tps = partition_names(r["partitions"])
        if t is None and writer != ADMIN and not errs and r["error_codes"] is not None and self._unowned(r):
            t = self._unseen_txn(ts, r, tps)
        for tp in tps:
            code = answers.get(tp, 0 if r["error_codes"] is not None and not errs else None)
            if code is None and errs and len(tps) == 1:
                code = errs[0]   # no per-partition answers joined: the one partition's is the request's
            if writer != ADMIN:
                self.marker_writes.append({"tp": tp, "epoch": r["producer_epoch"], "result": r["result"],
                                           "coordinator_epoch": r["coordinator_epoch"], "code": code, "ts": ts,
                                           "source": r["source"], "position": r["position"],
                                           "transaction_version": tv})
            if code not in (0, None):
                continue
            topic, _, part = tp.rpartition("-")
            self.markers.append({
                "topic": topic, "partition": int(part), "replica": None, "producer_id": self.pid,
                "producer_epoch": r["producer_epoch"], "base_offset": None, "last_offset": None,
                "is_transactional": True, "is_control": True, "control_type": r["result"],
                "coordinator_epoch": r["coordinator_epoch"], "base_timestamp_ms": int(ts * 1000),
                "max_timestamp_ms": int(ts * 1000), "source": r["source"], "position": r["position"],
                "writer": writer, "client_id": r.get("client_id"), "connection": r["connection"],
                "rank": (resp if resp is not None else ts, r["position"]), "sent": ts,
                "transaction_version": tv if writer != ADMIN else None})
            if t is not None and code == 0:
                if tp not in t.partitions and (tp.startswith("__consumer_offsets-") and t.groups
                                               or self._registered_unseen(t)):
                    # AddOffsetsToTxn named the group, the marker its partition; or registered
                    # before the capture began
                    t.partitions.append(tp)
                    txn_wire_order.offsets_listed(t, tp)
                t.marked.add(tp)
                if resp is not None and (t.marks_answered is None or resp > t.marks_answered):
                    t.marks_answered = resp
        if t is not None and t.prepared is None and not t.complete:
            self._coordinator_end(t, ts, r)
        if t is not None:
            self._maybe_complete(t, resp if resp is not None else ts, r)
        if self.held is not None:
            txn_wire_order.registered_after(self, self.held, resp if resp is not None else ts)

    def _registered_unseen(self, t: _Txn) -> bool:
        """Whether transaction `t` of a client that registers its partitions itself (version
        0/1: its AddPartitionsToTxn in the capture) began before the capture shows every
        registration (its first InitProducerId or answered EndTxn): it may hold partitions the
        capture never saw added. (A version-2 leader registers a partition with the data: a
        marker's partition no data of the capture shows is one written by an id no evidence
        names, or lost.)"""
        return self.tv1_adds and (self.known_from is None or t.start < self.known_from)

    def _unowned(self, r: dict) -> bool:
        """Whether no transaction of the replay may own these markers: the producer's latest one
        ended with the other result (with this one they are its own - on a partition whose
        registration the capture lost, at an epoch the replay did not expect, or re-sent)."""
        t = self.txns[-1] if self.txns else None
        return t is None or (t.prepared is not None and t.complete and t.prepared != r["result"])

    def _unseen_txn(self, ts: float, r: dict, tps: list[str]) -> _Txn:
        """The transaction a coordinator's markers end where the capture shows none (its data and
        registrations lost, or before the capture began): the coordinator writes markers only to
        end a transaction that registered these partitions - it is one, begun unseen."""
        epoch = r["producer_epoch"]
        if epoch is not None and (self.version == 2 or r["result"] == "ABORT" and self.top_epoch is not None
                                  and epoch > self.top_epoch):
            epoch -= 1   # the end's bump (version 2; a fencing abort's), not the data's epoch
        t = self._new(ts, epoch, r)
        t.partitions.extend(tp for tp in tps if tp not in t.partitions)
        return t

    def _marker_txn(self, ts: float, r: dict) -> _Txn | None:
        """The transaction a coordinator's markers end: the latest one ending with this result
        at this epoch whose markers are still out - under version 2, where every transaction
        has its own epoch, also one already taken as complete because the next transaction
        began (the client sends the next one's data once its EndTxn is answered, before the
        markers are written; under 0/1 one epoch spans transactions, so the marker is the next
        one's, unless none began since: the same end's markers to another broker, or re-sent
        after a failover) -, else the open one."""
        tps = set(partition_names(r["partitions"]))
        v2 = self.version == 2
        for t in reversed(self.txns[-16:]):   # markers follow their end within moments
            if (t.prepared == r["result"] and r["producer_epoch"] in txn_kept.marker_epochs(t)
                    and (v2 or not t.complete or t is self.txns[-1])
                    and (tps & set(t.partitions) or any(tp.startswith("__consumer_offsets-") for tp in tps)
                         or self._registered_unseen(t))):
                return txn_kept.marker_epoch(t, r["producer_epoch"])
        t = self.open_txn()
        return txn_wire_order.unended(self, t, ts, r, tps) or t

    def _coordinator_end(self, t: _Txn, ts: float, r: dict) -> None:
        """Markers with no EndTxn before them: the coordinator ended the transaction itself."""
        if txn_kept.session_end(t, r["result"]):
            cause, detail = "client", "the recovering session's end (KIP-939)"
        elif t.fence_request is not None:
            cause, detail = COORDINATOR, "fencing"
        elif not self.client_coordinator or txn_wire_cover.client_lost(self, r):
            cause, detail = None, None      # the client's requests (its EndTxn) are not in the capture
        elif r["result"] == "ABORT" and t.timeout_ms and (ts - t.start) * 1000 >= t.timeout_ms:
            cause, detail = COORDINATOR, "timeout"
        elif r["result"] == "ABORT":
            cause, detail = COORDINATOR, "timeout or fencing"
        else:
            cause, detail = None, None
        t.prepared, t.prepare_epoch = r["result"], r["producer_epoch"]
        # a fencing began with the new instance's InitProducerId (answered CONCURRENT_TRANSACTIONS
        # once the PrepareAbort was written), before its markers: as _init dates it
        at = t.fence_request if t.fence_request is not None and detail == "fencing" else ts
        self.record("Prepare" + r["result"].capitalize(), at, t.fence_row or r, t, epoch=r["producer_epoch"],
                    cause=cause, detail=detail)

    def _maybe_complete(self, t: _Txn, ts: float, r: dict, force: bool = False) -> None:
        """CompleteX once every registered partition's marker was answered (or, `force`, when a
        later answer shows the coordinator completed it: a new epoch after a fencing)."""
        if t.complete or t.prepared is None:
            return
        if force or (t.partitions and all(tp in t.marked for tp in t.partitions)):
            t.complete = True
            self.record("Complete" + t.prepared.capitalize(), ts, r, t, epoch=t.prepare_epoch)

    # -- data -------------------------------------------------------------------------------------
    def batch(self, ts: float, r) -> None:
        """A batch row: a served marker (txn_fetched), else a Produce - as its row dict, or as
        txn_wire_rows.produced_row made it (a tuple, the data row first)."""
        if type(r) is not tuple:
            if r.get("source_kind") == "fetch":
                return txn_fetched.fetched(self, ts, r)
            r = produced_row(self.pid, ts, r)
        row = r[0]
        tp = f"{row['topic']}-{row['partition']}"
        err = row["response_error"]
        if self.tid is None and r[3]:
            # a producer id whose first request is a Produce (TV2: EndTxn v5 gave it, KIP-890)
            self.tid = r[3]
        self.timeline.append((ts, row["position"], r))   # told in words only if a finding shows it (Story)
        if err not in (0, None):
            return
        key = (tp, row["producer_epoch"], row["base_sequence"])
        first = self._seen.get(key)
        if first is not None:   # a retry of a batch already counted: the broker stored it once
            if stored_by_retry(first, row):
                self.below.pop((row["topic"], row["partition"]), None)   # (txn_fetched._recent)
            return
        self._seen[key] = row
        if tp not in self.produce_hosts:
            self.produce_hosts[tp] = _host(row["connection"], 1)
        if self.version == 2 or not self.tv1_adds or self._asked(tp) or txn_wire_cover.add_lost(self, row, tp):
            self._implicit_add(ts, row, tp)   # its source, position and connection are the request's
        t = self.open_txn()
        self.data.append(row)
        self.data_by_tp.setdefault((row["topic"], row["partition"]), []).append(row)
        if t is not None and tp in t.partitions:
            t.rows.setdefault(tp, []).append(row)

    def _asked(self, tp: str) -> bool:
        """Whether the client asked to register `tp` since its last InitProducerId or EndTxn, and
        the capture holds no answer to it (lost, or in bytes the capture lost): the client sends
        a partition data only once its AddPartitionsToTxn succeeded (the Java client's
        TransactionManager, librdkafka's), so the data shows the registration was answered."""
        return tp in self.asked and self.asked[tp] == self.since

    def _implicit_add(self, ts: float, r: dict, tp: str) -> None:
        """Data on a partition whose registration the capture cannot show (a version-2 producer's
        leader registers it with the Produce - once per transaction and partition; a version 0/1
        producer's AddPartitionsToTxn before the capture or outside it) is in the producer's
        transaction all the same: its EndTxn ends it."""
        t = self.open_txn()
        epoch = r["producer_epoch"]
        if epoch is not None and self.top_epoch is not None and epoch < self.top_epoch \
                and (t is None or t.epoch != epoch):
            return   # an ended epoch's data (a zombie's) joins no transaction: nothing registers it
        if t is None and self._completing(r):
            return
        if t is None or _newer(epoch, t.epoch):
            t = self._new(ts, epoch, r)
        if tp not in t.partitions:
            t.partitions.append(tp)
            self.record("Ongoing", ts, r, t)

    def _completing(self, r: dict) -> bool:
        """Whether this write was answered while the coordinator was still writing the previous
        transaction's markers (one answered after it): no transaction begins before they are all
        written (AddPartitionsToTxn, and a version-2 leader's verification, get
        CONCURRENT_TRANSACTIONS until then), so it joins none - a write that raced the marker
        (its offset says on which side of it it landed: txn_parts.log_order) or one nothing
        registered."""
        prev = self.cur   # (maybe complete already: its markers are replayed at their requests)
        return (prev is not None and prev.prepared is not None and r["answered"] is not None
                and prev.marks_answered is not None and r["answered"] < prev.marks_answered)

    def facts(self) -> ProducerTxns:
        txn_fetched.stored_copies(self)
        txn_wire_order.order_races(self)
        txn_fetched.place(self)
        bounds = txn_fetched.ends_unseen(self)
        coverage = txn_wire_cover.WireCoverage(source="wire", coordinator=self.client_coordinator or self.tv2_adds,
                                registrations=self.tv2_adds if self.version == 2 else self.tv1_adds,
                                markers=bool(self.marker_hosts), slack_ms=0, feed=self)
        pt = assemble(self.pid, self.data + self.markers + bounds, self.records, coverage=coverage)
        pt.timeline = self.timeline
        pt.marker_writes, pt.busy = self.marker_writes, self.busy
        return pt


# each event's handler in WireFeed
_HANDLERS = {"INIT_PRODUCER_ID": "_init", "ADD_PARTITIONS": "_add", "ADD_OFFSETS": "_offsets",
             "TXN_OFFSET_COMMIT": "_offsets", "END_TXN": "_end", "WRITE_MARKERS": "_markers",
             txn_kept.KEEP_PREPARED: "_kept", txn_kept.KEPT_END: "_kept_end"}
