"""Upserts and deletes for primary-key tables: validated on call, merged and committed per bucket on flush."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import DeletionDisabledError, UnsupportedOperationError
from fluss_lake.kv.kv_tablet import ChangeImage
from fluss_lake.kv.merge import create_row_merger
from fluss_lake.write.append_writer import split_by_bucket
from fluss_lake.write.bucket_assigner import assign_buckets
from fluss_lake.write.validate import conform, to_frame
from fluss_lake.write.write_result import WriteResult

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["UpsertWriter"]

_OP = "__is_delete"


class UpsertWriter:
    """Writes upserts and deletes of one kind (full rows, or a fixed set of target columns).

    All calls between two flushes form one write batch per bucket, merged in call order; once
    `buffer_rows` rows are waiting they are sent as a batch without waiting for ``flush``.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("crm")
    >>> _ = conn.create_table("crm.c360", schema={"id": "INT", "email": "STRING", "visits": "INT"},
    ...                       primary_key=["id"])
    >>> t = conn.get_table("crm.c360")
    >>> _ = t.upsert([{"id": 1, "email": "a@x"}], target_columns=["id", "email"])
    >>> _ = t.upsert([{"id": 1, "visits": 3}], target_columns=["id", "visits"])
    >>> t.to_polars().to_dicts()
    [{'id': 1, 'email': 'a@x', 'visits': 3}]
    """

    def __init__(self, table: "Table", *, target_columns: Sequence[str] | None = None,
                 merge_mode: str = "default", buffer_rows: int = 1_000_000) -> None:
        if not table.is_primary_key_table:
            raise UnsupportedOperationError(f"{table.path} is a log table; use new_append() (upserts and deletes "
                                            "need a primary key)")
        self.table = table
        self.buffer_rows = buffer_rows
        spec = table.merge_spec
        self.target_columns = tuple(target_columns) if target_columns is not None else None
        self.merger = create_row_merger(spec, target_columns=self.target_columns, merge_mode=merge_mode)  # type: ignore[arg-type]
        self.merge_mode = merge_mode
        partial = self.target_columns is not None and set(self.target_columns) != set(spec.columns)
        self.partial = partial
        wal = table.info.options.get(opt.CHANGELOG_IMAGE, "full") == "wal"
        self.image = ChangeImage(wal=wal, inserts_as_updates=wal and spec.merge_engine is None and not partial)
        self._buffer: list[pl.DataFrame] = []
        self._buffered_rows = 0
        self._done = WriteResult()
        self.writer_id = uuid.uuid4().hex
        self._sequences: dict[int, int] = {}
        self._pending: dict[int, tuple[pl.DataFrame, int]] = {}

    def upsert(self, data: Any) -> None:
        """Validate and buffer upserts (raises before buffering anything if they do not fit)."""
        schema = self.table.schema
        frame = to_frame(data, schema)
        if self.partial:
            assert self.target_columns is not None
            frame = frame.select([c for c in frame.columns if c in self.target_columns] +
                                 [c for c in frame.columns if c not in schema.names])
            required: Sequence[str] = self.target_columns
        else:
            required = schema.names
        frame = conform(frame, schema, required=required, key_columns=schema.primary_key,
                        not_null_checked=[] if self.partial else [c.name for c in schema.columns if not c.nullable])
        if frame.height:
            self._buffer_frame(frame.with_columns(pl.lit(False).alias(_OP)))

    def delete(self, keys: Any) -> None:
        """Validate and buffer deletes by primary key (other columns are ignored)."""
        schema = self.table.schema
        if self.merge_mode == "default" and self.table.merge_spec.delete_behavior == "disable":
            raise DeletionDisabledError(f"{self.table.path} has {opt.DELETE_BEHAVIOR}='disable'; deletes are "
                                        "rejected (set it to 'allow' or 'ignore' when creating the table)")
        frame = to_frame(keys, schema)
        frame = conform(frame.select([c for c in frame.columns if c in schema.primary_key] +
                                     [c for c in frame.columns if c not in schema.names]),
                        schema, required=schema.primary_key, key_columns=schema.primary_key)
        if frame.height:
            self._buffer_frame(frame.with_columns(pl.lit(True).alias(_OP)))

    def _buffer_frame(self, frame: pl.DataFrame) -> None:
        """Keep validated rows; send a batch once ``buffer_rows`` are waiting (the client's batch bound)."""
        self._buffer.append(frame)
        self._buffered_rows += frame.height
        if self._buffered_rows >= self.buffer_rows:
            self._done = self._done.combine(self._send())

    def flush(self) -> WriteResult:
        """Commit everything buffered; returns what this writer committed since the last flush."""
        result = self._done.combine(self._send())
        self._done = WriteResult()
        return result

    def _send(self) -> WriteResult:
        """Merge and commit the pending per-bucket batches, then what is buffered; returns the offsets taken.

        A batch keeps its sequence number until it is committed, so calling ``flush`` again after a retriable
        error commits each batch exactly once, even if the failed attempt did reach the storage.
        """
        if self._pending or self._buffer:
            self.table.connection.check_table_alive(self.table.info)
        result = self._commit_pending()
        if not self._buffer:
            return result
        frame = pl.concat(self._buffer, how="vertical") if len(self._buffer) > 1 else self._buffer[0]
        self._buffer = []
        self._buffered_rows = 0
        info = self.table.info
        buckets = assign_buckets([frame.get_column(k).to_arrow() for k in info.bucket_keys], info.bucket_num,
                                 lake_format=info.options.get(opt.DATALAKE_FORMAT))
        for bucket, rows in split_by_bucket(frame, buckets).items():
            self._pending[bucket] = (rows, self._sequences.get(bucket, 0))
            self._sequences[bucket] = self._sequences.get(bucket, 0) + 1
        return result.combine(self._commit_pending())

    def _commit_pending(self) -> WriteResult:
        """Merge and commit every pending per-bucket batch, forgetting each once it is in the log."""
        offsets: dict[int, tuple[int, int]] = {}
        records = rows_sent = 0
        for bucket, (rows, seq) in list(self._pending.items()):
            is_delete = np.asarray(rows.get_column(_OP).to_numpy(), dtype=bool)
            header = self.table.kv_tablet(bucket).write(rows.drop(_OP), is_delete, self.merger, self.image,
                                                        writer_id=self.writer_id, batch_seq=seq)
            offsets[bucket] = (header.base_offset, header.next_offset)
            records += header.record_count
            rows_sent += rows.height
            del self._pending[bucket]
        return WriteResult(rows_sent, records, offsets)

    def __enter__(self) -> "UpsertWriter":
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.flush()
