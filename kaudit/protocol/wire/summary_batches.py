"""Per-partition and per-batch context of Produce requests and Fetch responses, transaction
events, and topic ids from Metadata (the second half of `summary`)."""

from __future__ import annotations

import dataclasses
import typing
from functools import lru_cache

from kaudit.protocol.wire import apis

ISOLATION = {0: "read_uncommitted", 1: "read_committed"}


def error_codes(body: dict | None, schema=None) -> list[int]:
    """Every distinct non-zero error code in a response body, in order of appearance
    (fields named `error_code` or ending in `_error_code`).

    `schema`: the kio class the body was decoded with, if it was; then only the fields that can
    hold an error code are visited (same answer, without walking every partition's dicts)."""
    seen: dict[int, None] = {}
    if body is not None:
        collect = _error_collector(schema) if schema is not None else None
        if collect is None:
            _collect_errors(body, seen)
        else:
            collect(body, seen)
    return list(seen)


@lru_cache(maxsize=None)
def _error_collector(cls):
    """`_plan_errors` with the plan of `cls` written out as one function (node, seen) -> None;
    None when the class has no plan."""
    plan = _error_plan(cls)
    if plan is None:
        return None
    lines = ["def collect(node, seen):"]
    counter = [0]

    def emit(plan, var, ind):
        for op, name, sub in plan:
            counter[0] += 1
            v = f"v{counter[0]}"
            lines.append(f"{ind}{v} = {var}.get({name!r})")
            if op == _ERR:
                lines.append(f"{ind}if {v} and isinstance({v}, int):")
                lines.append(f"{ind}    seen.setdefault({v}, None)")
            elif op == _MANY:
                x = f"x{counter[0]}"
                lines.append(f"{ind}if {v} is not None:")
                lines.append(f"{ind}    for {x} in {v}:")
                lines.append(f"{ind}        if {x} is not None:")
                emit(sub, x, ind + "            ")
            else:
                lines.append(f"{ind}if {v} is not None:")
                emit(sub, v, ind + "    ")

    emit(plan, "node", "    ")
    lines.append("    return None")
    env: dict = {}
    exec(compile("\n".join(lines) + "\n", f"<error codes of {cls.__qualname__}>", "exec"), env)  # noqa: S102
    return env["collect"]


_ERR, _ONE, _MANY = 0, 1, 2


def _is_error_name(name: str) -> bool:
    return name == "error_code" or name.endswith("_error_code")


@lru_cache(maxsize=None)
def _error_plan(cls):
    """((op, dict key, sub-plan), ...) in field order for a kio class: the error-code fields
    and the nested entities that contain some; None when the class is not a plain kio schema."""
    from kaudit.protocol.wire.kio_schema import _inner_types, _is_tuple, _out_name

    try:
        hints = typing.get_type_hints(cls)
        ops = []
        for f in dataclasses.fields(cls):
            kt = f.metadata.get("kafka_type")
            name = _out_name(f.name, kt)
            t = hints[f.name]
            inner = [c for c in _inner_types(t) if isinstance(c, type) and dataclasses.is_dataclass(c)]
            if inner:
                sub = _error_plan(inner[0])
                if sub is None:
                    return None
                if sub:
                    ops.append((_MANY if _is_tuple(t) else _ONE, name, sub))
            elif _is_error_name(name):
                ops.append((_ERR, name, None))
        return tuple(ops)
    except Exception:  # noqa: BLE001 - the generic walk works on any dict
        return None


