from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t


cdef struct Batch:          # a record batch of a record set (record_batch.Batch's fields)
    int64_t base_offset
    int32_t batch_length, ple, lod, base_seq, count
    int8_t magic
    uint32_t crc
    bint crc_ok
    int16_t attributes, epoch
    int64_t base_ts, max_ts, pid
    int32_t control         # the control record's type, -1: none
    bint has_coord
    int32_t coord


cdef struct Topic:          # a topic entry: its name (offsets in the payload) or its id
    Py_ssize_t name, name_len   # name_len -1: no name field (versions naming topics by id)
    bint id_zero            # the id is the all-zero uuid (Kafka's "none")
    uint8_t id[16]


cdef struct Part:           # a partition of a Produce request / Fetch request / either response
    int32_t topic, index
    int16_t error
    int64_t offset          # Produce response: base_offset; Fetch request: fetch_offset
    int64_t hw, lso, log_start
    int32_t preferred
    Py_ssize_t rec_size     # -1: a null record set (no record set field: -2)
    Py_ssize_t truncated
    int32_t first, nbatches     # its batches in Msg.batches
    int32_t first_aborted, naborted   # -1: null aborted_transactions
    bint has_log_start, has_preferred


cdef class Msg:
    """A Produce request, Fetch request, Produce response or Fetch response walked in C: the
    facts its rows need. A request also stands for the protocol.wire.messages.Request it is
    (`payload` decoded on first use of any other attribute)."""
    cdef readonly int api_key, api_version
    cdef readonly int32_t correlation_id
    cdef public object payload
    cdef public int64_t max_batch_bytes
    cdef object _real
    cdef readonly int32_t size
    # header and body facts
    cdef Py_ssize_t client_id, client_id_len, txn_id, txn_id_len    # len -1: null
    cdef Py_ssize_t cluster, cluster_len    # Metadata response v2+: cluster_id (len <= 0: none)
    cdef object brokers    # Metadata response: "node@host:port" comma-joined (None: none listed)
    cdef int16_t acks, top_error
    cdef int32_t timeout, throttle, replica_id
    cdef int8_t isolation
    cdef bint has_replica_id, has_top_error, has_throttle
    # arrays
    # EndTxn and AddPartitionsToTxn (v0-v3): the producer; EndTxn v5: the bumped producer
    cdef int64_t pid, new_pid
    cdef int16_t epoch, new_epoch
    cdef bint committed, has_new
    cdef int16_t *errors      # a response's non-zero error codes, in the order they appear
    cdef Py_ssize_t nerrors, cap_errors
    cdef Topic *topics
    cdef Part *parts
    cdef Batch *batches
    cdef int64_t *aborted    # (producer id, first offset) pairs
    cdef Py_ssize_t ntopics, nparts, nbatches, naborted
    cdef Py_ssize_t cap_topics, cap_parts, cap_batches, cap_aborted
    cdef const uint8_t *base     # the payload's bytes while walking (and while kept)

    cdef int add_topic(self) except -1
    cdef int add_part(self) except -1
    cdef int add_batch(self) except -1
    cdef int add_aborted(self, int64_t pid, int64_t first) except -1
    cdef int add_error(self, int16_t code) except -1


cdef Msg parse_request(object payload, const uint8_t *p, Py_ssize_t n, int64_t max_batch_bytes)
cdef Msg parse_response(Msg req, const uint8_t *p, Py_ssize_t n, int64_t max_batch_bytes)
cdef str uuid_text(const uint8_t *raw)
