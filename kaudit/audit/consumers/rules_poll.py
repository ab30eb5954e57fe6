"""The consumer rules on the order of what one consumer was served (Jepsen's nonmonotonic poll
and poll skip), on exactly-once commits, and on read_uncommitted reads of aborted data."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kaudit.audit.consumers.certify import aborted_read_suspects, poll_suspects, several_connections
from kaudit.audit.consumers.found import FOLD_NAME, MAX_FINDINGS, consumer_finding
from kaudit.audit.consumers.found import tp_name as _tp
from kaudit.audit.consumers.timeline import Timelines
from kaudit.audit.folds import np_indices
from kaudit.audit.registry import evidence, rule
from kaudit.ranges import offsets as offset_span, verb


def _resets(tl: Timelines) -> dict:
    """(client, tp) -> sorted times where the consumer's position may legitimately move: offset
    look-ups, assignments, joins and exits of its members."""
    out: dict[tuple, list] = {}
    for client, tp, ts in tl.lookups:
        out.setdefault((client, tp), []).append(ts)
    tps_of: dict[str, set] = {}
    for group, tp in tl.stints:
        tps_of.setdefault(group, set()).add(tp)
    for m in tl.members.values():
        times = [ts for ts, _, _ in m.assignments] + [ts for ts, _ in m.events]
        for tp in tps_of.get(m.group, ()):
            out.setdefault((m.client, tp), []).extend(times)
    for v in out.values():
        v.sort()
    return out


def _poll_pairs(tl: Timelines) -> list[tuple]:
    """(previous, next, last response with records) of one connection and partition with no
    position change allowed in between (no look-up, rebalance, error, nor a Fetch of that
    partition elsewhere by the client). `previous` is the last response that says where the
    client stood: one with records, or an empty one at a known fetch offset (its position did
    not move); none across bytes the capture lost on the connection. Made once per timelines: both poll rules read them. Only the pairs of the
    sequences certify.poll_suspects leaves: no other pair is a step back or a jump."""
    pairs = tl.__dict__.get("_poll_pairs")
    if pairs is None:
        pairs = tl._poll_pairs = list(_pairs(tl))
    return pairs


def _pairs(tl: Timelines):
    by_key: dict[tuple, list] = {}
    # only the sequences where a step back or a jump is possible at all (certify.py): a pair
    # elsewhere is judged clean by both rules whatever happened in between
    suspects = poll_suspects(tl.table)
    if not len(suspects):
        return
    for s in tl.table.objs(suspects):
        by_key.setdefault((s.connection, s.tp), []).append(s)
    # the (client, partition) pairs fetched on more than one connection: only there can a Fetch
    # elsewhere come between two of one connection's
    several = several_connections(tl.table)
    resets = _resets(tl)
    for (conn, tp), serves in by_key.items():
        prev = last = None   # last: the last response with records
        for s in serves:
            if prev is not None and s.fetch_offset is not None and prev.error in (0, None) \
                    and s.error in (0, None) and s.isolation == prev.isolation:
                times = resets.get((s.client, tp), ())
                if tp[0] in tl.unnamed:   # a Fetch by topic id no input named: its look-ups by name too
                    times = sorted(t for same in tl.maybe_same(tp) for t in resets.get((s.client, same), ()))
                # from when `prev` was sent: a look-up while it was in flight may precede a seek
                # (the client then drops its answer: KafkaConsumer's fetch at a stale position)
                i = bisect_left(times, prev.ts if prev.request_ts is None else prev.request_ts)
                quiet = not (i < len(times) and times[i] <= s.ts) and not (
                    (s.client, tp) in several
                    and any(o.connection != conn for o in tl.client_serves(s.client, tp, prev.ts, s.ts))) \
                    and not _lost_between(tl, conn, prev, s)
                if quiet:
                    yield prev, s, last
            if s.end is not None or s.error not in (0, None) or s.fetch_offset is not None:
                prev = s
            if s.end is not None:
                last = s
            elif s.error not in (0, None):
                last = None


def _lost_between(tl: Timelines, conn: str, prev, s) -> bool:
    """Whether the capture lost bytes between two responses of a connection, on it (a Fetch
    answered there) or on the client's other connections (Timelines.conns_of: a seek's OffsetFetch
    or ListOffsets, a rebalance) (audit.capture_holes)."""
    if not tl.holes:
        return False
    conns = {conn} | tl.conns_of([s.client])
    return tl.holes.lost_on(conns, (prev.source, prev.position), (s.source, s.position)) is not None


def _expected(prev) -> int | None:
    """Where the client's next Fetch starts: past the records it was served, else where it was."""
    return prev.end if prev.end is not None else prev.fetch_offset


