"""An incident's impact, in words: what consumers saw, from the findings' own numbers (offsets,
times) - never more than the evidence shows (report.story's narrative)."""

from __future__ import annotations

from collections import defaultdict

from kaudit.audit.stories.incidents import details_of as details
from kaudit.ranges import offsets as offset_span
from kaudit.timefmt import duration, iso_ms

# what the consumer rules' records suffered, as an impact says it
CONSUMED = {"consumer-redelivery": "served twice: possibly processed twice",
            "consumer-commit-beyond-served": "skipped: committed over, never served to the group",
            "consumer-reset-skip": "skipped: the consumer reset past them", "consumer-start-beyond-commit":
            "skipped: the member started past them", "consumer-poll-skip": "skipped: the consumer fetched past them",
            "consumer-nonmonotonic-poll": "fetched a second time by the same consumer",
            "eos-double-commit": "consumed by two committed transactions: their outputs were produced twice",
            "uncommitted-aborted-read": "read by a read_uncommitted consumer, then aborted"}


def reused(f: dict) -> bool:
    """A duplicate-batch whose second copy holds other records (sequences reused, not a retry)."""
    return f["rule"] == "duplicate-batch" and details(f).get("payload") == "different"


def _offsets(a, b) -> str:
    return f"{a}" if b is None or a == b else f"{a}-{b}"


def _state_impact(by: dict) -> list[str]:
    """A replica's own files against each other and the other replicas: what consumers read from
    it, were it the leader (the findings' own words say why)."""
    out = []
    for f in by.get("replica-divergence", [])[:2]:
        if f["severity"] in ("error", "critical"):
            out.append(f"replica {f.get('replica')} of {f['topic']}-{f['partition']} differs from the others at "
                       f"{offset_span(f['first_offset'], f.get('last_offset'))}: consumers read what the leader holds")
    for f in by.get("checkpoint-mismatch", [])[:1]:
        if f["severity"] in ("error", "critical"):
            out.append(f"{f['topic']}-{f['partition']} (replica {f.get('replica')}): records its checkpoints say "
                       "it held are gone from its log")
    for f in by.get("txnindex-mismatch", [])[:1]:
        out.append(f"{f['topic']}-{f['partition']} (replica {f.get('replica')}): read_committed consumers get their "
                   "aborted transactions from its .txnindex, which does not match its log")
    return out


def _zombie_impact(by: dict) -> list[str]:
    """What became of a zombie's writes, from the findings only: stored (where, and whether a
    COMMIT exposed them), refused (the requests the evidence shows), or not in the evidence."""
    out = []
    stale = by.get("write-after-epoch-end", [])
    for f in stale[:3]:
        d = details(f)
        where = f"{f['topic']}-{f['partition']}@{_offsets(f['first_offset'], f.get('last_offset'))}"
        if d.get("how_known") == "kip360":   # an idempotent producer's old id (wire_produce._after_move)
            out.append(f"the writes at {where} under producer id {f['producer_id']} were stored after its client "
                       f"had moved to producer id {d.get('next_producer_id')}: a broker does not fence an idempotent "
                       "producer id, so consumers read them - twice if the client also re-sent them under the new id")
        elif d.get("outcome") == "committed":
            out.append(f"the zombie's writes at {where} were stored and a later COMMIT exposed them: "
                       "read_committed consumers read data of a fenced instance")
        elif d.get("outcome") == "aborted":
            out.append(f"the zombie's writes at {where} were stored after its epoch ended; an ABORT discarded "
                       "them (read_uncommitted consumers read them)")
        else:
            out.append(f"the zombie's writes at {where} were stored after its epoch ended and no marker ends them")
    out += _moved(stale)
    fenced = by.get("fenced-epoch", [])
    stored = [f for f in fenced if f["severity"] in ("error", "critical")]
    if stored:
        out.append("the zombie's writes at " + ", ".join(
            f"{f['topic']}-{f['partition']} {offset_span(f['first_offset'], f.get('last_offset'))}" for f in stored[:3])
            + " were stored: consumers read data of a fenced instance")
    refused = [f for f in fenced if f not in stored]
    if refused and not stale and not stored:
        out.append(f"the brokers refused the zombie's {len(refused)} request(s) in the evidence: those were not "
                   "stored (whether it sent others elsewhere the evidence does not show)")
    elif refused:
        out.append(f"the brokers refused {len(refused)} other request(s) of the zombie")
    for f in by.get("coordinator-abort", [])[:1]:
        out.append(f"the coordinator aborted its open transaction ({details(f).get('cause') or 'fencing'}): "
                   "read_committed consumers skip that data")
    return out


def _moved(stale: list[dict]) -> list[str]:
    """The transactional id's move to a newer producer id (txn_lineage), told once: the zombie's
    producer id and its successor are one application's history."""
    for f in stale:
        d = details(f)
        hist = d.get("transactional_id_history") or {}
        if d.get("next_producer_id") is not None and hist:
            chain = " -> ".join(map(str, hist.get("producer_ids") or ()))
            return [f"producer id {f['producer_id']} was transactional id {hist.get('transactional_id')!r}'s until it "
                    f"moved to producer id {d['next_producer_id']} (its producer ids: {chain}); a writer still "
                    f"holding {f['producer_id']} is a zombie of that application"]
    return []


