# The rows of a Metadata, AddPartitionsToTxn (v0-v3) or EndTxn exchange walked in C: part of
# _crows.pyx (included). The twins of what WireRows.exchange writes for them through
# summary.frame_fields, summary_batches.txn_events and topic_names: one frame row, and an
# END_TXN / ADD_PARTITIONS txn_event row or the Metadata response's topic_name rows.

import json

from kaudit.model import SCHEMAS

DEF METADATA = 3
DEF ADD_PARTITIONS = 24
DEF END_TXN = 26

cdef dict API_NAMES = {k: apis.api_name(k) for k in (METADATA, ADD_PARTITIONS, END_TXN)}


cdef object _distinct_codes(Msg resp):
    """",".join of summary.error_codes (distinct non-zero codes, in order)."""
    seen = {}
    for i in range(resp.nerrors):
        seen.setdefault(resp.errors[i], None)
    return ",".join([str(c) for c in seen])


cdef object _tps(Msg m, const uint8_t *p):
    """"topic-partition" of every partition of m, comma-joined; None when there is none."""
    cdef Buf b = Buf(NULL, 0, 0)
    cdef Py_ssize_t i
    if not m.nparts:
        return None
    try:
        for i in range(m.nparts):
            if i:
                _add(&b, ",", 1)
            _topic_into(&b, &m.topics[m.parts[i].topic], p)
            _add(&b, "-", 1)
            _int(&b, m.parts[i].index)
        return _text(&b)
    finally:
        free(b.data)


cdef bint _json_text(Buf *b, object text) except -1:
    """A JSON string for a str json.dumps writes as it is (else False); None: null."""
    cdef bytes raw
    if text is None:
        _add(b, "null", 4)
        return True
    raw = text.encode("utf-8")
    if not _plain_json(raw, len(raw)):
        return False
    _add(b, '"', 1)
    _add(b, raw, len(raw))
    _add(b, '"', 1)
    return True


cdef object _add_partitions_json(Msg req, Msg resp, txn_id, tps, const uint8_t *pr):
    """(transactions, partition_errors) as WireRows.add writes them: json.dumps of
    [(txn, pid, epoch, False, partitions)] and of [(txn, topic, partition, error), ...]."""
    cdef Buf b = Buf(NULL, 0, 0)
    cdef Py_ssize_t i
    try:
        _add(&b, "[[", 2)
        ok = _json_text(&b, txn_id)
        _add(&b, ", ", 2)
        _int(&b, req.pid)
        _add(&b, ", ", 2)
        _int(&b, req.epoch)
        _add(&b, ", false, ", 9)
        ok = ok and _json_text(&b, tps)
        _add(&b, "]]", 2)
        transactions = _text(&b)
        errors = None
        if ok and resp.nparts:
            b.len = 0
            _add(&b, "[", 1)
            for i in range(resp.nparts):
                _add(&b, "[" if i == 0 else ", [", 1 if i == 0 else 3)
                ok = ok and _json_text(&b, txn_id)
                _add(&b, ", ", 2)
                ok = ok and _json_text(&b, _topic_text(&resp.topics[resp.parts[i].topic], pr))
                _add(&b, ", ", 2)
                _int(&b, resp.parts[i].index)
                _add(&b, ", ", 2)
                _int(&b, resp.parts[i].error)
                _add(&b, "]", 1)
            _add(&b, "]", 1)
            errors = _text(&b)
        if not ok:  # something to escape: Python's json
            transactions = json.dumps([(txn_id, req.pid, req.epoch, False, tps)], default=str)
            errors = json.dumps([(txn_id, _topic_text(&resp.topics[resp.parts[i].topic], pr),
                                  resp.parts[i].index, resp.parts[i].error)
                                 for i in range(resp.nparts)], default=str) if resp.nparts else None
        return transactions, errors
    finally:
        free(b.data)