@rule("consumer-nonmonotonic-poll", "warning", "wire",
      "a consumer was served a partition's records again, going backwards with no seek or rebalance seen",
      "The consumer read records it had already been served: if its application processed both deliveries, "
      "their effects happened twice. Look for a seek in the application, a paused partition whose buffered "
      "records were dropped, or a client bug.", fold=FOLD_NAME)
def check_nonmonotonic(tl: Timelines) -> list[dict]:
    """Invariant: within one assignment, a consumer's position only moves forward: each Fetch of a
    partition starts where the records it was served last ended (Fetcher: nextFetchOffset of the
    last batch; librdkafka the same); only a seek, a reset or a rebalance moves it back (Jepsen's
    nonmonotonic poll).
    Benign causes: an application seek (invisible on the wire); clients that drop the buffered
    records of a paused partition and fetch them again (the application saw them once); a
    rebalance or an offset look-up the capture does not hold (as consumer-poll-skip)."""
    out = []
    for prev, s, last in _poll_pairs(tl):
        # the records delivered below where the client stood: those of `prev`, or of the last
        # response with records when `prev` was empty
        if prev.end is not None:
            limit = prev.data_end
        else:
            limit = None if last is None or last.data_end is None else min(last.data_end, prev.fetch_offset)
        if limit is not None and 0 <= s.fetch_offset < limit:
            hi = limit - 1
            out.append(_poll_finding(
                tl, "consumer-nonmonotonic-poll",
                f"{_tp(s.tp)}: client {s.client_id} ({s.connection}) was served offsets up to {hi} (frame "
                f"{prev.position}), then fetched again from offset {s.fetch_offset} (frame {s.position}) with no "
                f"seek, offset look-up or rebalance seen: {offset_span(s.fetch_offset, hi)} {verb(s.fetch_offset, hi, 'is', 'are')} fetched a second time",
                prev, s, s.fetch_offset, hi, "fetched again"))
    return out[:MAX_FINDINGS]


@rule("consumer-poll-skip", "error", "wire",
      "a consumer's next Fetch of a partition jumped past records it was never served",
      "The consumer never read the records in the gap: look for an application seek or a client bug, "
      "and re-consume the range.", fold=FOLD_NAME)
def check_poll_skip(tl: Timelines) -> list[dict]:
    """Invariant: a consumer's next Fetch of a partition starts where the records it was last
    served ended (the position after the last batch returned; Jepsen's poll skip when it does
    not). A jump forward with no seek, offset reset or rebalance skips the records in between.
    Benign causes: an application seek (invisible on the wire); a rebalance or an offset
    look-up the capture does not hold (bytes it lost on the connection: no pair across them; a
    group member none of whose requests to its group coordinator it holds, or a client with no
    group request in a capture that reaches fewer brokers than its Metadata answers list - a
    capture of some brokers only: told at info, saying so)."""
    out = []
    for prev, s, _ in _poll_pairs(tl):
        expected = _expected(prev)
        if expected is not None and s.fetch_offset > expected:
            out.append(_poll_finding(
                tl, "consumer-poll-skip",
                f"{_tp(s.tp)}: client {s.client_id} ({s.connection}) stood at offset {expected} after the response "
                f"of frame {prev.position}, then fetched from offset {s.fetch_offset} (frame {s.position}) with no "
                f"seek, offset look-up or rebalance seen: {offset_span(expected, s.fetch_offset - 1)} {verb(expected, s.fetch_offset - 1, 'was', 'were')} skipped",
                prev, s, expected, s.fetch_offset - 1, "jumped"))
    return out[:MAX_FINDINGS]


