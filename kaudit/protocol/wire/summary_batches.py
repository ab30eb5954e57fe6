"""Per-partition and per-batch context of Produce requests and Fetch responses, transaction
events, and topic ids from Metadata (the second half of `summary`)."""

from __future__ import annotations

from kaudit.protocol.wire import apis

ISOLATION = {0: "read_uncommitted", 1: "read_committed"}


def error_codes(body: dict | None) -> list[int]:
    """Every distinct non-zero error code in a response body, in order of appearance
    (fields named `error_code` or ending in `_error_code`)."""
    seen: dict[int, None] = {}
    if body is not None:
        _collect_errors(body, seen)
    return list(seen)


def _collect_errors(node, seen: dict) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, int) and (k == "error_code" or k.endswith("_error_code")):
                if v:
                    seen.setdefault(v, None)
            elif isinstance(v, (dict, list)):
                _collect_errors(v, seen)
    elif isinstance(node, list):
        for v in node:
            if isinstance(v, (dict, list)):
                _collect_errors(v, seen)


def _iter_parts(topics, key):
    for t in topics or ():
        for p in t.get(key) or ():
            yield t, p


def _topic(t: dict):
    """A topic entry's name (`name` or `topic`), else its topic id (v13+ carry ids only)."""
    name = t.get("name", t.get("topic"))
    return name if name is not None else t.get("topic_id")


def _tkey(t: dict):
    name = t.get("name", t.get("topic"))
    return name if name is not None else ("id", t.get("topic_id"))


def _msg_context(msg) -> dict:
    if msg is None:
        return {"api_version": None, "correlation_id": None, "client_id": None}
    return {"api_version": msg.api_version, "correlation_id": msg.correlation_id,
            "client_id": getattr(msg, "client_id", None)}


def _record_set_fields(rs) -> dict:
    if rs is None:
        return {"record_set_size": None, "batches": [], "truncated_bytes": 0,
                "record_set_error": None}
    return {"record_set_size": rs.size, "batches": rs.batches, "truncated_bytes": rs.truncated,
            "record_set_error": rs.error}


# ---- Produce -------------------------------------------------------------------------------


def produce_partitions(request, response=None) -> list[dict]:
    """One dict per partition of a Produce request, with its response (when given):
    topic, topic_id, partition, acks, timeout_ms, transactional_id, api_version,
    correlation_id, client_id, record_set_size, batches ([Batch]), truncated_bytes,
    record_set_error (a DecodeError or None), response_error, response_base_offset,
    response_log_append_time_ms, response_log_start_offset, response_record_errors."""
    req = request.body if request is not None else None
    if not req:
        return []
    answers = {}
    resp = response.body if response is not None and response.body else {}
    for t, p in _iter_parts(resp.get("responses"), "partition_responses"):
        answers[(_tkey(t), p.get("index"))] = p
    ctx = _msg_context(request)
    out = []
    for t, p in _iter_parts(req.get("topic_data"), "partition_data"):
        a = answers.get((_tkey(t), p.get("index")), {})
        errs = a.get("record_errors")
        out.append({
            "topic": t.get("name"), "topic_id": t.get("topic_id"), "partition": p.get("index"),
            "acks": req.get("acks"), "timeout_ms": req.get("timeout_ms"),
            "transactional_id": req.get("transactional_id"), **ctx,
            **_record_set_fields(p.get("records")),
            "response_error": a.get("error_code"),
            "response_base_offset": a.get("base_offset"),
            "response_log_append_time_ms": a.get("log_append_time_ms"),
            "response_log_start_offset": a.get("log_start_offset"),
            "response_record_errors": [(e.get("batch_index"), e.get("batch_index_error_message"))
                                       for e in errs] if errs else None,
        })
    return out


def produce_batches(request, response=None) -> list[dict]:
    """One dict per record batch of a Produce request: the partition context of
    `produce_partitions` (without `batches`) plus `batch` (record_batch.Batch) and
    `batch_index`. `response_base_offset` is the broker's offset for the partition's first
    batch; for later batches of the same record set it is derived (previous base + count)."""
    out = []
    for part in produce_partitions(request, response):
        batches = part.pop("batches")
        base = part["response_base_offset"]
        for i, b in enumerate(batches):
            row = dict(part)
            row["batch"] = b
            row["batch_index"] = i
            row["response_base_offset"] = base
            if base is not None and base >= 0:
                base = base + b.last_offset_delta + 1
            out.append(row)
    return out