def _plan_errors(node, plan, seen: dict) -> None:
    """`_collect_errors` restricted to the plan's fields (a body of the plan's class)."""
    for op, name, sub in plan:
        v = node.get(name)
        if op == _ERR:
            if v and isinstance(v, int):
                seen.setdefault(v, None)
        elif v is not None:
            if op == _MANY:
                for x in v:
                    if x is not None:
                        _plan_errors(x, sub, seen)
            else:
                _plan_errors(v, sub, seen)


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
    api_version, correlation_id = request.api_version, request.correlation_id
    client_id = getattr(request, "client_id", None)
    acks, timeout_ms, txn_id = req.get("acks"), req.get("timeout_ms"), req.get("transactional_id")
    out = []
    for t in req.get("topic_data") or ():
        name, topic_id, tkey = t.get("name"), t.get("topic_id"), _tkey(t)
        for p in t.get("partition_data") or ():
            index = p.get("index")
            a = answers.get((tkey, index), _NONE)
            errs = a.get("record_errors")
            rs = p.get("records")
            out.append({
                "topic": name, "topic_id": topic_id, "partition": index,
                "acks": acks, "timeout_ms": timeout_ms, "transactional_id": txn_id,
                "api_version": api_version, "correlation_id": correlation_id, "client_id": client_id,
                # = _record_set_fields(rs)
                "record_set_size": None if rs is None else rs.size,
                "batches": [] if rs is None else rs.batches,
                "truncated_bytes": 0 if rs is None else rs.truncated,
                "record_set_error": None if rs is None else rs.error,
                "response_error": a.get("error_code"),
                "response_base_offset": a.get("base_offset"),
                "response_log_append_time_ms": a.get("log_append_time_ms"),
                "response_log_start_offset": a.get("log_start_offset"),
                "response_record_errors": [(e.get("batch_index"), e.get("batch_index_error_message"))
                                           for e in errs] if errs else None,
            })
    return out