def _poll_finding(tl: Timelines, rule_id: str, message: str, prev, s, first: int, last: int, note: str) -> dict:
    """A finding on the pair of responses (`prev`, then `s`) of one connection and partition. A
    client whose group coordinator may be outside the capture (Timelines.coordinator_unseen: a
    capture of some brokers only) may have rebalanced or fetched its committed offsets unseen:
    told at info, saying so."""
    unseen = tl.coordinator_unseen(s.client)
    if unseen:
        message += f"; {unseen}: a rebalance or an offset fetch may have moved it"
    return consumer_finding(
        rule_id, message, s.tp, first, last,
        [evidence(prev.source, prev.position, "fetch", "served"), evidence(s.source, s.position, "fetch", note)],
        start=prev.ts, end=s.ts, connection=s.connection, client_id=s.client_id,
        details={"member": s.member.member_id if s.member else None, **({"group_traffic": "not in the capture"} if unseen else {})},
        **({"severity": "info"} if unseen else {}))


@rule("eos-double-commit", "critical", "wire",
      "the same input offsets were committed by two committed transactions",
      "Two committed transactions consumed the same input records: the outputs derived from them were "
      "produced twice (exactly-once broken). Check that the application fences zombies (one "
      "transactional.id per input partition, or KIP-447's group metadata in sendOffsetsToTransaction) "
      "and that it seeks to the committed offsets after an abort; remove the duplicate outputs.", fold=FOLD_NAME)
def check_eos_double(tl: Timelines) -> list[dict]:
    """Invariant: in consume-transform-produce, a transaction commits with TxnOffsetCommit the
    position after the inputs its outputs came from, and its input range starts at the group's
    committed position (KIP-98, KIP-447: the coordinator fences stale generations). Two COMMITTED
    transactions whose input ranges overlap produced the outputs of those inputs twice. A
    transaction's input range is [the lowest offset its consumer was served since its previous
    transaction ended, the offset it committed).
    Benign causes: an aborted transaction followed by a committed one over the same inputs (the
    aborted outputs are never read by read_committed consumers) is normal and not reported."""
    txns = _transactions(tl)
    out = []
    for (group, tp), items in txns.items():
        items.sort(key=lambda x: x[0].outcome_ts)
        for i, (c2, lo2) in enumerate(items):
            for c1, lo1 in items[:i]:
                lo, hi = max(lo1, lo2), min(c1.offset, c2.offset)
                if lo >= hi or c1.txn == c2.txn:
                    continue
                out.append(consumer_finding(
                    "eos-double-commit",
                    f"group {group}, {_tp(tp)}: input {offset_span(lo, hi - 1)} {verb(lo, hi - 1, 'was', 'were')} consumed by two committed "
                    f"transactions: {c1.txn[0]} (producer {c1.txn[1]}, epoch {c1.txn[2]}) committed offset "
                    f"{c1.offset} and {c2.txn[0]} (producer {c2.txn[1]}, epoch {c2.txn[2]}) committed offset "
                    f"{c2.offset}: the outputs of those inputs were produced twice",
                    tp, lo, hi - 1, [evidence(c1.source, c1.position, "txn_offset_commit", "first"),
                                     evidence(c2.source, c2.position, "txn_offset_commit", "second")],
                    start=c1.ts, end=c2.ts, producer_id=c2.txn[1], producer_epoch=c2.txn[2],
                    transactional_id=c2.txn[0],
                    details={"group": group, "first": list(c1.txn), "second": list(c2.txn)}))
                break
    return out[:MAX_FINDINGS]


def _transactions(tl: Timelines) -> dict:
    """(group, tp) -> [(committed TxnOffsetCommit, start of its input range)]."""
    out: dict[tuple, list] = {}
    prev_end: dict[tuple, float] = {}
    by_member = {(m.group, m.member_id): m for m in tl.members.values()}
    for c in sorted((c for c in tl.commits if c.txn), key=lambda c: c.ts):
        key = (c.txn[0], c.txn[1], c.tp)
        since = prev_end.get(key, float("-inf"))
        if c.outcome_ts is not None:
            prev_end[key] = c.outcome_ts
        if c.outcome != "COMMIT":
            continue
        m = by_member.get((c.group, c.member_id))
        if m is None:   # TxnOffsetCommit v0-v2 name no member: the partition's owner then
            m = next((st.member for st in tl.stints.get((c.group, c.tp), ())
                      if st.start <= c.ts and (st.end is None or c.ts <= st.end)), None)
        served = [] if m is None else [s.first for s in tl.client_serves(m.client, c.tp, since, c.ts, open_start=True)
                                       if s.first is not None]
        lo = min(served) if served else c.offset
        out.setdefault((c.group, c.tp), []).append((c, min(lo, c.offset)))
    return out