# ---- Fetch ---------------------------------------------------------------------------------


def fetch_partitions(request, response) -> list[dict]:
    """One dict per partition of a Fetch response: topic, topic_id, partition, isolation_level,
    replica_id (-1 for consumers, a broker id for replication), fetch_offset (from the
    request), error_code, high_watermark, last_stable_offset, log_start_offset,
    aborted_transactions ([(producer_id, first_offset)] or None), preferred_read_replica,
    api_version, correlation_id, client_id, record_set_size, batches, truncated_bytes (a cut
    last entry: normal), record_set_error."""
    resp = response.body if response is not None else None
    if not resp:
        return []
    req = request.body if request is not None and request.body else {}
    offsets = {}
    for t, p in _iter_parts(req.get("topics"), "partitions"):
        offsets[(_tkey(t), p.get("partition"))] = p.get("fetch_offset")
    isolation = ISOLATION.get(req.get("isolation_level", 0)) if request is not None else None
    ctx = _msg_context(request if request is not None else response)
    out = []
    for t, p in _iter_parts(resp.get("responses"), "partitions"):
        aborted = p.get("aborted_transactions")
        out.append({
            "topic": t.get("topic"), "topic_id": t.get("topic_id"),
            "partition": p.get("partition_index"), "isolation_level": isolation,
            "replica_id": req.get("replica_id"),
            "fetch_offset": offsets.get((_tkey(t), p.get("partition_index"))),
            "error_code": p.get("error_code"), "high_watermark": p.get("high_watermark"),
            "last_stable_offset": p.get("last_stable_offset"),
            "log_start_offset": p.get("log_start_offset"),
            "aborted_transactions": None if aborted is None else
            [(a.get("producer_id"), a.get("first_offset")) for a in aborted],
            "preferred_read_replica": p.get("preferred_read_replica"),
            **ctx, **_record_set_fields(p.get("records")),
        })
    return out


def fetch_batches(request, response) -> list[dict]:
    """One dict per record batch of a Fetch response: the context of `fetch_partitions`
    (without `batches`) plus `batch` and `batch_index`."""
    out = []
    for part in fetch_partitions(request, response):
        batches = part.pop("batches")
        for i, b in enumerate(batches):
            row = dict(part)
            row["batch"] = b
            row["batch_index"] = i
            out.append(row)
    return out


# ---- transaction events --------------------------------------------------------------------

TXN_EVENT_FIELDS = ("event", "transactional_id", "producer_id", "producer_epoch", "partitions",
                    "result", "coordinator_epoch", "timeout_ms", "group_id", "new_producer_id",
                    "new_producer_epoch", "error_codes")


def _event(**kw) -> dict:
    out = dict.fromkeys(TXN_EVENT_FIELDS)
    out.update(kw)
    return out


def _errs(node) -> str | None:
    if node is None:
        return None
    return ",".join(str(c) for c in error_codes(node))


def _tps(items) -> str | None:
    items = [f"{t}-{p}" for t, p in items]
    return ",".join(items) if items else None


