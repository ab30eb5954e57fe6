"""Flat facts from a decoded (request, response) pair, for the rows of docs/architecture.md §3.

- `frame_fields(request, response)`: one dict with the keys `FRAME_FIELDS` (None where a field
  does not apply), for a `frame` row;
- `produce_partitions` / `produce_batches`: each batch of a Produce request with its request and
  response context, for `batch` rows (source_kind "produce");
- `fetch_partitions` / `fetch_batches`: the same for Fetch responses (source_kind "fetch");
- `txn_events(request, response)`: the transaction facts of producer and transaction APIs, for
  `txn_event` rows;
- `topic_names(metadata_response)`: topic id -> name, to name the topics of Fetch v13+ and
  Produce v13+ (which carry topic ids only).

Either side may be None (a request without a response, a response whose request is not in the
capture: pass a `Request`-less call with the response only when its api key is known).
"""

from __future__ import annotations

from kaudit.protocol.wire import apis
from kaudit.protocol.wire.summary_batches import (
    ISOLATION,
    _iter_parts,
    _topic,
    error_codes,
    fetch_batches,
    fetch_partitions,
    produce_batches,
    produce_partitions,
    topic_names,
    txn_events,
)

# error_codes: distinct non-zero codes of the response, comma-joined ("" none, None no response)
# partitions: "topic-partition" list, comma-joined (topic id when a v13+ message has no name)
# producer_id/_epoch: the producer the exchange is about (InitProducerId: the answer's, else the
#   request's, v3+ KIP-360, when the answer names none; Produce:
#   its batches'; EndTxn/AddPartitions/AddOffsets/TxnOffsetCommit: the request's)
# committed: EndTxn's request flag; WriteTxnMarkers: True/False when all markers agree
# new_producer_id/_epoch: EndTxn v5+ answer (the id and bumped epoch for the next transaction)
# coordinator: "node@host:port" list; coordinator_key_type 0 group, 1 transaction
# markers: [(producer_id, producer_epoch, "COMMIT"|"ABORT", coordinator_epoch, topic,
#   partition, error_code or None)]
# partition_errors: [(transactional_id, topic, partition, error_code)] (Produce,
#   AddPartitionsToTxn, TxnOffsetCommit)
# producers: [(topic, partition, producer_id, producer_epoch, last_sequence, last_timestamp,
#   coordinator_epoch, current_txn_start_offset)] (DescribeProducers)
# transactions: [(transactional_id, producer_id, producer_epoch, verify_only | state,
#   partitions)] (AddPartitionsToTxn v4+, DescribeTransactions, ListTransactions)
# body_decoder: "kio" | "hand" | "opaque" for the request body
FRAME_FIELDS = (
    "api_key", "api_name", "api_version", "correlation_id", "client_id", "error_codes",
    "transactional_id", "producer_id", "producer_epoch", "acks", "timeout_ms",
    "transaction_timeout_ms", "partitions", "committed", "new_producer_id",
    "new_producer_epoch", "group_id", "coordinator_key", "coordinator_key_type",
    "coordinator", "isolation_level", "sasl_mechanism", "sasl_username", "throttle_time_ms",
    "markers", "partition_errors", "producers", "transactions", "body_decoder",
)


def error_name(code: int) -> str:
    """Kafka's name for an error code ("INVALID_PRODUCER_EPOCH"), or "UNKNOWN(<code>)"."""
    from kio.schema.errors import ErrorCode  # on first use: kio's runtime types take a while to import

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN({code})"


def _tp(topic, partition) -> str:
    return f"{topic}-{partition}"


def _join(items) -> str | None:
    items = list(items)
    return ",".join(items) if items else None


def _body(msg):
    return None if msg is None else msg.body


# ---- frame ---------------------------------------------------------------------------------


def frame_fields(request, response=None) -> dict:
    """The flat `frame` row facts of a request/response pair (see FRAME_FIELDS)."""
    out = dict.fromkeys(FRAME_FIELDS)
    msg = request if request is not None else response
    if msg is None:
        return out
    key, version = msg.api_key, msg.api_version
    out.update(api_key=key, api_name=apis.api_name(key), api_version=version,
               correlation_id=msg.correlation_id)
    if request is not None:
        out["client_id"] = request.client_id
        out["body_decoder"] = request.decoder
    req, resp = _body(request), _body(response)
    if resp is not None:
        out["error_codes"] = ",".join(str(c) for c in error_codes(resp, _schema(response)))
        out["throttle_time_ms"] = resp.get("throttle_time_ms")
    handler = _FRAME_HANDLERS.get(key)
    if handler is not None:
        handler(out, req or {}, resp or {}, version)
    return out


def _schema(response):
    """The kio class a response body was read with, when its dict is exactly that schema's
    (SaslAuthenticate bodies gain redaction facts after decoding)."""
    if response.decoder != "kio" or response.api_key == apis.SASL_AUTHENTICATE:
        return None
    return apis.kio_class(response.api_key, response.body_version, "response")