_NONE: dict = {}  # no answer for a partition (never written to)


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
    last entry: normal), record_set_error.

    Then one per partition the request named and the response left out (`omitted_fetch_parts`),
    after the answered ones: error_code and every response field None, no batches."""
    resp = response.body if response is not None else None
    if not resp:
        return []
    req = request.body if request is not None and request.body else {}
    offsets = {}
    for t, p in _iter_parts(req.get("topics"), "partitions"):
        offsets[(_tkey(t), p.get("partition"))] = p.get("fetch_offset")
    isolation = ISOLATION.get(req.get("isolation_level", 0)) if request is not None else None
    msg = request if request is not None else response
    if msg is None:
        api_version = correlation_id = client_id = None
    else:
        api_version, correlation_id = msg.api_version, msg.correlation_id
        client_id = getattr(msg, "client_id", None)
    replica_id = req.get("replica_id")
    out = []
    for t in resp.get("responses") or ():
        topic, topic_id, tkey = t.get("topic"), t.get("topic_id"), _tkey(t)
        for p in t.get("partitions") or ():
            aborted = p.get("aborted_transactions")
            index = p.get("partition_index")
            rs = p.get("records")
            out.append({
                "topic": topic, "topic_id": topic_id,
                "partition": index, "isolation_level": isolation,
                "replica_id": replica_id,
                "fetch_offset": offsets.get((tkey, index)),
                "error_code": p.get("error_code"), "high_watermark": p.get("high_watermark"),
                "last_stable_offset": p.get("last_stable_offset"),
                "log_start_offset": p.get("log_start_offset"),
                "aborted_transactions": None if aborted is None else
                [(a.get("producer_id"), a.get("first_offset")) for a in aborted],
                "preferred_read_replica": p.get("preferred_read_replica"),
                "api_version": api_version, "correlation_id": correlation_id, "client_id": client_id,
                # = _record_set_fields(rs)
                "record_set_size": None if rs is None else rs.size,
                "batches": [] if rs is None else rs.batches,
                "truncated_bytes": 0 if rs is None else rs.truncated,
                "record_set_error": None if rs is None else rs.error,
            })
    answered = {(_tkey(t), p.get("partition_index")) for t, p in _iter_parts(resp.get("responses"), "partitions")}
    for t, index, offset in omitted_fetch_parts(req, resp, answered, offsets):
        out.append({
            "topic": t.get("topic"), "topic_id": t.get("topic_id"), "partition": index,
            "isolation_level": isolation, "replica_id": replica_id, "fetch_offset": offset,
            "error_code": None, "high_watermark": None, "last_stable_offset": None, "log_start_offset": None,
            "aborted_transactions": None, "preferred_read_replica": None,
            "api_version": api_version, "correlation_id": correlation_id, "client_id": client_id,
            "record_set_size": None, "batches": [], "truncated_bytes": 0, "record_set_error": None,
        })
    return out


def omitted_fetch_parts(req: dict, resp: dict, answered: set, offsets: dict):
    """(request topic entry, partition, fetch offset) of each partition a Fetch request named and
    its decoded response left out, in request order, once per (topic, partition) with the fetch
    offset the answered rows take (the last entry's). An incremental fetch session's response
    (KIP-227, Fetch v7+) omits the partitions with nothing new - no records, no error, no
    watermark change (FetchSession's mustRespond) - yet the client asked from that offset: its
    position is a fact the consumer timelines need (a reset to the log end fetches there and is
    answered with nothing). None after a top-level error (FETCH_SESSION_ID_NOT_FOUND, ...: the
    broker answered no partition)."""
    if resp.get("error_code") not in (0, None):
        return
    done = set(answered)
    for t, p in _iter_parts(req.get("topics"), "partitions"):
        key = (_tkey(t), p.get("partition"))
        if key not in done:
            done.add(key)
            yield t, key[1], offsets.get(key)


def fetch_batches(request, response, partitions: list[dict] | None = None) -> list[dict]:
    """One dict per record batch of a Fetch response: the context of `fetch_partitions`
    (without `batches`) plus `batch` and `batch_index`. `partitions`: what `fetch_partitions`
    already gave for this pair (left unchanged), to spare computing it again."""
    out = []
    for part in fetch_partitions(request, response) if partitions is None else partitions:
        batches = part["batches"]
        if not batches:
            continue
        base = dict(part)
        del base["batches"]
        for i, b in enumerate(batches):
            row = dict(base)
            row["batch"] = b
            row["batch_index"] = i
            out.append(row)
    return out


# ---- transaction events --------------------------------------------------------------------

TXN_EVENT_FIELDS = ("event", "transactional_id", "producer_id", "producer_epoch", "partitions",
                    "result", "coordinator_epoch", "timeout_ms", "group_id", "new_producer_id",
                    "new_producer_epoch", "error_codes", "transaction_version", "enable_2pc",
                    "keep_prepared_txn", "request_producer_id", "request_producer_epoch",
                    "ongoing_txn_producer_id", "ongoing_txn_producer_epoch")


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
                       timeout_ms=req.get("transaction_timeout_ms"), error_codes=_errs(resp),
                       enable_2pc=req.get("enable2_pc"), keep_prepared_txn=req.get("keep_prepared_txn"),
                       # v3+ (KIP-360): the id and epoch the client holds and asks to bump (-1: none)
                       request_producer_id=req.get("producer_id"),
                       request_producer_epoch=req.get("producer_epoch"),
                       # v6 answer (KIP-939): the prepared transaction a KeepPreparedTxn recovery kept
                       ongoing_txn_producer_id=resp.get("ongoing_txn_producer_id") if resp else None,
                       ongoing_txn_producer_epoch=resp.get("ongoing_txn_producer_epoch") if resp else None)]
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
                error_codes=None if resp is None else _errs(answer or {}),
                transaction_version=m.get("transaction_version")))
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
    """{topic_id: name} from a decoded Metadata (v10+), CreateTopics (v7+) or
    DescribeTopicPartitions response: each names its topics with their ids (KIP-516)."""
    body = response.body if response is not None and hasattr(response, "body") else response
    out = {}
    for t in (body or {}).get("topics") or ():
        if t.get("topic_id") and t.get("name"):
            out[t["topic_id"]] = t["name"]
    return out


def metadata_brokers(response) -> str | None:
    """The brokers a decoded Metadata response lists, "node@host:port" comma-joined (None: none
    listed): how many brokers the cluster has, against those a capture reaches."""
    body = response.body if response is not None and hasattr(response, "body") else response
    found = [f"{b.get('node_id')}@{b.get('host')}:{b.get('port')}" for b in (body or {}).get("brokers") or ()
             if b.get("node_id") is not None]
    return ",".join(found) or None


__all__ = ["ISOLATION", "TXN_EVENT_FIELDS", "fetch_batches", "fetch_partitions",
           "metadata_brokers", "omitted_fetch_parts", "produce_batches", "produce_partitions", "topic_names", "txn_events"]
