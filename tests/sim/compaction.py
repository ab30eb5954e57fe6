"""The log cleaner of a compacted topic (cleanup.policy=compact), run on one replica's closed
segments as Kafka's runs on each broker on its own (replicas clean independently: their files
differ afterwards, and that is no anomaly).

Facts (apache/kafka at 1eb7644, core/src/main/scala/kafka/log/LogCleaner.scala `Cleaner`,
clients/.../record/MemoryRecords.java `filterTo`, storage/.../log/ProducerStateEntry.java):

- What is cleanable: the segments below the first uncleanable offset - the base offset of the
  segment holding min(last stable offset, active segment base) (LogCleanerManager.
  calculateCleanableBytes); a round runs only when that range holds dirty (not yet cleaned)
  bytes. `buildOffsetMap` maps each key to its latest offset over the dirty range, skipping
  aborted transactions' batches (`CleanedTransactionMetadata.onBatchRead`); `latestOffset` is
  the last dirty batch's last offset. `doClean` then rewrites every segment from the log start
  to there, grouped (`groupSegmentsBySize`, up to segment.bytes) into one `.cleaned` segment per
  group at the group's first base offset.
- `shouldRetainRecord`: a record past the map's latest offset stays; a keyed record stays when
  no later offset of its key is in the map and it has a value (a tombstone until its batch's
  delete horizon); a record without a key goes.
- A transactional batch of an aborted transaction (the txnindex says which) is discarded whole;
  an ABORT marker stays while the round saw a batch of its transaction (its txnindex entry is
  copied into the cleaned segment), a COMMIT while the round saw data of its producer's
  transaction; a marker of a transaction with no data left gets a delete horizon (now +
  delete.retention.ms: the `has_delete_horizon` attribute, the base timestamp set to it, KIP-534)
  and is removed by the first round after it.
- `isBatchLastRecordOfProducer`: the batch holding an active producer's last data offset (its
  last sequence) is kept even when empty, and so is a producer's last marker when its state has
  no data batch (a marker of a new epoch cleared it: TV2); so is the round's last batch (its
  next offset is the first uncleanable offset). A kept empty batch is a header alone
  (`DefaultRecordBatch.writeEmptyHeader`: no records, base timestamp -1, the original max
  timestamp, base offset, last offset delta, producer id, epoch, base sequence, leader epoch).
- A batch losing records is rebuilt (`buildRetainedRecordsInto`): the same base offset, producer
  id, epoch, base sequence, transactional and control flags, leader epoch, and its original last
  offset delta (`overrideLastOffset`: the producer's last sequence survives); the records keep
  their offsets, the base timestamp becomes the first kept record's (or the delete horizon).
  A batch that loses nothing is copied as it is.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from fixtures import kafka_encoder as ke
from fixtures.builder.partition import _Segment
from fixtures.builder.scan import read_varint

DELETE_RETENTION_MS = 60_000     # delete.retention.ms of the simulated compacted topics
SEGMENT_BYTES = 900              # segment.bytes: small, so a few batches roll a segment

_HDR = struct.Struct(">qiibIhiqqqhii")


@dataclass
class Batch:
    base_offset: int
    leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_ts: int
    max_ts: int
    pid: int
    epoch: int
    base_seq: int
    records: list            # ke.Record
    raw: bytes

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def is_txn(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def horizon(self) -> int | None:
        return self.base_ts if self.attributes & 0x40 else None

    def control_type(self) -> int | None:
        if not self.is_control or not self.records:
            return None
        return struct.unpack(">hh", self.records[0].key)[1]   # 0 ABORT, 1 COMMIT


def _bytes(buf, pos):
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    return bytes(buf[pos:pos + n]), pos + n


def _records(body: bytes, count: int) -> list:
    out, pos = [], 0
    for _ in range(count):
        size, pos = read_varint(body, pos)
        end = pos + size
        p = pos + 1                                   # attributes
        ts_delta, p = read_varint(body, p)
        off_delta, p = read_varint(body, p)
        key, p = _bytes(body, p)
        value, p = _bytes(body, p)
        nh, p = read_varint(body, p)
        headers = []
        for _ in range(nh):
            hk, p = _bytes(body, p)
            hv, p = _bytes(body, p)
            headers.append((hk.decode(), hv))
        out.append(ke.Record(offset_delta=off_delta, timestamp_delta=ts_delta, key=key, value=value,
                             headers=tuple(headers)))
        pos = end
    return out


CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def decompress(codec: int, body: bytes) -> bytes:
    """A v2 batch's records section as its codec wrote it (the encoders' formats: gzip, xerial
    snappy, Kafka's LZ4 frame, a zstd frame without the content size)."""
    if codec == 0:
        return body
    if codec == 1:
        import gzip

        return gzip.decompress(body)
    if codec == 2:
        import cramjam

        out, pos = b"", 16                        # the xerial header, then [int32 length, block]
        while pos + 4 <= len(body):
            n = struct.unpack_from(">i", body, pos)[0]
            out += bytes(cramjam.snappy.decompress_raw(body[pos + 4:pos + 4 + n]))
            pos += 4 + n
        return out
    if codec == 3:
        import lz4.frame

        return lz4.frame.decompress(body)
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj().decompress(body)


