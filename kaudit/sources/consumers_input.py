"""The tables `kaudit consumers` (and the HTML report's consumer charts) read from captures, made
into consumer timelines."""

from __future__ import annotations

import pyarrow as pa

from kaudit.protocol.errors import DecodeError

KINDS = ("group_event", "fetch_partition", "batch", "txn_event", "topic_name")


class ConsumerTables:
    """Collects a capture's decoded chunks of the kinds the timelines read."""

    def __init__(self):
        self.tables: dict[str, list[pa.Table]] = {}

    def add(self, kind: str, t: pa.Table) -> None:
        if kind not in KINDS or not t.num_rows:
            return
        from kaudit.audit.consumers import fold

        # only what the timelines read: the consumers' Fetch responses and fetched batches
        if kind == "fetch_partition":
            t = t.filter(fold._fetch_where(t)).select(list(fold.FETCH_COLUMNS))
        elif kind == "batch":
            t = t.filter(fold._batch_where(t)).select(list(fold.BATCH_COLUMNS))
        if t.num_rows:
            self.tables.setdefault(kind, []).append(t)

    def __bool__(self) -> bool:
        return bool(self.tables)

    def timelines(self):
        from kaudit.audit.consumers.fold import timelines_of

        merged = {k: pa.concat_tables(v, promote_options="default") for k, v in self.tables.items()}
        names = {}
        if "topic_name" in merged:
            for r in merged["topic_name"].select(["topic_id", "topic"]).to_pylist():
                if r["topic_id"] and r["topic"]:
                    names[r["topic_id"]] = r["topic"]
        return timelines_of(merged, names)


def capture_timelines(files_errors: tuple[list[str], list[str]], options) -> tuple[list[str], list]:
    """(unreadable inputs, [Timelines]) of capture files: the files given together are one
    timeline (rotated captures of one tap)."""
    from kaudit.sources.pcap import decode_capture

    files, errors = files_errors
    errors = list(errors)
    tables = ConsumerTables()
    for path in files:
        try:
            for kind, t in decode_capture(path, options):
                tables.add(kind, t)
        except (DecodeError, OSError) as e:
            errors.append(f"{path}: {e}")
    if not files or len(errors) >= len(files) + len(files_errors[1]) and not tables:
        return errors, []
    return errors, [tables.timelines()]