cdef int other_rows(Sink s, str name, Msg req, Msg resp, const uint8_t *pr, req_frame,
                    resp_frame, req_ts, resp_ts, req_size, resp_size) except -1:
    """WireRows.exchange (its generic path) for a walked Metadata, AddPartitionsToTxn or EndTxn
    request and its walked response."""
    cdef const uint8_t[::1] qv = req.payload
    cdef const uint8_t *pq = &qv[0]
    cdef int key = req.api_key
    cdef Columns c = s.cols("frame")
    cdef int i
    cdef Py_ssize_t k
    cdef Topic *t
    codes = _distinct_codes(resp)
    txn_id = tps = transactions = errors = None
    if key != METADATA:
        txn_id = PyUnicode_DecodeUTF8(<const char *>pq + req.txn_id, req.txn_id_len, NULL)
    if key == ADD_PARTITIONS:
        tps = _tps(req, pq)
        transactions, errors = _add_partitions_json(req, resp, txn_id, tps, pr)
    c.begin()
    c.put_text(0, s.source)
    c.put_text(1, name)
    _num(c, 2, req_frame)
    _num(c, 3, resp_frame)
    _num(c, 4, req_ts)
    _num(c, 5, resp_ts)
    _latency(c, 6, req_ts, resp_ts)
    _num(c, 7, req_size)
    _num(c, 8, resp_size)
    c.put_i64(9, key)
    c.put_text(10, API_NAMES[key])
    c.put_i64(11, req.api_version)
    c.put_i64(12, req.correlation_id)
    _opt_str(c, 13, pq, req.client_id, req.client_id_len)
    c.put_text(14, codes)
    c.put_text(15, _error_names(codes) if codes else None)
    c.put_text(16, txn_id)
    if key != METADATA:
        c.put_i64(17, req.pid)
        c.put_i64(18, req.epoch)
    else:
        c.put_null(17)
        c.put_null(18)
    for i in range(19, 22):
        c.put_null(i)
    c.put_text(22, tps)
    if key == END_TXN:
        c.put_bool(23, req.committed)
    else:
        c.put_null(23)
    if key == END_TXN and resp.has_new:
        c.put_i64(24, resp.new_pid)
        c.put_i64(25, resp.new_epoch)
    else:
        c.put_null(24)
        c.put_null(25)
    for i in range(26, 33):
        c.put_null(i)
    if resp.has_throttle:
        c.put_i64(33, resp.throttle)
    else:
        c.put_null(33)
    c.put_null(34)
    c.put_text(35, errors)
    c.put_null(36)
    c.put_text(37, transactions)
    c.put_text(38, "kio")
    c.put_bool(39, True)
    c.put_null(40)
    c.finish()
    count = 1
    if key == METADATA:
        names = {}
        for k in range(resp.ntopics):
            t = &resp.topics[k]
            if not t.id_zero and t.name_len > 0:
                names[uuid_text(t.id)] = PyUnicode_DecodeUTF8(<const char *>pr + t.name, t.name_len, NULL)
        cluster = (PyUnicode_DecodeUTF8(<const char *>pr + resp.cluster, resp.cluster_len, NULL)
                   if resp.cluster_len > 0 else None)
        if (cluster is not None or resp.brokers is not None) and not names:
            names[None] = None   # the cluster alone (Metadata v0-v9 name no topic ids)
        if names:
            out = s.cols_list("topic_name")
            brokers = resp.brokers   # on the answer's first row only (WireRows.exchange)
            for topic_id, topic in names.items():
                out.append((s.source, name, resp_frame, resp_ts, key, topic_id, topic, cluster, brokers))
                brokers = None
            count += len(names)
    else:
        # the txn_event row, through WireRows.add as the pure path adds it (fields it does not
        # name are null: the row follows the schema as it grows)
        s.rows.add("txn_event", {
            "source": s.source, "connection": name, "position": req_frame, "ts": req_ts,
            "event": "END_TXN" if key == END_TXN else "ADD_PARTITIONS",
            "transactional_id": txn_id, "producer_id": req.pid, "producer_epoch": req.epoch,
            "partitions": tps,
            "result": ("COMMIT" if req.committed else "ABORT") if key == END_TXN else None,
            "new_producer_id": resp.new_pid if resp.has_new else None,
            "new_producer_epoch": resp.new_epoch if resp.has_new else None, "error_codes": codes})
    s.rows.count += count
    return 0