def parse(data: bytes) -> list[Batch]:
    """The v2 batches of a segment's bytes (their records decompressed)."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length, ple, magic, _crc, attrs, lod, bts, mts, pid, ep, bseq, n = _HDR.unpack_from(data, pos)
        end = pos + 12 + length
        body = decompress(attrs & 7, bytes(data[pos + 61:end]))
        out.append(Batch(base, ple, attrs, lod, bts, mts, pid, ep, bseq, _records(body, n), bytes(data[pos:end])))
        pos = end
    return out


def encode(b: Batch, records: list, horizon: int | None = None) -> bytes:
    """The batch rebuilt with `records` [(record, its timestamp)] (MemoryRecords.
    buildRetainedRecordsInto: compressed again with the original batch's codec)."""
    abs_ts = [r[1] for r in records]
    base_ts = horizon if horizon is not None else abs_ts[0]
    recs = [ke.Record(offset_delta=r[0].offset_delta, timestamp_delta=t - base_ts, key=r[0].key, value=r[0].value,
                      headers=r[0].headers) for r, t in zip(records, abs_ts)]
    return ke.encode_record_batch_v2(
        b.base_offset, recs, partition_leader_epoch=b.leader_epoch, is_transactional=b.is_txn,
        is_control=b.is_control, has_delete_horizon=horizon is not None, producer_id=b.pid, producer_epoch=b.epoch,
        base_sequence=b.base_seq, base_timestamp=base_ts, max_timestamp=max(abs_ts),
        last_offset_delta=b.last_offset_delta, codec=CODECS[b.attributes & 7])


def empty_header(b: Batch) -> bytes:
    """DefaultRecordBatch.writeEmptyHeader: the batch's header alone, no records (and no codec:
    CompressionType.NONE whatever the batch had)."""
    return ke.encode_record_batch_v2(
        b.base_offset, [], partition_leader_epoch=b.leader_epoch, is_transactional=b.is_txn,
        is_control=b.is_control, producer_id=b.pid, producer_epoch=b.epoch, base_sequence=b.base_seq,
        base_timestamp=-1, max_timestamp=b.max_ts, last_offset_delta=b.last_offset_delta)


class _Txns:
    """CleanedTransactionMetadata: which batches belong to aborted transactions (the txnindex
    entries, by first offset), and which markers still end data this round saw."""

    def __init__(self):
        self.queue: list = []          # [(first offset, entry)] pending, entry = (pid, first, last, lso)
        self.aborted: dict = {}        # pid -> [entry, last batch seen or None]
        self.committed: set = set()
        self.index: list = []          # the cleaned segment's txnindex

    def add(self, entries) -> None:
        self.queue = sorted(self.queue + [(e[1], e) for e in entries], key=lambda x: x[0])

    def _consume(self, offset: int) -> None:
        while self.queue and self.queue[0][0] <= offset:
            e = self.queue.pop(0)[1]
            self.aborted.setdefault(e[0], [e, None])

    def on_control(self, b: Batch) -> bool:
        """True: the marker ends nothing this round saw (it may go once its horizon passed)."""
        self._consume(b.last_offset)
        t = b.control_type()
        if t is None:
            return True                # an empty control batch was cleaned already
        if t == 0:
            m = self.aborted.pop(b.pid, None)
            if m is not None and m[1] is not None:
                self.index.append(m[0])
                return False
            return True
        if t == 1:
            if b.pid in self.committed:
                self.committed.discard(b.pid)
                return False
            return True
        return False

    def on_batch(self, b: Batch) -> bool:
        """True: the batch is an aborted transaction's (discarded whole)."""
        self._consume(b.last_offset)
        if not b.is_txn:
            return False
        m = self.aborted.get(b.pid)
        if m is not None:
            m[1] = b.last_offset
            return True
        self.committed.add(b.pid)
        return False


@dataclass
class _Round:
    keys: dict          # key -> latest offset (the offset map)
    latest: int         # the map's latest offset
    upper: int          # the first uncleanable offset
    now: int
    producers: dict     # pid -> (last data offset or None, epoch): lastRecordsOfActiveProducers


def _retain_record(r, off: int, b: Batch, rd: _Round) -> bool:
    if off > rd.latest:
        return True
    if r.key is None:
        return False
    if off < rd.keys.get(r.key, -1):
        return False
    return r.value is not None or b.horizon is None or rd.now < b.horizon


def _is_producers_last(b: Batch, rd: _Round) -> bool:
    last = rd.producers.get(b.pid) if b.pid >= 0 else None
    if last is None:
        return False
    data_offset, epoch = last
    if data_offset is not None:
        return b.last_offset == data_offset
    return b.is_control and b.epoch == epoch


def filter_batch(b: Batch, txns: _Txns, rd: _Round) -> tuple[bytes, int] | None:
    """What the cleaner writes of one batch (MemoryRecords.filterTo with the cleaner's filter):
    (bytes, max timestamp), or None when it drops the batch."""
    can_discard = txns.on_control(b) if b.is_control else txns.on_batch(b)
    if b.is_control:
        drop_records = can_discard and b.horizon is not None and b.horizon <= rd.now
    else:
        drop_records = can_discard
    retain_empty = _is_producers_last(b, rd) or b.last_offset + 1 == rd.upper
    kept = []
    if not drop_records:
        for r in b.records:
            off, ts = b.base_offset + r.offset_delta, b.base_ts + r.timestamp_delta
            if b.is_control or _retain_record(r, off, b, rd):
                kept.append((r, ts))
    if kept:
        tombstones = any(r.value is None for r, _ in kept)
        need_horizon = (tombstones or (can_discard and b.is_control)) and b.horizon is None
        if len(kept) == len(b.records) and not need_horizon:
            return b.raw, b.max_ts
        horizon = rd.now + DELETE_RETENTION_MS if need_horizon else b.horizon
        return encode(b, kept, horizon), max(t for _, t in kept)
    if retain_empty:
        return empty_header(b), b.max_ts
    return None


def _groups(segs: list, max_bytes: int) -> list:
    """groupSegmentsBySize: consecutive segments whose bytes sum to at most segment.bytes."""
    out = []
    for s in segs:
        if out and sum(len(x.data) for x in out[-1]) + len(s.data) <= max_bytes:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def clean(pb, now: int, *, max_bytes: int = SEGMENT_BYTES) -> bool:
    """One cleaning round of a replica (PartitionBuilder `pb`) at `now`; False when it has no
    dirty cleanable bytes (the cleaner would not pick it)."""
    planned = plan_round(pb, now, max_bytes=max_bytes)
    if planned is None:
        return False
    done, latest = planned
    for group, out in done:
        replace(pb, group, out)
    pb.cleaner_offset = latest + 1
    return True


def replace(pb, group: list, out) -> None:
    """LocalLog.replaceSegments completed: the cleaned segment in place of its group, and the
    replaced segments' producer snapshots deleted (UnifiedLog.deleteProducerSnapshots of those
    whose base offset the new segment does not take)."""
    i = pb.segments.index(group[0])
    pb.segments[i:i + len(group)] = [out]
    for s in group[1:]:
        pb.snapshots.pop(s.base_offset, None)


def plan_round(pb, now: int, *, max_bytes: int = SEGMENT_BYTES) -> tuple[list, int] | None:
    """What one round writes (Cleaner.doClean): [(the group of segments, its cleaned segment)]
    and the map's latest offset; None when nothing is dirty. Nothing is swapped in yet."""
    segs = [s for s in pb.segments if not s.suffix]
    open_txns = [st.txn_first_offset for st in pb.producers.values() if st.txn_first_offset >= 0]
    stop = min(min(open_txns, default=pb.next_offset), segs[-1].base_offset)
    upper = max(s.base_offset for s in segs if s.base_offset <= stop)
    cleanable = [s for s in segs if s.base_offset < upper]
    first_dirty = max(pb.cleaner_offset or 0, segs[0].base_offset)
    if first_dirty >= upper:
        return None
    parsed = {s.base_offset: parse(bytes(s.data)) for s in cleanable}
    entries = [e for s in segs for e in s.txnindex]
    keys, latest = _offset_map(cleanable, parsed, entries, first_dirty, upper)
    producers = {pid: (st.last_offset if st.last_offset >= 0 else None, st.epoch) for pid, st in pb.producers.items()}
    rd = _Round(keys, latest, upper, now, producers)
    txns = _Txns()
    nexts = {s.base_offset: (segs[k + 1].base_offset) for k, s in enumerate(segs[:-1])}
    done = []
    for group in _groups([s for s in cleanable if s.base_offset <= latest], max_bytes):
        out = _Segment(group[0].base_offset)
        txns.index = out.txnindex
        for s in group:
            txns.add([e for e in entries if e[2] >= s.base_offset and e[1] < nexts[s.base_offset]])
            for b in parsed[s.base_offset]:
                kept = filter_batch(b, txns, rd)
                if kept is not None:
                    data, max_ts = kept
                    out.data += data
                    if max_ts > out.max_ts:
                        out.max_ts, out.offset_of_max_ts = max_ts, b.last_offset
        out.time_maybe_append()        # onBecomeInactiveSegment
        out.closed = True
        done.append((group, out))
    return done, latest


def _offset_map(cleanable, parsed, entries, first_dirty: int, upper: int) -> tuple[dict, int]:
    """buildOffsetMap over [first_dirty, upper): key -> its latest offset outside aborted
    transactions, and the last dirty batch's last offset."""
    txns = _Txns()
    txns.add([e for e in entries if e[2] >= first_dirty and e[1] < upper])
    keys, latest = {}, -1
    for s in cleanable:
        for b in parsed[s.base_offset]:
            if b.last_offset < first_dirty:
                continue
            if b.is_control:
                txns.on_control(b)
            elif not txns.on_batch(b):
                for r in b.records:
                    off = b.base_offset + r.offset_delta
                    if r.key is not None and off >= first_dirty:
                        keys[r.key] = off
            latest = max(latest, b.last_offset)
    return keys, latest
