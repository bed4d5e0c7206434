"""Appends to log tables: validate on ``append``, group into one batch per bucket, commit on ``flush``."""

from __future__ import annotations

import random
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import UnsupportedOperationError
from fluss_lake.log.log_batch import BatchHeader, encode_batch
from fluss_lake.write.bucket_assigner import assign_buckets
from fluss_lake.write.validate import conform, to_frame
from fluss_lake.write.write_result import WriteResult

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["AppendWriter", "split_by_bucket"]


def split_by_bucket(frame: pl.DataFrame, buckets: np.ndarray) -> dict[int, pl.DataFrame]:
    """Rows of each bucket, write order kept."""
    if frame.height == 0:
        return {}
    if len(np.unique(buckets)) == 1:
        return {int(buckets[0]): frame}
    parts = frame.with_columns(pl.Series("__bucket", buckets)).partition_by("__bucket", as_dict=True, maintain_order=True)
    return {int(key[0]): part.drop("__bucket") for key, part in parts.items()}


class AppendWriter:
    """A buffering writer for a log table; use as a context manager or call :meth:`flush`.

    Examples
    --------
    >>> import tempfile, fluss_lake as fl
    >>> conn = fl.connect(tempfile.mkdtemp()); conn.create_database("web")
    >>> _ = conn.create_table("web.clicks", schema={"user": "BIGINT", "url": "STRING"}, bucket_num=2,
    ...                       bucket_keys=["user"])
    >>> with conn.get_table("web.clicks").new_append() as writer:
    ...     writer.append([{"user": 1, "url": "/a"}, {"user": 2, "url": "/b"}])
    >>> conn.get_table("web.clicks").to_polars().height
    2
    """

    def __init__(self, table: "Table", *, buffer_rows: int = 1_000_000) -> None:
        if table.is_primary_key_table:
            raise UnsupportedOperationError(f"{table.path} has a primary key; use new_upsert() instead of new_append()")
        self.table = table
        self.buffer_rows = buffer_rows
        self._buffer: list[pl.DataFrame] = []
        self._buffered_rows = 0
        self._done = WriteResult()
        self.writer_id = uuid.uuid4().hex
        self._sequences: dict[int, int] = {}
        self._pending: dict[int, tuple[pl.DataFrame, int]] = {}

    def append(self, data: Any) -> None:
        """Validate rows and buffer them; raises before buffering anything if they do not fit."""
        schema = self.table.schema
        frame = conform(to_frame(data, schema), schema, required=schema.names,
                        not_null_checked=[c.name for c in schema.columns if not c.nullable],
                        key_columns=self.table.info.bucket_keys)
        if frame.height:
            self._buffer_frame(frame)

    def _buckets(self, frame: pl.DataFrame) -> np.ndarray:
        """Bucket of every row: hash of the bucket key, else sticky or round-robin per batch."""
        info = self.table.info
        if info.bucket_keys:
            return assign_buckets([frame.get_column(k).to_arrow() for k in info.bucket_keys], info.bucket_num,
                                  lake_format=info.options.get(opt.DATALAKE_FORMAT))
        if info.options.get(opt.NO_KEY_ASSIGNER, "sticky") == "round_robin":
            bucket = self.table.next_round_robin_bucket()
            return np.full(frame.height, bucket, dtype=np.int32)
        return np.full(frame.height, random.randrange(info.bucket_num), dtype=np.int32)

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
        """Commit the pending batches (one per bucket), then what is buffered; returns the offsets taken.

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
        for bucket, rows in split_by_bucket(frame, self._buckets(frame)).items():
            self._pending[bucket] = (rows, self._sequences.get(bucket, 0))
            self._sequences[bucket] = self._sequences.get(bucket, 0) + 1
        return result.combine(self._commit_pending())

    def _commit_pending(self) -> WriteResult:
        """Commit every pending per-bucket batch, forgetting each once it is in the log."""
        info = self.table.info
        stats = _stats_columns(self.table)
        compression, level = self.table._compression()
        offsets: dict[int, tuple[int, int]] = {}
        rows_sent = 0
        for bucket, (rows, seq) in list(self._pending.items()):
            tablet = self.table.log_tablet(bucket)

            def build(base: int, commit_ts: int, rows: pl.DataFrame = rows, seq: int = seq) -> tuple[bytes, BatchHeader]:
                data = encode_batch(rows=rows, base_offset=base, commit_ts=commit_ts, schema_id=info.schema.schema_id,
                                    writer_id=self.writer_id, batch_seq=seq, stats_columns=stats,
                                    compression=compression, compression_level=level)
                return data, BatchHeader(base, rows.height, commit_ts, info.schema.schema_id, self.writer_id,
                                         batch_seq=seq)

            header = tablet.append(build, self.table.connection.clock, writer_id=self.writer_id, batch_seq=seq)
            offsets[bucket] = (header.base_offset, header.next_offset)
            rows_sent += rows.height
            del self._pending[bucket]
        return WriteResult(rows_sent, rows_sent, offsets)

    def __enter__(self) -> "AppendWriter":
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.flush()


def _stats_columns(table: "Table") -> tuple[str, ...]:
    """Columns with per-batch statistics (``table.statistics.columns``: unset, ``*`` or a list)."""
    value = table.info.options.get(opt.STATISTICS_COLUMNS)
    if not value:
        return ()
    from fluss_lake.metadata.descriptor import _STATS_TYPES

    if value.strip() == "*":
        return tuple(c.name for c in table.schema.columns if isinstance(c.dtype, _STATS_TYPES))
    return tuple(s.strip() for s in value.split(",") if s.strip())
