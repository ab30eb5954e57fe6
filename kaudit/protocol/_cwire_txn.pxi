# Metadata (v0-v13), AddPartitionsToTxn (v0-v3) and EndTxn (v0-v5) walked in C: part of
# _cwire.pyx (included). Their rows need little (the producer, the partitions, the error codes,
# the topic names), but the whole body is walked, as kio's schema walk reads it, so that a body
# the pure decoder would refuse is given up here too.

cdef bint _other_request(Msg m, Rd *r, int key, int v, bint flex) except -1:
    cdef int64_t nt, np, k, j
    cdef Py_ssize_t length
    if key == END_TXN:
        m.txn_id = _string(r, flex, False, &m.txn_id_len)
        m.pid = _i64(r)
        m.epoch = _i16(r)
        m.committed = _i8(r) != 0
        _tags(r, flex)
        return not r.bad
    if key == ADD_PARTITIONS:
        m.txn_id = _string(r, flex, False, &m.txn_id_len)
        m.pid = _i64(r)
        m.epoch = _i16(r)
        nt = _length(r, flex, 4)
        if r.bad or nt < 0:
            return False
        for k in range(nt):
            m.add_topic()
            m.topics[m.ntopics - 1].name = _string(r, flex, False, &m.topics[m.ntopics - 1].name_len)
            np = _length(r, flex, 4)
            if r.bad or np < 0 or not _need(r, np * 4):
                return False
            for j in range(np):
                m.add_part()
                m.parts[m.nparts - 1].index = _i32(r)
            _tags(r, flex)
            if r.bad:
                return False
        _tags(r, flex)
        return not r.bad
    # Metadata: the topics asked for, the flags
    nt = _length(r, flex, 4)
    if r.bad or (nt < 0 and v == 0):
        return False
    for k in range(nt):
        if v >= 10:
            if not _need(r, 16):
                return False
            r.off += 16
        _string(r, flex, v >= 10, &length)
        _tags(r, flex)
        if r.bad:
            return False
    if v >= 4:
        _i8(r)  # allow_auto_topic_creation
    if 8 <= v <= 10:
        _i8(r)  # include_cluster_authorized_operations
    if v >= 8:
        _i8(r)  # include_topic_authorized_operations
    _tags(r, flex)
    return not r.bad


cdef bint _other_response(Msg m, Rd *r, int key, int v, bint flex) except -1:
    cdef int64_t nt, np, k, j
    if key == END_TXN:
        m.throttle = _i32(r)
        m.has_throttle = True
        m.add_error(_i16(r))
        if v >= 5:
            m.new_pid = _i64(r)
            m.new_epoch = _i16(r)
            m.has_new = True
        _tags(r, flex)
        return not r.bad
    if key == ADD_PARTITIONS:
        m.throttle = _i32(r)
        m.has_throttle = True
        nt = _length(r, flex, 4)
        if r.bad or nt < 0:
            return False
        for k in range(nt):
            m.add_topic()
            m.topics[m.ntopics - 1].name = _string(r, flex, False, &m.topics[m.ntopics - 1].name_len)
            np = _length(r, flex, 4)
            if r.bad or np < 0:
                return False
            for j in range(np):
                m.add_part()
                m.parts[m.nparts - 1].index = _i32(r)
                m.parts[m.nparts - 1].error = _i16(r)
                m.add_error(m.parts[m.nparts - 1].error)
                _tags(r, flex)
                if r.bad:
                    return False
            _tags(r, flex)
            if r.bad:
                return False
        _tags(r, flex)
        return not r.bad
    return _metadata_response(m, r, v, flex)


cdef bint _int_array(Rd *r, bint flex) noexcept nogil:
    """An array of int32 (the replica lists): skipped, bounds checked (null is read as kio's
    walk reads it)."""
    cdef int64_t n = _length(r, flex, 4)
    if r.bad:
        return False
    if n > 0:
        if not _need(r, n * 4):
            return False
        r.off += n * 4
    return True


cdef bint _metadata_response(Msg m, Rd *r, int v, bint flex) except -1:
    cdef int64_t nb, nt, np, k, j
    cdef Py_ssize_t length, host, host_len
    cdef int32_t node, port
    cdef Topic *t
    if v >= 3:
        m.throttle = _i32(r)
        m.has_throttle = True
    nb = _length(r, flex, 4)  # brokers
    if r.bad:
        return False
    listed = []   # summary_batches.metadata_brokers' twin (a capture of some brokers only)
    for k in range(nb):
        node = _i32(r)
        host = _string(r, flex, False, &host_len)
        port = _i32(r)
        if v >= 1:
            _string(r, flex, True, &length)  # rack
        _tags(r, flex)
        if r.bad:
            return False
        listed.append(f"{node}@{(<const char *>r.p + host)[:host_len].decode('utf-8')}:{port}")
    m.brokers = ",".join(listed) or None
    if v >= 2:
        m.cluster = _string(r, flex, True, &m.cluster_len)  # cluster_id: the incident ids' cluster
    if v >= 1:
        _i32(r)  # controller_id
    nt = _length(r, flex, 4)
    if r.bad:
        return False
    for k in range(nt):
        m.add_topic()
        t = &m.topics[m.ntopics - 1]
        m.add_error(_i16(r))
        t.name = _string(r, flex, v >= 12, &t.name_len)
        if v >= 10:
            _uuid(r, t.id, &t.id_zero)
        if v >= 1:
            _i8(r)  # is_internal
        np = _length(r, flex, 4)
        if r.bad:
            return False
        for j in range(np):
            m.add_error(_i16(r))
            _i32(r)  # partition_index
            _i32(r)  # leader_id
            if v >= 7:
                _i32(r)  # leader_epoch
            if not _int_array(r, flex) or not _int_array(r, flex):  # replicas, isr
                return False
            if v >= 5 and not _int_array(r, flex):  # offline replicas
                return False
            _tags(r, flex)
            if r.bad:
                return False
        if v >= 8:
            _i32(r)  # topic_authorized_operations
        _tags(r, flex)
        if r.bad:
            return False
    if 8 <= v <= 10:
        _i32(r)  # cluster_authorized_operations
    if v >= 13:
        m.add_error(_i16(r))
    _tags(r, flex)
    return not r.bad