def _produce_frame(out, req, resp, version):
    out["acks"] = req.get("acks")
    out["timeout_ms"] = req.get("timeout_ms")
    out["transactional_id"] = req.get("transactional_id")
    tps = []
    for topic, part in _iter_parts(req.get("topic_data"), "partition_data"):
        tps.append(_tp(_topic(topic), part.get("index")))
        rs = part.get("records")
        if rs is not None and out["producer_id"] is None:
            for b in rs.batches:
                out["producer_id"], out["producer_epoch"] = b.producer_id, b.producer_epoch
                break
    out["partitions"] = _join(tps)
    errs = []
    for topic, part in _iter_parts(resp.get("responses"), "partition_responses"):
        errs.append((None, _topic(topic), part.get("index"), part.get("error_code")))
    out["partition_errors"] = errs or None


def _fetch_frame(out, req, resp, version):
    out["isolation_level"] = ISOLATION.get(req.get("isolation_level", 0)) if req else None
    out["timeout_ms"] = req.get("max_wait_ms")
    out["partitions"] = _join(_tp(_topic(t), p.get("partition"))
                              for t, p in _iter_parts(req.get("topics"), "partitions"))


def _init_producer_id_frame(out, req, resp, version):
    out["transactional_id"] = req.get("transactional_id")
    out["transaction_timeout_ms"] = req.get("transaction_timeout_ms")
    pid, asked = (resp.get("producer_id") if resp else None), req.get("producer_id")
    if resp and not (asked is not None and asked >= 0 and (pid is None or pid < 0)):
        out["producer_id"], out["producer_epoch"] = pid, resp.get("producer_epoch")
    else:  # v3+ requests carry the current id and epoch (-1 when none, KIP-360): no answer, or an
        # error answer naming no producer id, is about the producer that asked
        out["producer_id"], out["producer_epoch"] = req.get("producer_id"), req.get("producer_epoch")


def _add_partitions_frame(out, req, resp, version):
    txns = []
    if "transactions" in req:  # v4+: brokers verifying, several transactions per request
        for t in req.get("transactions") or ():
            tps = [_tp(tp.get("name"), p) for tp in t.get("topics") or ()
                   for p in tp.get("partitions") or ()]
            txns.append((t.get("transactional_id"), t.get("producer_id"), t.get("producer_epoch"),
                         t.get("verify_only"), _join(tps)))
    elif req:
        tps = [_tp(tp.get("name"), p) for tp in req.get("v3_and_below_topics") or ()
               for p in tp.get("partitions") or ()]
        txns.append((req.get("v3_and_below_transactional_id"),
                     req.get("v3_and_below_producer_id"),
                     req.get("v3_and_below_producer_epoch"), False, _join(tps)))
    if len(txns) == 1:
        out["transactional_id"], out["producer_id"], out["producer_epoch"], _, out["partitions"] = \
            txns[0]
    out["transactions"] = txns or None
    errs = []
    for t in resp.get("results_by_transaction") or ():
        for tr in t.get("topic_results") or ():
            for p in tr.get("results_by_partition") or ():
                errs.append((t.get("transactional_id"), tr.get("name"), p.get("partition_index"),
                             p.get("partition_error_code")))
    for tr in resp.get("results_by_topic_v3_and_below") or ():
        for p in tr.get("results_by_partition") or ():
            errs.append((out["transactional_id"], tr.get("name"), p.get("partition_index"),
                         p.get("partition_error_code")))
    out["partition_errors"] = errs or None


def _txn_common(out, req):
    out["transactional_id"] = req.get("transactional_id")
    out["producer_id"] = req.get("producer_id")
    out["producer_epoch"] = req.get("producer_epoch")
    out["group_id"] = req.get("group_id")


def _add_offsets_frame(out, req, resp, version):
    _txn_common(out, req)


def _end_txn_frame(out, req, resp, version):
    _txn_common(out, req)
    out["committed"] = req.get("committed")
    if version >= 5 and resp:
        out["new_producer_id"] = resp.get("producer_id")
        out["new_producer_epoch"] = resp.get("producer_epoch")


def _txn_offset_commit_frame(out, req, resp, version):
    _txn_common(out, req)
    out["partitions"] = _join(_tp(t.get("name"), p.get("partition_index"))
                              for t, p in _iter_parts(req.get("topics"), "partitions"))
    errs = [(out["transactional_id"], t.get("name"), p.get("partition_index"), p.get("error_code"))
            for t, p in _iter_parts(resp.get("topics"), "partitions")]
    out["partition_errors"] = errs or None


def _write_markers_frame(out, req, resp, version):
    results = {}
    for m in resp.get("markers") or ():
        for t, p in _iter_parts(m.get("topics"), "partitions"):
            key = (m.get("producer_id"), t.get("name"), p.get("partition_index"))
            results[key] = p.get("error_code")
    markers = []
    for m in req.get("markers") or ():
        result = "COMMIT" if m.get("transaction_result") else "ABORT"
        for t in m.get("topics") or ():
            for p in t.get("partition_indexes") or ():
                err = results.get((m.get("producer_id"), t.get("name"), p))
                markers.append((m.get("producer_id"), m.get("producer_epoch"), result,
                                m.get("coordinator_epoch"), t.get("name"), p, err))
    out["markers"] = markers or None
    pids = {(m[0], m[1]) for m in markers}
    if len(pids) == 1:
        out["producer_id"], out["producer_epoch"] = next(iter(pids))
        results_set = {m[2] for m in markers}
        if len(results_set) == 1:
            out["committed"] = results_set.pop() == "COMMIT"
    out["partitions"] = _join(_tp(m[4], m[5]) for m in markers)


