"""The tables `kaudit consumers` reads from captures, made into consumer timelines."""

from __future__ import annotations

import pyarrow as pa

from kaudit.protocol.errors import DecodeError

KINDS = ("group_event", "fetch_partition", "batch", "txn_event", "topic_name")


def capture_timelines(files_errors: tuple[list[str], list[str]], options) -> tuple[list[str], list]:
    """(unreadable inputs, [Timelines]) of capture files: the files given together are one
    timeline (rotated captures of one tap)."""
    from kaudit.audit.consumers.fold import timelines_of
    from kaudit.sources.pcap import decode_capture

    files, errors = files_errors
    errors = list(errors)
    tables: dict[str, list[pa.Table]] = {}
    for path in files:
        try:
            for kind, t in decode_capture(path, options):
                if kind in KINDS and t.num_rows:
                    tables.setdefault(kind, []).append(t)
        except (DecodeError, OSError) as e:
            errors.append(f"{path}: {e}")
    if not files or len(errors) >= len(files) + len(files_errors[1]) and not tables:
        return errors, []
    merged = {k: pa.concat_tables(v, promote_options="default") for k, v in tables.items()}
    names = {}
    if "topic_name" in merged:
        for r in merged["topic_name"].select(["topic_id", "topic"]).to_pylist():
            if r["topic_id"] and r["topic"]:
                names[r["topic_id"]] = r["topic"]
    return errors, [timelines_of(merged, names)]