def _torn_impact(d: dict) -> list[str]:
    """Per damaged stretch of a torn transaction, what read_committed consumers see against what
    the coordinator decided."""
    decided = d.get("coordinator_result")
    damaged = d.get("damaged")
    if not damaged:   # an older finding: its per-partition results only
        res = d.get("results") or {}
        return ["consumers saw part of one transaction: " + ", ".join(f"{k} {v or 'no marker'}" for k, v in sorted(res.items()))]
    out = []
    for tp, lo, hi, result, marker in damaged:
        if lo is None:
            continue
        where = f"{tp} offset{'s' if hi not in (None, lo) else ''} {_offsets(lo, hi)}"
        if result is None:
            out.append(f"{where}: no marker - read_committed consumers of {tp} stop at offset {lo}")
        elif decided == "COMMIT" and result == "ABORT":
            out.append(f"{where}: aborted though the coordinator committed the transaction: committed data "
                       "lost to read_committed consumers")
        elif decided == "ABORT" and result == "COMMIT":
            out.append(f"{where}: committed though the coordinator aborted the transaction: read_committed "
                       "consumers read data that should not exist")
        else:
            out.append(f"{where}: {result or 'no marker'}")
    if decided is None:
        out = ["the transaction's partitions ended differently (" + "; ".join(out) + "); the coordinator's "
               "decision is not in the evidence"]
    return out


def _open_or_late(by: dict, stalled: list[dict], reference_ms: int | None) -> list[str]:
    """What a late write's outcome and an open transaction mean to read_committed consumers."""
    lines = []
    for f in by.get("late-transactional-write", []):
        out = str(details(f).get("outcome") or "")
        late = f"{f['topic']}-{f['partition']}: data written after its transaction ended (offsets " \
               f"{_offsets(f['first_offset'], f.get('last_offset'))}): {out}"
        if "committed by the next" in out or f["severity"] == "critical":   # aborted data exposed
            lines.append(f"{late}; read_committed consumers read it")
        elif "aborted by the next" in out:   # its writer meant it for a transaction of its own
            lines.append(f"{late}; read_committed consumers never read it")
    stalled_at = {(f["topic"], f["partition"]) for f in stalled}
    for f in by.get("dangling-transaction", [])[:2]:
        if (f.get("topic"), f.get("partition")) in stalled_at or f.get("first_offset") is None:
            continue
        since = f.get("first_ts_ms")
        held = f" ({duration(reference_ms - since)} by the end of the evidence)" \
            if since is not None and reference_ms is not None else ""
        lines.append(f"read_committed consumers of {f['topic']}-{f['partition']} cannot read past offset "
                     f"{f['first_offset']} while it is open{held}")
    return lines


def impact(inc: dict, fs: list[dict], reference_ms: int | None) -> str:
    """What consumers saw, in words (the evidence's own numbers: offsets, times)."""
    by = defaultdict(list)
    for f in fs:
        by[f["rule"]].append(f)
    stalled = list({(f["topic"], f["partition"], f["first_offset"]): f for f in
                    reversed(by.get("hanging-transaction", []) + by.get("lso-stuck", []))}.values())[::-1]
    lines = _stalled_impact(stalled, reference_ms) + _replicas_impact(by)
    for f in by.get("torn-transaction", [])[:2]:
        lines.extend(_torn_impact(details(f)))
    lines += _copies_impact(by)
    lines.extend(_open_or_late(by, stalled, reference_ms))
    for f in by.get("non-transactional-write-in-transaction", [])[:1]:
        lines.append(f"{f['topic']}-{f['partition']}: writes outside the transaction are read whatever its outcome")
    if by.get("fenced-epoch") or by.get("write-after-epoch-end"):
        lines.extend(_zombie_impact(by))
    lines += _lost_impact(by)
    lines.extend(_state_impact(by))
    lines += _read_impact(by, fs)
    if not lines:
        seq = [f for f in fs if f["rule"] == "out-of-order-sequence"]
        # refused (warning: the broker's error answer) - the only sequence findings here
        refused = seq and all(f["severity"] == "warning" for f in seq)
        lines.append("the broker refused these batches with an error: it did not store them" if refused else
                     "the evidence shows no damage consumers would see" if not inc["consumer_visible"]
                     else "see the findings")
    return "; ".join(dict.fromkeys(lines))


def _stalled_impact(stalled: list[dict], reference_ms: int | None) -> list[str]:
    """read_committed consumers held at a hanging transaction's first offset (or a stuck LSO)."""
    lines = []
    for f in stalled[:4]:
        since = f.get("first_ts_ms")
        held = f" for {duration(reference_ms - since)}" if since is not None and reference_ms is not None else ""
        lines.append(f"read_committed consumers of {f['topic']}-{f['partition']} stopped at offset "
                     f"{f['first_offset']} since {iso_ms(since)}{held} (read_uncommitted consumers read on)")
    return lines


