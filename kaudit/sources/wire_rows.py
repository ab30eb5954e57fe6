"""The rows of a capture, built as tuples in schema order and turned into Arrow column by column.

`WireRows` is the sink `Conversation`s report to. Most exchanges go through the generic path
(`protocol.wire.summary`'s flat facts as dicts, then one tuple per row); Produce and Fetch
exchanges - nearly all the rows of a busy capture - are turned into tuples straight from their
decoded bodies. Both paths give the same rows: the fast ones are the generic functions
(`frame_fields`, `produce_batches`, `fetch_partitions`, `batch_row`) written out for one API.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from kaudit import native
from kaudit.model import SCHEMAS
from kaudit.protocol.record_batch import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    LOG_OVERHEAD,
)
from kaudit.protocol.codecs import codec_name
from kaudit.protocol.wire import apis
from kaudit.protocol.wire.group_events import GROUP_APIS, group_events
from kaudit.protocol.wire.summary import error_codes, error_name, frame_fields
from kaudit.protocol.wire.summary_batches import (
    ISOLATION,
    _tkey,
    _topic,
    fetch_batches,
    fetch_partitions,
    metadata_brokers,
    omitted_fetch_parts,
    topic_names,
    txn_events,
)
from kaudit.sources.batch_table import batch_row
from kaudit.sources.conversation import endpoint

_NAMES = {k: tuple(s.names) for k, s in SCHEMAS.items()}
_NAME_SETS = {k: frozenset(v) for k, v in _NAMES.items()}
_STRINGS = {k: tuple(i for i, f in enumerate(s) if pa.types.is_string(f.type)) for k, s in SCHEMAS.items()}
_FRAME_NAMES = frozenset(SCHEMAS["frame"].names)
_TXN_NAMES = frozenset(SCHEMAS["txn_event"].names)
_PRODUCE_NAME = apis.api_name(apis.PRODUCE)
_FETCH_NAME = apis.api_name(apis.FETCH)
# the responses that map topic ids to names (KIP-516)
TOPIC_NAME_APIS = frozenset({apis.METADATA, apis.CREATE_TOPICS, apis.DESCRIBE_TOPIC_PARTITIONS})


def _string(v):
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, default=str)


def table_from_tuples(kind: str, rows: list[tuple]) -> pa.Table:
    """Arrow table of one kind from tuples in its schema's field order."""
    schema = SCHEMAS[kind]
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    # tuples shorter than the schema (a compiled core built before a field was added): nulls
    columns += [(None,) * len(rows)] * (len(schema) - len(columns))
    return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema)], schema=schema)


# The kinds nearly every row of a busy capture is of: with the compiled core they are built
# column by column in C (kaudit/sources/_ccolumns.pyx: `append` takes the same tuples as a list)
COLUMNAR = frozenset({"frame", "batch", "fetch_partition"})


def rows_table(kind: str, rows) -> pa.Table:
    """The table of a kind's rows: a list of tuples, or a compiled column builder."""
    return table_from_tuples(kind, rows) if type(rows) is list else rows.table()


_ERROR_NAMES: dict = {}


def _error_names(codes: str) -> str:
    out = []
    for c in codes.split(","):
        name = _ERROR_NAMES.get(c)
        if name is None:
            name = _ERROR_NAMES[c] = error_name(int(c))
        out.append(name)
    return ",".join(out)


# (magic, attributes) -> (codec, timestamp_type, is_transactional, is_control, has_delete_horizon),
# the derived fields of record_batch.Batch
_ATTRS: dict = {}


def _attr_facts(magic: int, attributes: int) -> tuple:
    facts = _ATTRS.get((magic, attributes))
    if facts is None:
        v2 = magic >= 2
        facts = _ATTRS[(magic, attributes)] = (
            codec_name(attributes & 7),
            "none" if magic == 0 else ("log_append" if attributes & ATTR_TIMESTAMP_TYPE else "create"),
            v2 and bool(attributes & ATTR_TRANSACTIONAL), v2 and bool(attributes & ATTR_CONTROL),
            v2 and bool(attributes & ATTR_DELETE_HORIZON))
    return facts