def txn_events(request, response=None) -> list[dict]:
    """The `txn_event` facts of a producer or transaction API exchange (keys TXN_EVENT_FIELDS;
    `error_codes` None when there is no decoded response). Empty for other APIs."""
    req = request.body if request is not None else None
    if not req:
        return []
    key = request.api_key
    resp = response.body if response is not None else None
    if key == apis.INIT_PRODUCER_ID:
        pid, epoch = (resp.get("producer_id"), resp.get("producer_epoch")) if resp else (
            req.get("producer_id"), req.get("producer_epoch"))
        return [_event(event="INIT_PRODUCER_ID", transactional_id=req.get("transactional_id"),
                       producer_id=pid, producer_epoch=epoch,
                       timeout_ms=req.get("transaction_timeout_ms"), error_codes=_errs(resp))]
    if key == apis.ADD_PARTITIONS_TO_TXN:
        return _add_partitions_events(req, resp)
    if key == apis.ADD_OFFSETS_TO_TXN:
        return [_event(event="ADD_OFFSETS", transactional_id=req.get("transactional_id"),
                       producer_id=req.get("producer_id"), producer_epoch=req.get("producer_epoch"),
                       group_id=req.get("group_id"), error_codes=_errs(resp))]
    if key == apis.END_TXN:
        new = (resp.get("producer_id"), resp.get("producer_epoch")) if resp and "producer_id" in resp \
            else (None, None)
        return [_event(event="END_TXN", transactional_id=req.get("transactional_id"),
                       producer_id=req.get("producer_id"), producer_epoch=req.get("producer_epoch"),
                       result="COMMIT" if req.get("committed") else "ABORT",
                       new_producer_id=new[0], new_producer_epoch=new[1], error_codes=_errs(resp))]
    if key == apis.TXN_OFFSET_COMMIT:
        return [_event(event="TXN_OFFSET_COMMIT", transactional_id=req.get("transactional_id"),
                       producer_id=req.get("producer_id"), producer_epoch=req.get("producer_epoch"),
                       group_id=req.get("group_id"),
                       partitions=_tps((t.get("name"), p.get("partition_index"))
                                       for t, p in _iter_parts(req.get("topics"), "partitions")),
                       error_codes=_errs(resp))]
    if key == apis.WRITE_TXN_MARKERS:
        answers = {m.get("producer_id"): m for m in (resp or {}).get("markers") or ()}
        out = []
        for m in req.get("markers") or ():
            answer = answers.get(m.get("producer_id")) if resp is not None else None
            out.append(_event(
                event="WRITE_MARKERS", producer_id=m.get("producer_id"),
                producer_epoch=m.get("producer_epoch"),
                result="COMMIT" if m.get("transaction_result") else "ABORT",
                coordinator_epoch=m.get("coordinator_epoch"),
                partitions=_tps((t.get("name"), p) for t in m.get("topics") or ()
                                for p in t.get("partition_indexes") or ()),
                error_codes=None if resp is None else _errs(answer or {})))
        return out
    return []


def _add_partitions_events(req, resp):
    out = []
    if "transactions" in req:
        by_txn = {t.get("transactional_id"): t
                  for t in (resp or {}).get("results_by_transaction") or ()}
        top_err = (resp or {}).get("error_code") or 0
        for t in req.get("transactions") or ():
            answer = by_txn.get(t.get("transactional_id"))
            errs = None
            if resp is not None:
                errs = _errs(answer or {})
                if top_err:
                    errs = ",".join(x for x in (str(top_err), errs) if x)
            out.append(_event(
                event="ADD_PARTITIONS", transactional_id=t.get("transactional_id"),
                producer_id=t.get("producer_id"), producer_epoch=t.get("producer_epoch"),
                partitions=_tps((tp.get("name"), p) for tp in t.get("topics") or ()
                                for p in tp.get("partitions") or ()),
                result="VERIFY" if t.get("verify_only") else None, error_codes=errs))
        return out
    return [_event(
        event="ADD_PARTITIONS", transactional_id=req.get("v3_and_below_transactional_id"),
        producer_id=req.get("v3_and_below_producer_id"),
        producer_epoch=req.get("v3_and_below_producer_epoch"),
        partitions=_tps((tp.get("name"), p) for tp in req.get("v3_and_below_topics") or ()
                        for p in tp.get("partitions") or ()),
        error_codes=_errs(resp))]


# ---- Metadata ------------------------------------------------------------------------------


def topic_names(response) -> dict:
    """{topic_id: name} from a decoded Metadata response (ids of v10+ responses)."""
    body = response.body if response is not None and hasattr(response, "body") else response
    out = {}
    for t in (body or {}).get("topics") or ():
        if t.get("topic_id") and t.get("name"):
            out[t["topic_id"]] = t["name"]
    return out


__all__ = ["ISOLATION", "TXN_EVENT_FIELDS", "fetch_batches", "fetch_partitions",
           "produce_batches", "produce_partitions", "topic_names", "txn_events"]