def _find_coordinator_frame(out, req, resp, version):
    out["coordinator_key_type"] = req.get("key_type", 0)
    keys = req.get("coordinator_keys") if "coordinator_keys" in req else [req.get("key")]
    keys = [k for k in keys or () if k is not None]
    out["coordinator_key"] = _join(keys)
    if resp.get("coordinators") is not None:
        coords = resp["coordinators"]
    elif resp:
        coords = [resp]
    else:
        coords = []
    out["coordinator"] = _join(f"{c.get('node_id')}@{c.get('host')}:{c.get('port')}"
                               for c in coords if c.get("node_id", -1) >= 0)
    if out["coordinator_key_type"] == 1 and len(keys) == 1:
        out["transactional_id"] = keys[0]
    elif out["coordinator_key_type"] == 0 and len(keys) == 1:
        out["group_id"] = keys[0]


def _offset_commit_frame(out, req, resp, version):
    out["group_id"] = req.get("group_id")
    out["partitions"] = _join(_tp(t.get("name"), p.get("partition_index"))
                              for t, p in _iter_parts(req.get("topics"), "partitions"))


def _offset_fetch_frame(out, req, resp, version):
    groups = req.get("groups")
    if groups:
        out["group_id"] = _join(g.get("group_id") for g in groups)
    else:
        out["group_id"] = req.get("group_id")


def _describe_producers_frame(out, req, resp, version):
    producers = []
    for t, p in _iter_parts(resp.get("topics"), "partitions"):
        for a in p.get("active_producers") or ():
            producers.append((t.get("name"), p.get("partition_index"), a.get("producer_id"),
                              a.get("producer_epoch"), a.get("last_sequence"),
                              a.get("last_timestamp"), a.get("coordinator_epoch"),
                              a.get("current_txn_start_offset")))
    out["producers"] = producers or None
    out["partitions"] = _join(_tp(t.get("name"), p)
                              for t in req.get("topics") or ()
                              for p in t.get("partition_indexes") or ())


def _describe_transactions_frame(out, req, resp, version):
    txns = []
    for s in resp.get("transaction_states") or ():
        tps = [_tp(t.get("topic"), p) for t in s.get("topics") or () for p in t.get("partitions") or ()]
        txns.append((s.get("transactional_id"), s.get("producer_id"), s.get("producer_epoch"),
                     s.get("transaction_state"), _join(tps)))
    out["transactions"] = txns or None
    ids = req.get("transactional_ids") or []
    if len(ids) == 1:
        out["transactional_id"] = ids[0]
    if len(txns) == 1:
        out["producer_id"], out["producer_epoch"] = txns[0][1], txns[0][2]


def _list_transactions_frame(out, req, resp, version):
    txns = [(s.get("transactional_id"), s.get("producer_id"), None, s.get("transaction_state"), None)
            for s in resp.get("transaction_states") or ()]
    out["transactions"] = txns or None


def _sasl_handshake_frame(out, req, resp, version):
    out["sasl_mechanism"] = req.get("mechanism")


def _sasl_authenticate_frame(out, req, resp, version):
    facts = req.get("sasl") or {}
    out["sasl_mechanism"] = facts.get("mechanism")
    out["sasl_username"] = facts.get("username")


_FRAME_HANDLERS = {
    apis.PRODUCE: _produce_frame,
    apis.FETCH: _fetch_frame,
    apis.INIT_PRODUCER_ID: _init_producer_id_frame,
    apis.ADD_PARTITIONS_TO_TXN: _add_partitions_frame,
    apis.ADD_OFFSETS_TO_TXN: _add_offsets_frame,
    apis.END_TXN: _end_txn_frame,
    apis.TXN_OFFSET_COMMIT: _txn_offset_commit_frame,
    apis.WRITE_TXN_MARKERS: _write_markers_frame,
    apis.FIND_COORDINATOR: _find_coordinator_frame,
    apis.OFFSET_COMMIT: _offset_commit_frame,
    apis.OFFSET_FETCH: _offset_fetch_frame,
    apis.DESCRIBE_PRODUCERS: _describe_producers_frame,
    apis.DESCRIBE_TRANSACTIONS: _describe_transactions_frame,
    apis.LIST_TRANSACTIONS: _list_transactions_frame,
    apis.SASL_HANDSHAKE: _sasl_handshake_frame,
    apis.SASL_AUTHENTICATE: _sasl_authenticate_frame,
}


__all__ = [
    "FRAME_FIELDS", "ISOLATION", "error_codes", "error_name", "fetch_batches",
    "fetch_partitions", "frame_fields", "produce_batches", "produce_partitions", "topic_names",
    "txn_events",
]
