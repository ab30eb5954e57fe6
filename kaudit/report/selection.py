"""What a person asked to see: `--topic`, `--partition`, `--producer-id`, `--transactional-id`,
`--since`, `--until` (and `--min-severity` for findings). Audit commands select findings (the
rules always see every row: a duplicate's original may lie outside the selection); decode
commands select rows, kind by kind, by the columns a kind has."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from kaudit.timefmt import iso_ms

# Rows that describe the inputs rather than the data: kept unless a column they have excludes them.
CONTEXT_KINDS = frozenset({"log_dir", "skipped", "decode_issue", "connection", "partition_metadata", "topic_name"})
# Per kind, the columns of a row's time span (epoch ms, or capture seconds for wire rows).
_TIME_MS = {"batch": ("base_timestamp_ms", "max_timestamp_ms"), "record": ("timestamp_ms", "timestamp_ms"),
            "txn_log": ("timestamp_ms", "timestamp_ms"), "offset_commit": ("timestamp_ms", "timestamp_ms"),
            "group_metadata": ("timestamp_ms", "timestamp_ms"), "snapshot_entry": ("timestamp_ms", "timestamp_ms"),
            "index_entry": ("timestamp_ms", "timestamp_ms")}
_TIME_S = {"frame": ("request_ts", "response_ts"), "txn_event": ("ts", "ts"), "fetch_partition": ("request_ts", "response_ts"),
           "connection": ("first_ts", "last_ts"), "topic_name": ("ts", "ts")}


@dataclass(frozen=True)
class Selection:
    topic: tuple[str, ...] = ()
    partition: tuple[int, ...] = ()
    producer_id: tuple[int, ...] = ()
    transactional_id: tuple[str, ...] = ()
    since_ms: int | None = None
    until_ms: int | None = None
    min_severity: str | None = None

    def __bool__(self) -> bool:
        return bool(self.topic or self.partition or self.producer_id or self.transactional_id
                    or self.since_ms is not None or self.until_ms is not None)

    def text(self) -> str:
        parts = [f"topic {', '.join(self.topic)}" if self.topic else "",
                 f"partition {', '.join(map(str, self.partition))}" if self.partition else "",
                 f"producer id {', '.join(map(str, self.producer_id))}" if self.producer_id else "",
                 f"transactional id {', '.join(self.transactional_id)}" if self.transactional_id else "",
                 f"since {iso_ms(self.since_ms)}" if self.since_ms is not None else "",
                 f"until {iso_ms(self.until_ms)}" if self.until_ms is not None else "",
                 f"severity {self.min_severity} and above" if self.min_severity else ""]
        return "; ".join(p for p in parts if p) or "everything"

    # -- findings --------------------------------------------------------------------------
    def finding(self, f: dict) -> bool:
        from kaudit.audit import SEVERITY_RANK   # here: a decode's selection imports no audit module

        if self.min_severity and SEVERITY_RANK[f["severity"]] < SEVERITY_RANK[self.min_severity]:
            return False
        if self.topic and f.get("topic") not in self.topic:
            return False
        if self.partition and f.get("partition") not in self.partition:
            return False
        if self.producer_id and f.get("producer_id") not in self.producer_id:
            return False
        if self.transactional_id and f.get("transactional_id") not in self.transactional_id:
            return False
        lo, hi = f.get("first_ts_ms"), f.get("last_ts_ms")
        lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
        if self.since_ms is not None and (hi is None or hi < self.since_ms):
            return False
        if self.until_ms is not None and (lo is None or lo > self.until_ms):
            return False
        return True

    # -- decoded rows ----------------------------------------------------------------------
    def rows(self, kind: str, t: pa.Table) -> pa.Table | None:
        """The rows of a decoded chunk in the selection (None: none). A kind without a
        selected column has no row in it, context kinds apart."""
        if not self or t.num_rows == 0:
            return t
        import pyarrow.compute as pc   # here: an unselected decode need not import it

        names = set(t.column_names)
        mask = None
        for col, values in (("topic", self.topic), ("partition", self.partition),
                            ("producer_id", self.producer_id), ("transactional_id", self.transactional_id)):
            if not values:
                continue
            if col not in names:
                if kind in CONTEXT_KINDS:
                    continue
                return None
            m = pc.is_in(t.column(col), value_set=pa.array(list(values), t.schema.field(col).type))
            mask = m if mask is None else pc.and_(mask, m)
        span = _TIME_MS.get(kind) or _TIME_S.get(kind)
        if self.since_ms is not None or self.until_ms is not None:
            if span is None or not {span[0], span[1]} <= names:
                if kind not in CONTEXT_KINDS:
                    return None
            else:
                scale = 1.0 if kind in _TIME_MS else 1000.0
                lo = pc.multiply(pc.cast(t.column(span[0]), pa.float64()), scale)
                hi = pc.multiply(pc.cast(pc.coalesce(t.column(span[1]), t.column(span[0])), pa.float64()), scale)
                if self.since_ms is not None:
                    m = pc.greater_equal(pc.coalesce(hi, lo), float(self.since_ms))
                    mask = m if mask is None else pc.and_(mask, m)
                if self.until_ms is not None:
                    m = pc.less_equal(pc.coalesce(lo, hi), float(self.until_ms))
                    mask = m if mask is None else pc.and_(mask, m)
        if mask is None:
            return t
        t = t.filter(pc.fill_null(mask, False))
        return t if t.num_rows else None

    def unmatched(self, seen: dict) -> str | None:
        """What the selection names that the inputs do not hold (`seen`: engine.coverage's
        inventory), in words; None when each selected value occurs (or cannot be told)."""
        out = []
        for name, key, values in (("topic", "topics", self.topic), ("producer id", "producer_ids", self.producer_id),
                                  ("transactional id", "transactional_ids", self.transactional_id)):
            have = seen.get(key)
            if values and have is not None and not set(values) & set(have):
                shown = ", ".join(map(str, sorted(have, key=str)[:12])) or "none"
                out.append(f"no {name} {', '.join(map(str, values))} (the input holds {name}s: {shown})")
        have = seen.get("partitions")
        if self.partition and have is not None:
            names = [p for p in have if not self.topic or p.rsplit("-", 1)[0] in self.topic]
            if not any(int(p.rsplit("-", 1)[1]) in self.partition for p in names):
                out.append(f"no partition {', '.join(map(str, self.partition))}"
                           + (f" of {', '.join(self.topic)}" if self.topic else ""))
        lo, hi = seen.get("min_ts_ms"), seen.get("max_ts_ms")
        if lo is not None and hi is not None:
            if self.since_ms is not None and self.since_ms > hi or self.until_ms is not None and self.until_ms < lo:
                out.append(f"the evidence spans {iso_ms(lo)} to {iso_ms(hi)}")
        return "; ".join(out) or None

