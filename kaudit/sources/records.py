"""Record-level rows: `record` rows with --deep, and the coordinator rows of internal topics
(`__transaction_state` -> txn_log, `__consumer_offsets` -> offset_commit / group_metadata,
`__cluster_metadata` and its snapshots -> metadata_record, control records included),
which are always decoded because the audit needs them."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from kaudit.model import SCHEMAS, table_from_rows
from kaudit.protocol import coordinator
from kaudit.protocol.errors import DecodeError
from kaudit.protocol.metadata import rows as metadata_rows
from kaudit.protocol.record_batch import decode_entry
from kaudit.sources import record_columns

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
METADATA_TOPIC = metadata_rows.TOPIC_NAME
REMOTE_TOPIC = metadata_rows.REMOTE_TOPIC
FLUSH_ROWS = 8192
_COLUMNS: dict[str, frozenset] = {}   # a row kind's column names (Schema.names builds a list per call)
FLUSH_RECORD_BYTES = 4 << 20  # record rows are handed on before their keys and values pass this


class RecordRows:
    """Accumulates record-level rows for one file and hands them out as tables."""

    def __init__(self, place: dict, topic: str | None, deep: bool, max_batch_bytes: int):
        self.place = place
        self.deep = deep
        self.internal = topic if topic in (TXN_TOPIC, OFFSETS_TOPIC, METADATA_TOPIC, REMOTE_TOPIC) else None
        self.wanted = deep or self.internal is not None
        self.max_batch_bytes = max_batch_bytes
        # kind -> dict rows; "record" -> a record_columns builder (the kinds keep the order in
        # which their first row came, as tables are handed on in that order)
        self.rows: dict[str, object] = {}
        self.ready: list[tuple[str, pa.Table]] = []  # record tables cut before a flush

    def add_v2(self, buf, position: int) -> None:
        self.add_v2_run(buf, [position])

    def add_v2_run(self, buf, positions) -> None:
        """The records of the v2 batches at `positions` (a run the batch scan took), in order:
        the builder walks as many as it can in one call; a batch it declines goes through
        `add_entry`. Record tables are cut whenever the rows pass FLUSH_RECORD_BYTES."""
        if not (self.deep and not self.internal):
            for p in positions:
                self.add_entry(buf, p, 2)
            return
        cols = self._records()
        i, n = 0, len(positions)
        while i < n:
            j, declined = cols.add_batches(buf, positions, i, self.max_batch_bytes, FLUSH_RECORD_BYTES)
            if j > i and cols.nbytes >= FLUSH_RECORD_BYTES:
                self.ready.append(("record", record_columns.table(self.place, cols.take())))
            if declined:
                self.add_entry(buf, positions[j], 2)
                j += 1
            i = j

    def _records(self):
        cols = self.rows.get("record")
        if cols is None:
            cols = self.rows["record"] = record_columns.builder()
        return cols

    def add_entry(self, buf, position: int, magic: int) -> None:
        if not self.wanted:
            return
        try:
            batch, _ = decode_entry(buf, position, deep=True, max_batch_bytes=self.max_batch_bytes)
        except DecodeError as e:
            self._row("decode_issue", {
                "position": e.position if e.position >= 0 else position,
                "length": None, "issue": "records", "message": f"records of the batch at "
                f"{position} do not decode: {e.message}", "resync_position": None})
            return
        if self.deep:
            cols = self._records()
            for r in batch.records:
                cols.append(position, batch.base_offset, r.offset, r.timestamp_ms, r.sequence,
                            r.key, r.value, ",".join(k for k, _ in r.headers), r.headers_json(),
                            batch.control_type, batch.coordinator_epoch)
        if self.internal in (METADATA_TOPIC, REMOTE_TOPIC):
            for r in batch.records:
                self._metadata(batch, r, position)
        elif self.internal and not batch.is_control:
            for r in batch.records:
                self._internal(batch, r, position)

    def _metadata(self, batch, r, position: int) -> None:
        d = metadata_rows.decode_record(batch, r, self.internal)
        if d is None:
            return
        row = metadata_rows.row_fields(d)
        row.update(position=position, offset=r.offset, timestamp_ms=r.timestamp_ms,
                   raft_epoch=batch.partition_leader_epoch, is_control=batch.is_control)
        self._row("metadata_record", row)
        if d.issue is not None and d.issue != "not-decoded":
            self._row("decode_issue", {
                "position": position, "length": None, "issue": f"metadata-{d.issue}",
                "message": f"{self.internal} record at offset {r.offset}: {d.detail}",
                "resync_position": None})

    def _internal(self, batch, r, position: int) -> None:
        common = {"position": position, "offset": r.offset, "timestamp_ms": r.timestamp_ms}
        try:
            if self.internal == TXN_TOPIC:
                row = coordinator.decode_txn_log_record(r.key, r.value)
                kind = "txn_log"
            else:
                kind, row = coordinator.decode_offsets_record(r.key, r.value)
                if kind == "offset_commit":
                    row["producer_id"] = batch.producer_id
                    row["is_transactional"] = batch.is_transactional
        except DecodeError as e:
            self._row("decode_issue", {
                "position": position, "length": None, "issue": "coordinator-record",
                "message": f"{self.internal} record at offset {r.offset}: {e.message}",
                "resync_position": None})
            return
        if kind not in ("txn_log", "offset_commit", "group_metadata"):
            return  # newer record types of __consumer_offsets: recognised, not modelled
        names = _COLUMNS.get(kind) or _COLUMNS.setdefault(kind, frozenset(SCHEMAS[kind].names))
        row = {k: v for k, v in row.items() if k in names}  # decoders may say more than the row
        row.update(common)
        self._row(kind, row)

    def _row(self, kind: str, row: dict) -> None:
        row.update(self.place)
        self.rows.setdefault(kind, []).append(row)

    def flush(self) -> Iterator[tuple[str, pa.Table]]:
        rows, self.rows = self.rows, {}
        ready, self.ready = self.ready, []
        yield from ready
        for kind, items in rows.items():
            if kind == "record":
                if len(items):
                    yield kind, record_columns.table(self.place, items.take())
            else:
                yield kind, table_from_rows(kind, items)
