"""The group coordinator's `__consumer_offsets` partition of one consumer group (group:offsets_compacted):
its offset commits, the tombstones a deletion or an expiry writes, and the log cleaner over it.

Facts (apache/kafka at 1eb7644, core/.../coordinator/group/GroupMetadataManager.scala):
`storeOffsets` appends one batch per accepted OffsetCommit, a record per partition - key
OffsetCommitKey v1 (group, topic, partition), value OffsetCommitValue v3 (offset, leader epoch,
metadata, commit timestamp) - with no producer id (MemoryRecords.withRecords, CREATE_TIME);
`cleanupGroupMetadata` (an admin's DeleteGroups, or the offsets expired offsets.retention.ms after
the group became Empty) appends one batch of tombstones: a null value per removed offset's key and,
once the Empty group holds no offsets (it turns Dead) and its generation is past 0, one for its
GroupMetadataKey v2. The topic is compacted (cleanup.policy=compact): the cleaner keeps each key's
latest record, a tombstone until its delete horizon (compaction.py, the simulated cluster's
delete.retention.ms)."""

from __future__ import annotations

from fixtures import kafka_encoder as ke
from tests.sim.compaction import SEGMENT_BYTES, clean

OFFSETS_PARTITIONS = 5        # offsets.topic.num.partitions of the simulated cluster
RETENTION_MS = 7 * 86_400_000  # offsets.retention.ms (7 days)


class OffsetsLog:
    def __init__(self, sim, group: str, node: int):
        self.sim, self.group = sim, group
        self.part = sim.partition("__consumer_offsets", ke.coordinator_partition(group, OFFSETS_PARTITIONS),
                                  leader=node)
        for pb in self.part.pbs.values():
            pb.segment_bytes = SEGMENT_BYTES // 2
        self.offsets: dict = {}

    def _append(self, records) -> None:
        ts = self.sim.tick()
        recs = [{"key": k, "value": v, "timestamp_delta": 0} for k, v in records]
        self.part._store(ke.encode_record_batch_v2(0, recs, base_timestamp=ts))

    def commit(self, tp, offset: int) -> None:
        self.offsets[tp] = offset
        self._append([(ke.encode_offset_commit_key(self.group, tp[0], tp[1]),
                       ke.encode_offset_commit_value(offset, commit_timestamp=self.sim.clock))])

    def remove(self, generation: int) -> None:
        """cleanupGroupMetadata of an Empty group: its offsets' tombstones, and its own when its
        generation is past 0."""
        recs = [(ke.encode_offset_commit_key(self.group, t, p), None) for t, p in sorted(self.offsets)]
        if generation > 0:
            recs.append((ke.encode_group_metadata_key(self.group), None))
        self.offsets.clear()
        if recs:
            self._append(recs)

    def clean(self, nodes) -> None:
        for n in nodes:
            pb = self.part.pbs[n]
            clean(pb, self.sim.clock, max_bytes=pb.segment_bytes)


def finish(sim, log: OffsetsLog, generation: int, spec: dict) -> None:
    """After the members left: `then` - the group deleted (DeleteGroups) or its offsets expired
    (offsets.retention.ms later) or kept; the cleaner runs on `clean` nodes, and again on
    `again` nodes after `wait` ms (past the tombstones' delete horizon when long enough)."""
    if spec["then"] == "expire":
        sim.wait(RETENTION_MS)
    if spec["then"] in ("delete", "expire"):
        log.remove(generation)
    log.clean(spec["clean"])
    sim.wait(spec["wait"])
    log.clean(spec["again"])
