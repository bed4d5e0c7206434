"""Appends to log tables: validate on ``append``, group into one batch per bucket, commit on ``flush``."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from fluss_lake import options as opt
from fluss_lake.exceptions import UnsupportedOperationError
from fluss_lake.log.log_batch import BatchHeader, encode_batch
from fluss_lake.write.batching_writer import BatchingWriter
from fluss_lake.write.validate import conform, to_frame

if TYPE_CHECKING:
    from fluss_lake.table import Table

__all__ = ["AppendWriter"]


class AppendWriter(BatchingWriter):
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
        super().__init__(table, buffer_rows=buffer_rows)

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
            return self.table.buckets_of(frame)
        if info.options.get(opt.NO_KEY_ASSIGNER, "sticky") == "round_robin":
            bucket = self.table.next_round_robin_bucket()
            return np.full(frame.height, bucket, dtype=np.int32)
        return np.full(frame.height, random.randrange(info.bucket_num), dtype=np.int32)

    def _commit(self, target: "Table", bucket: int, rows: pl.DataFrame, seq: int) -> BatchHeader:
        """Append one bucket's batch at its log end."""
        info = self.table.info
        stats = _stats_columns(self.table)
        compression, level = self.table._compression()

        def build(base: int, commit_ts: int) -> tuple[bytes, BatchHeader]:
            data = encode_batch(rows=rows, base_offset=base, commit_ts=commit_ts, schema_id=info.schema.schema_id,
                                writer_id=self.writer_id, batch_seq=seq, stats_columns=stats,
                                compression=compression, compression_level=level)
            return data, BatchHeader(base, rows.height, commit_ts, info.schema.schema_id, self.writer_id, batch_seq=seq)

        return target.log_tablet(bucket).append(build, self.table.connection.clock, writer_id=self.writer_id,
                                                batch_seq=seq)


def _stats_columns(table: "Table") -> tuple[str, ...]:
    """Columns with per-batch statistics (``table.statistics.columns``: unset, ``*`` or a list)."""
    value = table.info.options.get(opt.STATISTICS_COLUMNS)
    if not value:
        return ()
    from fluss_lake.metadata.descriptor import _STATS_TYPES

    if value.strip() == "*":
        return tuple(c.name for c in table.schema.columns if isinstance(c.dtype, _STATS_TYPES))
    return tuple(s.strip() for s in value.split(",") if s.strip())
