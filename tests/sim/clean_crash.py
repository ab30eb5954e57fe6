"""A cleaning round interrupted: the broker died (or its log dir was copied) while the log
cleaner swapped a cleaned segment in, leaving `.cleaned`, `.swap` and `.deleted` files in the
partition dir.

Facts (apache/kafka at 1eb7644: LogCleaner.scala `cleanSegments`, storage/.../LocalLog.java
`replaceSegments`, UnifiedLog.replaceSegments, storage/.../LogLoader.java `load` and
`removeTempFilesAndCollectSwapFiles`):

- A round cleans its groups one by one; each group's segment is written as `<base>.log.cleaned`
  (with its `.index`, `.timeindex`, `.txnindex` `.cleaned`), then renamed `.swap`, then each old
  segment of the group, in ascending offsets, is renamed `.deleted` (asynchronous deletion after
  file.delete.delay.ms, 60 s), then the swap files lose their suffix; the replaced segments'
  producer snapshots are renamed `.deleted` too. The cleaner-offset-checkpoint is written once the
  whole round is done (LogCleanerManager.doneCleaning): an interrupted round leaves it as it was.
- Kafka's recovery: `.deleted` files are deleted; `.cleaned` files are deleted, and so is every
  `.swap` file at or past the lowest `.cleaned` offset (an incomplete swap); a remaining `.swap`
  log's range [its base, its next offset) names the files it replaces - every other file whose
  name's offset is in it (segments and snapshots) is deleted - and the swap files are renamed.
  So the recovered log is the old segments while a `.cleaned` file is there, the cleaned segment
  from the moment the group's `.swap` exists.

Stages (`stage`, of the group `at`; the groups before it completed, their old files still there
as `.deleted` when `lingering`): `cleaned` (the `.cleaned` segment, cut short mid-write when
`partial`), `swap` (renamed `.swap`, the old segments untouched), `swap_deleting` (and the first
`deleted` of them renamed `.deleted`), `deleting` (the swap done, the old files `.deleted`)."""

from __future__ import annotations

from fixtures import kafka_encoder as ke
from tests.sim.compaction import plan_round, replace

STAGES = ("cleaned", "swap", "swap_deleting", "deleting")


def interrupted_clean(pb, now: int, cut: dict) -> str | None:
    """A round of `pb`'s cleaner stopped at `cut` (see the module); None when nothing is dirty."""
    planned = plan_round(pb, now, max_bytes=pb.segment_bytes)
    if planned is None:
        return None
    done, _latest = planned
    k = min(cut["at"], len(done) - 1)
    for group, out in done[:k]:
        _swapped(pb, group, out, lingering=cut["lingering"])
    group, out = done[k]
    stage = cut["stage"]
    if stage == "deleting":
        _swapped(pb, group, out, lingering=True)
        return stage
    out.suffix = ".cleaned" if stage == "cleaned" else ".swap"
    if stage == "cleaned" and cut["partial"] and len(out.data) > 1:
        out.data = out.data[:len(out.data) // 2]          # the broker died mid-write
    pb.segments.insert(pb.segments.index(group[-1]) + 1, out)
    if stage == "swap_deleting":
        for s in group[:1 + cut["deleted"] % len(group)]:
            s.suffix = ".deleted"
    return stage


def _swapped(pb, group: list, out, *, lingering: bool) -> None:
    """The group's swap completed; its old files still there as `.deleted` when `lingering`
    (their asynchronous deletion not run yet)."""
    snaps = {s.base_offset: pb.snapshots.get(s.base_offset) for s in group[1:]}
    replace(pb, group, out)
    if not lingering:
        return
    i = pb.segments.index(out)
    for s in group:
        s.suffix = ".deleted"
    pb.segments[i:i] = group
    for off, data in snaps.items():
        if data is not None:
            pb.add_file(ke.segment_file_name(off, ".snapshot.deleted"), data)