@rule("uncommitted-aborted-read", "info", "wire",
      "a read_uncommitted consumer was served records of a transaction that later aborted",
      "Expected for isolation.level=read_uncommitted: the consumer saw records that were rolled back. "
      "If it must never act on them, use read_committed.", fold=FOLD_NAME)
def check_uncommitted_read(tl: Timelines) -> list[dict]:
    """Invariant: read_uncommitted Fetches return every record up to the high watermark, whatever
    its transaction's outcome (FetchIsolation.HIGH_WATERMARK; KIP-98): the consumer sees records of
    transactions that abort later. The outcome is the producer's next ABORT or COMMIT marker in the
    partition, as some Fetch response of the capture returned it.
    Benign causes: this is the isolation level's contract (info)."""
    table = tl.batch_table
    if table is None or not table.num_rows:
        return []
    control = table.filter(pc.fill_null(pc.and_(table.column("is_control"), pc.is_in(
        table.column("control_type"), pa.array(["ABORT", "COMMIT"]))), False))
    if not control.num_rows:
        return []
    # the batches where a finding is possible (certify.py), each judged here as it always was
    suspects = aborted_read_suspects(table, tl.table)
    if not len(suspects):
        return []
    markers: dict[tuple, list] = {}
    c = control.select(["topic", "partition", "producer_id", "base_offset", "control_type"]).to_pydict()
    for topic, partition, pid, base, kind in zip(*c.values()):
        markers.setdefault((topic, partition, pid), []).append((base, kind))
    for v in markers.values():
        v.sort()
    rows = table.take(np_indices(np.asarray(suspects)))
    ru = _read_uncommitted(tl, rows.column("position"))
    seen, out = set(), []
    for b in rows.to_pylist():
        k = (b["connection"], b["position"], (tl.names.get(b["topic"], b["topic"]), b["partition"]))
        # a batch compaction emptied (count 0) holds no record to read
        if k not in ru or not b.get("is_transactional") or b.get("is_control") or b.get("record_count") == 0:
            continue
        ms = markers.get((b["topic"], b["partition"], b["producer_id"]), ())
        # the lowest (offset, type) past the batch's last offset
        i = bisect_right(ms, (b["last_offset"], chr(0x10FFFF)))
        after = ms[i:i + 1]
        if not after or after[0][1] != "ABORT":
            continue
        key = (b["connection"], b["topic"], b["partition"], b["producer_id"], after[0][0])
        if key in seen:
            continue
        seen.add(key)
        out.append(consumer_finding(
            "uncommitted-aborted-read",
            f"{b['topic']}-{b['partition']}: a read_uncommitted consumer ({b['connection']}) was served producer "
            f"{b['producer_id']}'s records at {offset_span(b['base_offset'], b['last_offset'])} (frame {b['position']}) "
            f"of a transaction that aborted (ABORT marker at offset {after[0][0]})",
            (b["topic"], b["partition"]), b["base_offset"], b["last_offset"],
            [evidence(b.get("source"), b["position"], "fetch")], start=ru[k], connection=b["connection"],
            producer_id=b["producer_id"], producer_epoch=b["producer_epoch"]))
        if len(out) == MAX_FINDINGS:
            break   # the rule tells no more
    return out[:MAX_FINDINGS]


def _read_uncommitted(tl: Timelines, positions) -> dict:
    """(connection, position, tp) -> response time of the read_uncommitted responses with records
    at the given positions (the last one of a key, as they come)."""
    t = tl.table
    ru = t.has_end & (t.iso == (t.isos.index("read_uncommitted") if "read_uncommitted" in t.isos else -1))
    rows = np.flatnonzero(ru & np.isin(t.position, positions.to_numpy(zero_copy_only=False)))
    return {(t.conns[t.conn[i]], int(t.position[i]), t.tps[t.tp[i]]): float(t.ts[i]) for i in rows.tolist()}