def _batch_head(b) -> tuple:
    """batch_row's fields from base_offset to partition_leader_epoch, in BATCH order."""
    codec, ts_type, txn, control, horizon = _attr_facts(b.magic, b.attributes)
    lod = b.last_offset_delta
    return (b.base_offset, b.base_offset + lod, b.batch_length + LOG_OVERHEAD, b.magic, b.crc, b.crc_ok,
            b.attributes, codec, ts_type, txn, control, horizon, b.control_type, b.coordinator_epoch,
            b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.record_count,
            b.base_timestamp_ms, b.max_timestamp_ms, b.partition_leader_epoch)


_PERR_JSON: dict = {}


def _partition_errors_json(errs: list) -> str:
    """json.dumps(errs, default=str) for [(None, topic, partition, error_code)]."""
    parts = []
    for e in errs:
        s = _PERR_JSON.get(e)
        if s is None:
            s = json.dumps(e, default=str)
            if len(_PERR_JSON) < 65536:
                _PERR_JSON[e] = s
        parts.append(s)
    return "[" + ", ".join(parts) + "]"


class WireRows:
    """The sink conversations report to; keeps rows as tuples and hands out tables."""

    def __init__(self, source: str):
        self.source = source
        self.rows: dict[str, list[tuple]] = {}
        self.count = 0
        c = native.module("kaudit.sources._ccolumns")
        self.columns = None if c is None else c.Columns  # builders of the COLUMNAR kinds

    def _list(self, kind: str) -> list:
        """The rows of `kind` so far (a list, or a column builder with the same append)."""
        rows = self.rows.get(kind)
        if rows is None:
            rows = self.rows[kind] = ([] if self.columns is None or kind not in COLUMNAR
                                      else self.columns(kind, SCHEMAS[kind]))
        return rows

    def add(self, kind: str, row: dict) -> None:
        """One row from a dict: missing fields are null, unknown ones rejected."""
        if not row.keys() <= _NAME_SETS[kind]:
            raise KeyError(f"{kind} row has fields outside its schema: {sorted(set(row) - _NAME_SETS[kind])}")
        values = list(map(row.get, _NAMES[kind]))
        for i in _STRINGS[kind]:
            v = values[i]
            if v is not None and not isinstance(v, str):
                values[i] = _string(v)
        self._list(kind).append(tuple(values))
        self.count += 1

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        rows, self.rows, self.count = self.rows, {}, 0
        for kind, items in rows.items():
            yield kind, rows_table(kind, items)

    # ---- the sink protocol of Conversation ---------------------------------------------------

    def issue(self, conv, frame, issue, length, stream_offset, message, after=None) -> None:
        self.add("decode_issue", {"source": self.source, "position": frame, "issue": issue,
                                  "length": length, "message": message, "connection": conv.name,
                                  "stream_offset": stream_offset, "after_position": after})

    def exchange(self, conv, x) -> None:
        req, resp = x.request, x.response
        if req is not None and req.body is not None:
            if req.api_key == apis.PRODUCE:
                return self._produce(conv, x, req, resp)
            if req.api_key == apis.FETCH and resp is not None and resp.body is not None:
                return self._fetch(conv, x, req, resp)
        f = frame_fields(req, resp)
        if req is None:
            f["correlation_id"] = x.correlation_id
        latency = None
        if x.request_ts is not None and x.response_ts is not None:
            latency = round((x.response_ts - x.request_ts) * 1000.0, 3)
        row = {k: v for k, v in f.items() if k in _FRAME_NAMES}
        if f.get("error_codes"):
            row["error_names"] = _error_names(f["error_codes"])
        row.update(source=self.source, connection=conv.name, request_frame=x.request_frame,
                   response_frame=x.response_frame, request_ts=x.request_ts,
                   response_ts=x.response_ts, latency_ms=latency, request_size=x.request_size,
                   response_size=x.response_size, complete=x.complete, decode_error=x.decode_error)
        self.add("frame", row)
        if req is None:
            return
        ctx = {"connection": conv.name, "request_ts": x.request_ts, "response_ts": x.response_ts}
        # Produce with a body went the fast path; without one it has no batches. A Fetch comes
        # here when its request body or its response body did not decode.
        if req.api_key == apis.FETCH and resp is not None:
            parts = fetch_partitions(req, resp)
            for p in parts:
                self._fetch_partition(p, x, ctx)
            for b in fetch_batches(req, resp, parts):
                self._fetch_batch(b, x.response_frame, ctx)
        if resp is not None and resp.body is not None and req.api_key in TOPIC_NAME_APIS:
            names = topic_names(resp)
            cluster = resp.body.get("cluster_id") if req.api_key == apis.METADATA else None
            brokers = metadata_brokers(resp) if req.api_key == apis.METADATA else None
            if (cluster or brokers) and not names:
                names = {None: None}   # the cluster alone (Metadata v0-v9 name no topic ids)
            for topic_id, topic in names.items():
                # the brokers on the answer's first row only: a big cluster's list, once per answer
                self._list("topic_name").append((self.source, conv.name, x.response_frame, x.response_ts,
                                                 req.api_key, topic_id, topic, cluster or None, brokers))
                self.count += 1
                brokers = None
        for ev in txn_events(req, resp):
            ev = {k: v for k, v in ev.items() if k in _TXN_NAMES}
            ev.update(source=self.source, connection=conv.name, position=x.request_frame, ts=x.request_ts)
            self.add("txn_event", ev)
        if req.api_key in GROUP_APIS:
            for ev in group_events(req, resp):
                ev.update(source=self.source, connection=conv.name, position=x.request_frame,
                          ts=x.request_ts, response_ts=x.response_ts)
                self.add("group_event", ev)

    def _fetch_batch(self, b: dict, position, ctx: dict) -> None:
        place = {"source": self.source, "replica": None, "log_dir": None,
                 "topic": b.get("topic"), "partition": b.get("partition"), "topic_id": b.get("topic_id")}
        row = batch_row(b["batch"], place, "fetch")
        row["position"] = position
        row.update(ctx, api_version=b.get("api_version"), correlation_id=b.get("correlation_id"),
                   client_id=b.get("client_id"), transactional_id=b.get("transactional_id"),
                   acks=b.get("acks"))
        row["response_error"] = b.get("error_code")
        self.add("batch", row)

    def _fetch_partition(self, p: dict, x, ctx: dict) -> None:
        aborted = p.get("aborted_transactions")
        self.add("fetch_partition", {
            "source": self.source, "connection": ctx["connection"], "position": x.response_frame,
            "request_ts": x.request_ts, "response_ts": x.response_ts,
            "api_version": p.get("api_version"), "correlation_id": p.get("correlation_id"),
            "client_id": p.get("client_id"),
            "topic": p.get("topic"), "topic_id": p.get("topic_id"),
            "partition": p.get("partition"), "isolation_level": p.get("isolation_level"),
            "replica_id": p.get("replica_id"), "fetch_offset": p.get("fetch_offset"),
            "error_code": p.get("error_code"), "high_watermark": p.get("high_watermark"),
            "last_stable_offset": p.get("last_stable_offset"),
            "log_start_offset": p.get("log_start_offset"),
            "aborted_transactions": None if aborted is None else ",".join(f"{pid}@{off}" for pid, off in aborted),
            "preferred_read_replica": p.get("preferred_read_replica"),
            "record_set_size": p.get("record_set_size"), "batch_count": len(p.get("batches") or ()),
            "truncated_bytes": p.get("truncated_bytes"),
        })

    # ---- Produce and Fetch, straight to tuples -------------------------------------------------

    def _frame(self, conv, x, msg, error_codes_, throttle, decoder, acks, timeout_ms, txn_id, pid,
               epoch, partitions, partition_errors, isolation) -> None:
        """A frame row of a Produce or Fetch exchange (FRAME order)."""
        latency = None
        if x.request_ts is not None and x.response_ts is not None:
            latency = round((x.response_ts - x.request_ts) * 1000.0, 3)
        key = msg.api_key
        self._list("frame").append((
            self.source, conv.name, x.request_frame, x.response_frame, x.request_ts, x.response_ts,
            latency, x.request_size, x.response_size, key,
            _PRODUCE_NAME if key == apis.PRODUCE else _FETCH_NAME, msg.api_version,
            msg.correlation_id, msg.client_id, error_codes_,
            _error_names(error_codes_) if error_codes_ else None, txn_id, pid, epoch, acks,
            timeout_ms, None, partitions, None, None, None, None, None, None, None, isolation,
            None, None, throttle, None,
            None if partition_errors is None else _partition_errors_json(partition_errors),
            None, None, decoder, x.complete, x.decode_error))
        self.count += 1

    def _produce(self, conv, x, request, response) -> None:
        req = request.body
        resp = response.body if response is not None else None
        codes = throttle = None
        if resp is not None:
            codes = ",".join(str(c) for c in error_codes(resp, _schema(response)))
            throttle = resp.get("throttle_time_ms")
        # the answers: partition_errors of the frame, response fields of the batches
        answers = {}
        errs = []
        for t in (resp or _EMPTY).get("responses") or ():
            topic, tkey = _topic(t), _tkey(t)
            for p in t.get("partition_responses") or ():
                index = p.get("index")
                errs.append((None, topic, index, p.get("error_code")))
                answers[(tkey, index)] = p
        acks, timeout_ms, txn_id = req.get("acks"), req.get("timeout_ms"), req.get("transactional_id")
        source, name = self.source, conv.name
        position, req_ts, resp_ts = x.request_frame, x.request_ts, x.response_ts
        version, corr, client_id = request.api_version, request.correlation_id, request.client_id
        self._list("frame")  # kinds in the order the generic path adds them: frame, batch
        batches = None
        tps = []
        pid = epoch = None
        n = 0
        for t in req.get("topic_data") or ():
            tname = _topic(t)
            topic, topic_id = t.get("name"), t.get("topic_id")
            tkey = _tkey(t)
            for p in t.get("partition_data") or ():
                index = p.get("index")
                tps.append(f"{tname}-{index}")
                rs = p.get("records")
                if rs is None or not rs.batches:
                    continue
                if pid is None:
                    first = rs.batches[0]
                    pid, epoch = first.producer_id, first.producer_epoch
                a = answers.get((tkey, index), _EMPTY)
                error, base = a.get("error_code"), a.get("base_offset")
                if batches is None:
                    batches = self._list("batch")
                for b in rs.batches:
                    batches.append(("produce", source, position, None, None, topic, index)
                                   + _batch_head(b)
                                   + (name, version, corr, client_id, txn_id, acks, req_ts, resp_ts,
                                      error, base, topic_id))
                    n += 1
                    if base is not None and base >= 0:
                        base = base + b.last_offset_delta + 1
        self.count += n
        self._frame(conv, x, request, codes, throttle, request.decoder, acks, timeout_ms, txn_id,
                    pid, epoch, ",".join(tps) if tps else None, errs or None, None)

    def _fetch(self, conv, x, request, response) -> None:
        req, resp = request.body, response.body
        codes = ",".join(str(c) for c in error_codes(resp, _schema(response)))
        offsets = {}
        tps = []
        for t in req.get("topics") or ():
            tname, tkey = _topic(t), _tkey(t)
            for p in t.get("partitions") or ():
                index = p.get("partition")
                tps.append(f"{tname}-{index}")
                offsets[(tkey, index)] = p.get("fetch_offset")
        isolation = ISOLATION.get(req.get("isolation_level", 0))
        replica_id = req.get("replica_id")
        source, name = self.source, conv.name
        position, req_ts, resp_ts = x.response_frame, x.request_ts, x.response_ts
        version, corr, client_id = request.api_version, request.correlation_id, request.client_id
        self._list("frame")  # kinds in the order the generic path adds them
        parts = None
        batches = None
        n = 0
        for t in resp.get("responses") or ():
            topic, topic_id = t.get("topic"), t.get("topic_id")
            tkey = _tkey(t)
            for p in t.get("partitions") or ():
                aborted = p.get("aborted_transactions")
                index = p.get("partition_index")
                rs = p.get("records")
                error = p.get("error_code")
                if parts is None:
                    parts = self._list("fetch_partition")
                parts.append((
                    source, name, position, req_ts, resp_ts, version, corr, client_id, topic, index,
                    isolation, replica_id, offsets.get((tkey, index)), error,
                    p.get("high_watermark"), p.get("last_stable_offset"), p.get("log_start_offset"),
                    None if aborted is None else ",".join(
                        f"{a.get('producer_id')}@{a.get('first_offset')}" for a in aborted),
                    p.get("preferred_read_replica"),
                    None if rs is None else rs.size, 0 if rs is None else len(rs.batches),
                    0 if rs is None else rs.truncated, topic_id))
                n += 1
                if rs is None or not rs.batches:
                    continue
                if batches is None:
                    batches = self._list("batch")
                for b in rs.batches:
                    batches.append(("fetch", source, position, None, None, topic, index)
                                   + _batch_head(b)
                                   + (name, version, corr, client_id, None, None, req_ts, resp_ts,
                                      error, None, topic_id))
                    n += 1
        answered = {(_tkey(t), p.get("partition_index")) for t in resp.get("responses") or ()
                    for p in t.get("partitions") or ()}
        for t, index, offset in omitted_fetch_parts(req, resp, answered, offsets):
            if parts is None:
                parts = self._list("fetch_partition")
            parts.append((source, name, position, req_ts, resp_ts, version, corr, client_id, t.get("topic"), index,
                          isolation, replica_id, offset, None, None, None, None, None, None, None, 0, 0,
                          t.get("topic_id")))
            n += 1
        self.count += n
        self._frame(conv, x, request, codes, resp.get("throttle_time_ms"), request.decoder, None,
                    req.get("max_wait_ms"), None, None, None, ",".join(tps) if tps else None, None,
                    ISOLATION.get(req.get("isolation_level", 0)) if req else None)

    def connection(self, conv, opened, closed, stats) -> None:
        c = conv.client_dir or 0
        s = 1 - c
        self.add("connection", {
            "source": self.source, "connection": conv.name, "conn_id": conv.conn_id,
            "client": endpoint(*conv.client), "server": endpoint(*conv.server),
            "protocol": conv.protocol, "syn_seen": conv.syn_seen,
            "close_reason": closed.reason if closed else None,
            "first_frame": opened.frame, "last_frame": closed.frame if closed else None,
            "first_ts": opened.ts, "last_ts": closed.ts if closed else None,
            "packets": sum(stats.packets) if stats else None,
            "bytes_to_server": stats.data_bytes[c] if stats else None,
            "bytes_to_client": stats.data_bytes[s] if stats else None,
            "gaps": sum(stats.gaps) if stats else None,
            "gap_bytes": sum(stats.gap_bytes) if stats else None,
            "retransmissions": sum(stats.retransmissions) if stats else None,
            "conflicts": sum(stats.conflicts) if stats else None,
            "requests": conv.requests, "responses": conv.responses, "unanswered": conv.unanswered,
        })


_EMPTY: dict = {}


def _schema(response):
    """summary._schema: the kio class a response body was read with (None: walk the dict)."""
    if response.decoder != "kio" or response.api_key == apis.SASL_AUTHENTICATE:
        return None
    return apis.kio_class(response.api_key, response.body_version, "response")