def _replicas_impact(by: dict) -> list[str]:
    """An unclean election's lost records, replicas that disagree or miss segments."""
    lines = []
    for f in by.get("unclean-leader-election", [])[:2]:
        d = details(f)
        lost = ", ".join(f"replica {r} offsets {_offsets(a, b)}" for r, (a, b) in sorted((d.get("lost") or {}).items()))
        lines.append(f"{f['topic']}-{f['partition']}: broker {d.get('leader')} leads from offset "
                     f"{d.get('new_leader_start_offset')} without the previous leader's later records"
                     + (f" ({lost}): consumers never read them, and they are deleted when those brokers rejoin"
                        if lost else ""))
    for f in (by.get("unexplained-divergence", []) + by.get("missing-segments", []))[:2]:
        lines.append(f"{f['topic']}-{f['partition']}: replicas disagree at committed offsets from "
                     f"{f.get('first_offset')}: consumers read different records depending on the leader"
                     if f["rule"] == "unexplained-divergence" else
                     f"{f['topic']}-{f['partition']}: offsets {_offsets(f['first_offset'], f.get('last_offset'))} "
                     f"cannot be read from replica {f.get('replica')}")
    return lines


def _copies_impact(by: dict) -> list[str]:
    """Records stored twice (or sequences reused), and an application's repeated records."""
    lines = []
    for f in (by.get("duplicate-batch", []) + by.get("duplicate-records", []))[:1]:
        d = details(f)
        a, b = d.get("original_first_offset"), d.get("original_last_offset")
        if f.get("first_offset") is not None and reused(f):
            what = ("another batch's records" if d.get("original_batch_sequences") else "other records")
            lines.append(f"offsets {_offsets(f['first_offset'], f.get('last_offset'))} hold {what} under "
                         f"sequences already stored at offsets {_offsets(a, b)}: not a copy - the producer's "
                         f"sequence numbers were reused, so records may be missing or out of order")
        elif f.get("first_offset") is not None and d.get("payload") == "unknown":
            lines.append(f"offsets {_offsets(f['first_offset'], f.get('last_offset'))} hold sequences already stored "
                         f"at offsets {_offsets(a, b)}, whose records were not compared: the same records twice "
                         "(consumers process them twice) if it is a copy, else reused sequence numbers")
        elif f.get("first_offset") is not None:
            n = (f["last_offset"] - f["first_offset"] + 1) if f.get("last_offset") is not None else None
            if b is None and a is not None and n:
                b = a + n - 1
            lines.append(f"records visible twice: offsets {_offsets(f['first_offset'], f.get('last_offset'))} repeat "
                         f"offsets {_offsets(a, b)}" + (f" ({n} record(s) delivered twice)" if n else ""))
    for f in by.get("repeated-records", [])[:1]:
        d = details(f)
        lines.append(f"{d.get('repeats')} batch(es) of {f['topic']}-{f['partition']} repeat earlier records "
                     f"(first at offsets {_offsets(*(d.get('first_repeat_offsets') or [f['first_offset'], None]))}, "
                     f"the same as offsets {_offsets(d.get('original_first_offset'), d.get('original_last_offset'))}); "
                     "consumers read every copy. No timestamp and no sign of a failed send: most likely the "
                     "application sending the same values again, not a retry")
    return lines


def _lost_impact(by: dict) -> list[str]:
    """Sequences not in the log, what the client was told against the log, offsets gone."""
    lines = []
    gaps = [f for f in by.get("out-of-order-sequence", []) if details(f).get("kind") == "gap"
            and f["severity"] in ("error", "critical")]
    for f in gaps[:1]:
        d = details(f)
        lines.append(f"sequences {d.get('expected_sequence')}-{(f.get('base_sequence') or 0) - 1} of producer "
                     f"{f['producer_id']} are not in the log: lost if they were acknowledged")
    for f in by.get("outcome-mismatch", [])[:1]:
        lines.append(f"what the client was told differs from the log: {f['message']}")
    for f in by.get("missing-offsets", [])[:3]:
        lines.append(f"offsets {_offsets(f['first_offset'], f.get('last_offset'))} of {f['topic']}-{f['partition']} "
                     f"are gone from replica {f.get('replica')}: consumers reading it cannot read them (a fetch at a "
                     "missing offset returns the next batch; past the log end it fails OFFSET_OUT_OF_RANGE)")
    return lines


def _read_impact(by: dict, fs: list[dict]) -> list[str]:
    """Corrupt bytes consumers fail on, and what the consumers' own findings say they read."""
    lines = []
    for f in (by.get("crc-mismatch", []) + by.get("corrupt-batch", []))[:1]:
        lines.append(f"consumers fetching offsets around {f.get('first_offset')} of {f.get('topic')}-{f.get('partition')} "
                     "(replica " + str(f.get("replica")) + ") fail on corrupt bytes (CorruptRecordException)")
    for f in [f for f in fs if f["rule"] in CONSUMED][:3]:
        group = details(f).get("group")
        lines.append(f"{'group ' + group + ', ' if group else ''}{f['topic']}-{f['partition']}: offsets "
                     f"{_offsets(f['first_offset'], f.get('last_offset'))} {CONSUMED[f['rule']]}")
    return lines
